package cli

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// LogLevel is a DOCA numeric log level, as -l/--log-level and
// --sdk-log-level take it.
type LogLevel int

// The DOCA log levels.
const (
	LogDisable  LogLevel = 10
	LogCritical LogLevel = 20
	LogError    LogLevel = 30
	LogWarning  LogLevel = 40
	LogInfo     LogLevel = 50
	LogDebug    LogLevel = 60
	LogTrace    LogLevel = 70
)

// LogLevels lists the valid levels in increasing verbosity.
var LogLevels = []LogLevel{LogDisable, LogCritical, LogError, LogWarning, LogInfo, LogDebug, LogTrace}

var logLevelNames = map[LogLevel]string{
	LogDisable:  "DISABLE",
	LogCritical: "CRITICAL",
	LogError:    "ERROR",
	LogWarning:  "WARNING",
	LogInfo:     "INFO",
	LogDebug:    "DEBUG",
	LogTrace:    "TRACE",
}

// LogLevelHelp is DOCA's description of the levels: "<10=DISABLE, 20=CRITICAL, ...>".
func LogLevelHelp() string {
	parts := make([]string, len(LogLevels))
	for i, l := range LogLevels {
		parts[i] = fmt.Sprintf("%d=%s", int(l), logLevelNames[l])
	}
	return "<" + strings.Join(parts, ", ") + ">"
}

func validLogLevels() string {
	parts := make([]string, len(LogLevels))
	for i, l := range LogLevels {
		parts[i] = fmt.Sprintf("%d (%s)", int(l), logLevelNames[l])
	}
	return strings.Join(parts, ", ")
}

// ParseLogLevel parses a DOCA log level: one of the numbers 10, 20, ... 70,
// or (as a convenience) its name, in any case ("debug", "WARNING").
func ParseLogLevel(s string) (LogLevel, error) {
	t := strings.TrimSpace(s)
	if n, err := strconv.Atoi(t); err == nil {
		if l := LogLevel(n); l.Valid() {
			return l, nil
		}
	} else {
		for l, name := range logLevelNames {
			if strings.EqualFold(t, name) {
				return l, nil
			}
		}
	}
	return 0, fmt.Errorf("invalid log level %q; valid levels: %s", s, validLogLevels())
}

// Valid reports whether l is one of the DOCA levels.
func (l LogLevel) Valid() bool { _, ok := logLevelNames[l]; return ok }

// Name is the level's DOCA name ("INFO"), or "LogLevel(n)" if invalid.
func (l LogLevel) Name() string {
	if n, ok := logLevelNames[l]; ok {
		return n
	}
	return fmt.Sprintf("LogLevel(%d)", int(l))
}

// String is the number, as the flag takes it; it makes *LogLevel a pflag.Value.
func (l LogLevel) String() string { return strconv.Itoa(int(l)) }

// Set parses s; it makes *LogLevel a pflag.Value.
func (l *LogLevel) Set(s string) error {
	v, err := ParseLogLevel(s)
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Type is the placeholder pflag shows for the value.
func (l *LogLevel) Type() string { return "level" }

// Enabled reports whether anything is logged at this level (false for DISABLE).
func (l LogLevel) Enabled() bool { return l > LogDisable }

// Tracing reports whether the level is TRACE: zap has no trace level, so
// code that has trace-only output checks this and logs at debug.
func (l LogLevel) Tracing() bool { return l >= LogTrace }

// ZapLevel is the minimum zap level that l lets through. DISABLE has no zap
// equivalent: check Enabled (NewLogger returns a no-op logger for it).
// CRITICAL lets through DPanic, Panic and Fatal; TRACE and DEBUG are Debug.
func (l LogLevel) ZapLevel() zapcore.Level {
	switch {
	case l <= LogDisable:
		return zapcore.FatalLevel + 1
	case l <= LogCritical:
		return zapcore.DPanicLevel
	case l <= LogError:
		return zapcore.ErrorLevel
	case l <= LogWarning:
		return zapcore.WarnLevel
	case l <= LogInfo:
		return zapcore.InfoLevel
	default:
		return zapcore.DebugLevel
	}
}

// UCXLevel is the UCX log level name (as UCX_LOG_LEVEL spells it) for l used
// as the SDK log level: DISABLE and CRITICAL are "fatal" (UCX cannot be
// silenced further), then "error", "warn", "info", "debug", "trace". The
// caller maps it onto ucp.SetLogLevel (see UCX.ApplyLogLevel).
func (l LogLevel) UCXLevel() string {
	switch {
	case l <= LogCritical:
		return "fatal"
	case l <= LogError:
		return "error"
	case l <= LogWarning:
		return "warn"
	case l <= LogInfo:
		return "info"
	case l <= LogDebug:
		return "debug"
	default:
		return "trace"
	}
}

// LogFormat selects the logger's encoding.
type LogFormat string

// The log formats.
const (
	LogConsole LogFormat = "console" // readable lines, the default
	LogJSON    LogFormat = "json"    // one JSON object per line, for machines
)

func (f LogFormat) String() string { return string(f) }

// Set parses s; it makes *LogFormat a pflag.Value.
func (f *LogFormat) Set(s string) error {
	switch v := LogFormat(strings.ToLower(strings.TrimSpace(s))); v {
	case LogConsole, LogJSON:
		*f = v
		return nil
	}
	return fmt.Errorf("invalid log format %q; valid formats: console, json", s)
}

// Type is the placeholder pflag shows for the value.
func (f *LogFormat) Type() string { return "format" }

// LogConfig is the logging part of every command's configuration.
type LogConfig struct {
	Level    LogLevel  // -l/--log-level: rdmo's own logs
	SDKLevel LogLevel  // --sdk-log-level: UCX's logs (apply UCXLevel())
	Format   LogFormat // --log-format
}

// ChildArgs are the flags that pass this log configuration on to a child
// rdmo process (the embedded UROM service, its worker processes).
func (l LogConfig) ChildArgs() []string {
	return []string{"--log-level", l.Level.String(), "--sdk-log-level", l.SDKLevel.String(), "--log-format", l.Format.String()}
}

// DefaultLogConfig is INFO for rdmo, WARNING for the SDK, console output.
func DefaultLogConfig() LogConfig {
	return LogConfig{Level: LogInfo, SDKLevel: LogWarning, Format: LogConsole}
}

// NewLogger builds the zap logger for c, writing to w (os.Stderr if nil).
// DISABLE gives a no-op logger. The console format is readable
// ("2024-05-01T10:00:00.000Z  INFO  rdmo  message  {"k": "v"}"); the JSON
// format has the keys ts, level, logger, msg, and writes durations as
// strings, as the console does ("5s").
func NewLogger(c LogConfig, w io.Writer) (*zap.Logger, error) {
	if !c.Level.Valid() {
		return nil, fmt.Errorf("invalid log level %d; valid levels: %s", int(c.Level), validLogLevels())
	}
	if !c.Level.Enabled() {
		return zap.NewNop(), nil
	}
	if w == nil {
		w = os.Stderr
	}
	var enc zapcore.Encoder
	switch c.Format {
	case LogConsole, "":
		ec := zapcore.EncoderConfig{
			TimeKey:          "ts",
			LevelKey:         "level",
			NameKey:          "logger",
			MessageKey:       "msg",
			StacktraceKey:    "stacktrace",
			LineEnding:       zapcore.DefaultLineEnding,
			EncodeLevel:      zapcore.CapitalLevelEncoder,
			EncodeTime:       zapcore.TimeEncoderOfLayout("2006-01-02T15:04:05.000Z07:00"),
			EncodeDuration:   zapcore.StringDurationEncoder,
			EncodeName:       zapcore.FullNameEncoder,
			ConsoleSeparator: "  ",
		}
		enc = zapcore.NewConsoleEncoder(ec)
	case LogJSON:
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout(time.RFC3339Nano)
		// Durations as the console writes them ("5s"), not nanoseconds.
		ec.EncodeDuration = zapcore.StringDurationEncoder
		ec.CallerKey = ""
		enc = zapcore.NewJSONEncoder(ec)
	default:
		return nil, fmt.Errorf("invalid log format %q; valid formats: console, json", string(c.Format))
	}
	sink := zapcore.Lock(zapcore.AddSync(w))
	core := zapcore.NewCore(enc, sink, zap.NewAtomicLevelAt(c.Level.ZapLevel()))
	return zap.New(core, zap.ErrorOutput(sink), zap.AddStacktrace(zapcore.DPanicLevel)).Named("rdmo"), nil
}

// SetupLogging builds the logger for c (see NewLogger) and applies the SDK
// log level through ucx.ApplyLogLevel, if set.
func SetupLogging(c LogConfig, w io.Writer, ucx UCX) (*zap.Logger, error) {
	log, err := NewLogger(c, w)
	if err != nil {
		return nil, UsageError(err)
	}
	if ucx.ApplyLogLevel != nil {
		if err := ucx.ApplyLogLevel(c.SDKLevel.UCXLevel()); err != nil {
			return nil, fmt.Errorf("--sdk-log-level: %w", err)
		}
	}
	return log, nil
}

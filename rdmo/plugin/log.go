package plugin

import (
	"io"
	"os"
	"sync"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/openrdmo/rdmo/rdmo/plugin/internal/wire"
)

// hclogTimeLayout is the "@timestamp" layout go-plugin parses; a line whose
// timestamp does not parse is not taken as JSON (and loses its level).
const hclogTimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// pluginStderr is the process's real standard error, taken before
// go-plugin's Serve points os.Stderr at its stdio pipe. go-plugin reads the
// real stderr of the plugin process line by line and parses hclog JSON.
var pluginStderr io.Writer = os.Stderr

var (
	loggerOnce sync.Once
	logger     *zap.Logger
)

// Logger returns the plugin process's logger. It writes one JSON object per
// line on the process's standard error in the shape hclog writes ("@level",
// "@message", "@timestamp", "@module", "@caller" and the fields), which
// go-plugin in the worker parses: each line reaches the worker's log at its
// own level, with its fields. Use it in plugin code (not in the worker):
//
//	plugin.Logger().Warn("queue nearly full", zap.Uint64("region", id))
//
// The level comes from the worker (through the environment).
func Logger() *zap.Logger {
	loggerOnce.Do(func() {
		lvl := zapcore.InfoLevel
		if s := os.Getenv(wire.EnvLogLevel); s != "" {
			if l, ok := zapLevelFromString(s); ok {
				lvl = l
			}
		}
		logger = NewPluginLogger(pluginStderr, lvl)
	})
	return logger
}

// NewPluginLogger returns a zap logger writing hclog-shaped JSON lines to w
// at level lvl and above: what Logger uses, exposed for tests and for
// plugins that log somewhere else too.
func NewPluginLogger(w io.Writer, lvl zapcore.LevelEnabler) *zap.Logger {
	ws := zapcore.Lock(zapcore.AddSync(w))
	core := zapcore.NewCore(zapcore.NewJSONEncoder(hclogEncoderConfig()), ws, lvl)
	return zap.New(core, zap.AddCaller(), zap.ErrorOutput(ws))
}

func hclogEncoderConfig() zapcore.EncoderConfig {
	return zapcore.EncoderConfig{
		MessageKey:     "@message",
		LevelKey:       "@level",
		TimeKey:        "@timestamp",
		NameKey:        "@module",
		CallerKey:      "@caller",
		StacktraceKey:  "stacktrace",
		LineEnding:     zapcore.DefaultLineEnding,
		EncodeLevel:    hclogLevelEncoder,
		EncodeTime:     zapcore.TimeEncoderOfLayout(hclogTimeLayout),
		EncodeDuration: zapcore.StringDurationEncoder,
		EncodeCaller:   zapcore.ShortCallerEncoder,
		EncodeName:     zapcore.FullNameEncoder,
	}
}

// hclogLevelEncoder writes zap levels with hclog's names; zap's levels above
// Error (DPanic, Panic, Fatal) are "error" to hclog.
func hclogLevelEncoder(l zapcore.Level, e zapcore.PrimitiveArrayEncoder) {
	switch {
	case l < zapcore.DebugLevel:
		e.AppendString("trace")
	case l == zapcore.DebugLevel:
		e.AppendString("debug")
	case l == zapcore.InfoLevel:
		e.AppendString("info")
	case l == zapcore.WarnLevel:
		e.AppendString("warn")
	default:
		e.AppendString("error")
	}
}

func zapLevelFromString(s string) (zapcore.Level, bool) {
	switch hclog.LevelFromString(s) {
	case hclog.Trace, hclog.Debug:
		return zapcore.DebugLevel, true
	case hclog.Info:
		return zapcore.InfoLevel, true
	case hclog.Warn:
		return zapcore.WarnLevel, true
	case hclog.Error:
		return zapcore.ErrorLevel, true
	case hclog.Off:
		return zapcore.FatalLevel + 1, true
	}
	return 0, false
}

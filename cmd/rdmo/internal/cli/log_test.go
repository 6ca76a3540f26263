package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestParseLogLevel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want LogLevel
	}{
		{"10", LogDisable}, {"20", LogCritical}, {"30", LogError}, {"40", LogWarning},
		{"50", LogInfo}, {"60", LogDebug}, {"70", LogTrace}, {" 60 ", LogDebug},
		{"debug", LogDebug}, {"WARNING", LogWarning}, {"Trace", LogTrace},
	} {
		got, err := ParseLogLevel(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseLogLevel(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	const valid = "valid levels: 10 (DISABLE), 20 (CRITICAL), 30 (ERROR), 40 (WARNING), 50 (INFO), 60 (DEBUG), 70 (TRACE)"
	for _, in := range []string{"15", "0", "80", "-10", "", "info2", "6e1", "0x3c"} {
		_, err := ParseLogLevel(in)
		if err == nil || !strings.HasSuffix(err.Error(), valid) || !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("ParseLogLevel(%q) error = %v", in, err)
		}
	}
}

func TestLogLevelMappings(t *testing.T) {
	for _, tc := range []struct {
		l       LogLevel
		name    string
		zap     zapcore.Level
		ucx     string
		enabled bool
	}{
		{LogDisable, "DISABLE", zapcore.FatalLevel + 1, "fatal", false},
		{LogCritical, "CRITICAL", zapcore.DPanicLevel, "fatal", true},
		{LogError, "ERROR", zapcore.ErrorLevel, "error", true},
		{LogWarning, "WARNING", zapcore.WarnLevel, "warn", true},
		{LogInfo, "INFO", zapcore.InfoLevel, "info", true},
		{LogDebug, "DEBUG", zapcore.DebugLevel, "debug", true},
		{LogTrace, "TRACE", zapcore.DebugLevel, "trace", true},
	} {
		if tc.l.Name() != tc.name || tc.l.ZapLevel() != tc.zap || tc.l.UCXLevel() != tc.ucx || tc.l.Enabled() != tc.enabled {
			t.Errorf("%d: name %s zap %v ucx %s enabled %v", int(tc.l), tc.l.Name(), tc.l.ZapLevel(), tc.l.UCXLevel(), tc.l.Enabled())
		}
		if tc.l.String() != strings.TrimSpace(tc.l.String()) || tc.l.Tracing() != (tc.l == LogTrace) {
			t.Errorf("%d: String %q Tracing %v", int(tc.l), tc.l.String(), tc.l.Tracing())
		}
	}
	if LogLevel(15).Valid() || LogLevel(15).Name() != "LogLevel(15)" {
		t.Error("15 is not a level")
	}
	if got := LogLevelHelp(); got != "<10=DISABLE, 20=CRITICAL, 30=ERROR, 40=WARNING, 50=INFO, 60=DEBUG, 70=TRACE>" {
		t.Errorf("LogLevelHelp = %q", got)
	}
}

func TestLogFormatSet(t *testing.T) {
	var f LogFormat
	if err := f.Set("JSON"); err != nil || f != LogJSON {
		t.Errorf("Set(JSON) = %v, %v", f, err)
	}
	if err := f.Set("yaml"); err == nil || err.Error() != `invalid log format "yaml"; valid formats: console, json` {
		t.Errorf("Set(yaml) = %v", err)
	}
}

func TestNewLoggerConsole(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(LogConfig{Level: LogInfo, Format: LogConsole}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Info("server ready", zap.String("device", "mlx5_0"))
	_ = log.Sync()
	out := buf.String()
	if strings.Contains(out, "hidden") {
		t.Errorf("debug line at INFO: %q", out)
	}
	if !strings.Contains(out, "INFO  rdmo  server ready") || !strings.Contains(out, `{"device": "mlx5_0"}`) {
		t.Errorf("console output %q", out)
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("want one line, got %q", out)
	}
}

func TestNewLoggerJSON(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(LogConfig{Level: LogTrace, Format: LogJSON}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("detail", zap.String("k", "v"), zap.Duration("drain_timeout", 5*time.Second))
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("not JSON: %q: %v", buf.String(), err)
	}
	if m["level"] != "debug" || m["msg"] != "detail" || m["logger"] != "rdmo" || m["k"] != "v" || m["ts"] == nil {
		t.Errorf("fields %v", m)
	}
	// Durations as the console writes them, not nanoseconds.
	if m["drain_timeout"] != "5s" {
		t.Errorf("drain_timeout %#v, want \"5s\"", m["drain_timeout"])
	}
}

func TestNewLoggerLevels(t *testing.T) {
	for _, tc := range []struct {
		l    LogLevel
		want []string
	}{
		{LogDisable, nil},
		{LogCritical, []string{"dpanic"}},
		{LogError, []string{"error", "dpanic"}},
		{LogWarning, []string{"warn", "error", "dpanic"}},
		{LogInfo, []string{"info", "warn", "error", "dpanic"}},
		{LogDebug, []string{"debug", "info", "warn", "error", "dpanic"}},
	} {
		var buf bytes.Buffer
		log, err := NewLogger(LogConfig{Level: tc.l, Format: LogJSON}, &buf)
		if err != nil {
			t.Fatal(err)
		}
		log.Debug("debug")
		log.Info("info")
		log.Warn("warn")
		log.Error("error")
		log.DPanic("dpanic") // does not panic: the logger is not in development mode
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if line == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatal(err)
			}
			got = append(got, m["msg"].(string))
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("level %s logged %v, want %v", tc.l.Name(), got, tc.want)
		}
	}
}

func TestNewLoggerErrors(t *testing.T) {
	if _, err := NewLogger(LogConfig{Level: 15}, nil); err == nil {
		t.Error("level 15 accepted")
	}
	if _, err := NewLogger(LogConfig{Level: LogInfo, Format: "xml"}, nil); err == nil {
		t.Error("format xml accepted")
	}
	if log, err := NewLogger(LogConfig{Level: LogInfo}, nil); err != nil || log == nil {
		t.Errorf("default writer: %v", err)
	}
}

func TestSetupLoggingAppliesSDKLevel(t *testing.T) {
	var got string
	ucx := UCX{ApplyLogLevel: func(l string) error { got = l; return nil }}
	if _, err := SetupLogging(LogConfig{Level: LogInfo, SDKLevel: LogDebug}, new(bytes.Buffer), ucx); err != nil {
		t.Fatal(err)
	}
	if got != "debug" {
		t.Errorf("SDK level applied %q, want debug", got)
	}
	ucx.ApplyLogLevel = func(string) error { return errors.New("no UCX") }
	if _, err := SetupLogging(LogConfig{Level: LogInfo, SDKLevel: LogDebug}, new(bytes.Buffer), ucx); err == nil ||
		err.Error() != "--sdk-log-level: no UCX" {
		t.Errorf("err = %v", err)
	}
	if _, err := SetupLogging(LogConfig{Level: 15}, nil, UCX{}); ExitCode(err) != ExitUsage {
		t.Errorf("bad level: %v", err)
	}
}

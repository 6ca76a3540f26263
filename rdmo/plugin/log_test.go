package plugin_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/openrdmo/rdmo/rdmo/plugin"
)

// TestPluginLoggerFormat: Logger's lines are hclog JSON.
func TestPluginLoggerFormat(t *testing.T) {
	var buf bytes.Buffer
	l := plugin.NewPluginLogger(&buf, zapcore.DebugLevel).Named("mod")
	l.Warn("w", zap.Int("n", 3))
	l.Debug("d")
	l.Error("e")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("lines %q", lines)
	}
	for i, want := range []string{"warn", "debug", "error"} {
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil {
			t.Fatal(err)
		}
		if m["@level"] != want || m["@module"] != "mod" {
			t.Errorf("line %d: %v", i, m)
		}
		if _, err := time.Parse("2006-01-02T15:04:05.000000Z07:00", m["@timestamp"].(string)); err != nil {
			t.Errorf("timestamp: %v", err)
		}
	}
	if !strings.Contains(lines[0], `"@message":"w"`) || !strings.Contains(lines[0], `"n":3`) {
		t.Errorf("line %s", lines[0])
	}
}

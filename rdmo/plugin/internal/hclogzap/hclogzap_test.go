package hclogzap_test

import (
	"os"
	"testing"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/openrdmo/rdmo/rdmo/plugin/internal/hclogzap"
)

// TestHCLogger: the hclog adapter keeps levels, fields and names.
func TestHCLogger(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	l := hclogzap.New(zap.New(core))
	if l.GetLevel() != hclog.Info || l.IsDebug() || !l.IsWarn() {
		t.Fatalf("level %v", l.GetLevel())
	}
	l.Trace("t")
	l.Debug("d")
	l.Info("i", "k", 1)
	l.Named("sub").With("w", "x").Warn("w", "@module", "m")
	l.Error("e", "err", os.ErrNotExist, "odd")
	l.Log(hclog.Warn, "lw")
	l.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}).Print("[ERROR] std")
	all := logs.AllUntimed()
	want := []struct {
		msg string
		lvl zapcore.Level
	}{{"i", zapcore.InfoLevel}, {"w", zapcore.WarnLevel}, {"e", zapcore.ErrorLevel}, {"lw", zapcore.WarnLevel}, {"std", zapcore.ErrorLevel}}
	if len(all) != len(want) {
		t.Fatalf("entries %v", all)
	}
	for i, w := range want {
		if all[i].Message != w.msg || all[i].Level != w.lvl {
			t.Errorf("entry %d: %s at %v, want %s at %v", i, all[i].Message, all[i].Level, w.msg, w.lvl)
		}
	}
	if m := all[1].ContextMap(); m["w"] != "x" || m["plugin_module"] != "m" || all[1].LoggerName != "sub" {
		t.Errorf("fields %v name %q", m, all[1].LoggerName)
	}
	if m := all[2].ContextMap(); m["err"] == nil || m["EXTRA_VALUE_AT_END"] != "odd" {
		t.Errorf("fields %v", m)
	}
	l.SetLevel(hclog.Error)
	if l.IsWarn() || l.GetLevel() != hclog.Error {
		t.Error("SetLevel")
	}
	dbg := hclogzap.New(zap.New(zapcore.NewNopCore()))
	if dbg.GetLevel() != hclog.Off {
		t.Errorf("nop core level %v", dbg.GetLevel())
	}
	core2, _ := observer.New(zapcore.DebugLevel)
	if hclogzap.New(zap.New(core2)).GetLevel() != hclog.Trace {
		t.Error("debug core should take trace lines")
	}
}

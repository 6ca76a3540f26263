package logsample

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Lines over the budget are left out, and the next line written says how
// many.
func TestSuppressedCount(t *testing.T) {
	obs, logs := observer.New(zap.DebugLevel)
	log := Sampled(zap.New(obs), time.Hour, 2, 10)
	for i := 0; i < 12; i++ {
		log.Warn("dropped", zap.Int("i", i))
	}
	log.Warn("other")
	got := logs.AllUntimed()
	if len(got) != 4 {
		t.Fatalf("%d lines written, want 4: %v", len(got), got)
	}
	if got[0].ContextMap()[SuppressedKey] != nil || got[1].ContextMap()[SuppressedKey] != nil {
		t.Errorf("first lines carry %q: %v", SuppressedKey, got[:2])
	}
	// Lines 3..11 of the message: 9 left out, the 12th (the 10th after
	// the first two) written.
	if m := got[2].ContextMap(); m["i"] != int64(11) || m[SuppressedKey] != uint64(9) {
		t.Errorf("third line %v, want i=11 with %s=9", m, SuppressedKey)
	}
	if got[3].Message != "other" || got[3].ContextMap()[SuppressedKey] != nil {
		t.Errorf("another message: %v", got[3])
	}
}

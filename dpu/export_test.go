package dpu

import (
	"time"

	"github.com/openrdmo/rdmo/ucp"
)

// IdleCounters reports, since New, how long the loop has spun without
// work before sleeping, how often it has slept, and how many of those
// sleeps a spin preceded.
func (w *Worker) IdleCounters() (spun time.Duration, sleeps, spins uint64) {
	return time.Duration(w.spun.Load()), w.sleeps.Load(), w.spins.Load()
}

// InlineFlushes is how many FLUSHes the loop answered without the
// executor since New.
func (w *Worker) InlineFlushes() uint64 { return w.inlineFlushes.Load() }

// FlushWaiting reports whether a WaitFlush caller is waiting on request
// queue rq.
func (w *Worker) FlushWaiting(rq uint64) bool {
	w.regMu.Lock()
	q := w.rqByID[rq]
	w.regMu.Unlock()
	if q == nil {
		return false
	}
	q.watch.mu.Lock()
	defer q.watch.mu.Unlock()
	return q.watch.ch != nil
}

// SetDefaults fills the zero fields of c with their defaults, as New does.
func (c *Config) SetDefaults() error { return c.setDefaults() }

// CapabilitiesFor is the capability list a worker with cfg reports: its
// context's segments are what ucp.ShmSegmentsLarge says of its UCXConfig.
func CapabilitiesFor(cfg Config) []string {
	return capabilities(cfg, ucp.ShmSegmentsLarge(cfg.UCXConfig))
}

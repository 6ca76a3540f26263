package dpu

import "time"

// IdleCounters reports, since New, how long the loop has spun without
// work before sleeping, how often it has slept, and how many of those
// sleeps a spin preceded.
func (w *Worker) IdleCounters() (spun time.Duration, sleeps, spins uint64) {
	return time.Duration(w.spun.Load()), w.sleeps.Load(), w.spins.Load()
}

// InlineFlushes is how many FLUSHes the loop answered without the
// executor since New.
func (w *Worker) InlineFlushes() uint64 { return w.inlineFlushes.Load() }

package dpu

import "time"

// IdleCounters reports, since New, how long the loop has spun without
// work before sleeping, how often it has slept, and how many of those
// sleeps a spin preceded.
func (w *Worker) IdleCounters() (spun time.Duration, sleeps, spins uint64) {
	return time.Duration(w.spun.Load()), w.sleeps.Load(), w.spins.Load()
}

// FlushWaited reports whether someone waits in WaitFlush on request queue
// rq: a test that closes the queue under a waiter must know the waiter is
// there, or it may come after the close and find no queue at all.
func (w *Worker) FlushWaited(rq uint64) bool {
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

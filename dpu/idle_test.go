package dpu_test

import (
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// idleSleeps waits until the worker's loop has slept n more times and
// returns how many of those sleeps it spun before. A loop that never
// sleeps again fails the test at the hang guard.
func idleSleeps(t *testing.T, w *dpu.Worker, n uint64) (sleeps, spins uint64) {
	t.Helper()
	_, s0, p0 := w.IdleCounters()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		_, s1, p1 := w.IdleCounters()
		if s1-s0 >= n {
			return s1 - s0, p1 - p0
		}
		if time.Now().After(deadline) {
			t.Fatalf("the loop slept %d times in 30 s, want %d: it does not go idle", s1-s0, n)
		}
	}
}

// checkSleeps fails unless the loop spun before few of its sleeps: after
// a sleep that ran its full IdleWait it sleeps again at once.
func checkSleeps(t *testing.T, what string, sleeps, spins uint64) {
	t.Helper()
	t.Logf("%s: %d sleeps, %d after a spin", what, sleeps, spins)
	if spins > sleeps/4+2 {
		t.Errorf("%s: the loop spun before %d of its %d sleeps", what, spins, sleeps)
	}
}

// An idle worker sleeps: after traffic stops it spins once (at most the
// adaptive window), then sleeps IdleWait after IdleWait without spinning.
func TestIdleWorkerSleeps(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers()})
		s := e.newSetup(1, 4096, 0, 4096)
		// A conversation first: it grows the loop's spin window.
		for i := 1; i <= 300; i++ {
			if _, f := s.in.flush(uint64(i)); f.Failed != 0 {
				t.Fatalf("flush %d: %+v", i, f)
			}
		}
		sleeps, spins := idleSleeps(t, e.w, 100)
		checkSleeps(t, "idle", sleeps, spins)
	})
}

// A handler that does not return keeps a batch outstanding: the loop
// spins for at most SpinPending, then sleeps like an idle one, and the
// request completes once the handler returns.
func TestStuckHandlerLoopSleeps(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		slow := newSlow(t)
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(slow)})
		s := e.newSetup(1, 4096, 0, 4096)
		in := s.in
		seq := in.send(userReq(1, opSlow, rdmo.FlagAck, s.region, s.base), pattern(8, 3), 0)
		slow.waitStarted(in)
		sleeps, spins := idleSleeps(t, e.w, 100)
		checkSleeps(t, "handler stuck", sleeps, spins)
		slow.release()
		if a := in.ack(seq); a.Status != rdmo.StatusOK {
			t.Fatalf("ack %+v", a)
		}
	})
}

package dpu_test

import (
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// idleFor watches the worker's loop for d and returns how often it slept
// and how many of those sleeps it spun before.
func idleFor(w *dpu.Worker, d time.Duration) (sleeps, spins uint64) {
	_, s0, p0 := w.IdleCounters()
	time.Sleep(d)
	_, s1, p1 := w.IdleCounters()
	return s1 - s0, p1 - p0
}

// checkSleeps fails unless the loop slept (at most every IdleWait, 1 ms)
// through most of d, and spun before few of those sleeps: after a sleep
// that ran its full IdleWait it sleeps again at once.
func checkSleeps(t *testing.T, what string, sleeps, spins uint64, d time.Duration) {
	t.Helper()
	t.Logf("%s: %d sleeps in %v, %d after a spin", what, sleeps, d, spins)
	// Under heavy load a sleep can last far longer than asked: demand a
	// tenth of the sleeps an idle machine would show.
	if want := uint64(d / time.Millisecond / 10); sleeps < want {
		t.Errorf("%s: the loop slept %d times in %v, want at least %d", what, sleeps, d, want)
	}
	if spins > sleeps/4+2 {
		t.Errorf("%s: the loop spun before %d of its %d sleeps", what, spins, sleeps)
	}
}

// An idle worker sleeps: after traffic stops it spins once (at most the
// adaptive window), then sleeps IdleWait after IdleWait without spinning.
func TestIdleWorkerSleeps(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers()})
		s := e.newSetup(1, 4096, 0, 4096)
		// A conversation first: it grows the loop's spin window.
		for i := 1; i <= 300; i++ {
			if _, f := s.in.flush(uint64(i)); f.Failed != 0 {
				t.Fatalf("flush %d: %+v", i, f)
			}
		}
		time.Sleep(20 * time.Millisecond)
		const d = 300 * time.Millisecond
		sleeps, spins := idleFor(e.w, d)
		checkSleeps(t, "idle", sleeps, spins, d)
	})
}

// A handler that does not return keeps a batch outstanding: the loop
// spins for at most SpinPending, then sleeps like an idle one, and the
// request completes once the handler returns.
func TestStuckHandlerLoopSleeps(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		slow := newSlow(t)
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(slow)})
		s := e.newSetup(1, 4096, 0, 4096)
		in := s.in
		seq := in.send(userReq(1, opSlow, rdmo.FlagAck, s.region, s.base), pattern(8, 3), 0)
		slow.waitStarted(in)
		time.Sleep(20 * time.Millisecond)
		const d = 300 * time.Millisecond
		sleeps, spins := idleFor(e.w, d)
		checkSleeps(t, "handler stuck", sleeps, spins, d)
		slow.release()
		if a := in.ack(seq); a.Status != rdmo.StatusOK {
			t.Fatalf("ack %+v", a)
		}
	})
}

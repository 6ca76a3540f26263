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

// A FLUSH with nothing to write back or wait for is answered by the loop
// without a hand-off to the executor; one after a batch of a handler that
// caches state goes to the executor and writes that state back, and so
// does every FLUSH until one succeeded.
func TestIdleFlushInline(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		cache := newCache()
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(cache)})
		s := e.newSetup(1, 4096, 0, 4096)
		in := s.in
		flush := func(id uint64, inline bool) {
			t.Helper()
			before := e.w.InlineFlushes()
			if _, f := in.flush(id); f.Failed != 0 {
				t.Fatalf("flush %d: %+v", id, f)
			}
			if got := e.w.InlineFlushes() - before; got != map[bool]uint64{false: 0, true: 1}[inline] {
				t.Fatalf("flush %d: answered inline %d times, want inline=%v", id, got, inline)
			}
		}
		flush(1, true) // nothing ran yet
		for i, v := range []uint64{0xABCD, 0x1234} {
			in.ack(in.send(userReq(1, opCache, rdmo.FlagAck, s.region, s.base+64, v), nil, 0))
			if got := le.Uint64(s.mem(s.base+64, 8)); got == v {
				t.Fatalf("cached value %#x written before the flush", v)
			}
			flush(uint64(10*i+2), false) // writes the cached value back
			if got := le.Uint64(s.mem(s.base+64, 8)); got != v {
				t.Fatalf("after the flush the target holds %#x, want %#x", got, v)
			}
			flush(uint64(10*i+3), true) // nothing left to write
		}
	})
}

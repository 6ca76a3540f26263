package initiator_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/internal/testutil"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// withoutCreditFlushes drops from the stand-in's arrivals the FLUSHes flow
// control queued (every flush but the last, which the test sent), after
// checking that there are as many as the initiator counts.
func withoutCreditFlushes(t testing.TB, got []arrival, in *initiator.Initiator) []arrival {
	t.Helper()
	out := make([]arrival, 0, len(got))
	flushes := 0
	for i, a := range got {
		if a.Req.Header.Op == rdmo.OpFlush && i < len(got)-1 {
			flushes++
			continue
		}
		out = append(out, a)
	}
	if n := in.Stats().CreditFlushes; uint64(flushes) != n {
		t.Errorf("%d flushes before the last one arrived, the initiator queued %d for flow control", flushes, n)
	}
	return out
}

// A worker slow to complete requests (a busy target) never sees more
// unconfirmed requests than the initiator's credits, however fast the
// producers: calls wait for flow control's own flushes instead of
// overrunning the worker's in-flight limit. Every request still arrives
// once, in each producer's order.
func TestCreditsKeepWithinWorkerLimit(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		const credits = 64
		s, in := start(t, tr, standInConfig{limit: credits}, initiator.Options{Credits: credits})
		s.hold.Store(true) // nothing completes until the producers had to wait
		stopSlow := make(chan struct{})
		slowDone := make(chan struct{})
		go func() {
			defer close(slowDone)
			testutil.WaitFor(t, "a call to wait for credits", func() bool { return in.Stats().CreditWaits > 0 })
			// Then complete in bursts, holding in between.
			for {
				s.hold.Store(false)
				select {
				case <-stopSlow:
					return
				case <-time.After(200 * time.Microsecond):
				}
				s.hold.Store(true)
				select {
				case <-stopSlow:
					s.hold.Store(false)
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		const producers, each = 4, 1500
		err := appendFromProducers(in, producers, each)
		close(stopSlow)
		<-slowDone
		if err != nil {
			t.Fatal(err)
		}
		if _, err := in.Flush(timeout(t, 20*time.Second)); err != nil {
			t.Fatal(err)
		}
		if n := s.overLimit.Load(); n != 0 {
			t.Errorf("%d requests arrived past the worker's limit of %d (most pending: %d)", n, credits, s.maxPending.Load())
		}
		got := withoutCreditFlushes(t, s.arrivals(), in)
		if len(got) != producers*each+1 {
			t.Fatalf("stand-in got %d requests, want %d", len(got), producers*each+1)
		}
		next := make([]uint64, producers)
		for i, a := range got[:producers*each] {
			g := binary.LittleEndian.Uint64(a.Payload)
			if a.Req.Header.Op != rdmo.OpAppend || g >= producers || binary.LittleEndian.Uint64(a.Payload[8:]) != next[g] {
				t.Fatalf("request %d: op %d, out of order", i, a.Req.Header.Op)
			}
			next[g]++
		}
		st := in.Stats()
		if st.CreditFlushes == 0 || st.CreditWaits == 0 {
			t.Errorf("%d credit flushes, %d credit waits", st.CreditFlushes, st.CreditWaits)
		}
		t.Logf("%d appends: %d flow-control flushes, %d calls waited for credits, most pending at the worker %d",
			st.Appends, st.CreditFlushes, st.CreditWaits, s.maxPending.Load())
	})
}

// Without flow control (Credits < 0) the same stalled worker is overrun:
// the stand-in's limit check does see it, so the test above is not empty.
func TestNoCreditsOverrunsStalledWorker(t *testing.T) {
	ucptest.CheckLeaks(t)
	const limit = 64
	s, in := start(t, ucptest.Transports[0], standInConfig{limit: limit}, initiator.Options{Credits: -1})
	s.hold.Store(true)
	for i := 0; i < 4*limit; i++ {
		if err := in.Append(8, 1, 1, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "every append to arrive", func() bool { return s.arrived.Load() == 4*limit })
	s.hold.Store(false)
	if _, err := in.Flush(timeout(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := s.overLimit.Load(); n == 0 {
		t.Errorf("no arrival past the limit of %d without flow control (most pending %d)", limit, s.maxPending.Load())
	}
	if st := in.Stats(); st.CreditFlushes != 0 || st.CreditWaits != 0 {
		t.Errorf("flow control acted with Credits < 0: %+v", st)
	}
}

// Failures reported to flow control's own flushes reach the caller's next
// Flush: the counts add up and the first failure is the earliest one, as
// if no other flush had been answered in between. The Flush after that is
// clean.
func TestCreditFlushFailuresCarryToFlush(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		failOn := func(r wire.RequestHeader, _ []byte) rdmo.Status {
			if r.Header.Op == rdmo.OpAppend && r.Append.DataRkey == 666 {
				return rdmo.StatusUnknownRegion
			}
			return rdmo.StatusOK
		}
		const credits = 8
		s, in := start(t, tr, standInConfig{failOn: failOn, limit: credits}, initiator.Options{Credits: credits})
		ctx := timeout(t, 20*time.Second)
		bad := map[int]bool{3: true, 40: true, 41: true}
		for i := 0; i < 50; i++ {
			rkey := uint64(1)
			if bad[i] {
				rkey = 666
			}
			if err := in.Append(8, 1, rkey, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		rsp, err := in.Flush(ctx)
		var fe *initiator.FlushError
		if !errors.As(err, &fe) || !errors.Is(err, rdmo.ErrUnknownRegion) {
			t.Fatalf("flush: %v, want a *FlushError for UnknownRegion", err)
		}
		var firstSeq uint64
		for _, a := range s.arrivals() {
			if a.Req.Header.Op == rdmo.OpAppend && a.Req.Append.DataRkey == 666 {
				firstSeq = a.Seq
				break
			}
		}
		if rsp.Failed != 3 || rsp.FirstSeq != firstSeq || rsp.FirstOp != rdmo.OpAppend || rsp.FirstStatus != rdmo.StatusUnknownRegion {
			t.Errorf("flush response %+v, want 3 failures, the first at seq %d", rsp, firstSeq)
		}
		if _, err := in.Flush(ctx); err != nil {
			t.Errorf("the next flush: %v", err)
		}
		st := in.Stats()
		if st.CreditFlushes == 0 || st.FailuresReported != 3 {
			t.Errorf("%d credit flushes, %d failures reported", st.CreditFlushes, st.FailuresReported)
		}
		if n := s.overLimit.Load(); n != 0 {
			t.Errorf("%d arrivals past the limit", n)
		}
	})
}

// Credits below the minimum are refused at New.
func TestCreditsMinimum(t *testing.T) {
	ucptest.CheckLeaks(t)
	_, err := initiator.New(initiator.Options{WorkerAddress: []byte{1}, Credits: 2})
	if err == nil {
		t.Fatal("New accepted Credits: 2")
	}
	t.Log(err)
}

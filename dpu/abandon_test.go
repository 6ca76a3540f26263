package dpu_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/internal/testutil"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/plugins/flush"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// waitStats polls the worker's counters until cond holds (bounded by the
// test's deadline, a hang guard). It progresses nothing: an initiator that must
// stay silent stays silent.
func waitStats(t *testing.T, w *dpu.Worker, what string, cond func(dpu.Stats) bool) dpu.Stats {
	t.Helper()
	var st dpu.Stats
	if !testutil.Poll(testutil.Deadline(t), func() bool { st = w.Stats(); return cond(st) }) {
		t.Fatalf("timed out waiting for %s (stats %+v)", what, st)
	}
	return st
}

// An initiator that stops in the middle of a rendezvous APPEND must not
// stall the other initiators of its client: once its request queue is
// closed (RQ_DESTROY after the drain timeout), its unfinished receive is
// abandoned, the placement ticket it held is released, and a FLUSH of
// another initiator of the same client, which waits for every Place of the
// client before it, completes. The abandoned payload is never written.
// (Over TCP, UCX cancels the receive itself when the worker force-closes
// the endpoint; the outcome for B is the same.)
func TestAbandonedRendezvousReleasesFlush(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		const (
			client = 1
			qlen   = 128 << 10
			big    = 64 << 10 // A's rendezvous payload, never sent
		)
		e := newEnv(t, tr, dpu.Config{
			Handlers:     []rdmo.Handler{appendop.New(appendop.Options{}), flush.New()},
			DrainTimeout: 200 * time.Millisecond,
		})
		// A is the setup's initiator. Like a real initiator
		// (host/initiator), it uses the active-message rendezvous
		// scheme: it pushes its payload only when it progresses after
		// the worker's ready-to-receive.
		ctxA, err := ucp.NewContext(ucp.ContextOptions{Config: ucp.WithRendezvousScheme(tr.Config())})
		if err != nil {
			ucptest.SkipOrFail(t, "UCX unavailable: %v", err)
		}
		t.Cleanup(func() {
			if err := ctxA.Close(); err != nil {
				t.Errorf("context close: %v", err)
			}
		})
		// newSetup makes the target and A on ctxA (their cleanups run
		// before ctxA's close); B uses the env's context.
		shared := e.ctx
		e.ctx = ctxA
		s := e.newSetup(client, qlen, 0, qlen)
		e.ctx = shared
		a := s.in
		q := s.base // the tail word; the queue's data follows it
		le.PutUint64(s.mem(q, 8), q+8)

		b := e.newInitiator(client)
		rqB := e.do(dpu.RQCreate{Client: client, Addr: b.addr}).RQ
		b.connect(s.waddr)

		// Both connections up before anything else: A's request then
		// leaves at its send, without A's progress.
		if _, f := a.flush(1); f.Failed != 0 {
			t.Fatalf("A's first flush %+v", f)
		}
		if _, f := b.flush(2); f.Failed != 0 {
			t.Fatalf("B's first flush %+v", f)
		}

		// A's rendezvous APPEND: issued (its ready-to-send leaves at
		// once on the connected endpoint) but A never progresses again,
		// so the worker's ready-to-receive is never seen and the payload
		// never comes. The append handler reserves its space and Places
		// it: the worker starts the receive.
		a.send(appendReq(client, rdmo.FlagAck, q, s.region, s.region), pattern(big, 1), ucp.SendRendezvous)
		a.w.Submit()
		waitStats(t, e.w, "the worker to Place A's append", func(st dpu.Stats) bool { return st.Places == 1 })

		// B appends eagerly, then flushes. Its FLUSH waits for A's Place.
		data := pattern(1000, 2)
		seq := b.send(appendReq(client, rdmo.FlagAck, q, s.region, s.region), data, 0)
		b.send(wire.AppendFlushRequest(nil, wire.Header{ClientID: client, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: 0xB}), nil, 0)
		ack := b.ack(seq)
		if ack.Status != rdmo.StatusOK {
			t.Fatalf("B's append %+v", ack)
		}
		b.progressUntil("B's flush to reach the worker", func() bool { return e.w.Stats().Requests[rdmo.OpFlush] == 3 })
		// One-sided: an answer now would be a FLUSH that did not wait
		// for an earlier Place of its client.
		for _, f := range b.flushes {
			if f.FlushID == 0xB {
				t.Fatalf("B's flush answered while A's Place was pending: %+v", f)
			}
		}
		if st := e.w.Stats(); st.AbandonedReceives != 0 {
			t.Fatalf("%d receives abandoned before any queue closed", st.AbandonedReceives)
		}

		// A's queue closes after the drain timeout, A's request still in
		// flight. Only B is progressed meanwhile.
		e.do(dpu.RQDestroy{Client: client, RQ: s.rq}, b)
		f := b.waitFlush(0xB) // bounded by waitLimit: a hang guard
		if f.Failed != 0 {
			t.Errorf("B's flush %+v: B's requests did not fail", f)
		}
		st := e.w.Stats()
		// A's append ended exactly once, failed. Over shared memory
		// (UCX 1.13: no peer-failure handling on those endpoints) only
		// the worker can end its receive: it abandons it. Over TCP the
		// endpoint has peer-failure handling, and UCX itself cancels
		// the receive when the worker force-closes it, before there is
		// anything to abandon.
		if n := st.Failures[rdmo.StatusInternal]; n != 1 || len(st.Failures) != 1 {
			t.Errorf("failures %v, want A's append only (Internal)", st.Failures)
		}
		abandoned := st.AbandonedReceives
		if tr.Name == "shm" && abandoned != 1 || abandoned > 1 {
			t.Errorf("AbandonedReceives %d over %s, want 1", abandoned, tr.Name)
		}
		t.Logf("%s: %d receive(s) abandoned by the worker", tr.Name, abandoned)
		if st.RQs != 1 {
			t.Errorf("%d request queues after RQ_DESTROY, want B's only", st.RQs)
		}
		if _, ok := st.InFlight[s.rq]; ok {
			t.Errorf("A's closed queue still has an in-flight gauge: %v", st.InFlight)
		}
		if st.InFlight[rqB] != 0 {
			t.Errorf("B's queue has %d requests in flight after its flush", st.InFlight[rqB])
		}

		// The region: A's space stays reserved (the tail moved past it
		// before the Place) but unwritten; B's data follows it; the
		// flushed tail word follows B's data; nothing else changed.
		aAt := q + 8
		bAt := aAt + big
		if ack.Value != bAt {
			t.Fatalf("B's append landed at %#x, want %#x (after A's reserved space)", ack.Value, bAt)
		}
		end := bAt + uint64(len(data))
		if got := le.Uint64(s.mem(q, 8)); got != end {
			t.Errorf("tail %#x after B's flush, want %#x", got, end)
		}
		if !bytes.Equal(s.mem(bAt, len(data)), data) {
			t.Errorf("B's appended data is not in target memory")
		}
		if err := guards(s.mem(aAt, big)); err != nil {
			t.Errorf("A's abandoned payload was written: %v", err)
		}
		if err := guards(s.mem(end, int(s.base+qlen-end))); err != nil {
			t.Errorf("past B's data: %v", err)
		}

		// B goes on: no placement of A is left for its FLUSHes to wait for.
		more := pattern(500, 3)
		seq = b.send(appendReq(client, rdmo.FlagAck, q, s.region, s.region), more, 0)
		if _, f := b.flush(0xC); f.Failed != 0 {
			t.Errorf("B's second flush %+v", f)
		}
		if a := b.ack(seq); a.Status != rdmo.StatusOK || a.Value != end {
			t.Errorf("B's second append %+v, want value %#x", a, end)
		}
		if !bytes.Equal(s.mem(end, len(more)), more) || le.Uint64(s.mem(q, 8)) != end+uint64(len(more)) {
			t.Errorf("B's second append is not in target memory")
		}
		if got := e.w.Stats().AbandonedReceives; got != abandoned {
			t.Errorf("AbandonedReceives %d at the end, was %d", got, abandoned)
		}
		// The cleanups close A's endpoint with its send still pending,
		// then the worker with the abandoned receive still in UCX.
	})
}

// guards reports the first byte of b that is not the target's guard byte.
func guards(b []byte) error {
	for i, c := range b {
		if c != guard {
			return fmt.Errorf("byte %d of %d is %#x, not the guard %#x", i, len(b), c, guard)
		}
	}
	return nil
}

package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/host/initiator"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// An initiator with default options never trips a worker's default
// in-flight limit, even when target memory is slow to reach: the limit is
// there against initiators that ignore flow control, and a well-behaved
// one must never lose requests to it. Here the target progresses its UCX
// worker only every 2 ms (a busy host) and one initiator sends 20000
// appends, then flushes: flow control (initiator.Options.Credits) makes the
// initiator wait for its own flushes instead of overrunning the worker.
func TestLimitsDefaultInitiatorStaysWithinInFlightLimit(t *testing.T) {
	for _, tr := range ucptest.Transports {
		for _, aggregate := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/aggregate=%v", tr.Name, aggregate), func(t *testing.T) {
				defaultInitiatorWithinLimit(t, tr, aggregate)
			})
		}
	}
}

func defaultInitiatorWithinLimit(t *testing.T, tr ucptest.Transport, aggregate bool) {
	ucptest.CheckLeaks(t)
	ctx := ucptest.NewContext(t, tr)
	tg := &target{t: t, ctx: ctx, stop: make(chan struct{}), done: make(chan struct{}), client: 1}
	ready := make(chan error, 1)
	go func() { // a slow target, on the goroutine that owns its worker
		defer close(tg.done)
		w, err := ctx.NewWorker(ucp.WorkerOptions{})
		if err == nil {
			if tg.addr, err = w.Address(); err != nil {
				w.Close()
			}
		}
		if err == nil {
			tg.w = w
		}
		ready <- err
		if err != nil {
			return
		}
		defer w.Close()
		for {
			select {
			case <-tg.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			w.Progress()
		}
	}()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.close)
	tg.worker = inProc(t, tr, dpu.Config{Handlers: handlers(appendop.Owned)})()
	tg.wAddr = tg.do(dpu.ClientInit{ID: 1, Addr: tg.addr}).Addr
	q := tg.fencedQueue(16<<20, 8)
	in, err := initiator.New(initiator.Options{WorkerAddress: tg.wAddr, ClientID: 1, UCX: tr.Config(), Aggregate: aggregate})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	tg.do(dpu.RQCreate{Client: 1, Addr: in.Address()})
	const n = 20000
	for i := 0; i < n; i++ {
		if err := in.Append(q.base, q.id, q.id, makeRecord(0, i, 64)); err != nil {
			t.Fatal(err)
		}
	}
	fctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := in.Flush(fctx); err != nil {
		t.Fatalf("default initiator (Window %d) against a default worker (MaxInFlightPerRQ %d): %v",
			initiator.DefaultWindow, dpu.DefaultMaxInFlightPerRQ, err)
	}
	if err := checkQueue(q.data()[8:q.tail()-q.base], map[int]int{0: n}); err != nil {
		t.Fatal(err)
	}
	if f := tg.worker.Stats().Failures[rdmo.StatusTooManyInFlight]; f != 0 {
		t.Errorf("the worker refused %d requests past its in-flight limit", f)
	}
	st := in.Stats()
	if st.CreditFlushes == 0 {
		t.Errorf("no flow-control flush in %d appends", n)
	}
	t.Logf("%d appends: %d flow-control flushes, %d calls waited for credits", n, st.CreditFlushes, st.CreditWaits)
}

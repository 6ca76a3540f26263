package dpu_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/internal/testutil"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

const opWho = rdmo.OpUserBase + 7 // records the client ids its handler sees

// whoHandler records, per request, the header's client id and Request.Client.
type whoHandler struct {
	rdmo.BaseHandler
	mu   sync.Mutex
	seen []rdmo.ClientID
}

func (*whoHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: "test-who", Version: "1", Ops: []uint32{opWho}}
}

func (h *whoHandler) HandleBatch(_ rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range reqs {
		h.seen = append(h.seen, reqs[i].Client)
		results[i] = rdmo.Result{Status: rdmo.StatusOK}
	}
}

func (h *whoHandler) all() []rdmo.ClientID {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]rdmo.ClientID(nil), h.seen...)
}

// A queue made for a reference initiator (RQ_CREATE with ErrorHandling
// none and ZeroClientID): the initiator's endpoint asks for no error
// handling, as the reference client's does, and its requests name client
// 0. They are served as the queue's client (handlers see its id); other
// ids still fail; a queue made without ZeroClientID still refuses 0; and
// WaitFlush reports the queue's flushes.
func TestReferenceQueue(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		who := &whoHandler{}
		e := newEnv(t, tr, dpu.Config{Handlers: []rdmo.Handler{who}})
		const client = 7
		s := e.newSetup(client, 4096, 0, 4096)

		ref := e.newInitiator(0)
		rq := e.do(dpu.RQCreate{Client: client, Addr: ref.addr, ErrorHandling: dpu.RQErrorsNone, ZeroClientID: true}).RQ
		ep, err := ref.w.Connect(s.waddr, ucp.EndpointOptions{Name: "reference", ErrorHandling: ucp.ErrorHandlingNone})
		if err != nil {
			t.Fatal(err)
		}
		ref.ep = ep

		// Nothing flushed yet: a bounded wait ends with the context.
		wctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		if ev, err := e.w.WaitFlush(wctx, client, rq, 0); !errors.Is(err, context.DeadlineExceeded) || ev.Flushes != 0 {
			t.Fatalf("WaitFlush before any flush = %+v, %v", ev, err)
		}
		cancel()
		// A waiter that is there before the flush completes.
		type res struct {
			ev  dpu.FlushEvent
			err error
		}
		waiter := make(chan res, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			ev, err := e.w.WaitFlush(ctx, client, rq, 0)
			waiter <- res{ev, err}
		}()

		for _, id := range []uint64{0, client, client + 1} {
			seq := ref.send(userReq(id, opWho, rdmo.FlagAck), nil, 0)
			a := ref.ack(seq)
			want := rdmo.StatusOK
			if id == client+1 {
				want = rdmo.StatusClientMismatch
			}
			if a.Status != want {
				t.Errorf("client id %d on the reference queue: %s, want %s", id, a.Status.Name(), want.Name())
			}
		}
		ref.client = 0
		_, fr := ref.flush(0xbeef)
		if fr.Failed != 1 || fr.FirstStatus != rdmo.StatusClientMismatch {
			t.Errorf("flush response %+v, want the one ClientMismatch", fr)
		}
		r := <-waiter
		if r.err != nil || r.ev.Flushes != 1 || r.ev.FlushID != 0xbeef || r.ev.Failed != 1 || r.ev.Failures != 1 || r.ev.RQ != rq {
			t.Errorf("WaitFlush = %+v, %v", r.ev, r.err)
		}
		for _, got := range who.all() {
			if got != client {
				t.Errorf("the handler saw client %d; want %d (the queue's client, not the 0 on the wire)", got, client)
			}
		}
		if n := len(who.all()); n != 2 {
			t.Errorf("the handler ran %d requests, want 2", n)
		}

		// Client id 0 on an ordinary queue of the same client still fails.
		seq := s.in.send(userReq(0, opWho, rdmo.FlagAck), nil, 0)
		if a := s.in.ack(seq); a.Status != rdmo.StatusClientMismatch {
			t.Errorf("client id 0 on an ordinary queue: %s, want ClientMismatch", a.Status.Name())
		}

		// Unknown queues, and another client's, are ErrUnknownRQ at once.
		bg := context.Background()
		if _, err := e.w.WaitFlush(bg, client, rq+100, 0); !errors.Is(err, dpu.ErrUnknownRQ) {
			t.Errorf("WaitFlush of an unknown queue: %v", err)
		}
		if _, err := e.w.WaitFlush(bg, client+1, rq, 0); !errors.Is(err, dpu.ErrUnknownRQ) {
			t.Errorf("WaitFlush of another client's queue: %v", err)
		}
		// A waiter is released when the queue closes.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			ev, err := e.w.WaitFlush(ctx, client, rq, 1)
			waiter <- res{ev, err}
		}()
		// Destroyed before the waiter found it, the queue would be
		// unknown to it, not closed under it.
		testutil.WaitFor(t, "the WaitFlush caller to wait", func() bool { return e.w.FlushWaiting(rq) })
		e.do(dpu.RQDestroy{Client: client, RQ: rq}, ref)
		if r := <-waiter; !errors.Is(r.err, dpu.ErrUnknownRQ) || r.ev.Flushes != 1 {
			t.Errorf("WaitFlush across RQ_DESTROY = %+v, %v", r.ev, r.err)
		}
	})
}

// An unknown error-handling mode is refused.
func TestRQCreateBadErrorHandling(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: []rdmo.Handler{putHandler{}}})
		s := e.newSetup(3, 4096, 0, 4096)
		in := e.newInitiator(3)
		if _, err := e.try(dpu.RQCreate{Client: s.client, Addr: in.addr, ErrorHandling: 9}); !errors.Is(err, dpu.ErrInvalidCommand) {
			t.Errorf("RQ_CREATE with mode 9: %v", err)
		}
	})
}

// An initiator address that would make UCX 1.13 abort (an unknown header
// version: random bytes from a peer) is refused, and the worker lives on.
func TestRQCreateImplausibleAddress(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: []rdmo.Handler{putHandler{}}})
		s := e.newSetup(3, 4096, 0, 4096)
		for _, addr := range [][]byte{{0x25, 1, 2, 3}, {0x2f}, {}} {
			if _, err := e.try(dpu.RQCreate{Client: s.client, Addr: addr, ErrorHandling: dpu.RQErrorsNone}); !errors.Is(err, dpu.ErrInvalidCommand) {
				t.Errorf("RQ_CREATE with address % x: %v", addr, err)
			}
		}
		in := e.newInitiator(3)
		e.do(dpu.RQCreate{Client: s.client, Addr: in.addr})
	})
}

package dpu

import (
	"context"
	"sync"

	"github.com/openrdmo/rdmo/rdmo/wire"
)

// flushWatch is a queue's record of completed FLUSHes: written by the loop
// when a flush response leaves, read by WaitFlush callers. The loop pays a
// mutex (uncontended but for a waiter) per FLUSH, nothing per other
// request, and allocates only for a waiter.
type flushWatch struct {
	mu     sync.Mutex
	ev     FlushEvent
	closed bool
	ch     chan struct{} // non-nil while someone waits; closed at the next change
}

func (fw *flushWatch) flushed(r wire.FlushResponse) {
	fw.mu.Lock()
	fw.ev.Flushes++
	fw.ev.FlushID, fw.ev.Failed = r.FlushID, r.Failed
	fw.ev.FirstOp, fw.ev.FirstStatus, fw.ev.FirstSeq = r.FirstOp, r.FirstStatus, r.FirstSeq
	fw.ev.Failures += uint64(r.Failed)
	fw.wakeLocked()
	fw.mu.Unlock()
}

func (fw *flushWatch) close() {
	fw.mu.Lock()
	fw.closed = true
	fw.wakeLocked()
	fw.mu.Unlock()
}

func (fw *flushWatch) wakeLocked() {
	if fw.ch != nil {
		close(fw.ch)
		fw.ch = nil
	}
}

// WaitFlush waits until more than after FLUSHes of request queue rq (of
// client) have completed, and returns the queue's FlushEvent: its answer
// has left the worker, so everything the initiator sent before that FLUSH
// is complete and visible in target memory. When ctx ends first it
// returns the event as it stands with ctx.Err(). A queue that is unknown,
// another client's, or closed (RQ_DESTROY, its initiator or target gone)
// is a *CommandError matching ErrUnknownRQ. Safe for concurrent use; it
// does not go through the loop.
func (w *Worker) WaitFlush(ctx context.Context, client, rq, after uint64) (FlushEvent, error) {
	w.regMu.Lock()
	q := w.rqByID[rq]
	w.regMu.Unlock()
	if q == nil || q.c.id != client {
		return FlushEvent{Client: client, RQ: rq}, cmdErr(CmdRQFlushWait, ErrUnknownRQ, "request queue "+utoa(rq)+" of client "+utoa(client))
	}
	fw := q.watch
	for {
		fw.mu.Lock()
		ev := fw.ev
		ev.Client, ev.RQ = client, rq
		if ev.Flushes > after {
			fw.mu.Unlock()
			return ev, nil
		}
		if fw.closed {
			fw.mu.Unlock()
			return ev, cmdErr(CmdRQFlushWait, ErrUnknownRQ, "request queue "+utoa(rq)+" closed")
		}
		if fw.ch == nil {
			fw.ch = make(chan struct{})
		}
		ch := fw.ch
		fw.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ev, ctx.Err()
		}
	}
}

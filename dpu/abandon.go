package dpu

import (
	"errors"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/rdmo"
)

// errReceiveAbandoned fails a request whose rendezvous payload was still
// coming when its request queue closed.
var errReceiveAbandoned = errors.New("the request queue closed before its rendezvous payload arrived")

// abandonReceives ends, for the worker, the rendezvous receives of q that
// UCX has not finished when q's endpoint is closed. On an endpoint without
// peer-failure handling (shared memory with UCX's error handling off, see
// ucp.NewContext) UCX cannot tell that an initiator died, so a receive from
// a dead one never completes, and a client's FLUSH waits for every Place of
// the client before it: without this, one initiator killed mid-rendezvous
// would stall every other initiator of its client for good. Each such
// receive fails its request, and its placement ticket and operation group
// are released now. The UCX request itself stays pending (UCX has no way
// to cancel an active-message receive); until it ends, or the worker
// closes, its slot, its buffer and the rkey and mapping of its region stay
// alive, so a late fragment can land only where the request was allowed to
// write, and a bounce buffer is never handed out again.
func (w *Worker) abandonReceives(q *rq) {
	var queued map[int32]bool
	for _, i := range w.backlog {
		if queued == nil {
			queued = map[int32]bool{}
		}
		queued[i] = true
	}
	n := 0
	for i := range w.ops.ops {
		op := &w.ops.ops[i]
		if (op.kind != opRecv && op.kind != opRecvBounce) || op.abandoned || op.rq != q || queued[int32(i)] {
			// Not a receive of q, or one UCX never got: that one fails
			// when the backlog reaches it (issueNow).
			continue
		}
		n++
		op.abandoned = true
		g := op.g
		op.g = nil
		if op.kind == opRecvBounce {
			op.buf = nil // UCX may still write into it; never reused
		}
		if op.kind == opRecvBounce || op.place {
			w.placeDone(op.c, op.ticket)
		}
		if g != nil {
			g.fail(rdmo.StatusInternal, errReceiveAbandoned)
			g.pending--
			w.groupCheck(g) // may grow w.ops.ops: op is not used after this
		}
	}
	if n > 0 {
		w.stats.abandoned.Add(uint64(n))
		w.log.Warn("rendezvous receives abandoned with their request queue", zap.Uint64("client", q.c.id),
			zap.Uint64("rq", q.id), zap.Int("receives", n))
	}
}

// receiveAbandonedDone is the UCX completion of an abandoned receive: only
// the slot and the region reference it held are left to free.
func (w *Worker) receiveAbandonedDone(i int32, op *targetOp) {
	if op.counted {
		op.r.inflight--
		if op.r.inflight == 0 && op.r.destroyWhenIdle {
			w.destroyRkey(op.r)
		}
	}
	w.ops.release(i)
}

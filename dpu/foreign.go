package dpu

import (
	"encoding/binary"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
)

// Answers to requests that arrive on an endpoint the worker does not serve
// (not a request queue's, see answerForeign): at most foreignBurst at once
// and foreignRate a second after that, so a flood costs the worker no more
// than a trickle of sends.
const (
	foreignBurst = 16
	foreignRate  = 16
)

// foreignLimiter is a token bucket over the worker's clock (loop-owned).
type foreignLimiter struct {
	tokens float64
	at     int64 // Worker.now of the last refill
	primed bool
}

func (l *foreignLimiter) allow(now int64) bool {
	if !l.primed {
		l.tokens, l.at, l.primed = foreignBurst, now, true
	}
	l.tokens = min(foreignBurst, l.tokens+float64(now-l.at)*foreignRate/float64(time.Second))
	l.at = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

// answerForeign answers a FLUSH (plain, or inside a BATCH container) that
// arrived on a reply endpoint that is not a request queue's, so that its
// initiator sees an error instead of waiting for good: a flush response
// with the flush id it asked about, one failure and StatusNoQueue. This is
// what an initiator whose endpoint did not match the worker's gets (over
// shared memory, an endpoint that asked for peer-failure detection and
// fell back to none while the worker's has it: UCX then keeps the two
// apart, docs/SECURITY.md). Nothing of the request runs; other requests get
// no answer (there is no queue to number them), and the answers are
// rate-limited.
func (w *Worker) answerForeign(m *ucp.Message) {
	if m.Reply == nil || len(m.Header) < wire.HeaderLen {
		return
	}
	switch binary.LittleEndian.Uint32(m.Header[wire.HeaderOpOffset:]) {
	case rdmo.OpFlush:
		if rh, err := wire.ParseRequest(m.Header); err == nil {
			w.sendForeign(m.Reply, rh.Flush.FlushID)
		}
	case rdmo.OpBatch:
		rh, err := wire.ParseRequest(m.Header)
		if err != nil || m.Rendezvous {
			return
		}
		it := wire.NewBatchIter(m.Data, rh.Batch.Count)
		for it.Next() {
			if r, err := it.Request(); err == nil && r.Header.Op == rdmo.OpFlush {
				w.sendForeign(m.Reply, r.Flush.FlushID)
			}
		}
	}
}

func (w *Worker) sendForeign(ep *ucp.Endpoint, flushID uint64) {
	if !w.foreign.allow(w.now) {
		return
	}
	var msg [wire.FlushResponseLen]byte
	wire.AppendFlushResponse(msg[:0], wire.FlushResponse{FlushID: flushID, Failed: 1, FirstOp: rdmo.OpFlush, FirstStatus: rdmo.StatusNoQueue})
	// Best effort: a full send queue or a failed endpoint loses the answer.
	if err := ep.SendAM(0, msg[:], nil, 0, nil, 0); err != nil {
		w.log.Debug("answer to a foreign endpoint not sent", zap.Error(err))
	}
}

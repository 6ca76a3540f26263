package bench

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/openrdmo/rdmo/host/target"
	"github.com/openrdmo/rdmo/ucp"
)

// The append rows' queue in target memory, and how a round gets a fresh
// queue without a fresh registration.
//
// The queue memory is a slot area of tail words followed by the data. Each
// round takes the next tail word, pointing at the first data byte: a worker
// with the owned strategy caches a tail it has read until the region goes,
// so a new tail word is a new queue to it, while the data the round writes
// is the memory earlier rounds wrote, still mapped into the worker. That is
// the steady state of a long-running application's ring. The cold row
// (rdmo-append/owned/cold) deregisters and registers the queue before each
// of its rounds instead, so every append writes memory freshly mapped into
// the worker and pays its first touch. When the slots run out, every
// worker's registration is renewed once.

// queueSlotBytes is the slot area before the queue's data: 512 tail
// words, and the data starts on a page boundary.
const queueSlotBytes = 4096

// queueMem is the target's queue memory and the round's tail word.
type queueMem struct {
	mem  *ucp.Memory
	next int // the next unused tail word
	tail int // offset of the current round's tail word
}

// resetQueue gives the round a queue: a fresh tail word pointing at the
// first data byte, registered with ws's worker (unless ws is nil: a
// native row), freshly when cold, with its pages populated when populate
// (target.RegisterOptions.Populate).
func (t *benchTarget) resetQueue(ctx context.Context, bytes int, ws *workerState, cold, populate bool) (queueInfo, error) {
	q := &t.queue
	if q.mem != nil && q.mem.Len() != bytes {
		if err := t.deregQueue(ctx, nil); err != nil {
			return queueInfo{}, err
		}
		q.mem.Close()
		q.mem = nil
	}
	if q.mem == nil {
		if bytes <= queueSlotBytes {
			return queueInfo{}, fmt.Errorf("a %d-byte queue has no room after its %d-byte slot area", bytes, queueSlotBytes)
		}
		m, err := t.uctx.Allocate(bytes)
		if err != nil {
			return queueInfo{}, fmt.Errorf("allocate a %d-byte queue: %w", bytes, err)
		}
		_ = target.AdviseHugePages(m) // refused where THP is off: small pages
		q.mem, q.next = m, 0
	}
	if q.next == queueSlotBytes/8 {
		// Every tail word may be cached by a worker: a new registration
		// forgets them.
		if err := t.deregQueue(ctx, nil); err != nil {
			return queueInfo{}, err
		}
		q.next = 0
	}
	if cold && ws != nil {
		if err := t.deregQueue(ctx, ws); err != nil {
			return queueInfo{}, err
		}
	}
	q.tail = 8 * q.next
	q.next++
	base, data := q.mem.Address()+uint64(q.tail), q.mem.Address()+queueSlotBytes
	binary.LittleEndian.PutUint64(q.mem.Bytes()[q.tail:], data)
	info := queueInfo{Base: base, Data: data, Len: uint64(bytes - q.tail), Pages: t.pages()}
	if ws == nil {
		rkey, err := q.mem.PackRkey()
		if err != nil {
			return queueInfo{}, err
		}
		info.Rkey = rkey
		return info, nil
	}
	if ws.queueReg == 0 {
		reg, err := ws.tg.RegisterWith(ctx, q.mem, target.RegisterOptions{Populate: populate})
		if err != nil {
			return queueInfo{}, err
		}
		ws.queueReg = reg.ID
	}
	info.Region = ws.queueReg
	return info, nil
}

// deregQueue deregisters the queue from ws's worker, or from every worker
// when ws is nil. Deregistration writes a worker's cached tails back and
// forgets them.
func (t *benchTarget) deregQueue(ctx context.Context, ws *workerState) error {
	for _, w := range t.workers {
		if (ws == nil || w == ws) && w.queueReg != 0 {
			id := w.queueReg
			w.queueReg = 0
			if err := w.tg.Deregister(ctx, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// pages says how the queue memory is backed (THP counts touched pages
// only: those of earlier rounds).
func (t *benchTarget) pages() string {
	if t.queue.mem == nil {
		return ""
	}
	p, err := target.PagesOf(t.queue.mem)
	if err != nil {
		return "unknown"
	}
	return p.String()
}

package dpu

import (
	"errors"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
)

type opKind uint8

const (
	opPut        opKind = iota + 1 // write buf to raddr
	opGet                          // read raddr into buf (Sync)
	opAtomic                       // 64-bit atomic (Sync)
	opFence                        // order earlier UCX writes before later ops
	opFlush                        // endpoint flush, then the readback if set
	opReadback                     // the flush's 8-byte visibility read
	opRecv                         // rendezvous receive into buf (Fetch, or Place into the mapping)
	opRecvBounce                   // rendezvous receive into a bounce buffer, then opBouncePut
	opBouncePut                    // the Put of a bounce buffer into target memory
	opReply                        // an answer (flush response, ack) on a request queue
	opRQFlush                      // flush a request queue's endpoint before closing it
)

// targetOp is one operation from an executor (or the loop itself) to UCX.
// Executors fill one in their own buffers; the loop copies it into its op
// table, whose index is the UCX completion tag.
type targetOp struct {
	kind  opKind
	place bool // opRecv: a Place (a placement ticket is taken)
	// abandoned: a receive whose queue closed before UCX finished it
	// (abandonReceives); its completion, if one ever comes, only frees
	// the slot.
	abandoned bool
	counted   bool // counted in r.inflight (the rkey must outlive the op)
	n         uint8
	g         *opGroup
	c         *client
	r         *region
	raddr     uint64
	buf       []byte
	pend      *pending
	amo       ucp.AtomicOp
	value     uint64
	compare   uint64
	res       *rdmo.RemoteOp
	// opFlush: the region of the visibility read after the flush.
	readback *region
	ticket   uint64
	rq       *rq
	msg      [wire.FlushResponseLen]byte // opReply
	big      *replyBuf                   // opReply: an ack with a result, instead of msg
	acks     []byte                      // opReply: an ACK group's entries (msg: its header)
}

type groupKind uint8

const (
	groupBatch groupKind = iota + 1
	groupSync
)

// opGroup counts the UCX operations of a batch (completed with it) or of
// an executor's wait (which ends when they have all completed). Loop-owned
// between submission and completion.
type opGroup struct {
	kind    groupKind
	pending int
	sealed  bool // no more ops will join; complete when pending is 0
	status  rdmo.Status
	detail  string
	b       *batch
	c       *client
}

func (g *opGroup) fail(st rdmo.Status, err error) {
	if g != nil && g.status == rdmo.StatusOK {
		g.status = st
		if err != nil {
			g.detail = err.Error()
		}
	}
}

func (w *Worker) groupCheck(g *opGroup) {
	if g.pending != 0 || !g.sealed {
		return
	}
	g.sealed = false
	switch g.kind {
	case groupBatch:
		w.completeBatch(g.b)
	case groupSync:
		w.readied++
		w.wakeExec(g.c)
		select {
		case g.c.syncCh <- struct{}{}:
		default:
			// One signal per wait; a second one would be a bug, and
			// blocking here would stop every client.
			w.log.Error("dpu: internal error: executor signalled twice", zap.Uint64("client", g.c.id))
		}
	}
}

// opTable holds the operations between submission and completion.
type opTable struct {
	ops  []targetOp
	free []int32
}

func (t *opTable) alloc() int32 {
	if n := len(t.free); n > 0 {
		i := t.free[n-1]
		t.free = t.free[:n-1]
		return i
	}
	t.ops = append(t.ops, targetOp{})
	return int32(len(t.ops) - 1)
}

func (t *opTable) release(i int32) {
	t.ops[i] = targetOp{}
	t.free = append(t.free, i)
}

type completer struct{ w *Worker }

func (c *completer) Complete(comp ucp.Completion) {
	c.w.opFinished(int32(comp.Tag), comp.Value, comp.Err)
}

// enqueue takes an executor's op into the table and issues it. An op that
// uses a region's rkey (or its mapping) counts in the region's inflight
// from here until it finishes, so the rkey outlives it even when the op
// waits in the backlog.
func (w *Worker) enqueue(src *targetOp) {
	if src.g != nil {
		src.g.pending++
	}
	i := w.ops.alloc()
	op := &w.ops.ops[i]
	*op = *src
	switch op.kind {
	case opRecv:
		if op.place {
			op.ticket = w.placeStart(op.c)
		}
	case opRecvBounce:
		op.buf = w.bounce.get(int(op.pend.length))
		op.ticket = w.placeStart(op.c)
	case opFlush:
		if t := op.c.placeNext; op.c.minPendingPlace() < t {
			op.c.parked = append(op.c.parked, parkedFlush{op: i, ticket: t})
			return
		}
	}
	if op.r != nil && (op.kind != opRecv || op.place) {
		op.counted = true
		op.r.inflight++
	}
	w.issue(i)
}

func (w *Worker) issue(i int32) {
	if len(w.backlog) > 0 || !w.issueNow(i) {
		w.backlog = append(w.backlog, i)
	}
}

// issueBacklog retries the ops UCX had no room for, in order.
func (w *Worker) issueBacklog() int {
	n := 0
	for n < len(w.backlog) && w.issueNow(w.backlog[n]) {
		n++
	}
	if n > 0 {
		k := copy(w.backlog, w.backlog[n:])
		w.backlog = w.backlog[:k]
	}
	return n
}

// issueNow hands op i to UCX; false means UCX is full and it must wait.
func (w *Worker) issueNow(i int32) bool {
	op := &w.ops.ops[i]
	tag := uint64(i)
	var err error
	switch op.kind {
	case opPut, opBouncePut:
		err = op.c.hostEP.Put(op.buf, op.raddr, op.r.rkey, w.comp, tag)
	case opGet, opReadback:
		err = op.c.hostEP.Get(op.buf, op.raddr, op.r.rkey, w.comp, tag)
	case opAtomic:
		err = op.c.hostEP.Atomic(op.amo, op.value, op.compare, op.raddr, op.r.rkey, w.comp, tag)
	case opFence:
		w.opFinished(i, 0, w.uw.Fence())
		return true
	case opFlush:
		err = op.c.hostEP.Flush(w.comp, tag)
	case opRecv, opRecvBounce:
		if op.rq != nil && op.rq.closed {
			err = errReceiveAbandoned
			break
		}
		err = w.uw.Receive(op.pend.held, op.buf, w.comp, tag)
		if err == nil {
			op.pend.consumed = true
		}
	case opReply:
		if q := op.rq; q.closed || q.epFailed || q.ep == nil {
			err = ucp.ErrClosed
		} else if op.acks != nil && int(op.n)+len(op.acks) > ucp.InlineLen {
			// Longer than the inline bytes: the buffer stays the op's
			// until its completion (opFinished).
			err = q.ep.SendAM(0, op.msg[:op.n], op.acks, 0, w.comp, tag)
			if err == nil {
				return true
			}
		} else if op.acks != nil {
			err = q.ep.SendAM(0, op.msg[:op.n], op.acks, 0, nil, 0)
		} else if rb := op.big; rb != nil {
			// At most wire.MaxAckMessageLen bytes: copied into C memory
			// now, so the buffer is free once SendAM returns.
			err = q.ep.SendAM(0, rb.b[:wire.AckResultLen], rb.b[wire.AckResultLen:rb.n], 0, nil, 0)
		} else {
			err = q.ep.SendAM(0, op.msg[:op.n], nil, 0, nil, 0)
		}
		if errors.Is(err, ucp.ErrTooManyOutstanding) {
			return false
		}
		w.putReplyBuf(op.big)
		w.putAckBuf(op.acks)
		if err != nil {
			w.log.Debug("answer not sent", zap.Uint64("rq", op.rq.id), zap.Error(err))
		}
		w.ops.release(i)
		return true
	case opRQFlush:
		err = op.rq.ep.Flush(w.comp, tag)
	}
	if errors.Is(err, ucp.ErrTooManyOutstanding) {
		return false
	}
	if err != nil {
		w.opFinished(i, 0, err)
	}
	return true
}

// opFinished is every op's completion (or immediate failure), on the loop.
func (w *Worker) opFinished(i int32, value uint64, err error) {
	if int(i) >= len(w.ops.ops) {
		return
	}
	op := w.ops.ops[i] // a copy: the table may grow below
	if op.kind == 0 {
		return
	}
	if op.abandoned {
		w.receiveAbandonedDone(i, &op)
		return
	}
	switch op.kind {
	case opPut, opReadback:
		if err != nil {
			op.g.fail(rdmo.StatusTargetUnreachable, err)
		}
	case opBouncePut:
		if err != nil {
			op.g.fail(rdmo.StatusTargetUnreachable, err)
		}
		w.bounce.put(op.buf)
		w.placeDone(op.c, op.ticket)
	case opGet, opAtomic:
		if err != nil {
			op.res.Status = rdmo.StatusTargetUnreachable
		} else if op.kind == opAtomic {
			op.res.Result = value
		}
	case opFence:
		if err != nil {
			op.g.fail(rdmo.StatusTargetUnreachable, err)
		}
	case opFlush:
		if err != nil {
			op.g.fail(rdmo.StatusTargetUnreachable, err)
		} else if r := op.readback; r != nil && r.rkey != nil {
			// The visibility read, awaited as part of the same wait.
			w.stats.readbacks.Add(1)
			n := min(r.length, 8)
			nop := &w.ops.ops[i]
			nop.kind, nop.r, nop.raddr, nop.buf, nop.readback = opReadback, r, r.base, op.c.readback[:n], nil
			nop.counted = true
			r.inflight++
			w.issue(i)
			return
		}
	case opRecv:
		if err != nil {
			op.g.fail(rdmo.StatusInternal, err)
		}
		if op.place {
			w.placeDone(op.c, op.ticket)
		}
	case opRecvBounce:
		if err == nil && op.r.rkey == nil {
			err = ucp.ErrClosed // the region went while the payload came
		}
		if err == nil {
			nop := &w.ops.ops[i]
			nop.kind = opBouncePut
			w.issue(i)
			return
		}
		op.g.fail(rdmo.StatusInternal, err)
		w.bounce.put(op.buf)
		w.placeDone(op.c, op.ticket)
	case opReply: // an ACK group (other answers complete at once)
		w.putAckBuf(op.acks)
		if err != nil {
			w.log.Debug("ack group not sent", zap.Uint64("rq", op.rq.id), zap.Error(err))
		}
	case opRQFlush:
		op.rq.flushDone = true
		if err != nil {
			w.log.Debug("request queue flush failed", zap.Uint64("rq", op.rq.id), zap.Error(err))
		}
	}
	if op.counted {
		op.r.inflight--
		if op.r.inflight == 0 && op.r.destroyWhenIdle {
			w.destroyRkey(op.r)
		}
	}
	w.ops.release(i)
	if g := op.g; g != nil {
		g.pending--
		w.groupCheck(g)
	}
}

func (w *Worker) placeStart(c *client) uint64 {
	t := c.placeNext
	c.placeNext++
	c.placeQ = append(c.placeQ, placeEntry{ticket: t})
	return t
}

func (c *client) minPendingPlace() uint64 {
	if len(c.placeQ) > 0 {
		return c.placeQ[0].ticket
	}
	return c.placeNext
}

// placeDone marks a placement finished and issues the flushes that waited
// for every placement before them.
func (w *Worker) placeDone(c *client, t uint64) {
	c.placesDone.Add(1)
	for k := range c.placeQ {
		if c.placeQ[k].ticket == t {
			c.placeQ[k].done = true
			break
		}
	}
	n := 0
	for n < len(c.placeQ) && c.placeQ[n].done {
		n++
	}
	if n > 0 {
		k := copy(c.placeQ, c.placeQ[n:])
		c.placeQ = c.placeQ[:k]
	}
	if len(c.parked) == 0 {
		return
	}
	lo := c.minPendingPlace()
	var ready []int32
	keep := c.parked[:0]
	for _, p := range c.parked {
		if p.ticket <= lo {
			ready = append(ready, p.op)
		} else {
			keep = append(keep, p)
		}
	}
	c.parked = keep
	for _, i := range ready {
		w.issue(i)
	}
}

func (w *Worker) destroyRkey(r *region) {
	if r.rkey != nil {
		r.rkey.Close()
		r.rkey = nil
	}
	r.destroyWhenIdle = false
}

// bouncePool recycles the buffers of Places into unmapped target memory,
// keeping up to bouncePoolBytes of free buffers across its size classes
// (powers of two from 4 KiB). A queue streaming large payloads has tens of
// them in flight at once (the initiator's byte window is 64 MiB): a pool of
// a few buffers per class made every payload beyond them a fresh
// allocation, and over RDMA a fresh registration of its memory for the put.
type bouncePool struct {
	free  map[int][][]byte
	bytes int // bytes of the free buffers held
}

// bouncePoolBytes bounds the free bounce memory a worker keeps: a burst's
// worth of 1 MiB payloads, held for the next one rather than returned to
// the garbage collector.
const bouncePoolBytes = 64 << 20

func (p *bouncePool) get(n int) []byte {
	size := 4096
	for size < n {
		size <<= 1
	}
	if l := p.free[size]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[size] = l[:len(l)-1]
		p.bytes -= size
		return b[:n]
	}
	return make([]byte, n, size)
}

func (p *bouncePool) put(b []byte) {
	size := cap(b)
	if p.bytes+size > bouncePoolBytes {
		return
	}
	if p.free == nil {
		p.free = map[int][][]byte{}
	}
	p.free[size] = append(p.free[size], b[:size])
	p.bytes += size
}

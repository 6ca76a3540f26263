package initiator

import (
	"context"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/openrdmo/rdmo/internal/coalesce"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// queue is the coalescing queue between producers (any goroutine) and the
// progress loop: producers encode their request into the current batch
// under the Batcher's mutex; the loop swaps the whole batch out at once.
// The same mutex guards the send window and flow control, so a request
// costs one lock round trip for its producer.
type queue struct {
	coalesce.Batcher[*batch]

	window, windowBytes int
	inflight            int // window slots in use
	inflightBytes       int // window bytes in use
	// Producers waiting: for window space, and for credits (a flush
	// answer). Freed window space wakes only the first kind, so a
	// stream whose producer waits for credits is not woken by every
	// send that completes, only to find no credit and wait again.
	windowWaiters, creditWaiters int
	// space is set when window space or credits were returned while
	// producers wait (broadcast), and replaced by a new latch.
	space *latch

	// sleeping is set by the loop before it checks the batch and waits
	// for work; the producer that puts the first request into the empty
	// batch then wakes it (and clears the flag, so nobody else does).
	sleeping atomic.Bool

	seq uint64 // arrival sequence number of the next request
	// Flow control (Options.Credits): every request with a sequence
	// number below confirmed has completed at the worker (a flush
	// answered); flushEnd is the sequence number after the last FLUSH
	// queued, ours or the caller's.
	credits   int
	confirmed uint64
	flushEnd  uint64
	closed    bool  // Close was called: no new requests
	failed    error // the peer failed: every call fails with this
	failReq   bool  // PeerFailed was called: the progress loop must act
	// attn is closed || failReq, written under the mutex, so that the
	// polling loop finds an empty queue without taking the mutex the
	// producers use.
	attn atomic.Bool
	// drives are the Drives waiting for the loop, in call order.
	drives []*driveReq
}

func (q *queue) init(window, windowBytes, credits int, wake func()) {
	q.window, q.windowBytes, q.credits = window, windowBytes, credits
	q.space = new(latch)
	q.Init(wake)
}

// broadcast wakes every waiting producer. Called with mu held.
func (q *queue) broadcast() {
	if q.windowWaiters+q.creditWaiters > 0 {
		l := q.space
		q.space = new(latch)
		l.fire()
	}
}

// release returns window space and wakes the producers waiting for it
// once an eighth of the window is free (or nothing is in flight); called
// with mu held. Waking them for every slot freed would hand the CPU to a
// producer that fills one slot and waits again: a thread switch per
// request when a stream outruns the worker. Woken at the low-water mark,
// a producer queues a run of requests that the loop sends as one batch.
func (q *queue) release(slots, nbytes int) {
	q.inflight -= slots
	q.inflightBytes -= nbytes
	if q.windowWaiters > 0 && (slots > 0 || nbytes > 0) && q.roomToWake() {
		q.broadcast()
	}
}

// roomToWake reports whether the window has room for a run of requests:
// an eighth of its slots and of its bytes, or nothing in flight (a request
// larger than the byte window goes alone).
func (q *queue) roomToWake() bool {
	if q.inflight == 0 {
		return true
	}
	return q.window-q.inflight >= max(1, q.window/8) && q.windowBytes-q.inflightBytes >= q.windowBytes/8
}

// confirm records a flush answer's flow-control mark and wakes the
// producers waiting for credits when it moved; called with mu held.
func (q *queue) confirm(confirmed uint64) {
	if confirmed != q.confirmed {
		q.confirmed = confirmed
		if q.creditWaiters > 0 {
			q.broadcast()
		}
	}
}

// batch is a group of requests encoded back to back. Headers and small
// payloads live in two arenas; large payloads in pooled buffers of their
// own (copied before the lock is taken). A batch is reused once every send
// issued from it has completed locally, because UCX reads the arenas until
// then.
type batch struct {
	id      uint32
	hdr     []byte
	data    []byte
	ents    []entry
	pending int // sends issued and not yet complete (progress loop)
	// agg holds the BATCH containers built from the batch (worker
	// goroutine): each a container header followed by its data.
	agg []byte
}

type entry struct {
	op, flags      uint32
	hdrOff, hdrLen uint32
	dataOff        int
	dataLen        int
	own            *[]byte // the payload, when it has its own buffer
	lend           *Lend   // AppendLent: the payload is ext, the caller's, until the send completed
	byRef          bool    // AppendLent from a LendPool: the payload is a wire.PoolRef in data; lend returns at the ack
	ext            []byte
	seq            uint64
	cost           int // window bytes
	flush          *FlushWait
	call           *CallWait // a Call's request (it has rdmo.FlagAck)
	// span > 1: this entry leads a BATCH container of span entries (it
	// and the ones after it), which is agg[aggOff:aggEnd].
	span           int
	aggOff, aggEnd int
}

func (b *batch) header(e *entry) []byte {
	return b.hdr[e.hdrOff : e.hdrOff+e.hdrLen : e.hdrOff+e.hdrLen]
}

func (b *batch) payload(e *entry) []byte {
	if e.own != nil {
		return *e.own
	}
	if e.lend != nil && !e.byRef {
		return e.ext
	}
	return b.data[e.dataOff : e.dataOff+e.dataLen : e.dataOff+e.dataLen]
}

// maxKeptArena is the largest arena a recycled batch keeps, so that one
// burst does not pin its memory forever.
const maxKeptArena = 4 << 20

// reset empties the batch for reuse, returning large payload buffers.
func (b *batch) reset() {
	for i := range b.ents {
		if b.ents[i].own != nil {
			putBuf(b.ents[i].own)
		}
	}
	clear(b.ents)
	b.ents = b.ents[:0]
	b.hdr = b.hdr[:0]
	b.data = b.data[:0]
	b.agg = b.agg[:0]
	if cap(b.data) > maxKeptArena {
		b.data = nil
	}
	if cap(b.agg) > maxKeptArena {
		b.agg = nil
	}
	if cap(b.ents) > maxKeptArena/64 {
		b.ents, b.hdr = nil, nil
	}
	b.pending = 0
}

// request is one call's request, described for enqueue.
type request struct {
	op     uint32
	flags  uint32
	app    rdmo.AppendHeader
	iovs   []wire.IOV
	chunks [][]byte
	sub    []byte
	data   []byte // the caller's payload (APPEND, user op)
	plen   int    // payload length on the wire
	flush  *FlushWait
	call   *CallWait
	lend   *Lend // AppendLent: data is sent from where it is
	// byRef: AppendLent of a LendPool's memory the worker maps; the
	// payload on the wire is ref (flags has rdmo.FlagByRef and FlagAck).
	byRef bool
	ref   wire.PoolRef
	pool  wire.LendPoolHeader // LEND_POOL
	// poll, when set, is a Driver's: the caller is the loop itself, so
	// instead of waiting for window space or credits (which only the
	// loop frees) it runs a loop round and tries again.
	poll func() error
}

// ownBufferMin: payloads at least this long are copied into a buffer of
// their own before the queue lock is taken, so a big copy never holds up
// other producers.
const ownBufferMin = 4 << 10

func (r *request) headerLen() int {
	switch r.op {
	case rdmo.OpFlush:
		return wire.FlushHeaderLen
	case rdmo.OpAppend:
		return wire.AppendHeaderLen
	case rdmo.OpScatter:
		return wire.ScatterHeaderLen
	case rdmo.OpLendPool:
		return wire.LendPoolHeaderLen
	}
	return wire.HeaderLen + len(r.sub)
}

// writePayload appends the request's wire payload to dst.
func (r *request) writePayload(dst []byte) []byte {
	if r.byRef {
		return wire.AppendPoolRef(dst, r.ref)
	}
	if r.op != rdmo.OpScatter {
		return append(dst, r.data...)
	}
	for i := range r.iovs {
		// Lengths were checked by the caller, so AppendIOV cannot fail.
		dst, _ = wire.AppendIOV(dst, r.iovs[i], r.chunks[i])
	}
	return dst
}

// enqueue waits for window space, encodes r into the current batch and
// wakes the loop if it sleeps on an empty queue (the Batcher's Unlock). It
// returns the request's arrival sequence number.
func (in *Initiator) enqueue(ctx context.Context, r *request) (uint64, error) {
	hlen := r.headerLen()
	cost := hlen + r.plen
	var own *[]byte
	if r.plen >= ownBufferMin && r.lend == nil {
		own = getBuf(r.plen)
		*own = r.writePayload((*own)[:0])
	}
	q := &in.q
	q.Lock()
	waited, creditWaited := false, false
	var flushFirst bool
	for {
		if q.closed {
			q.Unlock()
			putBuf(own)
			return 0, ErrClosed
		}
		if q.failed != nil {
			err := q.failed
			q.Unlock()
			putBuf(own)
			return 0, err
		}
		var creditsOK bool
		flushFirst, creditsOK = q.credit(r.op)
		if !creditsOK {
			// Only a flush answer returns credits: make sure one is
			// coming (the Unlock below wakes the loop for it).
			if q.seq > q.flushEnd {
				in.queueCreditFlush()
			}
			if !creditWaited {
				creditWaited = true
				in.stats.creditWaits.Add(1)
			}
		} else if q.inflight < q.window && (q.inflightBytes == 0 || q.inflightBytes+cost <= q.windowBytes) {
			break
		} else if !waited {
			waited = true
			in.stats.windowWaits.Add(1)
		}
		if r.poll != nil {
			q.Unlock()
			if err := r.poll(); err != nil {
				putBuf(own)
				return 0, err
			}
			q.Lock()
			continue
		}
		if in.onLoop() {
			// Inside a Drive's fn, with no Driver: nobody else
			// would free the space.
			q.Unlock()
			putBuf(own)
			return 0, ErrInsideDrive
		}
		space := q.space
		waiters := &q.windowWaiters
		if !creditsOK {
			waiters = &q.creditWaiters
		}
		*waiters++
		q.Unlock()
		in.awaitSpace(space, ctx)
		q.Lock()
		*waiters--
		if ctx != nil && ctx.Err() != nil {
			q.Unlock()
			putBuf(own)
			return 0, ctx.Err()
		}
	}
	if flushFirst {
		in.queueCreditFlush()
	}
	seq := in.put(r, cost, own)
	// While the loop is parked for a stream, its producers send what
	// they queued themselves (stream.go); a request somebody waits for
	// (a lent buffer, a Call, a Flush) goes at once.
	run := q.LenLocked() >= streamRoundEvery || r.lend != nil || r.call != nil || r.flush != nil
	q.Unlock()
	if run && in.tok.Load() == tokFree {
		in.streamRound()
	}
	return seq, nil
}

// wake is the queue's wake function: it interrupts the loop's sleep, a
// system call, only when the loop is (about to be) asleep. The loop sets
// sleeping before it checks the batch: either it sees the request or the
// producer sees the flag.
func (in *Initiator) wake() {
	if in.q.sleeping.Swap(false) {
		in.stats.wakes.Add(1)
		in.w.Wake()
	}
	in.wakeParked()
}

// put takes window space and a sequence number for r and encodes it into
// the current batch. Called with the mutex held.
func (in *Initiator) put(r *request, cost int, own *[]byte) (seq uint64) {
	q := &in.q
	q.inflight++
	q.inflightBytes += cost
	seq = q.seq
	q.seq++
	b := *q.Batch()
	if r.op == rdmo.OpFlush {
		r.flush.seq = seq
		q.flushEnd = seq + 1
	}
	// The entry is filled in place: one built on the stack and appended
	// was copied (with write barriers) per request.
	b.ents = append(b.ents, entry{})
	e := &b.ents[len(b.ents)-1]
	e.op, e.flags, e.seq, e.cost = r.op, r.flags, seq, cost
	e.flush, e.call, e.own, e.lend = r.flush, r.call, own, r.lend
	e.hdrOff = uint32(len(b.hdr))
	h := wire.Header{ClientID: in.opts.ClientID, Op: r.op, Flags: r.flags}
	if r.flags&rdmo.FlagAck != 0 && r.lend == nil && in.opts.GroupAcks {
		// A lent buffer's ack comes alone: a stream of lent records
		// whose buffers came back in groups would refill them in
		// bursts, and its worker would wait between them.
		h.Flags |= rdmo.FlagAckGroup
	}
	switch r.op {
	case rdmo.OpFlush:
		b.hdr = wire.AppendFlushRequest(b.hdr, h, rdmo.FlushHeader{FlushID: r.flush.id})
	case rdmo.OpAppend:
		b.hdr = wire.AppendAppendRequest(b.hdr, h, r.app)
	case rdmo.OpScatter:
		b.hdr = wire.AppendScatterRequest(b.hdr, h, rdmo.ScatterHeader{Count: uint64(len(r.iovs))})
	case rdmo.OpLendPool:
		b.hdr = wire.AppendLendPoolRequest(b.hdr, h, r.pool)
	default:
		// Checked by the caller: a user op with a short enough sub-header.
		b.hdr, _ = wire.AppendUserRequest(b.hdr, h, r.sub)
	}
	e.hdrLen = uint32(len(b.hdr)) - e.hdrOff
	e.byRef = r.byRef
	if r.lend != nil && !r.byRef {
		e.ext = r.data
	} else if own == nil && r.plen > 0 {
		e.dataOff = len(b.data)
		b.data = r.writePayload(b.data)
		e.dataLen = len(b.data) - e.dataOff
	}
	q.Added(1)
	return seq
}

// credit reports whether a request of op fits the credits now, and whether
// flow control wants a FLUSH of its own queued before it (half the credits
// went out since the last one). One credit is always kept back, so that a
// producer that has to wait can still queue the flush that will return
// credits. Called with mu held.
func (q *queue) credit(op uint32) (flushFirst, ok bool) {
	if q.credits <= 0 {
		return false, true
	}
	need := uint64(1)
	if op != rdmo.OpFlush && q.seq-q.flushEnd >= uint64(q.credits/2) {
		flushFirst, need = true, 2
	}
	return flushFirst, q.seq+need-q.confirmed <= uint64(q.credits-1)
}

// queueCreditFlush puts a fenced FLUSH of flow control's own into the
// current batch: its answer confirms every request before it, returning
// their credits. Called with the mutex held.
func (in *Initiator) queueCreditFlush() {
	fw := &FlushWait{in: in, id: in.flushID.Add(1), auto: true}
	in.put(&request{op: rdmo.OpFlush, flags: rdmo.FlagFence, flush: fw}, wire.FlushHeaderLen, nil)
	in.stats.creditFlushes.Add(1)
}

// Pools of payload buffers by power-of-two size class, from ownBufferMin
// up to maxPooledBuf; larger payloads get a buffer of their own.
const (
	minBufShift  = 12 // ownBufferMin
	maxBufShift  = 22
	maxPooledBuf = 1 << maxBufShift
)

var bufPools [maxBufShift - minBufShift + 1]sync.Pool

func bufClass(n int) int {
	if n <= 1<<minBufShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minBufShift
}

func getBuf(n int) *[]byte {
	if n > maxPooledBuf {
		b := make([]byte, 0, n)
		return &b
	}
	c := bufClass(n)
	if p, ok := bufPools[c].Get().(*[]byte); ok {
		return p
	}
	b := make([]byte, 0, 1<<(c+minBufShift))
	return &b
}

func putBuf(p *[]byte) {
	if p == nil || cap(*p) > maxPooledBuf || cap(*p) < 1<<minBufShift {
		return
	}
	// Only exact class sizes come from getBuf.
	c := bufClass(cap(*p))
	if cap(*p) != 1<<(c+minBufShift) {
		return
	}
	*p = (*p)[:0]
	bufPools[c].Put(p)
}

// awaitSpace waits until l is set (window space or credits returned) or
// ctx (nil: none) ends. A stream's producer waits here every few hundred
// requests, for the answer of flow control's flush. The first producer to
// wait runs the progress loop's rounds itself meanwhile, as a caller
// waiting for its answer does (borrow.go): the loop parks for it, so that
// the producer, the loop and the worker do not poll at once on a machine
// with fewer cores (each turn a context switch, and the parked producer's
// wake-up through the scheduler a hand-off of tens of microseconds). The
// other producers, and every producer with one P or
// Options.LoopThreadOnly, park.
func (in *Initiator) awaitSpace(l *latch, ctx context.Context) {
	if !in.opts.LoopThreadOnly && runtime.GOMAXPROCS(0) > 1 && in.spaceBorrower.CompareAndSwap(false, true) {
		br := in.borrowBegin()
		br.wait(l, ctx)
		in.spaceBorrower.Store(false)
	} else {
		// The loop frees the space; a caller counted as a borrower
		// (Flush, Call) must not leave it parked meanwhile.
		in.resumeParked()
	}
	if l.isSet() {
		return
	}
	// ctx's channel only now: a context's Done makes it (a channel and a
	// lock for a fresh WithTimeout), which a request that finds space at
	// once, as most do (a Flush with its own deadline), never needs.
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	select {
	case <-l.C():
	case <-done:
	}
}

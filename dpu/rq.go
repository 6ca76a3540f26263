package dpu

import (
	"encoding/binary"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/cacheline"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
)

// smallPayload is the largest eager payload copied into the queue's own
// memory (ucp hands payloads up to 1 KiB in an arena valid only until the
// message handler returns); larger ones are kept zero-copy (Message.Keep).
const smallPayload = 1024

// rq is a request queue: the connection from one initiator, bound to one
// client. Loop-owned, except inflightSeen (read by Stats).
type rq struct {
	id      uint64
	c       *client
	ep      *ucp.Endpoint
	addrKey string
	zeroID  bool        // client id 0 in a header means this queue's client (RQCreate.ZeroClientID)
	watch   *flushWatch // completed FLUSHes, for WaitFlush

	nextSeq  uint64
	queue    []*pending // accepted, not yet dispatched; queue[head:]
	head     int
	started  int   // requests dispatched and not completed
	inflight int64 // accepted and not completed
	// inflightSeen is inflight for Stats, stored once per container,
	// plain request and completed batch: a locked add per request (two,
	// counting its completion) waits for every store before it, the
	// handlers' copies into target memory among them.
	inflightSeen atomic.Int64
	arena        payloadArena // copies of small payloads
	pools        map[wire.PoolID]*lendPool
	free         []*pending
	boxes        []*heldBox // recycled

	// The ACK group being filled (ackgroup.go): acks of requests sent
	// with FlagAckGroup, sent when their batch completes (others at the
	// end of the loop's round).
	acks     []byte
	ackCount uint32
	ackDirty bool // in Worker.ackDirty

	// Failures since the last flush response.
	failed      uint32
	firstOp     uint32
	firstStatus rdmo.Status
	firstSeq    uint64

	// Teardown.
	closing   bool
	epFailed  bool
	closed    bool
	flushing  bool
	flushDone bool
	deadline  time.Time
	failWith  rdmo.Status // requests not started fail with it (0: let them run)
	noFlush   bool        // close without flushing the answers out first
	waiters   []*command
}

// reqKey is what a request's answers name it by: its sequence number, its
// op and flags (FlagAck asks for an ack), and a FLUSH's id (the flush
// response carries it). An accepted request keeps it in its pending record;
// one refused before it was accepted has it on the stack.
type reqKey struct {
	seq     uint64
	op      uint32
	flags   uint32
	flushID uint64 // FLUSH sub-header
}

// arrival is one request as it arrives, a plain AM or an inner request of
// a BATCH container, until request has queued or refused it. It lives on
// the stack of the AM handler and travels by pointer; a container's inner
// requests reuse one, which also keeps the container's state (it holds no
// pointer to another stack value, so escape analysis keeps it there).
type arrival struct {
	seq    uint64
	hdr    []byte
	rh     wire.RequestHeader // what decoding hdr gave
	perr   error              // the decoding's error
	data   []byte             // the eager payload (nil for rendezvous)
	length int                // the payload's length
	rndv   bool
	m      *ucp.Message // the request's AM, or its container's

	// An inner request of a container (m): the box that keeps the
	// container's data once an inner payload must point into it, and the
	// offset of the current inner payload in m.Data.
	inner bool
	box   *heldBox
	poff  int
}

// pending is one accepted request until it completes.
type pending struct {
	reqKey
	app     rdmo.AppendHeader // APPEND sub-header
	count   uint64            // SCATTER sub-header
	h       *handlerEntry
	hdr     [wire.MaxHeaderLen]byte // the header as received, for Request.Sub
	hdrLen  uint8
	payload []byte
	length  uint64
	rndv    bool
	chunk   *chunk
	held    ucp.Held
	hasHeld bool
	// box: an inner request of a container whose payload points into the
	// container's kept AM data.
	box *heldBox
	// consumed: loop-owned, a Receive took the rendezvous payload.
	consumed bool
	// moved: executor-owned, Place or Fetch already used the payload.
	moved bool
	// pool: a FlagByRef request's payload is in this lend pool's mapping.
	pool *lendPool
	// arrived is when the request's message arrived (Worker.clock).
	arrived int64
}

func (p *pending) fenced() bool {
	return p.flags&rdmo.FlagFence != 0 || p.op == rdmo.OpFlush
}

func (q *rq) getPending() *pending {
	if n := len(q.free); n > 0 {
		p := q.free[n-1]
		q.free = q.free[:n-1]
		return p
	}
	return new(pending)
}

// putPending recycles a request record. A queue keeps as many as its
// in-flight limit (max), so a stream at that limit, where one container
// brings many requests at once, allocates none at steady state; what it
// keeps is what it once had in flight.
func (q *rq) putPending(p *pending, max int) {
	*p = pending{}
	if len(q.free) < max {
		q.free = append(q.free, p)
	}
}

// clientOK reports whether a header's client id names the queue's client:
// its id, or 0 on a queue made for a reference initiator.
func (q *rq) clientOK(id uint64) bool {
	return id == q.c.id || (id == 0 && q.zeroID)
}

func (q *rq) queued() int { return len(q.queue) - q.head }

func (q *rq) popFront() *pending {
	p := q.queue[q.head]
	q.queue[q.head] = nil
	q.head++
	if q.head == len(q.queue) {
		q.queue, q.head = q.queue[:0], 0
	} else if q.head > 1024 && q.head > len(q.queue)/2 {
		n := copy(q.queue, q.queue[q.head:])
		for i := n; i < len(q.queue); i++ {
			q.queue[i] = nil
		}
		q.queue, q.head = q.queue[:n], 0
	}
	return p
}

// handleMessages is the AM handler for AM id 0, on the loop.
func (w *Worker) handleMessages(_ *ucp.Worker, msgs []ucp.Message) {
	w.now = w.clock()
	for i := range msgs {
		w.handleMessage(&msgs[i])
	}
}

func (w *Worker) handleMessage(m *ucp.Message) {
	if m.Reply == nil {
		w.drop(m, "no reply endpoint")
		return
	}
	q, ok := m.Reply.Value.(*rq)
	if !ok || q == nil {
		w.drop(m, "not a request queue's endpoint")
		w.answerForeign(m)
		return
	}
	if q.closing || w.shutdown {
		// What an initiator had in flight when its queue was
		// destroyed: a normal teardown, not worth a warning (Stats
		// still counts it).
		q.nextSeq++
		w.stats.dropped.Add(1)
		if ce := w.reqLog.Check(zap.DebugLevel, "rdmo message dropped"); ce != nil {
			ce.Write(zap.String("reason", "request queue is closing"), zap.Int("header_len", len(m.Header)), zap.Int("length", m.Length))
		}
		return
	}
	if len(m.Header) >= wire.HeaderLen && binary.LittleEndian.Uint32(m.Header[wire.HeaderOpOffset:]) == rdmo.OpBatch {
		w.handleContainer(q, m)
		return
	}
	a := arrival{seq: q.nextSeq, hdr: m.Header, data: m.Data, length: m.Length, rndv: m.Rendezvous, m: m}
	q.nextSeq++
	a.perr = wire.ParseRequestInto(&a.rh, m.Header)
	if len(m.Header) >= wire.HeaderLen {
		w.stats.request(a.rh.Header.Op, m.Length)
	} else {
		w.stats.bytes.Add(uint64(m.Length))
	}
	w.request(q, &a)
	q.publishInflight()
}

// publishInflight lets Stats see inflight.
func (q *rq) publishInflight() { q.inflightSeen.Store(q.inflight) }

// keepContainer returns the box of an inner request's container, keeping
// the container's AM data on first use.
func (a *arrival) keepContainer(q *rq) *heldBox {
	if a.box == nil {
		a.box = q.getBox()
		a.box.held = a.m.Keep()
	}
	return a.box
}

// heldBox keeps a container's AM data (zero-copy, Message.Keep) until every
// inner request whose payload points into it has completed.
type heldBox struct {
	held ucp.Held
	refs int
}

func (q *rq) getBox() *heldBox {
	if n := len(q.boxes); n > 0 {
		b := q.boxes[n-1]
		q.boxes = q.boxes[:n-1]
		return b
	}
	return new(heldBox)
}

func (q *rq) putBox(b *heldBox) {
	*b = heldBox{}
	if len(q.boxes) < 64 {
		q.boxes = append(q.boxes, b)
	}
}

// handleContainer unpacks a BATCH container (docs/PROTOCOL.md section 11):
// each inner request takes the next sequence number and goes through
// request exactly like a plain one. The container itself takes none,
// except when it cannot be unpacked at all (its own header is malformed,
// flagged or another client's, it came by rendezvous, or its count cannot
// fit its data): then it is one failed request with one sequence number
// (op 3). When its entries' framing is broken, every one of its count inner
// requests fails (op 3, no answer) and none runs.
func (w *Worker) handleContainer(q *rq, m *ucp.Message) {
	w.stats.request(rdmo.OpBatch, m.Length)
	rh, err := wire.ParseRequest(m.Header)
	st, detail := rdmo.StatusOK, ""
	switch {
	case err != nil:
		st, detail = rdmo.StatusOf(err), err.Error()
	case !q.clientOK(rh.Header.ClientID):
		st, detail = rdmo.StatusClientMismatch, "batch container names client "+utoa(rh.Header.ClientID)+
			", the queue is client "+utoa(q.c.id)
	case m.Rendezvous:
		st, detail = rdmo.StatusRendezvousRefused, "a batch container must be sent eager"
	case m.Length > w.cfg.MaxEagerPayload:
		st, detail = rdmo.StatusLengthOverflow, w.eagerDetail("batch container", m.Length)
	case !wire.CountPlausible(m.Data, rh.Batch.Count):
		st, detail = rdmo.StatusPayloadMismatch, "batch count "+utoa(rh.Batch.Count)+" does not fit "+
			strconv.Itoa(len(m.Data))+" bytes of entries"
	}
	if st != rdmo.StatusOK {
		seq := q.nextSeq
		q.nextSeq++
		w.reject(q, &reqKey{seq: seq, op: rdmo.OpBatch, flags: rh.Header.Flags}, m.Header, st, detail)
		return
	}
	count := rh.Batch.Count
	if err := wire.CheckBatchPayload(m.Data, count); err != nil {
		// The entries cannot be trusted: nothing runs, nothing answers.
		st := rdmo.StatusOf(err)
		first := q.nextSeq
		for i := uint64(0); i < count; i++ {
			w.countFailure(q, q.nextSeq, rdmo.OpBatch, st)
			q.nextSeq++
		}
		if ce := w.reqLog.Check(zap.WarnLevel, "rdmo batch container malformed"); ce != nil {
			ce.Write(zap.Uint64("client", q.c.id), zap.Uint64("rq", q.id), zap.Uint64("first_seq", first),
				zap.Uint64("count", count), zap.String("status", st.Name()), zap.String("detail", err.Error()))
		}
		return
	}
	a := arrival{m: m, inner: true}
	it := wire.NewBatchIter(m.Data, count)
	// Requests are counted per run of one op (bytes: counted with the
	// container), one atomic add per run instead of per request.
	var runOp uint32
	var run uint64
	for it.Next() {
		seq := q.nextSeq
		q.nextSeq++
		hdr, data := it.Header(), it.Payload()
		err := it.RequestInto(&a.rh)
		if op := a.rh.Header.Op; len(hdr) >= wire.HeaderLen && op != rdmo.OpBatch {
			if run > 0 && op != runOp {
				w.stats.requests(runOp, run)
				run = 0
			}
			runOp = op
			run++
		}
		a.seq, a.hdr, a.perr, a.data, a.length = seq, hdr, err, data, len(data)
		a.poff = it.PayloadOffset()
		w.request(q, &a)
	}
	if run > 0 {
		w.stats.requests(runOp, run)
	}
	q.publishInflight()
}

// request validates one arriving request and queues it, or completes it at
// once with its failure.
func (w *Worker) request(q *rq, a *arrival) {
	rh, hdr, length := &a.rh, a.hdr, a.length
	k := reqKey{seq: a.seq, op: rh.Header.Op, flags: rh.Header.Flags}
	op := k.op
	if op == rdmo.OpFlush && len(hdr) >= wire.FlushHeaderLen {
		k.flushID = binary.LittleEndian.Uint64(hdr[wire.FlushIDOffset:])
	}
	perr := a.perr
	if perr != nil {
		w.reject(q, &k, hdr, rdmo.StatusOf(perr), perr.Error())
		return
	}
	if !q.clientOK(rh.Header.ClientID) {
		w.reject(q, &k, hdr, rdmo.StatusClientMismatch,
			"header names client "+utoa(rh.Header.ClientID)+", the queue is client "+utoa(q.c.id))
		return
	}
	if op == rdmo.OpLendPool {
		w.lendPoolRequest(q, &k, hdr, a)
		return
	}
	h := w.lookup(op)
	if h == nil {
		w.reject(q, &k, hdr, rdmo.StatusUnknownOp, "no handler serves the op")
		return
	}
	data := a.data
	var pool *lendPool
	if k.flags&rdmo.FlagByRef != 0 {
		if a.rndv {
			w.reject(q, &k, hdr, rdmo.StatusRendezvousRefused, "a BYREF reference must be sent eager")
			return
		}
		var st rdmo.Status
		var detail string
		if data, pool, st, detail = q.resolveRef(data); st != rdmo.StatusOK {
			w.reject(q, &k, hdr, st, detail)
			return
		}
		length = len(data)
		w.stats.bytes.Add(uint64(length))
	}
	if !a.rndv && length > w.cfg.MaxEagerPayload {
		// UCX has received it whole; refusing it here hands the buffer
		// back when the AM handler returns instead of keeping it.
		w.reject(q, &k, hdr, rdmo.StatusLengthOverflow, w.eagerDetail("eager payload", length))
		return
	}
	if a.rndv {
		if op == rdmo.OpFlush {
			w.reject(q, &k, hdr, rdmo.StatusPayloadMismatch, "flush carries a rendezvous payload")
			return
		}
	} else if err := rh.CheckPayload(data); err != nil {
		w.reject(q, &k, hdr, rdmo.StatusOf(err), err.Error())
		return
	}
	if q.inflight >= int64(w.cfg.MaxInFlightPerRQ) {
		w.reject(q, &k, hdr, rdmo.StatusTooManyInFlight,
			"limit of "+utoa(uint64(w.cfg.MaxInFlightPerRQ))+" requests in flight reached")
		return
	}
	p := q.getPending()
	p.reqKey, p.h = k, h
	p.app, p.count = rh.Append, rh.Scatter.Count // decoded once, here, for the handler
	p.arrived = w.now
	p.hdrLen = uint8(copy(p.hdr[:], hdr))
	if rh.Header.ClientID != q.c.id {
		// Client id 0 on a reference initiator's queue (clientOK): the
		// handlers, which check the id again, see the client it binds to.
		binary.LittleEndian.PutUint64(p.hdr[wire.HeaderClientIDOffset:], q.c.id)
	}
	p.length = uint64(length)
	switch {
	case pool != nil:
		// Read in place by the handler: the pool stays mapped until the
		// request completes.
		p.pool = pool
		pool.refs++
		p.payload = data
	case a.rndv:
		p.rndv = true
		p.held, p.hasHeld = a.m.Keep(), true
	case len(data) == 0:
	case len(data) <= smallPayload:
		p.payload, p.chunk = q.arena.alloc(len(data))
		copy(p.payload, data)
	case !a.inner:
		p.held, p.hasHeld = a.m.Keep(), true
		p.payload = p.held.Data
	default:
		// A large inner payload stays in the container's data.
		b := a.keepContainer(q)
		b.refs++
		p.box = b
		end := a.poff + len(data)
		p.payload = b.held.Data[a.poff:end:end]
	}
	q.inflight++
	q.queue = append(q.queue, p)
	w.markDirty(q.c)
}

// eagerDetail says why an eager payload of n bytes was refused.
func (w *Worker) eagerDetail(what string, n int) string {
	return what + " of " + strconv.Itoa(n) + " bytes exceeds the limit of " + strconv.Itoa(w.cfg.MaxEagerPayload) +
		" (dpu.Config.MaxEagerPayload)"
}

func (w *Worker) drop(m *ucp.Message, why string) {
	w.stats.dropped.Add(1)
	if ce := w.reqLog.Check(zap.WarnLevel, "rdmo message dropped"); ce != nil {
		ce.Write(zap.String("reason", why), zap.Int("header_len", len(m.Header)), zap.Int("length", m.Length))
	}
}

// reject completes a request that failed before it could run; hdr is its
// header as received.
func (w *Worker) reject(q *rq, k *reqKey, hdr []byte, st rdmo.Status, detail string) {
	if len(hdr) < wire.HeaderLen {
		// Too short to know the op or the flags: a failure to count, no
		// answer (it may not be a FLUSH, nor ask for an ack).
		w.recordFailure(q, k.seq, 0, st, detail, true)
		return
	}
	w.complete(q, k, &rdmo.Result{Status: st, Detail: detail})
}

func (w *Worker) markDirty(c *client) {
	if !c.dirty {
		c.dirty = true
		w.dirty = append(w.dirty, c)
	}
}

func (w *Worker) pumpDirty() {
	for len(w.dirty) > 0 {
		// Two buffers take turns: a pump may mark clients dirty again (a
		// batch run inline completes at once), into the other one.
		d := w.dirty
		w.dirty = w.dirtySpare[:0]
		for i, c := range d {
			c.dirty = false
			w.pump(c)
			d[i] = nil
		}
		w.dirtySpare = d[:0]
	}
}

// execQueueDepth bounds the batches handed to an executor that it has not
// finished running: requests arriving meanwhile wait in their queue and
// join a later, larger batch.
const execQueueDepth = 2

// pump hands dispatchable requests of the client's queues to its executor.
func (w *Worker) pump(c *client) {
	if c.exited || c.stopping {
		return
	}
	for c.queued < execQueueDepth {
		q := w.nextReady(c)
		if q == nil {
			return
		}
		if w.carryOver(c, q) {
			// The next round starts at q, or a queue whose head is over
			// the bytes every round another queue's batch leaves would
			// never get its turn.
			c.rr = (c.rr + len(c.rqs) - 1) % len(c.rqs)
			return
		}
		w.dispatch(c, q)
	}
}

// carryOver keeps q's head for the next round when the loop would run
// its batch itself but for the payload bytes this round already took
// (inlineBytes): a stream of large records then runs on the loop a round
// at a time instead of sending every record over the budget to the
// client's executor, whose wake-up and answer cost two thread hand-offs
// per batch and, while it copies, a loop polling beside it for the
// executor's answer. The executor of that client is idle (inlineOK), so
// it would not have run in parallel with the loop anyway. The next round
// starts with a Progress, so the other clients' requests are served
// between two such batches as before.
func (w *Worker) carryOver(c *client, q *rq) bool {
	p := q.queue[q.head]
	if len(p.payload) <= w.inlineBytes || len(p.payload) > inlineBytes || w.inlineLeft <= 0 || !w.inlineable(c, p) {
		return false
	}
	w.carried = append(w.carried, c)
	return true
}

// recarry marks the clients carryOver kept dirty again, at the start of
// a round whose budget is whole.
func (w *Worker) recarry() {
	for i, c := range w.carried {
		w.markDirty(c)
		w.carried[i] = nil
	}
	w.carried = w.carried[:0]
}

// nextReady picks the next queue (round robin) whose head may start: a
// fenced head only once everything before it has completed.
func (w *Worker) nextReady(c *client) *rq {
	n := len(c.rqs)
	for i := 0; i < n; i++ {
		q := c.rqs[(c.rr+i)%n]
		if q.queued() == 0 || q.failWith != 0 {
			continue
		}
		if q.queue[q.head].fenced() && q.started > 0 {
			continue
		}
		c.rr = (c.rr + i + 1) % n
		return q
	}
	return nil
}

// dispatch makes a batch of the contiguous requests at q's head that share
// a handler (a fenced request only ever leads a batch).
func (w *Worker) dispatch(c *client, q *rq) {
	if w.flushInline(c, q) {
		return
	}
	inline := w.inlineOK(c, q.queue[q.head])
	limit := w.cfg.MaxBatch
	if inline {
		limit = min(limit, maxInline, w.inlineLeft)
	}
	b := c.getBatch()
	b.rq = q
	first := q.popFront()
	b.h = first.h
	b.cached = c.cached
	if !b.h.info.NoCachedState {
		c.cached++
		if !b.h.info.Inline {
			c.slowCached = c.cached
		}
	}
	b.add(first)
	room := w.inlineBytes - len(first.payload) // payload bytes an inline batch may still take
	for q.queued() > 0 && len(b.ents) < limit {
		p := q.queue[q.head]
		if p.h != b.h || p.fenced() || inline && (p.rndv && !b.h.info.InlineRendezvous || len(p.payload) > room) {
			break
		}
		room -= len(p.payload)
		b.add(q.popFront())
	}
	for i := range b.ents {
		b.reqs[i].Client = rdmo.ClientID(c.id)
	}
	q.started += len(b.ents)
	w.stats.batch(len(b.ents))
	if inline {
		w.inlineLeft -= len(b.ents)
		w.inlineBytes = room
		w.runInline(c, b)
		return
	}
	c.queued++
	c.pushExec(execItem{kind: execBatch, b: b})
}

// maxInline bounds the requests of a batch the loop runs itself, and
// inlineBudget and inlineBytes those of all batches it runs itself in one
// round and their payload bytes: with handlers of well under a microsecond
// per request (rdmo.HandlerInfo.Inline) and copies of at most 1 MiB (about
// 130 µs at this machine's 8 GB/s into target memory) the loop is away
// from UCX and the other clients for some hundreds of microseconds at
// most. What the budget leaves goes to the executors. The bytes' bound was
// 256 KiB: a stream of 64 KiB appends then sent all but four a round to
// the executor, and the hand-offs between the two (futex wake-ups, the
// runtime's thread hand-over) were a fifth of the worker's samples
// (docs/benchmarks/large-payloads.md, "The loop's inline budget").
const (
	maxInline    = 256
	inlineBudget = 1024
	inlineBytes  = 1 << 20
)

// inlineOK reports whether the batch that p leads may run on the loop
// (runInline) instead of the client's executor. Order is kept: the
// executor is idle (every batch dispatched before returned from
// HandleBatch, nothing queued for it) and a fenced head reached dispatch
// only once everything before it completed (nextReady), exactly as on the
// executor. And nothing the batch can call waits for the loop: every
// region of the client is mapped (Put and Get are copies, atomics the
// CPU's, and Config.UCXAtomics is off), no payload is rendezvous (no Fetch
// or Place), and Flush has nothing to wait for (no UCX write or Place
// since the last one). Only handlers that declare Inline (built-ins and
// WebAssembly modules, whose host bounds an inline call tighter,
// handlerView.RunsInline; a go-plugin's handler never does, its
// HandlerInfo comes over the plugin protocol without the flag), and
// within the round's budget (inlineBudget), so one client's stream cannot
// keep the loop from the others: what is over goes to the executor.
//
// A FLUSH of the built-in flush handler runs inline too when every batch
// of a handler that may cache state and is not Inline was written back by
// an earlier FLUSH (slowCached): its WriteBackAll then calls the inline
// handlers' WriteBack only (copies through the mapping, as their batches
// make), and its Flush has nothing to wait for. That is the FLUSH after a
// stream of appends to queues whose tails the worker owns, which would
// otherwise cost two hand-offs to write back one tail word.
//
// A handler that also declares InlineRendezvous never waits for the loop
// in a batch (Place only queues the payload's receive; Fetch and Flush
// fail on the loop, handlerView), so its batches run inline with
// rendezvous payloads and while earlier Places are still landing.
func (w *Worker) inlineOK(c *client, p *pending) bool {
	return w.inlineLeft > 0 && len(p.payload) <= w.inlineBytes && w.inlineable(c, p)
}

// inlineable is inlineOK without the round's budget: whether the loop
// may run the batch p leads at all (carryOver asks it of the next round).
func (w *Worker) inlineable(c *client, p *pending) bool {
	info := &p.h.info
	noWait := info.Inline && info.InlineRendezvous // Place only: nothing of the batch waits for the loop
	// The executor's fields (dirtyUCX, placed) are read only once
	// atExec == 0 says it is idle: the order of the terms matters.
	return (info.Inline || p.h == w.flushEntry && c.slowCached <= c.cleanAt) && (!p.rndv || noWait) &&
		c.atExec == 0 && !w.cfg.UCXAtomics && c.unmapped == 0 && !c.dirtyUCX &&
		(noWait || c.placesDone.Load() == c.placed) && !c.hostFailed.Load()
}

// runInline runs a batch on the loop as the client's executor would: the
// executor is idle (inlineOK), so the loop may use what it owns (the
// target, dirtyUCX, placed) until it hands it the next item; a panic is
// caught and fails the batch's requests (callHandler); then the batch
// completes as one the executor handed back. It saves the two hand-offs
// between threads that a batch at the executor costs (the wake-up of the
// executor, and of the loop by its answer), each a wait for a CPU when the
// machine is busy.
func (w *Worker) runInline(c *client, b *batch) {
	w.stats.inlined.Add(1)
	t := &c.view
	t.bind(b, &b.g, &b.ops, &b.bufs)
	t.inline = true
	c.callHandler(b)
	t.inline = false
	t.unbind()
	w.submit(b.ops, nil, nil)
	b.g.sealed = true
	w.groupCheck(&b.g)
}

// flushInline answers a FLUSH at q's head on the loop, without the
// executor, when the built-in flush handler would do nothing: the client's
// executor is idle (so what it owns, read below, was last written before
// it handed its last item back), no batch of a handler that may cache state
// ran since the last FLUSH that succeeded (WriteBackAll would write
// nothing), every write so far was a copy through a mapping of target
// memory (visible already) and every Place finished (Target.Flush has
// nothing to wait for). That is the common idle flush: it costs no
// hand-off to the executor and back. The counters move as if the handler
// had run (a batch of one, a WriteBackAll, a Flush).
func (w *Worker) flushInline(c *client, q *rq) bool {
	p := q.queue[q.head]
	if p.op != rdmo.OpFlush || p.h != w.flushEntry || c.atExec > 0 || c.cached != c.cleanAt ||
		c.dirtyUCX || c.placesDone.Load() != c.placed || c.hostFailed.Load() {
		return false
	}
	q.popFront()
	w.inlineFlushes.Add(1)
	st := &w.stats
	st.batch(1)
	st.fences.Add(1)
	st.flushes.Add(1)
	st.observe(p.op, w.clock()-p.arrived)
	w.complete(q, &p.reqKey, &rdmo.Result{})
	w.releasePayload(q, p)
	q.putPending(p, w.cfg.MaxInFlightPerRQ)
	q.publishInflight()
	if q.closing {
		w.advanceRQ(q)
	}
	return true
}

// completeBatch completes a batch's requests once HandleBatch returned and
// every operation it issued finished.
func (w *Worker) completeBatch(b *batch) {
	q := b.rq
	now := w.clock()
	var lat latencyRun
	if b.h == w.flushEntry && b.g.status == rdmo.StatusOK && b.results[0].Status == rdmo.StatusOK {
		// A FLUSH (always alone in its batch: it is fenced) wrote back
		// everything the batches dispatched before it cached.
		b.c.cleanAt = max(b.c.cleanAt, b.cached)
	}
	for i, p := range b.ents {
		lat.observe(&w.stats, p.op, now-p.arrived)
		res := &b.results[i]
		if res.Status == rdmo.StatusOK && b.g.status != rdmo.StatusOK {
			res.Status, res.Detail = b.g.status, b.g.detail
		}
		if res.Status == rdmo.StatusOK && len(res.Data) > rdmo.MaxResultData {
			res.Status, res.Detail = rdmo.StatusHandlerFailed, "result data of "+utoa(uint64(len(res.Data)))+" bytes, at most "+utoa(rdmo.MaxResultData)
		}
		if res.Status != rdmo.StatusOK {
			res.Value, res.Data = 0, nil
		}
		if p.pool != nil {
			// The handler has read the lent record: drop this core's
			// copy of its lines before the ack frees the buffer, so that
			// the initiator refilling it needs no probe of this core per
			// line (internal/cacheline).
			cacheline.Evict(p.payload)
		}
		// The data may point into the request's payload: the answer copies
		// it before the payload is released.
		w.complete(q, &p.reqKey, res)
		w.releasePayload(q, p)
		q.putPending(p, w.cfg.MaxInFlightPerRQ)
	}
	lat.flush(&w.stats)
	q.publishInflight()
	w.sendAckGroup(q)
	q.started -= len(b.ents)
	b.c.putBatch(b)
	w.markDirty(q.c)
	if q.closing {
		w.advanceRQ(q)
	}
}

func (w *Worker) releasePayload(q *rq, p *pending) {
	if p.chunk != nil {
		q.arena.release(p.chunk)
	}
	if p.hasHeld && !p.consumed {
		w.uw.Release(p.held)
	}
	if b := p.box; b != nil {
		if b.refs--; b.refs == 0 {
			w.uw.Release(b.held)
			q.putBox(b)
		}
	}
	if p.pool != nil {
		w.unrefPool(p.pool)
	}
	q.inflight--
}

// complete accounts a finished request and sends its answers: the flush
// response for a FLUSH, an ack when FlagAck asked for one.
// An ack carries the result's data, and a failure's detail (its first
// rdmo.MaxResultDetail bytes), in the 40-byte form (docs/PROTOCOL.md
// section 6.4); without either it is the 32-byte ack.
func (w *Worker) complete(q *rq, k *reqKey, res *rdmo.Result) {
	seq, op, st, data, detail := k.seq, k.op, res.Status, res.Data, res.Detail
	if st != rdmo.StatusOK {
		w.recordFailure(q, seq, op, st, detail, false)
	}
	switch {
	case op == rdmo.OpFlush:
		r := wire.FlushResponse{FlushID: k.flushID, Failed: q.failed}
		if q.failed > 0 {
			r.FirstOp, r.FirstStatus, r.FirstSeq = q.firstOp, q.firstStatus, q.firstSeq
		}
		q.failed, q.firstOp, q.firstStatus, q.firstSeq = 0, 0, 0, 0
		var msg [wire.FlushResponseLen]byte
		wire.AppendFlushResponse(msg[:0], r)
		w.stats.flushRsp.Add(1)
		w.reply(q, msg[:])
		q.watch.flushed(r)
	case k.flags&rdmo.FlagAck != 0:
		a := wire.AckResponse{Op: op, Seq: seq, Status: st, Value: res.Value}
		if st != rdmo.StatusOK {
			detail = rdmo.TruncateDetail(detail, rdmo.MaxResultDetail)
		} else {
			detail = ""
		}
		w.stats.acks.Add(1)
		if k.flags&rdmo.FlagAckGroup != 0 {
			w.groupAck(q, a, data, detail)
			return
		}
		if len(data) == 0 && len(detail) == 0 {
			var msg [wire.AckResponseLen]byte
			wire.AppendAck(msg[:0], a)
			w.reply(q, msg[:])
			return
		}
		a.DataLen, a.DetailLen = uint32(len(data)), uint32(len(detail))
		rb := w.getReplyBuf()
		b := wire.AppendAck(rb.b[:0], a)
		b = append(b, data...)
		b = append(b, detail...)
		rb.n = len(b)
		w.replyBig(q, rb)
	}
}

func (w *Worker) recordFailure(q *rq, seq uint64, op uint32, st rdmo.Status, detail string, short bool) {
	w.countFailure(q, seq, op, st)
	if ce := w.reqLog.Check(zap.WarnLevel, "rdmo request failed"); ce != nil {
		opName := w.opName(op)
		if short {
			opName = "unknown"
		}
		ce.Write(zap.Uint64("client", q.c.id), zap.Uint64("rq", q.id), zap.Uint64("seq", seq),
			zap.String("op", opName), zap.String("status", st.Name()), zap.String("detail", detail))
	}
}

// countFailure accounts a failed request for the next flush response.
func (w *Worker) countFailure(q *rq, seq uint64, op uint32, st rdmo.Status) {
	w.stats.failure(st)
	if q.failed < ^uint32(0) {
		q.failed++
	}
	if q.failed == 1 || seq < q.firstSeq {
		q.firstOp, q.firstStatus, q.firstSeq = op, st, seq
	}
}

// reply sends a response on the queue's endpoint (AM id 0).
func (w *Worker) reply(q *rq, msg []byte) {
	if q.closed || q.epFailed {
		return
	}
	w.sendAckGroup(q) // answers leave in the order they were made
	i := w.ops.alloc()
	op := &w.ops.ops[i]
	op.kind = opReply
	op.rq = q
	op.n = uint8(copy(op.msg[:], msg))
	w.issue(i)
}

// replyBuf holds an ack with a result (header, data, detail): at most
// wire.MaxAckMessageLen bytes, which ucp copies into C memory when the send
// is issued, so the buffer is reused at once. Loop-owned.
type replyBuf struct {
	b [wire.MaxAckMessageLen]byte
	n int
}

func (w *Worker) getReplyBuf() *replyBuf {
	if n := len(w.replyFree); n > 0 {
		rb := w.replyFree[n-1]
		w.replyFree = w.replyFree[:n-1]
		return rb
	}
	return new(replyBuf)
}

func (w *Worker) putReplyBuf(rb *replyBuf) {
	if rb != nil && len(w.replyFree) < maxFreeReplyBufs {
		w.replyFree = append(w.replyFree, rb)
	}
}

// maxFreeReplyBufs bounds the reply buffers kept for reuse.
const maxFreeReplyBufs = 256

// replyBig sends an ack with a result on the queue's endpoint.
func (w *Worker) replyBig(q *rq, rb *replyBuf) {
	if q.closed || q.epFailed {
		w.putReplyBuf(rb)
		return
	}
	w.sendAckGroup(q)
	i := w.ops.alloc()
	op := &w.ops.ops[i]
	op.kind = opReply
	op.rq = q
	op.big = rb
	w.issue(i)
}

// startRQTeardown stops accepting requests on q and closes it once its
// in-flight requests completed (or DrainTimeout passed). With flush, the
// endpoint is flushed first so the answers already sent leave (over TCP
// that needs the initiator's progress, so removals of dead clients skip it).
func (w *Worker) startRQTeardown(q *rq, waiter *command, failWith rdmo.Status, flush bool) {
	if !flush {
		q.noFlush = true
	}
	if waiter != nil {
		q.waiters = append(q.waiters, waiter)
	}
	if failWith != 0 && q.failWith == 0 {
		q.failWith = failWith
		for q.queued() > 0 {
			p := q.popFront()
			w.releasePayload(q, p)
			w.complete(q, &p.reqKey, &rdmo.Result{Status: failWith, Detail: "request queue closed before the request started"})
			q.putPending(p, w.cfg.MaxInFlightPerRQ)
		}
		q.publishInflight()
	}
	if q.closing {
		return
	}
	q.closing = true
	q.deadline = time.Now().Add(w.cfg.DrainTimeout)
	w.closingRQs = append(w.closingRQs, q)
	w.log.Debug("request queue closing", zap.Uint64("client", q.c.id), zap.Uint64("rq", q.id),
		zap.Int64("in_flight", q.inflight))
}

// advanceRQ starts the final flush of a draining queue's endpoint, so the
// answers already sent leave before it is closed.
func (w *Worker) advanceRQ(q *rq) {
	if q.inflight > 0 || q.flushing || q.closed || q.epFailed || q.noFlush {
		return
	}
	q.flushing = true
	w.sendAckGroup(q) // before the flush that lets the answers leave
	i := w.ops.alloc()
	op := &w.ops.ops[i]
	op.kind = opRQFlush
	op.rq = q
	w.issue(i)
}

func (w *Worker) rqReadyToClose(q *rq, now time.Time) bool {
	if now.After(q.deadline) {
		if q.inflight > 0 || !q.flushDone {
			w.log.Warn("request queue closed before draining", zap.Uint64("client", q.c.id), zap.Uint64("rq", q.id),
				zap.Int64("in_flight", q.inflight))
		}
		return true
	}
	if q.inflight > 0 {
		return false
	}
	if q.epFailed || q.noFlush {
		return true
	}
	w.advanceRQ(q)
	return q.flushDone
}

// closeRQ closes the queue's endpoint and forgets it.
func (w *Worker) closeRQ(q *rq) {
	q.closed = true
	w.sendAckGroup(q) // drops the group: nobody will read it
	if q.ep != nil {
		q.ep.Value = nil
		if err := q.ep.CloseForce(); err != nil {
			w.log.Warn("closing request queue endpoint", zap.Uint64("rq", q.id), zap.Error(err))
		}
	}
	w.abandonReceives(q)
	w.dropPools(q)
	if w.rqAddr[q.addrKey] == q {
		delete(w.rqAddr, q.addrKey)
	}
	c := q.c
	for i, x := range c.rqs {
		if x == q {
			n := copy(c.rqs[i:], c.rqs[i+1:])
			c.rqs[i+n] = nil
			c.rqs = c.rqs[:i+n]
			break
		}
	}
	w.regMu.Lock()
	delete(w.rqByID, q.id)
	w.regMu.Unlock()
	if q.inflight == 0 {
		q.arena.reset()
		q.free = nil
	}
	q.watch.close()
	w.log.Debug("request queue closed", zap.Uint64("client", c.id), zap.Uint64("rq", q.id))
	for _, cmd := range q.waiters {
		cmd.answer(Notification{Type: CmdRQDestroy, Client: c.id, RQ: q.id}, nil)
	}
	q.waiters = nil
}

// onRQError is the OnError of a queue's endpoint: the initiator is gone.
func (w *Worker) onRQError(q *rq, err error) {
	q.epFailed = true
	w.peerFailed()
	w.log.Info("initiator endpoint failed; freeing its request queue", zap.Uint64("client", q.c.id),
		zap.Uint64("rq", q.id), zap.Error(err))
	w.startRQTeardown(q, nil, 0, false)
}

// payloadArena holds copies of small payloads in 64 KiB chunks that are
// recycled once every payload in them completed: no allocation per
// message at steady state, bounded by the in-flight limit.
type payloadArena struct {
	cur  *chunk
	free []*chunk
}

const chunkSize = 64 << 10

type chunk struct {
	buf  []byte
	used int
	refs int
}

func (a *payloadArena) alloc(n int) ([]byte, *chunk) {
	c := a.cur
	if c == nil || len(c.buf)-c.used < n {
		if c != nil && c.refs == 0 {
			c.used = 0
			a.free = append(a.free, c)
		}
		if k := len(a.free); k > 0 {
			c = a.free[k-1]
			a.free = a.free[:k-1]
		} else {
			c = &chunk{buf: make([]byte, chunkSize)}
		}
		a.cur = c
	}
	b := c.buf[c.used : c.used+n : c.used+n]
	c.used += (n + 7) &^ 7
	if c.used > len(c.buf) {
		c.used = len(c.buf)
	}
	c.refs++
	return b, c
}

func (a *payloadArena) release(c *chunk) {
	c.refs--
	if c.refs > 0 {
		return
	}
	if c == a.cur {
		c.used = 0
		return
	}
	c.used = 0
	if len(a.free) < 4 {
		a.free = append(a.free, c)
	}
}

func (a *payloadArena) reset() { a.cur, a.free = nil, nil }

func utoa(n uint64) string { return strconv.FormatUint(n, 10) }

// Capabilities lists the wire extensions beyond the reference that a
// worker with the default configuration implements, as capability strings:
// wire.CapabilityBatch (it unpacks BATCH containers, docs/PROTOCOL.md
// section 11), wire.CapabilityLargeBatch (containers of up to 60 KiB, in
// one piece over shared memory, section 11.8), wire.CapabilityResult (acks
// carry result data and failure details, section 6.4), wire.CapabilityLend
// (lend pools, section 13) and wire.CapabilityAckGroup (acks in groups,
// section 14), and wire.CapabilityLargeEager (eager payloads of 512 KiB,
// when MaxEagerPayload admits them). A target passes them to its
// initiators out of band (host/oob.WorkerInfo), which enable what they know
// (initiator.Options.Aggregate, LargeBatches, GroupAcks, LargeEager).
func Capabilities() []string { return capabilities(Config{}, ucp.ShmSegmentsLarge(nil)) }

// capabilities is Capabilities for a worker with configuration cfg whose
// UCX context has large shared-memory segments or not
// (ucp.Context.LargeShmSegments): it takes large containers only with
// them, and when MaxEagerPayload admits them.
func capabilities(cfg Config, largeShm bool) []string {
	caps := []string{wire.CapabilityBatch, wire.CapabilityResult, wire.CapabilityLend, wire.CapabilityAckGroup}
	maxEager := cfg.MaxEagerPayload
	if maxEager == 0 {
		maxEager = DefaultMaxEagerPayload
	}
	if maxEager >= wire.MaxLargeBatch && largeShm {
		caps = append(caps, wire.CapabilityLargeBatch)
	}
	if maxEager >= wire.MaxLargeEager {
		caps = append(caps, wire.CapabilityLargeEager)
	}
	return caps
}

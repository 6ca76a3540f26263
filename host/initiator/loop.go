package initiator

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
)

// loop is the state of the progress loop. Nothing in it is touched by
// any other goroutine: it owns the UCP worker and endpoint (the ucp
// threading rule), the batches taken from the queue, and the tables of
// requests that wait for an answer.
type loop struct {
	in     *Initiator
	ctx    *ucp.Context
	ownCtx bool
	w      *ucp.Worker
	ep     *ucp.Endpoint

	batches []*batch // by batch id (the high half of a send's tag)
	free    []*batch

	flushes map[uint64]*FlushWait // by flush id: issued, not answered
	acks    ackTable              // by sequence number: issued, not acked

	sendsOut   int // sends issued and not complete
	freedSlots int // window space freed since the last settle
	freedBytes int
	counts     batchCounts

	// confirmed is the flow-control mark the last flush answer gave (see
	// queue.confirmed), handed to the queue at the next settle; carry
	// holds the failures reported to flow control's own flushes until the
	// next Flush of the caller's.
	confirmed, settledConfirmed uint64
	carry                       wire.FlushResponse

	failed error // the peer failed (*PeerFailedError)
	fatal  bool  // the UCP worker is unusable (events lost)
	// closing is set once shutdown failed the flushes and requests still
	// awaiting an answer: their answers may still arrive while the
	// endpoint closes, which is expected, not a stray response.
	closing bool
	idle    int
	// patient is set when an answer was awaited for pendingSpins rounds
	// in vain (a long Call, a stalled worker): the loop then sleeps after
	// idleSpins until something arrives, rather than spin again after
	// every sleep, which would keep a third of a core busy.
	patient bool
	// answered is set when the loop handed a caller the answer it waited
	// for (a Call's ack, a Flush's response) in this round; answeredAt is
	// when the last round that did so ended, zero once the conversation
	// window after it has passed (see run).
	answered   bool
	answeredAt time.Time

	// tid is the OS thread the loop is locked to; driving is set while a
	// Drive's fn runs on it (see drive.go).
	tid     int32
	driving bool
	// borrowed is set while a waiting caller runs rounds (borrow.go).
	borrowed bool
	// quiet counts the rounds since the loop last issued an APPEND or a
	// SCATTER, up to quietRounds: only then does it hand over to a
	// waiting caller.
	quiet int
	// lentAcks counts the outstanding acks that return a lent buffer
	// (FlagByRef): their owner waits for the loop.
	lentAcks int
	// streamIdle is set when the loop parked for a stream's producers
	// and none ran a round (the requests were sparse, or the stream
	// ended), and cleared when it takes a batch of streamMinBatch
	// appends or scatters (stream.go).
	streamIdle bool
}

// dropAck forgets the outstanding ack of seq.
func (lp *loop) dropAck(seq uint64, rec ackRec) {
	lp.acks.del(seq)
	if rec.lend != nil {
		lp.lentAcks--
	}
}

type ackRec struct {
	op   uint32
	cost int
	call *CallWait // nil for a request sent with FlagAck by Append, User, ...
	lend *Lend     // a FlagByRef request's: returned by the ack, which says the worker read it
}

const (
	// idleSpins is how many empty progress rounds the progress loop
	// makes before it sleeps in Worker.Wait.
	idleSpins = 64
	// pendingSpins is how many it makes, yielding, while sends are not
	// complete (about a millisecond) before it sleeps anyway, so a peer
	// that stopped reading does not cost a spinning core.
	pendingSpins = 2048
	// yieldPEvery is how many of those rounds pass between two yields
	// of the loop's P (runtime.Gosched) while sends wait.
	yieldPEvery = 1024
	// minCloseWait is the least a graceful endpoint close is given at
	// Close, however much of CloseTimeout the drain used.
	minCloseWait = 100 * time.Millisecond
	// pollInterval bounds a sleep while something is outstanding, in case
	// a transport does not signal a completion or arrival.
	pollInterval = 2 * time.Millisecond
)

func (in *Initiator) run(ready chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(in.done)
	lp, err := in.setup()
	if err != nil {
		close(in.errs)
		ready <- err
		return
	}
	lp.tid = int32(syscall.Gettid())
	in.lp = lp
	ready <- nil
	lp.run()
	in.closeErr = lp.shutdown()
	close(in.errs)
}

func (in *Initiator) setup() (lp *loop, err error) {
	lp = &loop{in: in, flushes: map[uint64]*FlushWait{}}
	defer func() {
		if err != nil {
			if lp.ep != nil {
				lp.ep.CloseForce()
			}
			if lp.w != nil {
				lp.w.Close()
			}
			if lp.ownCtx {
				lp.ctx.Close()
			}
		}
	}()
	lp.ctx = in.opts.Context
	if lp.ctx == nil {
		lp.ctx, err = ucp.NewContext(ucp.ContextOptions{Config: ucp.WithRendezvousScheme(in.opts.UCX), Name: in.opts.Name, LargeShmSegments: in.opts.LargeBatches})
		if err != nil {
			return lp, fmt.Errorf("initiator: %w", err)
		}
		lp.ownCtx = true
	}
	// Operations UCX holds at once are sends not yet complete, which the
	// window bounds, plus an endpoint close.
	// A serialized worker lets a waiting caller run the loop's rounds
	// (borrow.go).
	lp.w, err = lp.ctx.NewWorker(ucp.WorkerOptions{MaxOutstanding: in.opts.Window + 16, Serialized: !in.opts.LoopThreadOnly})
	if err != nil {
		return lp, fmt.Errorf("initiator: %w", err)
	}
	if in.addr, err = lp.w.Address(); err != nil {
		return lp, fmt.Errorf("initiator: %w", err)
	}
	if err = lp.w.SetHandler(amID, lp); err != nil {
		return lp, fmt.Errorf("initiator: %w", err)
	}
	if len(in.opts.WorkerAddress) == 0 {
		wa, err := in.opts.Exchange(append([]byte(nil), in.addr...))
		if err != nil {
			return lp, fmt.Errorf("initiator: out-of-band exchange: %w", err)
		}
		if len(wa) == 0 {
			return lp, errors.New("initiator: out-of-band exchange: no RDMO worker address")
		}
		in.opts.WorkerAddress = append([]byte(nil), wa...)
	}
	lp.ep, err = lp.w.Connect(in.opts.WorkerAddress, ucp.EndpointOptions{
		Name:          in.opts.Name,
		ErrorHandling: in.opts.ErrorHandling,
		OnError:       func(_ *ucp.Endpoint, err error) { lp.fail(err) },
	})
	if err != nil {
		return lp, fmt.Errorf("initiator: %w", err)
	}
	in.detect = lp.ep.PeerFailureDetection()
	if in.autoRndv && in.opts.LargeEager && tcpOnly(lp.ep.Transports()) {
		// Set before New returns, and read only by this loop (sendFlags).
		in.opts.RendezvousThreshold = wire.MaxLargeEager
	}
	in.w, in.ctx = lp.w, lp.ctx
	in.q.Swap(lp.newBatch()) // batch 0 is the queue's first current batch
	return lp, nil
}

// newBatch returns an empty batch, reusing a recycled one when it can.
func (lp *loop) newBatch() *batch {
	if n := len(lp.free); n > 0 {
		b := lp.free[n-1]
		lp.free = lp.free[:n-1]
		return b
	}
	b := &batch{id: uint32(len(lp.batches))}
	lp.batches = append(lp.batches, b)
	return b
}

func (lp *loop) recycle(b *batch) {
	b.reset()
	lp.free = append(lp.free, b)
}

// take swaps the queue's batch out if it holds requests, reports whether
// Close or PeerFailed asked for attention, and takes the first Drive
// waiting for the loop (not while one runs: Drives run one at a time).
func (lp *loop) take() (b *batch, closing, failReq bool, dr *driveReq) {
	q := &lp.in.q
	if !q.Queued() && !q.attn.Load() {
		return nil, false, false, nil
	}
	q.Lock()
	closing, failReq = q.closed, q.failReq
	q.failReq = false
	if len(q.drives) > 0 && !lp.driving && !lp.borrowed && !closing {
		dr = q.drives[0]
		q.drives[0] = nil
		q.drives = q.drives[1:]
	}
	q.attn.Store(q.closed || len(q.drives) > 0 && !lp.driving)
	if q.Queued() {
		b, _ = q.SwapLocked(lp.newBatch())
	}
	q.Unlock()
	return b, closing, failReq, dr
}

func (lp *loop) run() {
	for !lp.round() {
	}
}

// round is one iteration of the progress loop: take what producers queued
// and issue it, run a Drive that waits for the loop, progress the worker,
// return freed window space, and then, when nothing happened, poll, yield
// or sleep. It reports that Close was called and the loop must end. A
// Driver's wait runs rounds too (lp.driving is then set), so everything
// the loop does for other goroutines goes on while a Drive runs.
func (lp *loop) round() (closing bool) {
	if lp.quiet < quietRounds {
		lp.quiet++
	}
	if (lp.quiet >= quietRounds || lp.in.spaceBorrower.Load()) && lp.in.spinning.Load() > 0 && !lp.driving && !lp.borrowed && lp.sendsOut == 0 && !lp.in.q.Queued() && !lp.in.q.attn.Load() {
		// A caller waits for its answer, nothing else is on its way
		// (no request, no Drive, no Close) and no stream ran lately:
		// let it run the rounds (borrow.go).
		lp.handOver(parkLimit, false)
	}
	b, closing, failReq, dr := lp.take()
	if failReq {
		lp.peerFailed()
	}
	if b != nil {
		lp.issue(b)
	}
	if closing {
		return true
	}
	if dr != nil {
		lp.drive(dr)
		lp.idle, lp.patient = 0, false
		return false
	}
	n, err := lp.w.Progress()
	if err != nil && !lp.fatal {
		lp.fatal = true
		lp.in.log.Error("progress failed; the initiator is unusable", zap.Error(err))
		lp.fail(err)
	}
	lp.settle()
	if b != nil || n > 0 {
		lp.idle = 0
		lp.patient = false
		if lp.answered {
			lp.answered = false
			// In a Drive the caller is this thread: nobody to hand the
			// CPU to, and no conversation to wait for afterwards.
			if !lp.driving && !lp.borrowed {
				lp.answeredAt = time.Now()
				// The caller that has its answer now may be waiting
				// for this very CPU (three polling threads, this loop,
				// the caller and the worker's, share two cores on a
				// small machine): give it the CPU at once rather than
				// after the idle rounds below.
				if runtime.GOMAXPROCS(0) > 1 {
					syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
				}
			}
		}
		return false
	}
	if lp.borrowed {
		return false
	}
	lp.idle++
	if lp.streamHandOverOK() {
		lp.handOver(streamPark, true)
		lp.idle = 0
		return false
	}
	// An answer is due soon while sends are out or a flush or an
	// acked request (a Call) waits for its answer: a round trip is
	// far shorter than a sleep's wake-up through the kernel, so the
	// loop keeps polling for a bounded number of rounds before it
	// sleeps. With nothing outstanding it sleeps after idleSpins.
	awaiting := lp.sendsOut > 0 || len(lp.flushes) > 0 || lp.acks.len() > 0
	if !awaiting && lp.conversing() {
		return false
	}
	if lp.fatal || lp.idle >= idleSpins && (!awaiting || lp.patient || lp.idle >= pendingSpins) {
		lp.patient = awaiting
		lp.idle = 0
		lp.sleep()
		return false
	}
	if lp.idle >= idleSpins {
		if lp.sendsOut == 0 && runtime.GOMAXPROCS(0) > 1 {
			// Only answers are awaited: yield the CPU to
			// other threads but keep the P. The loop is locked to
			// its thread (UCX binds the worker to it), and a locked
			// goroutine's Gosched parks its thread on a futex and
			// wakes another: two context switches per yield, over
			// a millisecond of them per flush.
			syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			return false
		}
		// Sends wait in UCX for room at the receiver (a full
		// shared-memory FIFO), which no wake-up event announces:
		// keep progressing, yielding the CPU (sched_yield) to the
		// threads that drain it. Once in a long wait (yieldPEvery
		// rounds), or with one P, also let this process's other
		// goroutines run (the receiver may be one of them): a
		// locked goroutine's Gosched hands its P to another thread
		// and parks its own, two thread switches and a futex wake.
		// A stream that outruns its worker waits like this many
		// times a second, so the yield must be rare: every
		// idleSpins rounds it made a 4 KiB stream's initiator
		// switch threads two to seven times as often
		// (docs/benchmarks/large-payloads.md, "Yielding the P").
		if runtime.GOMAXPROCS(0) > 1 && lp.idle%yieldPEvery != 0 {
			syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			return false
		}
		runtime.Gosched()
	}
	return false
}

// conversing keeps the idle loop polling for answerSpin after it handed a
// caller its answer: a caller making calls one after another (a
// conversation: Call, look at the result, Call) sends its next request a
// few microseconds later, which a polling loop takes at once, while a
// sleeping one must be woken through the kernel and rescheduled, a wait for
// a CPU that on a busy machine costs more than the round trip to the
// worker. The window is bounded in time, so an initiator whose caller went
// quiet sleeps soon after (TestIdleInitiatorSleeps). It yields the CPU
// between polls (sched_yield), keeping its P, as the wait for an answer
// does; with one P it does not converse: the caller needs that P.
func (lp *loop) conversing() bool {
	if lp.answeredAt.IsZero() || lp.idle < idleSpins {
		return false
	}
	if lp.idle%spinCheckEvery == 0 && time.Since(lp.answeredAt) >= answerSpin || runtime.GOMAXPROCS(0) < 2 {
		lp.answeredAt = time.Time{}
		return false
	}
	syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	return true
}

// sleep waits in Worker.Wait unless a request arrived meanwhile. The flag
// it sets first makes the next producer wake it (Initiator.wake).
func (lp *loop) sleep() {
	q := &lp.in.q
	q.sleeping.Store(true)
	defer q.sleeping.Store(false)
	q.Lock()
	if q.Queued() || q.closed || q.failReq || len(q.drives) > 0 && !lp.driving {
		q.Unlock()
		return
	}
	q.Unlock()
	if lp.flushOverdue() {
		return
	}
	timeout := time.Duration(-1)
	// A Driver sleeping here must still see its context end.
	if lp.sendsOut > 0 || len(lp.flushes) > 0 || lp.acks.len() > 0 || lp.fatal || lp.driving {
		timeout = pollInterval
	}
	lp.in.stats.sleeps.Add(1)
	if _, err := lp.w.Wait(timeout); err != nil {
		// Without a wake-up descriptor, poll.
		time.Sleep(pollInterval)
	}
}

// flushOverdue fails the Initiator when a flush has waited longer than
// Options.FlushTimeout for its answer: the worker no longer serves this
// queue, so nothing behind that flush will be answered either, and each
// outstanding or later call fails at once with the cause rather than
// after a bound of its own. It runs before the loop sleeps, which a loop
// waiting for answers that do not come does every few milliseconds.
func (lp *loop) flushOverdue() bool {
	limit := lp.in.opts.FlushTimeout
	if limit <= 0 || len(lp.flushes) == 0 || lp.failed != nil {
		return false
	}
	var late *FlushWait
	for _, fw := range lp.flushes {
		if !fw.sent.IsZero() && time.Since(fw.sent) >= limit && (late == nil || fw.id < late.id) {
			late = fw
		}
	}
	if late == nil {
		return false
	}
	lp.fail(&PeerFailedError{Cause: &FlushTimeoutError{ID: late.id, Limit: limit}})
	if err := lp.ep.CloseForce(); err != nil {
		lp.in.log.Warn("force-closing the endpoint", zap.Error(err))
	}
	lp.settle()
	return true
}

// issue hands every request of b to UCX. They are sent in one cgo call at
// the next Progress. With Options.Aggregate, runs of small requests go in
// BATCH containers when the batch holds several requests: they queued up
// while this goroutine was busy issuing or progressing earlier sends, the
// moment TCP's autocorking waits for. A request taken alone goes alone at
// once, so an idle connection sees no added latency.
func (lp *loop) issue(b *batch) {
	in := lp.in
	in.stats.batches.Add(1)
	if in.opts.Aggregate && len(b.ents) > 1 {
		lp.pack(b)
	}
	for i := 0; i < len(b.ents); {
		n := max(1, b.ents[i].span)
		lp.send(b, i, n)
		i += n
	}
	if lp.counts.appends+lp.counts.scatters > 0 {
		lp.quiet = 0
		if len(b.ents) >= streamMinBatch {
			lp.streamIdle = false
		}
	}
	in.stats.add(&lp.counts)
	if b.pending == 0 {
		lp.recycle(b)
	}
}

// sendFlags is how a request is sent on its own.
func (lp *loop) sendFlags(e *entry, dataLen int) ucp.SendFlags {
	thresh := lp.in.opts.RendezvousThreshold
	switch {
	case thresh >= 0 && dataLen > thresh && (e.op == rdmo.OpAppend || rdmo.IsUserOp(e.op)):
		return ucp.SendReply | ucp.SendRendezvous
	case thresh < 0 && e.op != rdmo.OpScatter:
		return ucp.SendReply
	}
	return ucp.SendReply | ucp.SendEager
}

// pack marks runs of consecutive requests that fit a container together
// (at least two, at most MaxAggregate bytes, none that would go by
// rendezvous) and encodes their containers into b.agg. Everything is
// encoded before anything is sent, so b.agg no longer moves.
func (lp *loop) pack(b *batch) {
	limit := lp.in.opts.MaxAggregate
	client := wire.Header{ClientID: lp.in.opts.ClientID}
	fits := func(e *entry) int {
		data := b.payload(e)
		if lp.sendFlags(e, len(data))&ucp.SendRendezvous != 0 {
			return 0
		}
		n := wire.BatchEntrySize(int(e.hdrLen), len(data))
		if wire.BatchHeaderLen+n > limit {
			return 0
		}
		return n
	}
	b.agg = b.agg[:0]
	for i := 0; i < len(b.ents); {
		size := fits(&b.ents[i])
		if size == 0 {
			i++
			continue
		}
		size += wire.BatchHeaderLen
		j := i + 1
		for j < len(b.ents) {
			n := fits(&b.ents[j])
			if n == 0 || size+n > limit {
				break
			}
			size += n
			j++
		}
		if j-i >= 2 {
			lead := &b.ents[i]
			lead.span, lead.aggOff = j-i, len(b.agg)
			b.agg = wire.AppendBatchRequest(b.agg, client, wire.BatchHeader{Count: uint64(j - i)})
			for k := i; k < j; k++ {
				e := &b.ents[k]
				// Checked at enqueue: headers of 16..64 bytes, no container.
				b.agg, _ = wire.AppendBatchEntry(b.agg, b.header(e), b.payload(e))
			}
			lead.aggEnd = len(b.agg)
		}
		i = j
	}
}

// send issues one AM: the request b.ents[i] alone (n == 1), or the
// container of b.ents[i:i+n].
func (lp *loop) send(b *batch, i, n int) {
	in := lp.in
	lead := &b.ents[i]
	var hdr, data []byte
	var flags ucp.SendFlags
	if n == 1 {
		hdr, data = b.header(lead), b.payload(lead)
		flags = lp.sendFlags(lead, len(data))
	} else {
		ctr := b.agg[lead.aggOff:lead.aggEnd:lead.aggEnd]
		hdr, data = ctr[:wire.BatchHeaderLen], ctr[wire.BatchHeaderLen:]
		flags = ucp.SendReply | ucp.SendEager
	}
	for k := i; k < i+n; k++ {
		e := &b.ents[k]
		switch {
		case e.flush != nil:
			lp.flushes[e.flush.id] = e.flush
			if in.opts.FlushTimeout > 0 {
				e.flush.sent = time.Now()
			}
		case e.flags&rdmo.FlagAck != 0:
			r := ackRec{op: e.op, cost: e.cost, call: e.call}
			if e.byRef {
				r.lend = e.lend
			}
			lp.acks.put(e.seq, r)
			if r.lend != nil {
				lp.lentAcks++
			}
		}
	}
	if err := lp.ep.SendAM(amID, hdr, data, flags, lp, uint64(b.id)<<32|uint64(i)); err != nil {
		in.stats.sendErrors.Add(1)
		for k := i; k < i+n; k++ {
			lp.entryFailed(&b.ents[k], err)
			b.ents[k].lend.giveBack(err)
		}
		return
	}
	b.pending++
	lp.sendsOut++
	c := &lp.counts
	for k := i; k < i+n; k++ {
		switch op := b.ents[k].op; {
		case op == rdmo.OpAppend:
			c.appends++
		case op == rdmo.OpScatter:
			c.scatters++
		case op == rdmo.OpFlush:
			c.flushes++
		default:
			c.userOps++
		}
	}
	c.messages++
	if n > 1 {
		c.containers++
		c.aggregated += uint64(n)
	}
	c.headerBytes += uint64(len(hdr))
	c.payloadBytes += uint64(len(data))
	if flags&ucp.SendRendezvous != 0 {
		c.rendezvous++
	}
}

// Complete is the completion of one send (ucp.Completer): a request, or a
// container and every request in it.
func (lp *loop) Complete(c ucp.Completion) {
	b := lp.batches[c.Tag>>32]
	i := int(uint32(c.Tag))
	n := max(1, b.ents[i].span)
	lp.sendsOut--
	if c.Err != nil {
		lp.in.stats.sendErrors.Add(1)
	}
	for k := i; k < i+n; k++ {
		e := &b.ents[k]
		switch {
		case c.Err != nil:
			lp.entryFailed(e, c.Err)
		case e.flush == nil && e.flags&rdmo.FlagAck == 0:
			// Done once sent. Flushes and acked requests hold their window
			// space until their answer.
			lp.release(e.cost)
		}
		if !e.byRef || c.Err != nil {
			// A payload sent by reference is the worker's to read
			// until its ack.
			e.lend.giveBack(c.Err)
		}
	}
	if b.pending--; b.pending == 0 {
		lp.recycle(b)
	}
}

// entryFailed settles a request whose send failed: it frees its window
// space (unless a peer failure already did) and fails its flush.
func (lp *loop) entryFailed(e *entry, err error) {
	if lp.failed != nil {
		err = lp.failed
	} else if errors.Is(err, ucp.ErrPeerFailed) {
		err = &PeerFailedError{Cause: err}
	} else {
		err = fmt.Errorf("initiator: send %s: %w", rdmo.OpName(e.op), err)
	}
	switch {
	case e.flush != nil:
		if lp.flushes[e.flush.id] == e.flush {
			delete(lp.flushes, e.flush.id)
			e.flush.finish(wire.FlushResponse{}, err)
			lp.release(e.cost)
		}
	case e.flags&rdmo.FlagAck != 0:
		if rec, ok := lp.acks.get(e.seq); ok {
			lp.dropAck(e.seq, rec)
			lp.release(e.cost)
			e.call.fail(err)
		}
	default:
		lp.release(e.cost)
	}
}

func (lp *loop) release(cost int) {
	lp.freedSlots++
	lp.freedBytes += cost
}

// settle returns the window space freed in the last round to the queue, in
// one lock round trip, and wakes producers waiting for it.
func (lp *loop) settle() {
	if lp.freedSlots == 0 && lp.confirmed == lp.settledConfirmed {
		return
	}
	q := &lp.in.q
	q.Lock()
	q.confirm(lp.confirmed)
	q.release(lp.freedSlots, lp.freedBytes)
	q.Unlock()
	lp.settledConfirmed = lp.confirmed
	lp.freedSlots, lp.freedBytes = 0, 0
}

// HandleMessages receives the worker's responses (ucp.MessageHandler).
func (lp *loop) HandleMessages(_ *ucp.Worker, msgs []ucp.Message) {
	in := lp.in
	for i := range msgs {
		m := &msgs[i]
		id, err := wire.ParseResponseID(m.Header)
		if err != nil {
			in.stats.malformed.Add(1)
			in.log.Warn("malformed response", zap.Error(err), zap.Int("header_len", len(m.Header)))
			continue
		}
		switch id {
		case wire.RspFlush:
			lp.flushResponse(m)
		case wire.RspAck:
			lp.ackResponse(m)
		case wire.RspAckGroup:
			lp.ackGroup(m)
		}
	}
}

func (lp *loop) flushResponse(m *ucp.Message) {
	in := lp.in
	rsp, err := wire.ParseFlushResponse(m.Header)
	if err != nil {
		in.stats.malformed.Add(1)
		in.log.Warn("malformed flush response", zap.Error(err), zap.Int("header_len", len(m.Header)))
		return
	}
	fw, ok := lp.flushes[rsp.FlushID]
	if !ok {
		// Stale, foreign or duplicate: never a completion of ours.
		in.stats.unknownResponses.Add(1)
		if lp.closing {
			in.log.Debug("flush response after close", zap.Uint64("flush_id", rsp.FlushID))
			return
		}
		in.log.Warn("flush response matches no outstanding flush", zap.Uint64("flush_id", rsp.FlushID))
		return
	}
	delete(lp.flushes, rsp.FlushID)
	lp.release(wire.FlushHeaderLen)
	// A fenced FLUSH is answered once every request before it completed.
	lp.confirmed = max(lp.confirmed, fw.seq+1)
	in.stats.flushesDone.Add(1)
	if fw.auto {
		if rsp.Failed > 0 {
			in.stats.failuresReported.Add(uint64(rsp.Failed))
			lp.carry = carryFailures(lp.carry, rsp)
		}
		fw.finish(rsp, nil)
		return
	}
	if lp.carry.Failed > 0 {
		if rsp.Failed > 0 {
			in.stats.failuresReported.Add(uint64(rsp.Failed))
		}
		rsp = carryFailures(lp.carry, rsp)
		lp.carry = wire.FlushResponse{}
	} else if rsp.Failed > 0 {
		in.stats.failuresReported.Add(uint64(rsp.Failed))
	}
	var ferr error
	if rsp.Failed > 0 {
		ferr = &FlushError{Response: rsp}
	}
	fw.finish(rsp, ferr)
	lp.answered = true
}

// carryFailures adds the failures of a later flush response to those of an
// earlier one: the counts add up (saturating, as the worker's do) and the
// first failure stays the earlier one's. The result carries the later
// response's flush id.
func carryFailures(earlier, later wire.FlushResponse) wire.FlushResponse {
	out := later
	if earlier.Failed == 0 {
		return out
	}
	out.FirstOp, out.FirstStatus, out.FirstSeq = earlier.FirstOp, earlier.FirstStatus, earlier.FirstSeq
	out.Failed = earlier.Failed + later.Failed
	if out.Failed < earlier.Failed {
		out.Failed = ^uint32(0)
	}
	return out
}

func (lp *loop) ackResponse(m *ucp.Message) {
	in := lp.in
	ack, err := wire.ParseAck(m.Header)
	if err != nil {
		in.stats.malformed.Add(1)
		in.log.Warn("malformed ack", zap.Error(err), zap.Int("header_len", len(m.Header)))
		return
	}
	var data, detail []byte
	if m.Rendezvous {
		// Our worker's results fit an eager message (rdmo.MaxResultData);
		// a rendezvous one is not fetched.
		err = fmt.Errorf("ack data sent by rendezvous: %w", rdmo.ErrRendezvousRefused)
	} else {
		data, detail, err = wire.AckResult(ack, m.Data)
	}
	lp.ack(ack, data, detail, err)
}

// ackGroup takes the acks of an ACK group (wire.CapabilityAckGroup) in
// order. A malformed entry ends the group: the acks before it count, the
// requests of those after it are answered by no ack (their calls end with
// the Initiator's, or their context).
func (lp *loop) ackGroup(m *ucp.Message) {
	in := lp.in
	count, err := wire.ParseAckGroupHeader(m.Header)
	if err == nil && m.Rendezvous {
		err = fmt.Errorf("ack group sent by rendezvous: %w", rdmo.ErrRendezvousRefused)
	}
	if err != nil {
		in.stats.malformed.Add(1)
		in.log.Warn("malformed ack group", zap.Error(err), zap.Int("header_len", len(m.Header)))
		return
	}
	in.stats.ackGroups.Add(1)
	it := wire.NewAckGroupIter(m.Data, count)
	for it.Next() {
		ack := it.Ack()
		data, detail, err := wire.AckResult(ack, it.Result())
		lp.ack(ack, data, detail, err)
	}
	if err := it.Err(); err != nil {
		in.stats.malformed.Add(1)
		in.log.Warn("malformed ack group", zap.Error(err), zap.Uint32("count", count))
	}
}

// ack answers the request an ack names; resErr is the failure to read its
// result (data and detail are then ignored).
func (lp *loop) ack(ack wire.AckResponse, data, detail []byte, resErr error) {
	in := lp.in
	rec, ok := lp.acks.get(ack.Seq)
	if !ok {
		in.stats.unknownResponses.Add(1)
		if lp.closing {
			in.log.Debug("ack after close", zap.Uint64("seq", ack.Seq))
			return
		}
		in.log.Warn("ack matches no outstanding request", zap.Uint64("seq", ack.Seq),
			zap.String("op", rdmo.OpName(ack.Op)))
		return
	}
	if rec.op != ack.Op {
		// Our sequence prediction and the worker's numbering disagree:
		// accept the ack for the seq, but say so.
		in.log.Warn("ack op differs from the request sent with its seq", zap.Uint64("seq", ack.Seq),
			zap.String("sent", rdmo.OpName(rec.op)), zap.String("acked", rdmo.OpName(ack.Op)))
	}
	lp.dropAck(ack.Seq, rec)
	lp.release(rec.cost)
	rec.lend.giveBack(nil)
	in.stats.acks.Add(1)
	if err := resErr; err != nil {
		// The ack itself is good: the request is answered, without its
		// result, and says so.
		in.stats.malformed.Add(1)
		in.log.Warn("malformed ack result", zap.Error(err), zap.Uint64("seq", ack.Seq))
		data, detail = nil, nil
		if ack.Status == rdmo.StatusOK {
			ack.Status = rdmo.StatusOf(err)
			detail = []byte("ack result unreadable: " + err.Error())
		}
	}
	if ack.Status != rdmo.StatusOK {
		in.stats.ackFailures.Add(1)
		if rec.call == nil {
			select {
			case in.errs <- &RequestError{Op: ack.Op, Seq: ack.Seq, Status: ack.Status, Detail: string(detail)}:
			default:
				in.stats.errorsDropped.Add(1)
			}
		}
	}
	if rec.call != nil {
		rec.call.finish(ack, data, detail)
		lp.answered = true
	}
	if in.opts.OnAck != nil {
		in.opts.OnAck(ack, data)
	}
}

// fail handles a failed endpoint: requests still queued are dropped, and
// everything waiting for an answer fails with a *PeerFailedError, as does
// every later call. Sends in flight complete with errors on their own.
func (lp *loop) fail(cause error) {
	if lp.failed != nil {
		return
	}
	pe, ok := cause.(*PeerFailedError)
	if !ok {
		pe = &PeerFailedError{Cause: cause}
	}
	lp.failed = pe
	lp.in.log.Warn("endpoint to the RDMO worker failed", zap.Error(cause))
	q := &lp.in.q
	q.Lock()
	if q.failed == nil {
		q.failed = pe
	}
	b := *q.Batch()
	slots, nbytes := 0, 0
	for i := range b.ents {
		e := &b.ents[i]
		if e.flush != nil {
			e.flush.finish(wire.FlushResponse{}, pe)
		}
		e.call.fail(pe)
		e.lend.giveBack(pe)
		slots++
		nbytes += e.cost
	}
	b.reset()
	q.SwapLocked(b) // the emptied batch stays the current one
	q.release(slots, nbytes)
	q.broadcast()
	q.Unlock()
	for id, fw := range lp.flushes {
		fw.finish(wire.FlushResponse{}, pe)
		lp.release(wire.FlushHeaderLen)
		delete(lp.flushes, id)
	}
	lp.acks.each(func(seq uint64, rec ackRec) {
		lp.release(rec.cost)
		lp.dropAck(seq, rec)
		rec.call.fail(pe)
		rec.lend.giveBack(pe)
	})
}

// peerFailed acts on PeerFailed: fail everything and close the endpoint at
// once.
func (lp *loop) peerFailed() {
	lp.fail(lp.in.q.failedErr())
	if err := lp.ep.CloseForce(); err != nil {
		lp.in.log.Warn("force-closing the endpoint", zap.Error(err))
	}
	lp.settle()
}

// shutdown runs after Close: it fails the Drives still waiting for the
// loop, sends what was queued, waits (bounded) for sends to complete, fails
// what still waits for an answer, and closes the
// endpoint, the worker and the context it made.
func (lp *loop) shutdown() error {
	in := lp.in
	deadline := time.Now().Add(in.opts.CloseTimeout)
	drained := true
	q := &in.q
	q.Lock()
	drives := q.drives
	q.drives = nil
	q.Unlock()
	for _, dr := range drives {
		dr.done <- ErrClosed
	}
	for {
		b, _, failReq, _ := lp.take()
		if failReq {
			lp.peerFailed()
		}
		if b != nil {
			lp.issue(b)
			continue
		}
		if lp.sendsOut == 0 {
			break
		}
		if lp.failed != nil || lp.fatal || time.Now().After(deadline) {
			drained = false
			break
		}
		n, err := lp.w.Progress()
		lp.settle()
		if err != nil {
			drained = false
			break
		}
		if n == 0 {
			lp.w.Wait(time.Millisecond)
		}
	}
	if !drained {
		in.log.Warn("closing with sends outstanding", zap.Int("sends", lp.sendsOut))
	}
	failErr := error(ErrClosed)
	if lp.failed != nil {
		failErr = lp.failed
	}
	lp.closing = true
	for id, fw := range lp.flushes {
		fw.finish(wire.FlushResponse{}, failErr)
		lp.release(wire.FlushHeaderLen)
		delete(lp.flushes, id)
	}
	lp.acks.each(func(seq uint64, rec ackRec) {
		lp.release(rec.cost)
		lp.dropAck(seq, rec)
		rec.call.fail(failErr)
		rec.lend.giveBack(failErr)
	})
	var errs []error
	var err error
	if drained && lp.failed == nil {
		// A graceful close waits for the worker to take what was sent;
		// over a cut network UCX would wait far longer than CloseTimeout.
		err = lp.ep.CloseWithin(max(time.Until(deadline), minCloseWait))
	} else {
		err = lp.ep.CloseForce()
	}
	switch {
	case errors.Is(err, ucp.ErrTimeout) || errors.Is(err, ucp.ErrPeerFailed):
		// Everything sent left this side; the worker did not confirm the
		// close in time, or is gone. Nothing the caller could act on.
		in.log.Warn("endpoint close not confirmed by the worker", zap.Error(err))
	case err != nil && lp.failed == nil:
		errs = append(errs, fmt.Errorf("initiator: close endpoint: %w", err))
	}
	if err := lp.w.Close(); err != nil {
		errs = append(errs, fmt.Errorf("initiator: close worker: %w", err))
	}
	in.closePools()
	lp.settle()
	if lp.ownCtx {
		if err := lp.ctx.Close(); err != nil {
			errs = append(errs, fmt.Errorf("initiator: close context: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (q *queue) failedErr() error {
	q.Lock()
	defer q.Unlock()
	return q.failed
}

// tcpOnly reports whether every lane of an endpoint is TCP (Options.LargeEager).
func tcpOnly(transports []string) bool {
	for _, t := range transports {
		if t != "tcp" {
			return false
		}
	}
	return len(transports) > 0
}

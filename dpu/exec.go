package dpu

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/coalesce"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
)

// client is one target process. The loop owns most fields; the executor
// goroutine owns the ones marked so; hostFailed and regions are shared.
type client struct {
	id uint64
	w  *Worker

	// Shared.
	hostFailed atomic.Bool                        // the host-access endpoint failed or the client is gone
	regions    atomic.Pointer[map[uint64]*region] // copy-on-write, written by the loop
	placesDone atomic.Uint64                      // Places finished, written by the loop
	// blocked is set while the executor blocks (on exQ or syncCh): a push
	// or signal then readies it onto the loop's P (see Worker.wakeExec).
	blocked atomic.Bool

	// Loop-owned.
	hostEP   *ucp.Endpoint
	nregions int
	unmapped int // regions not mapped into the worker (served through UCX)
	rqs      []*rq
	rr       int
	queued   int  // batches handed to the executor, HandleBatch not returned
	atExec   int  // batches and commands at the executor, not returned
	waking   bool // in Worker.woken
	// cached counts the batches dispatched to handlers that may cache
	// state (HandlerInfo.NoCachedState false); cleanAt is its value when
	// the last FLUSH that succeeded was dispatched. While they are equal,
	// WriteBackAll has nothing to write (see flushInline).
	cached, cleanAt uint64
	// slowCached is cached after the last batch dispatched to a handler
	// that may cache state and does not run inline (a plugin's). While it
	// is at most cleanAt, such handlers have nothing to write back, and a
	// FLUSH may run on the loop with the inline handlers' WriteBacks only
	// (Worker.inlineOK, handlerView.WriteBackAll).
	slowCached uint64
	dirty      bool
	stopping   bool // no more batches: the executor was told to stop
	exited     bool
	waiters    []*command // RemoveClient calls waiting for the removal
	batches    []*batch   // recycled batches (per client: Buffer memory never crosses clients)
	// Rendezvous placements in flight, so that a flush is issued only
	// after the placements before it finished (their data is written by
	// the receive itself, or by a Put after it, not covered by an
	// endpoint flush issued earlier).
	placeNext uint64
	placeQ    []placeEntry
	parked    []parkedFlush
	readback  [8]byte // destination of the flush's visibility read
	// MR_REGs whose pages are being populated (startPopulate).
	populating int

	exQ    coalesce.Queue[execItem] // the loop pushes, the executor takes
	syncCh chan struct{}            // the loop signals the end of a Sync-style wait

	// Executor-owned.
	view     handlerView
	sync     opGroup // the group the executor waits for (loop touches it between submit and signal)
	cmdOps   []targetOp
	cmdBufs  bufArena
	dirtyUCX bool    // writes went through UCX since the last flush
	placed   uint64  // Places handed to the loop (compare placesDone)
	unfenced bool    // UCX writes not yet ordered before later reads
	lastPut  *region // where the last UCX write went (visibility read target)
}

type placeEntry struct {
	ticket uint64
	done   bool
}

type parkedFlush struct {
	op     int32
	ticket uint64
}

func newClient(w *Worker, id uint64) *client {
	c := &client{id: id, w: w, syncCh: make(chan struct{}, 1)}
	c.exQ.Init(nil)
	empty := map[uint64]*region{}
	c.regions.Store(&empty)
	c.sync = opGroup{kind: groupSync, c: c}
	c.view = handlerView{c: c, w: w}
	return c
}

type execKind uint8

const (
	execBatch execKind = iota + 1
	execDereg
	execStop
)

type execItem struct {
	kind     execKind
	b        *batch
	reg      *region
	cmd      *command
	graceful bool
}

// pushExec hands an item to the executor; on the loop only.
func (c *client) pushExec(it execItem) {
	c.w.readied++
	c.w.wakeExec(c)
	if it.kind != execStop {
		c.w.atExec++
		c.atExec++
	}
	c.exQ.Push(it)
}

// batch is a run of requests of one queue for one handler, from dispatch
// to completion. Batches are recycled per client.
type batch struct {
	g       opGroup
	c       *client
	rq      *rq
	h       *handlerEntry
	ents    []*pending
	reqs    []rdmo.Request
	results []rdmo.Result
	ops     []targetOp // executor: ops not yet handed to the loop
	bufs    bufArena   // Target.Buffer memory, valid until completion
	// cached is client.cached when the batch was dispatched (a FLUSH
	// batch that succeeds makes it client.cleanAt).
	cached uint64
}

func (b *batch) add(p *pending) {
	b.ents = append(b.ents, p)
	// Fields are set in place: an rdmo.Request literal appended is built
	// on the stack and copied, 130 bytes per request. Slots past len are
	// zero (putBatch clears what a batch used).
	var r *rdmo.Request
	b.reqs, r = grow(b.reqs)
	r.Seq, r.Op, r.Flags = p.seq, p.op, p.flags
	r.Flush.FlushID, r.Append, r.Scatter.Count = p.flushID, p.app, p.count
	r.Sub = p.hdr[wire.SubHeaderOffset:p.hdrLen:p.hdrLen]
	r.Payload, r.Length, r.Rendezvous = p.payload, p.length, p.rndv
	b.results, _ = grow(b.results)
}

// grow extends s by one zero element and returns a pointer to it. The
// element is zero only if s's spare capacity is (putBatch clears it).
func grow[T any](s []T) ([]T, *T) {
	if n := len(s); n < cap(s) {
		s = s[:n+1]
		return s, &s[n]
	}
	var zero T
	s = append(s, zero)
	return s, &s[len(s)-1]
}

func (c *client) getBatch() *batch {
	var b *batch
	if n := len(c.batches); n > 0 {
		b = c.batches[n-1]
		c.batches = c.batches[:n-1]
	} else {
		b = &batch{c: c}
	}
	b.g = opGroup{kind: groupBatch, b: b}
	return b
}

func (c *client) putBatch(b *batch) {
	clear(b.ents)
	clear(b.reqs)
	clear(b.results)
	clear(b.ops)
	b.ents, b.reqs, b.results, b.ops = b.ents[:0], b.reqs[:0], b.results[:0], b.ops[:0]
	b.rq, b.h = nil, nil
	b.bufs.reset()
	if len(c.batches) < 16 {
		c.batches = append(c.batches, b)
	}
}

// run is the client's executor goroutine.
func (c *client) run() {
	var items []execItem
	for {
		// blocked is set before the queue is looked at again (Wait takes
		// first), so a push the loop makes after an empty look finds it
		// set and counts the wake-up (Worker.wakeExec).
		if items = c.exQ.Take(items); len(items) == 0 && !c.exQ.Closed() {
			c.blocked.Store(true)
			items = c.exQ.Wait(items)
			c.blocked.Store(false)
		}
		for i := range items {
			it := items[i]
			items[i] = execItem{}
			switch it.kind {
			case execBatch:
				c.runBatch(it.b)
			case execDereg:
				c.runDereg(it.reg, it.cmd)
			case execStop:
				c.runStop(it.graceful)
				c.w.push(inboxItem{kind: itemExited, c: c})
				return
			}
		}
	}
}

func (c *client) runBatch(b *batch) {
	t := &c.view
	t.bind(b, &b.g, &b.ops, &b.bufs)
	c.callHandler(b)
	t.unbind()
	c.w.push(inboxItem{kind: itemBatchDone, c: c, b: b, ops: b.ops})
}

func (c *client) callHandler(b *batch) {
	defer func() {
		if r := recover(); r != nil {
			c.w.stats.panics.Add(1)
			detail := fmt.Sprintf("handler %q panicked: %v", b.h.info.Name, r)
			c.w.log.Error("rdmo handler panicked", zap.Uint64("client", c.id), zap.String("handler", b.h.info.Name),
				zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			for i := range b.results {
				b.results[i] = rdmo.Result{Status: rdmo.StatusHandlerFailed, Detail: detail}
			}
		}
	}()
	b.h.h.HandleBatch(&c.view, b.reqs, b.results)
}

// protect runs a handler hook, turning a panic into an error.
func (c *client) protect(name, hook string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.w.stats.panics.Add(1)
			c.w.log.Error("rdmo handler panicked", zap.Uint64("client", c.id), zap.String("handler", name),
				zap.String("hook", hook), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			err = &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: fmt.Sprintf("%s.%s panicked: %v", name, hook, r)}
		}
	}()
	return fn()
}

// runDereg is MR_DEREG's executor part: every handler writes back what it
// caches for the region, the writes are made visible, then the region is
// gone for this client's handlers.
func (c *client) runDereg(r *region, cmd *command) {
	t := &c.view
	t.bind(nil, &c.sync, &c.cmdOps, &c.cmdBufs)
	var errs []error
	for _, e := range c.w.handlers {
		if err := c.protect(e.info.Name, "RegionRemoved", func() error { return e.h.RegionRemoved(t, rdmo.RegionID(r.id)) }); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", e.info.Name, err))
		}
	}
	if err := t.Flush(); err != nil {
		errs = append(errs, err)
	}
	t.unbind()
	clear(c.cmdOps)
	c.cmdOps = c.cmdOps[:0]
	c.cmdBufs.reset()
	r.gone.Store(true)
	c.w.push(inboxItem{kind: itemDeregDone, c: c, reg: r, cmd: cmd, err: errors.Join(errs...)})
}

// runStop ends the executor: on a graceful stop (Close) the handlers write
// back their cached state first; then every handler forgets the client.
func (c *client) runStop(graceful bool) {
	if graceful && !c.hostFailed.Load() {
		t := &c.view
		t.bind(nil, &c.sync, &c.cmdOps, &c.cmdBufs)
		err := t.WriteBackAll()
		if ferr := t.Flush(); err == nil {
			err = ferr
		}
		t.unbind()
		if err != nil {
			c.w.log.Warn("write-back at close failed", zap.Uint64("client", c.id), zap.Error(err))
		}
		clear(c.cmdOps)
		c.cmdOps = c.cmdOps[:0]
		c.cmdBufs.reset()
	}
	for _, e := range c.w.handlers {
		c.protect(e.info.Name, "ClientRemoved", func() error { e.h.ClientRemoved(rdmo.ClientID(c.id)); return nil })
	}
}

package ucp

/*
#include <stdlib.h>
#include <string.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// WorkerOptions configure a Worker. Zero values pick the defaults.
type WorkerOptions struct {
	// MaxOutstanding bounds the operations in flight at once (default 8192).
	// Queueing one more returns ErrTooManyOutstanding.
	MaxOutstanding int
	// MaxBatch is how many operations are queued before they are issued
	// without waiting for Progress (default 1024).
	MaxBatch int
	// ProgressRounds bounds the ucp_worker_progress calls one Progress makes
	// while UCX keeps reporting work (default 64). A call that delivers
	// only a few events (a request or an answer, not a stream) ends the
	// Progress at once, so the caller sees it one poll of the transports
	// sooner.
	ProgressRounds int
	// Serialized creates the worker UCS_THREAD_MODE_SERIALIZED: any
	// thread may then use it, one at a time, with the uses ordered by the
	// caller (an atomic hand-over, a mutex), and the owner-thread check
	// does not apply. NewWorker still locks the calling goroutine to its
	// thread, and Close must come from that goroutine. See thread.go for
	// what it costs.
	Serialized bool
}

// Completion is the outcome of a non-blocking operation.
type Completion struct {
	Tag uint64 // the caller's tag
	// Value is the fetched value of an atomic operation, or the number of
	// bytes received by Receive; zero otherwise.
	Value uint64
	Err   error
}

// Completer receives completions on the worker's goroutine, inside Progress.
// Long-lived completers (a connection, a batch) make completions allocation
// free: the interface holds a pointer and the tag says which operation ended.
type Completer interface {
	Complete(Completion)
}

// CompleterFunc adapts a function to Completer.
type CompleterFunc func(Completion)

// Complete calls f.
func (f CompleterFunc) Complete(c Completion) { f(c) }

// MessageHandler receives the active messages that arrived for one AM id in
// one progress round, in arrival order. The slice and each Message's Header
// and Data are valid until HandleMessages returns, unless the handler calls
// Message.Keep.
type MessageHandler interface {
	HandleMessages(w *Worker, msgs []Message)
}

// MessageHandlerFunc adapts a function to MessageHandler.
type MessageHandlerFunc func(w *Worker, msgs []Message)

// HandleMessages calls f.
func (f MessageHandlerFunc) HandleMessages(w *Worker, msgs []Message) { f(w, msgs) }

// MaxAMID is one past the largest active message id a handler may be set for.
const MaxAMID = C.SHIM_MAX_AM_ID

// Worker is a UCP worker: the progress engine that owns endpoints and
// completes operations. See the package comment for the threading rule.
type Worker struct {
	h   *handle
	ctx *Context
	uw  C.ucp_worker_h
	sw  *C.shim_worker_t
	swh C.uintptr_t // sw as an integer: the data path's crossings (shim_progress_h)
	tid int         // the OS thread the worker was created on (see thread.go)

	opts  WorkerOptions
	ops   []C.shim_op_t   // view of sw->ops (C memory)
	cslot []C.shim_slot_t // view of sw->slots (C memory)
	slots []slot
	free  []uint32
	nops  int
	ready []readyCompletion // completions found when ops were issued

	release  []uintptr // AM descriptors to release in the next round
	handlers [MaxAMID]MessageHandler
	msgs     []Message
	eps      map[C.ucp_ep_h]*Endpoint
	lastEP   *Endpoint
	lns      map[uint64]*Listener
	nextLn   uint64

	inProgress  bool
	outstanding int
	active      bool // UCX did work in some Progress round (settle)

	wakeMu sync.RWMutex // Wake (any goroutine) against Close
}

type slot struct {
	c    Completer
	tag  uint64
	pin  runtime.Pinner
	busy bool
	pins bool // pin holds something
	kind slotKind
	n    uint64    // bytes a receive asked for
	ep   *Endpoint // the endpoint the operation runs on, if any
}

type slotKind uint8

const (
	slotPlain slotKind = iota
	slotAtomic
	slotReceive
)

type readyCompletion struct {
	token  uint32
	status C.ucs_status_t
}

// NewWorker creates a single-threaded worker (or a serialized one, see
// WorkerOptions.Serialized) on the context, bound to the calling
// goroutine's OS thread: it locks the goroutine to its thread
// (runtime.LockOSThread) until Close, which must be called from the same
// goroutine. Create the worker on the goroutine that will drive it.
func (c *Context) NewWorker(opts WorkerOptions) (*Worker, error) {
	if err := c.h.check(); err != nil {
		return nil, err
	}
	if opts.MaxOutstanding <= 0 {
		opts.MaxOutstanding = 8192
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 1024
	}
	if opts.ProgressRounds <= 0 {
		opts.ProgressRounds = 64
	}
	var p C.ucp_worker_params_t
	p.field_mask = C.UCP_WORKER_PARAM_FIELD_THREAD_MODE
	p.thread_mode = C.UCS_THREAD_MODE_SINGLE
	if opts.Serialized {
		p.thread_mode = C.UCS_THREAD_MODE_SERIALIZED
	}
	w := &Worker{ctx: c, opts: opts, eps: map[C.ucp_ep_h]*Endpoint{}, lns: map[uint64]*Listener{}}
	// UCX binds the worker to the first thread that uses it: create it on
	// the thread it will live on.
	w.tid = lockThread()
	if st := C.ucp_worker_create(c.ctx, &p, &w.uw); st != C.UCS_OK {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("ucp: create worker: %w", Status(st))
	}
	w.sw = C.shim_worker_new(w.uw, C.uint32_t(opts.MaxOutstanding), C.uint32_t(opts.MaxBatch))
	w.swh = C.uintptr_t(uintptr(unsafe.Pointer(w.sw)))
	if w.sw != nil && opts.Serialized {
		w.sw.serialized = 1
	}
	if w.sw == nil {
		C.ucp_worker_destroy(w.uw)
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("ucp: create worker: %w", StatusNoMemory)
	}
	w.ops = unsafe.Slice(w.sw.ops, opts.MaxBatch)
	w.cslot = unsafe.Slice(w.sw.slots, opts.MaxOutstanding)
	w.slots = make([]slot, opts.MaxOutstanding)
	w.free = make([]uint32, opts.MaxOutstanding)
	for i := range w.free {
		w.free[i] = uint32(opts.MaxOutstanding - 1 - i)
	}
	c.mu.Lock()
	c.nw++
	c.mu.Unlock()
	w.h = newHandle(w, "ucp.Worker")
	w.h.keep = w.slots
	return w, nil
}

// Address returns the worker's UCP address, which a peer passes to Connect.
func (w *Worker) Address() ([]byte, error) {
	if err := w.guard(); err != nil {
		return nil, err
	}
	var addr *C.ucp_address_t
	var n C.size_t
	if st := C.ucp_worker_get_address(w.uw, &addr, &n); st != C.UCS_OK {
		return nil, fmt.Errorf("ucp: worker address: %w", Status(st))
	}
	defer C.ucp_worker_release_address(w.uw, addr)
	return C.GoBytes(unsafe.Pointer(addr), C.int(n)), nil
}

// Info returns UCX's description of the worker.
func (w *Worker) Info() string {
	if w.h.check() != nil {
		return ""
	}
	w.mustOnThread("ucp.Worker")
	return goStringAndFree(C.shim_worker_info(w.uw))
}

// Outstanding is the number of operations queued or in flight.
func (w *Worker) Outstanding() int { return w.outstanding }

// SetHandler installs h for active messages with the given id (below
// MaxAMID); nil removes it.
func (w *Worker) SetHandler(id uint16, h MessageHandler) error {
	if err := w.guard(); err != nil {
		return err
	}
	if int(id) >= MaxAMID {
		return fmt.Errorf("ucp: AM id %d out of range [0,%d)", id, MaxAMID)
	}
	var st C.ucs_status_t
	if h == nil {
		st = C.shim_clear_am_handler(w.sw, C.uint16_t(id))
	} else {
		st = C.shim_set_am_handler(w.sw, C.uint16_t(id))
	}
	if st != C.UCS_OK {
		return fmt.Errorf("ucp: set AM handler %d: %w", id, Status(st))
	}
	w.handlers[id] = h
	return nil
}

// acquire reserves a slot for an operation; the caller fills an op.
func (w *Worker) acquire(c Completer, tag uint64) (uint32, *C.shim_op_t, error) {
	if err := w.h.check(); err != nil {
		return 0, nil, err
	}
	if len(w.free) == 0 {
		return 0, nil, ErrTooManyOutstanding
	}
	if w.nops == len(w.ops) {
		if err := w.submit(); err != nil {
			return 0, nil, err
		}
	}
	tok := w.free[len(w.free)-1]
	w.free = w.free[:len(w.free)-1]
	s := &w.slots[tok]
	s.c, s.tag, s.busy = c, tag, true
	w.outstanding++
	op := &w.ops[w.nops]
	w.nops++
	*op = C.shim_op_t{token: C.uint64_t(tok)}
	return tok, op, nil
}

// inline returns the slot's inline buffer, for small payloads copied into C
// memory instead of pinning Go memory.
func (w *Worker) inline(tok uint32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&w.cslot[tok].inl[0])), C.SHIM_INLINE)
}

// pinned returns a pointer to b that C may hold until the slot completes.
func (w *Worker) pinned(tok uint32, b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	w.slots[tok].pin.Pin(p)
	w.slots[tok].pins = true
	return p
}

// Submit issues every queued operation now, in one cgo call, without
// progressing the worker. Progress and Wait also do this.
func (w *Worker) Submit() {
	if w.h.check() == nil {
		if err := w.submit(); err != nil {
			panic(err)
		}
	}
}

// submit issues the queued operations. Off the owner thread (with the check
// on) nothing is issued and they stay queued.
func (w *Worker) submit() error {
	if w.nops == 0 {
		return nil
	}
	C.shim_submit_h(w.swh, C.uint32_t(w.nops))
	if err := w.offThread(); err != nil {
		return err
	}
	w.collectSubmitted()
	return nil
}

// collectSubmitted moves the outcomes of ops that finished in place to the
// ready list; they are delivered in the next Progress.
func (w *Worker) collectSubmitted() {
	for i := 0; i < w.nops; i++ {
		op := &w.ops[i]
		if op.result != C.SHIM_RES_DONE {
			continue
		}
		tok := uint32(op.token)
		if s := &w.slots[tok]; op.status == C.UCS_OK && s.c == nil && !s.pins && s.ep == nil {
			// Nobody waits for it: free the slot now.
			s.tag, s.kind, s.n, s.busy = 0, slotPlain, 0, false
			w.free = append(w.free, tok)
			w.outstanding--
			continue
		}
		w.ready = append(w.ready, readyCompletion{token: tok, status: C.ucs_status_t(op.status)})
	}
	w.nops = 0
}

func (w *Worker) complete(tok uint32, status C.ucs_status_t, length uint64) {
	s := &w.slots[tok]
	if !s.busy {
		return
	}
	if s.pins {
		s.pin.Unpin()
		s.pins = false
	}
	c, tag, ep, kind, n := s.c, s.tag, s.ep, s.kind, s.n
	s.c, s.tag, s.ep, s.kind, s.n, s.busy = nil, 0, nil, slotPlain, 0, false
	w.free = append(w.free, tok)
	w.outstanding--
	comp := Completion{Tag: tag}
	switch {
	case status != C.UCS_OK:
		comp.Err = Status(status)
		if ep != nil && ep.err != nil {
			comp.Err = ep.err
		}
	case kind == slotAtomic:
		comp.Value = uint64(w.cslot[tok].reply)
	case kind == slotReceive:
		comp.Value = n
		if length != 0 {
			comp.Value = length
		}
	}
	if c != nil {
		c.Complete(comp)
	}
}

// Progress issues queued operations, releases the message buffers of the
// previous round, progresses UCX, and delivers what happened: completions to
// their Completers and messages to their handlers, in the order UCX reported
// them. It returns the number of events delivered.
func (w *Worker) Progress() (int, error) {
	if err := w.h.check(); err != nil {
		return 0, err
	}
	if w.inProgress {
		return 0, ErrReentrant
	}
	w.inProgress = true
	defer func() { w.inProgress = false }()

	var rel *C.uintptr_t
	if len(w.release) > 0 {
		rel = (*C.uintptr_t)(unsafe.Pointer(&w.release[0]))
	}
	nops := w.nops
	C.shim_progress_h(w.swh, C.uint32_t(nops), rel, C.uint32_t(len(w.release)), C.uint32_t(w.opts.ProgressRounds))
	if err := w.offThread(); err != nil {
		return 0, err
	}
	w.release = w.release[:0]
	if w.sw.busy > 0 {
		w.active = true
	}
	w.collectSubmitted()

	delivered := 0
	for len(w.ready) > 0 {
		ready := w.ready
		w.ready = nil
		for _, r := range ready {
			w.complete(r.token, r.status, 0)
			delivered++
		}
		if w.ready == nil {
			w.ready = ready[:0]
		}
	}
	if w.sw.dropped != 0 {
		return delivered, ErrEventsLost
	}
	delivered += w.deliverEvents()
	return delivered, nil
}

func (w *Worker) deliverEvents() int {
	n := 0
	runAM := -1 // the AM id of the run of messages in w.msgs (-1: none)
	w.msgs = w.msgs[:0]
	for i := 0; i < int(w.sw.nevents); i++ {
		ev := (*C.shim_event_t)(unsafe.Add(unsafe.Pointer(w.sw.events), uintptr(i)*unsafe.Sizeof(C.shim_event_t{})))
		n++
		if ev.kind == C.SHIM_EV_AM {
			if int(ev.am_id) != runAM {
				runAM = w.flushMessages(runAM)
				runAM = int(ev.am_id)
			}
			w.msgs = append(w.msgs, w.message(ev))
			continue
		}
		runAM = w.flushMessages(runAM)
		switch ev.kind {
		case C.SHIM_EV_COMPLETE:
			w.complete(uint32(ev.token), C.ucs_status_t(ev.status), uint64(ev.length))
		case C.SHIM_EV_EP_ERROR:
			w.endpointFailed(C.ucp_ep_h(ev.ep), Status(ev.status))
		case C.SHIM_EV_CONN_REQ:
			w.connRequest(uint64(ev.token), ev.ep)
		}
	}
	w.flushMessages(runAM)
	return n
}

// flushMessages hands the messages gathered for one AM id to its handler.
func (w *Worker) flushMessages(id int) int {
	if id >= 0 && len(w.msgs) > 0 {
		w.dispatch(uint16(id), w.msgs)
	}
	w.msgs = w.msgs[:0]
	return -1
}

func (w *Worker) message(ev *C.shim_event_t) Message {
	arena := unsafe.Pointer(w.sw.arena)
	m := Message{
		ID:     uint16(ev.am_id),
		Length: int(ev.length),
		w:      w,
	}
	if ev.header_len > 0 {
		m.Header = unsafe.Slice((*byte)(unsafe.Add(arena, uintptr(ev.header_off))), int(ev.header_len))
	}
	switch {
	case ev.am_flags&C.SHIM_AM_DATA_RNDV != 0:
		m.Rendezvous = true
		m.desc = ev.data
	case ev.am_flags&C.SHIM_AM_DATA_PERSISTENT != 0:
		m.desc = ev.data
		m.Data = unsafe.Slice((*byte)(ev.data), int(ev.length))
	case ev.length > 0:
		m.Data = unsafe.Slice((*byte)(unsafe.Add(arena, uintptr(ev.data_off))), int(ev.length))
	}
	if ev.am_flags&C.SHIM_AM_HAS_REPLY_EP != 0 {
		m.Reply = w.replyEndpoint(C.ucp_ep_h(ev.ep))
	}
	return m
}

func (w *Worker) dispatch(id uint16, msgs []Message) {
	if h := w.handlers[id]; h != nil {
		h.HandleMessages(w, msgs)
	}
	for i := range msgs {
		if m := &msgs[i]; m.desc != nil && !m.kept {
			w.release = append(w.release, uintptr(m.desc))
		}
	}
}

// Wait blocks until the worker has work (an arrival, a completion, a Wake)
// or the timeout passes (negative: no limit). It issues queued operations
// first. It returns true when there may be work for Progress.
func (w *Worker) Wait(timeout time.Duration) (bool, error) {
	if err := w.h.check(); err != nil {
		return false, err
	}
	if w.inProgress {
		return false, ErrReentrant
	}
	if err := w.submit(); err != nil {
		return false, err
	}
	if len(w.ready) > 0 {
		return true, nil
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	r := C.shim_wait(w.sw, C.int(ms))
	if err := w.offThread(); err != nil {
		return false, err
	}
	switch {
	case r == 1:
		return true, nil
	case r == 0:
		return false, nil
	default:
		return false, fmt.Errorf("ucp: wait: %w", Status(r))
	}
}

// Wake interrupts a Wait. It is the one Worker method that any goroutine may
// call.
func (w *Worker) Wake() error {
	w.wakeMu.RLock()
	defer w.wakeMu.RUnlock()
	if err := w.h.check(); err != nil {
		return err
	}
	return statusErr(C.ucp_worker_signal(w.uw))
}

// Fence orders the worker's RMA and atomic operations: those issued after
// it take effect after those issued before it.
func (w *Worker) Fence() error {
	if err := w.guard(); err != nil {
		return err
	}
	if err := w.submit(); err != nil {
		return err
	}
	return statusErr(C.ucp_worker_fence(w.uw))
}

// Flush queues a flush of every endpoint of the worker: it completes when
// all RMA and atomics issued before it have completed remotely.
func (w *Worker) Flush(c Completer, tag uint64) error {
	_, op, err := w.acquire(c, tag)
	if err != nil {
		return err
	}
	op.kind = C.SHIM_OP_WORKER_FLUSH
	return nil
}

// FlushSync flushes the worker and waits for it.
func (w *Worker) FlushSync(timeout time.Duration) error {
	return w.runSync(timeout, func(c Completer) error { return w.Flush(c, 0) })
}

// settle progresses the worker until UCX has done nothing for settleQuiet
// (at most settleLimit), before it is destroyed. A peer that connected
// to this worker a moment ago may have left UCX with a wire-up reply it
// could not send yet (on TCP, while its socket to the peer still
// connects), on an endpoint UCX made by itself that no Close of ours
// reaches; UCX 1.13 aborts the process when it destroys a worker holding
// such a reply (ucp_request_send_state_ff: "got REP message"; a debug
// assertion its later releases dropped). Quiet is judged by UCX's own
// work (shim_worker.busy), not by events of ours, since wire-up makes
// none, and over time rather than rounds: on a loaded machine the peer
// may take milliseconds to accept the connection the reply waits for.
// A worker that never did anything has nothing to settle.
func (w *Worker) settle() {
	if !w.active {
		return
	}
	start := time.Now()
	quietSince := start
	for {
		n, err := w.Progress()
		if err != nil {
			return
		}
		now := time.Now()
		if n > 0 || w.sw.busy > 0 {
			quietSince = now
		}
		if now.Sub(quietSince) >= settleQuiet || now.Sub(start) >= settleLimit {
			return
		}
		if _, err := w.Wait(time.Millisecond); err != nil {
			return
		}
	}
}

const (
	settleQuiet = 10 * time.Millisecond
	settleLimit = 500 * time.Millisecond
)

// syncWaiter turns a completion into a flag that a blocking helper polls.
type syncWaiter struct {
	done bool
	c    Completion
}

func (s *syncWaiter) Complete(c Completion) { s.done, s.c = true, c }

// ErrTimeout reports a blocking helper that gave up waiting.
var ErrTimeout = errors.New("ucp: timed out")

// runSync issues one operation with an internal completer and progresses
// until it completes or the timeout passes (zero: 30 s).
func (w *Worker) runSync(timeout time.Duration, issue func(Completer) error) error {
	_, err := w.runSyncValue(timeout, issue)
	return err
}

func (w *Worker) runSyncValue(timeout time.Duration, issue func(Completer) error) (Completion, error) {
	if w.inProgress {
		return Completion{}, ErrReentrant
	}
	sw := &syncWaiter{}
	if err := issue(sw); err != nil {
		return Completion{}, err
	}
	if err := w.progressUntil(func() bool { return sw.done }, timeout); err != nil {
		return Completion{}, err
	}
	return sw.c, sw.c.Err
}

// ProgressUntil progresses the worker until cond is true or the timeout
// passes (zero: 30 s). It is for setup, teardown and tests, not the data path.
func (w *Worker) ProgressUntil(cond func() bool, timeout time.Duration) error {
	return w.progressUntil(cond, timeout)
}

func (w *Worker) progressUntil(cond func() bool, timeout time.Duration) error {
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	deadline := time.Now().Add(timeout)
	for spins := 0; !cond(); spins++ {
		n, err := w.Progress()
		if err != nil {
			return err
		}
		if spins&1023 == 1023 && time.Now().After(deadline) {
			return ErrTimeout
		}
		if n == 0 && spins > 4096 {
			// Idle for a while: sleep in the kernel rather than spin.
			if _, err := w.Wait(time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close closes the worker's listeners and endpoints (forcibly), completes
// every outstanding operation (with ErrClosed if UCX did not), destroys the
// worker, and unlocks the goroutine from its thread (see NewWorker).
func (w *Worker) Close() error {
	if w.h.closed.Load() {
		return nil
	}
	if err := w.onOwnerThread("ucp.Worker"); err != nil {
		return err
	}
	if w.inProgress {
		return ErrReentrant
	}
	for _, l := range w.lns {
		l.Close()
	}
	for _, ep := range w.eps {
		if ep.owned {
			ep.closeWith(true, DefaultCloseTimeout)
		}
	}
	// Give UCX a bounded time to finish what the closes started.
	deadline := time.Now().Add(2 * time.Second)
	for w.outstanding > 0 && time.Now().Before(deadline) {
		if _, err := w.Progress(); err != nil {
			break
		}
	}
	w.settle()
	// Release whatever message buffers are still held by this worker.
	if len(w.release) > 0 {
		C.shim_progress(w.sw, 0, (*C.uintptr_t)(unsafe.Pointer(&w.release[0])), C.uint32_t(len(w.release)), 0)
		w.release = w.release[:0]
	}
	// UCX asserts at destroy that every request was released; those still
	// pending (a peer that never answers) are released here and complete
	// with ErrClosed below.
	C.shim_abandon_pending(w.sw)
	for tok := range w.slots {
		if w.slots[tok].busy {
			w.failSlot(uint32(tok))
		}
	}
	for id := range w.handlers {
		if w.handlers[id] != nil {
			C.shim_clear_am_handler(w.sw, C.uint16_t(id))
		}
	}
	w.wakeMu.Lock()
	w.h.markClosed()
	w.wakeMu.Unlock()
	for _, ep := range w.eps {
		ep.h.markClosed()
	}
	C.ucp_worker_destroy(w.uw)
	C.shim_worker_free(w.sw)
	w.sw, w.swh = nil, 0
	w.ctx.mu.Lock()
	w.ctx.nw--
	w.ctx.mu.Unlock()
	// Undo NewWorker's lock, but only on the worker's own thread (only its
	// goroutine runs there): closed from anywhere else (with the check
	// off), it would undo a lock some other goroutine holds.
	if syscall.Gettid() == w.tid {
		runtime.UnlockOSThread()
	}
	return nil
}

func (w *Worker) failSlot(tok uint32) {
	s := &w.slots[tok]
	if s.pins {
		s.pin.Unpin()
		s.pins = false
	}
	c, tag := s.c, s.tag
	s.c, s.tag, s.ep, s.kind, s.n, s.busy = nil, 0, nil, slotPlain, 0, false
	w.outstanding--
	if c != nil {
		c.Complete(Completion{Tag: tag, Err: ErrClosed})
	}
}

package dpu

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/coalesce"
	"github.com/openrdmo/rdmo/internal/logsample"
	"github.com/openrdmo/rdmo/plugins/flush"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp"
)

// Worker is the RDMO worker component: it owns one UCP context and worker,
// driven by one goroutine (the loop), and one executor goroutine per
// client that runs the operation handlers. See docs/ARCHITECTURE.md, "dpu".
type Worker struct {
	cfg Config
	log *zap.Logger
	// reqLog logs rejected and dropped requests, sampled (see sampled).
	reqLog *zap.Logger
	uctx   *ucp.Context
	uw     *ucp.Worker
	addr   []byte

	handlers []*handlerEntry
	// replyFree are reply buffers for acks with a result (loop-owned).
	replyFree []*replyBuf
	// ackDirty are the request queues with an ACK group to send at the
	// end of the round, ackFree the group buffers for reuse (loop-owned).
	ackDirty []*rq
	ackFree  [][]byte
	byOp     [rdmo.OpUserBase]*handlerEntry
	// flushEntry is byOp[OpFlush] when it is the built-in flush handler,
	// whose no-op FLUSHes the loop answers itself (flushInline).
	flushEntry *handlerEntry
	userOps    map[uint32]*handlerEntry // fixed after New

	stats counters
	// epoch and now time requests for Stats.Latency: now is read once per
	// round of arriving messages (loop-owned), not once per request.
	epoch time.Time
	now   int64
	// foreign limits answers to endpoints that are no request queue's
	// (foreign.go; loop-owned).
	foreign foreignLimiter

	// Inbox: Do callers queue commands and executors their messages; the
	// first item into an empty queue wakes the loop (wake). Close closes
	// cmds.
	cmds     coalesce.Queue[*command]
	inbox    coalesce.Queue[inboxItem]
	sleeping atomic.Bool
	done     chan struct{} // closed when the loop has torn everything down
	closeErr error

	// Registry: written by the loop only, under regMu; read by executors
	// (region owner checks) and Stats.
	regMu      sync.Mutex
	allRegions map[uint64]*region
	rqByID     map[uint64]*rq
	nclients   int

	// Loop-owned state.
	clients     map[uint64]*client
	rqAddr      map[string]*rq
	nextRQ      uint64
	nextRegion  uint64
	ops         opTable
	backlog     []int32 // ops UCX had no room for, in order
	comp        *completer
	closingRQs  []*rq
	removals    []*client
	shutdown    bool
	bounce      bouncePool
	cmdBuf      []*command
	itemBuf     []inboxItem
	dirty       []*client // clients whose request queues may dispatch
	dirtySpare  []*client // pumpDirty's second buffer
	readied     int       // items and signals handed to executors in this round (see run)
	woken       []*client // clients whose parked executor the loop readied (see wakeExec)
	round       uint64    // rounds of the loop
	inlineLeft  int       // requests the loop may still run itself this round (runInline)
	inlineBytes int       // and their payload bytes
	carried     []*client // clients whose next batch waits for the next round's budget (carryOver)
	atExec      int       // batches and commands handed to executors, not returned
	shm         shmCheck  // the shared-memory receive-queue check (shmcheck.go)

	// Idle accounting, for tests: time spun without work before sleeping,
	// sleeps, and the sleeps that a spin preceded.
	spun   atomic.Int64
	sleeps atomic.Uint64
	spins  atomic.Uint64
	// inlineFlushes counts the FLUSHes the loop answered itself
	// (flushInline), for tests.
	inlineFlushes atomic.Uint64
}

type handlerEntry struct {
	h    rdmo.Handler
	info rdmo.HandlerInfo
}

// command is a Do call in flight.
type command struct {
	cmd   Command
	reply chan cmdResult
}

type cmdResult struct {
	n   Notification
	err error
}

func (c *command) answer(n Notification, err error) {
	c.reply <- cmdResult{n, err} // buffered, answered once
}

// removeClient is the internal command behind RemoveClient.
type removeClient struct{ ID uint64 }

func (removeClient) CommandType() CommandType { return CommandType(255) }

type itemKind uint8

const (
	itemSubmit    itemKind = iota + 1 // ops from an executor (Sync, Flush, Fetch)
	itemBatchDone                     // HandleBatch returned: its last ops
	itemDeregDone                     // MR_DEREG's executor part finished
	itemExited                        // an executor goroutine ended
	itemPopulated                     // MR_REG's populate finished (commands.go)
)

// inboxItem is one message from an executor to the loop.
type inboxItem struct {
	kind itemKind
	c    *client
	b    *batch
	ops  []targetOp // the owner's ops (Puts, Places), in issue order
	sync []targetOp // ops of the sync group g, after ops
	g    *opGroup   // sealed once ops and sync are queued
	reg  *region
	cmd  *command
	err  error
}

// sampled logs the first 20 lines of each message per second and every
// 1000th after that: a flood of bad requests (or a peer that died with
// thousands in flight) cannot flood the log; Stats counts every one.
// A line written after some were left out says how many
// (logsample.SuppressedKey).
func sampled(log *zap.Logger) *zap.Logger {
	return logsample.Sampled(log, time.Second, 20, 1000)
}

// New creates the worker's UCP context and worker and starts the goroutine
// that owns them.
func New(cfg Config) (*Worker, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:        cfg,
		log:        cfg.Logger,
		reqLog:     sampled(cfg.Logger),
		userOps:    map[uint32]*handlerEntry{},
		done:       make(chan struct{}),
		allRegions: map[uint64]*region{},
		rqByID:     map[uint64]*rq{},
		clients:    map[uint64]*client{},
		rqAddr:     map[string]*rq{},
	}
	w.stats.reqUser = map[uint32]*atomic.Uint64{}
	w.cmds.Init(w.wake)
	w.inbox.Init(w.wake)
	w.stats.latUser = map[uint32]*latency{}
	w.stats.opNames = map[uint32]string{}
	w.epoch = time.Now()
	w.comp = &completer{w}
	if err := w.register(cfg.Handlers); err != nil {
		return nil, err
	}
	started := make(chan error, 1)
	go w.run(started)
	if err := <-started; err != nil {
		<-w.done
		return nil, err
	}
	return w, nil
}

func (w *Worker) register(hs []rdmo.Handler) error {
	for _, h := range hs {
		if h == nil {
			return fmt.Errorf("dpu: nil handler")
		}
		e := &handlerEntry{h: h, info: h.Info()}
		if len(e.info.Ops) == 0 {
			return fmt.Errorf("dpu: handler %q serves no op", e.info.Name)
		}
		for _, prev := range w.handlers {
			if prev.info.Name == e.info.Name {
				return fmt.Errorf("dpu: two handlers named %q (version %s, ops %v; version %s, ops %v)",
					e.info.Name, prev.info.Version, prev.info.Ops, e.info.Version, e.info.Ops)
			}
		}
		for _, op := range e.info.Ops {
			if op > rdmo.OpScatter && !rdmo.IsUserOp(op) {
				return fmt.Errorf("dpu: handler %q claims reserved op %d", e.info.Name, op)
			}
			if prev := w.lookup(op); prev != nil {
				return fmt.Errorf("dpu: op %s claimed by handlers %q and %q", rdmo.OpName(op), prev.info.Name, e.info.Name)
			}
			if op < rdmo.OpUserBase {
				w.byOp[op] = e
			} else {
				w.userOps[op] = e
				w.stats.reqUser[op] = new(atomic.Uint64)
				w.stats.latUser[op] = new(latency)
				w.stats.opNames[op] = OpLabel(op, e.info.Name, e.info.OpNames)
			}
		}
		w.handlers = append(w.handlers, e)
	}
	if w.byOp[rdmo.OpFlush] == nil {
		// FLUSH has one implementation, the flush plugin's, whether the
		// worker's builder configured it or not.
		fl := flush.New()
		e := &handlerEntry{h: fl, info: fl.Info()}
		w.byOp[rdmo.OpFlush] = e
		w.handlers = append(w.handlers, e)
	}
	if e := w.byOp[rdmo.OpFlush]; flush.Is(e.h) {
		w.flushEntry = e
	}
	return nil
}

// OpLabel names an op for logs and metrics: the reference ops by their
// names, a user op by the name its handler gave it (names, from
// rdmo.HandlerInfo.OpNames: a plugin process sends its own and its
// rdmo.DefineOp names), else by the name its package gave it when linked
// into this process ("kv-lookup(38)"), else by its handler's name and its
// id ("counter(16)").
func OpLabel(op uint32, handler string, names map[uint32]string) string {
	if n := names[op]; n != "" && rdmo.IsUserOp(op) {
		return n + "(" + utoa(uint64(op)) + ")"
	}
	if _, ok := rdmo.DefinedOpName(op); ok || !rdmo.IsUserOp(op) || handler == "" {
		return rdmo.OpName(op)
	}
	return handler + "(" + utoa(uint64(op)) + ")"
}

// opName is OpLabel for an op of this worker.
func (w *Worker) opName(op uint32) string {
	if n, ok := w.stats.opNames[op]; ok {
		return n
	}
	return rdmo.OpName(op)
}

func (w *Worker) lookup(op uint32) *handlerEntry {
	if op < rdmo.OpUserBase {
		return w.byOp[op]
	}
	return w.userOps[op]
}

// Address is the worker's UCP address (what CLIENT_INIT answers with).
func (w *Worker) Address() []byte { return append([]byte(nil), w.addr...) }

// Do executes a command on the loop and returns its answer.
// It is safe for concurrent use. A failed command returns its notification
// (with a non-OK Status) and a *CommandError. When ctx ends first, Do
// returns ctx.Err(); the command still runs to completion.
func (w *Worker) Do(ctx context.Context, cmd Command) (Notification, error) {
	cmd, ok := normalize(cmd)
	if !ok {
		e := cmdErr(CommandType(255), ErrInvalidCommand, "nil or unknown command")
		return e.Notification(0), e
	}
	c := &command{cmd: cmd, reply: make(chan cmdResult, 1)}
	if !w.cmds.Push(c) {
		e := cmdErr(cmd.CommandType(), ErrClosed, "")
		return e.Notification(commandClient(cmd)), e
	}
	select {
	case r := <-c.reply:
		return r.n, r.err
	case <-ctx.Done():
		return Notification{Type: cmd.CommandType(), Status: rdmo.StatusInternal, Detail: ctx.Err().Error(),
			Client: commandClient(cmd)}, ctx.Err()
	}
}

// RemoveClient drops a client whose target is gone: its request queues are
// closed (requests not yet started fail with TargetUnreachable), every
// handler's ClientRemoved is called on its executor, and its regions and
// endpoint are released. Nothing is written back.
func (w *Worker) RemoveClient(id uint64) error {
	_, err := w.Do(context.Background(), removeClient{ID: id})
	return err
}

// Close tears the worker down: every client is removed after its handlers
// wrote back their cached state (WriteBackAll, Flush) where the target is still
// reachable; then the UCP worker and context are closed and the goroutines
// end. Close waits for handlers that are running to return.
func (w *Worker) Close() error {
	w.cmds.Close()
	<-w.done
	return w.closeErr
}

// push hands an executor's message to the loop.
func (w *Worker) push(it inboxItem) {
	w.inbox.Push(it)
}

// wake interrupts the loop's sleep; it costs a system call only when the
// loop is (about to be) asleep. The loop sets sleeping before it checks
// the inbox (inboxPending): either it sees the item or the producer sees
// the flag.
func (w *Worker) wake() {
	if w.sleeping.Load() {
		w.uw.Wake()
	}
}

// normalize turns a command given by pointer into its value, so the loop
// never dereferences a caller's pointer; nil and unknown commands fail.
func normalize(cmd Command) (Command, bool) {
	switch c := cmd.(type) {
	case ClientInit, RQCreate, RQDestroy, MRReg, MRDereg, removeClient:
		return c, true
	case *ClientInit:
		if c != nil {
			return *c, true
		}
	case *RQCreate:
		if c != nil {
			return *c, true
		}
	case *RQDestroy:
		if c != nil {
			return *c, true
		}
	case *MRReg:
		if c != nil {
			return *c, true
		}
	case *MRDereg:
		if c != nil {
			return *c, true
		}
	}
	return nil, false
}

// commandClient is the client a (normalized) command names.
func commandClient(cmd Command) uint64 {
	switch c := cmd.(type) {
	case ClientInit:
		return c.ID
	case RQCreate:
		return c.Client
	case RQDestroy:
		return c.Client
	case MRReg:
		return c.Client
	case MRDereg:
		return c.Client
	case removeClient:
		return c.ID
	}
	return 0
}

// run is the loop goroutine: it owns the UCP worker.
//
// It keeps an OS thread of its own (runtime.LockOSThread), so that under
// load the executors run on other threads, in parallel with it, and because
// UCX binds the worker to the thread that created it (ucp.NewWorker):
// the worker is made here, on that thread, and never leaves it.
func (w *Worker) run(started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(w.done)
	var err error
	// Large shared-memory segments: initiators that know the worker has
	// them (wire.CapabilityLargeBatch) send containers of up to 60 KiB
	// in one piece; the worker's own messages stay small (acks, answers).
	w.uctx, err = ucp.NewContext(ucp.ContextOptions{Config: w.cfg.UCXConfig, Name: "rdmo-dpu", LargeShmSegments: true})
	if err != nil {
		started <- fmt.Errorf("dpu: %w", err)
		return
	}
	w.uw, err = w.uctx.NewWorker(ucp.WorkerOptions{MaxOutstanding: 16384})
	if err == nil {
		w.addr, err = w.uw.Address()
	}
	if err == nil {
		err = w.uw.SetHandler(0, ucp.MessageHandlerFunc(w.handleMessages))
	}
	if err == nil {
		err = w.uw.SetHandler(shmCheckAM, ucp.MessageHandlerFunc(w.onShmProbe))
	}
	if err != nil {
		if w.uw != nil {
			w.uw.Close()
		}
		w.uctx.Close()
		started <- fmt.Errorf("dpu: %w", err)
		return
	}
	started <- nil
	w.log.Debug("dpu worker started", zap.Int("handlers", len(w.handlers)))

	var sp spinner
	sp.reset()
	var progressErr, waitErr error // logged once each
	for {
		w.round++
		w.readied = 0 // counted by completions in Progress too
		w.inlineLeft, w.inlineBytes = inlineBudget, inlineBytes
		w.recarry()
		n, err := w.uw.Progress()
		if err != nil && progressErr == nil {
			progressErr = err
			w.log.Error("progress failed", zap.Error(err))
		}
		did := w.drainInbox()
		did += w.issueBacklog()
		w.pumpDirty()
		if w.shm.due || w.shm.seq != 0 {
			w.checkShm()
		}
		if len(w.closingRQs) > 0 || len(w.removals) > 0 || w.shutdown {
			w.maintain()
			if w.shutdown && len(w.clients) == 0 && len(w.removals) == 0 && len(w.closingRQs) == 0 {
				break
			}
		}
		if len(w.ackDirty) > 0 {
			did += w.sendAckGroups()
		}
		if n > 0 || did > 0 || w.readied > 0 || len(w.carried) > 0 {
			if sp.active() && len(w.woken) > 0 {
				// Work after a quiet spell that woke an executor (a
				// request/response conversation): let it run now.
				// Under load the loop does not yield: another thread
				// takes the executor from this P, in parallel with it.
				w.yieldToWoken()
			}
			continue
		}
		if len(w.woken) > 0 {
			// Nothing to do but wait for an executor this loop woke:
			// if it still waits in this P's run queue, let it run.
			w.yieldToWoken()
		}
		if !sp.idle(w.outstanding()) {
			continue
		}
		// A goroutine this loop readied (a Do caller it answered) may sit
		// in this P's run queue; a cgo call that blocks keeps the P until
		// sysmon takes it back. Yield the P first so it runs now (on
		// another thread: the loop's is locked; a sleep is rare enough
		// for the two thread switches this costs).
		runtime.Gosched()
		if sp.spun > 0 {
			w.spun.Add(int64(sp.spun))
			w.spins.Add(1)
		}
		w.sleeps.Add(1)
		w.sleeping.Store(true)
		woken := false
		if !w.inboxPending() {
			if waitErr != nil {
				// No wake-up support: nap briefly instead of spinning.
				time.Sleep(min(w.cfg.IdleWait, 100*time.Microsecond))
				woken = true
			} else if woken, err = w.uw.Wait(w.cfg.IdleWait); err != nil {
				waitErr = err
				w.log.Error("wait failed; the idle worker will poll", zap.Error(err))
			}
		} else {
			woken = true
		}
		w.sleeping.Store(false)
		sp.slept(woken)
	}
	w.closeErr = w.teardown()
}

// inboxPending reports, without a lock, whether drainInbox has work.
func (w *Worker) inboxPending() bool {
	return w.inbox.Queued() || w.cmds.Queued() || w.cmds.Closed() && !w.shutdown
}

// drainInbox runs the queued commands and executor messages.
func (w *Worker) drainInbox() int {
	if !w.inboxPending() {
		return 0
	}
	// Close first, commands second, messages last: every command queued
	// before Close, and every message queued before a command taken, is
	// in this round, and messages are handled before commands.
	closeReq := w.cmds.Closed()
	cmds := w.cmds.Take(w.cmdBuf)
	items := w.inbox.Take(w.itemBuf)
	for i := range items {
		w.handleItem(&items[i])
		items[i] = inboxItem{}
	}
	for i, c := range cmds {
		if w.shutdown {
			e := cmdErr(c.cmd.CommandType(), ErrClosed, "")
			c.answer(e.Notification(commandClient(c.cmd)), e)
		} else {
			w.execute(c)
		}
		cmds[i] = nil
	}
	w.cmdBuf, w.itemBuf = cmds[:0], items[:0]
	if closeReq && !w.shutdown {
		w.startShutdown()
	}
	return len(cmds) + len(items)
}

func (w *Worker) handleItem(it *inboxItem) {
	switch it.kind {
	case itemSubmit:
		w.submit(it.ops, it.sync, it.g)
	case itemBatchDone:
		b := it.b
		w.atExec--
		b.c.atExec--
		w.submit(it.ops, nil, nil)
		b.g.sealed = true
		b.c.queued--
		w.markDirty(b.c)
		w.groupCheck(&b.g)
	case itemDeregDone:
		w.atExec--
		it.c.atExec--
		w.deregDone(it.c, it.reg, it.cmd, it.err)
	case itemExited:
		it.c.exited = true
	case itemPopulated:
		w.populated(it.c, it.reg, it.cmd, it.err)
	}
}

// submit queues an executor's ops: each counts in its group until it
// completes; the sync group, if any, is sealed afterwards.
func (w *Worker) submit(ops, sync []targetOp, g *opGroup) {
	for i := range ops {
		w.enqueue(&ops[i])
	}
	for i := range sync {
		w.enqueue(&sync[i])
	}
	if g != nil {
		g.sealed = true
		w.groupCheck(g)
	}
}

// startShutdown begins Close: new requests are dropped, every client is
// removed (with write-back), and the loop ends when all are gone.
func (w *Worker) startShutdown() {
	w.shutdown = true
	w.log.Debug("dpu worker closing", zap.Int("clients", len(w.clients)))
	for _, c := range w.clients {
		w.startRemoval(c, nil, true)
	}
}

// teardown closes what is left after every client is gone.
func (w *Worker) teardown() error {
	var errs []error
	// Answer commands that raced with Close.
	for _, c := range w.cmds.Take(nil) {
		e := cmdErr(c.cmd.CommandType(), ErrClosed, "")
		c.answer(e.Notification(commandClient(c.cmd)), e)
	}
	w.closeShmProbes()
	w.uw.SetHandler(0, nil)
	w.uw.SetHandler(shmCheckAM, nil)
	if err := w.uw.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := w.uctx.Close(); err != nil {
		errs = append(errs, err)
	}
	w.log.Debug("dpu worker closed")
	return errors.Join(errs...)
}

// maintain advances request queue teardowns and client removals; it runs
// at the top of the loop (outside Progress), where endpoints may be closed.
func (w *Worker) maintain() {
	now := time.Now()
	if len(w.closingRQs) > 0 {
		var ready []*rq
		keep := w.closingRQs[:0]
		for _, q := range w.closingRQs {
			if w.rqReadyToClose(q, now) {
				ready = append(ready, q)
			} else {
				keep = append(keep, q)
			}
		}
		for i := len(keep); i < len(w.closingRQs); i++ {
			w.closingRQs[i] = nil
		}
		w.closingRQs = keep
		for _, q := range ready {
			w.closeRQ(q)
		}
	}
	if len(w.removals) > 0 {
		var ready []*client
		keep := w.removals[:0]
		for _, c := range w.removals {
			if c.exited && len(c.rqs) == 0 && c.populating == 0 {
				ready = append(ready, c)
			} else {
				keep = append(keep, c)
			}
		}
		for i := len(keep); i < len(w.removals); i++ {
			w.removals[i] = nil
		}
		w.removals = keep
		for _, c := range ready {
			w.finishRemoval(c)
		}
	}
}

// wakeExec records that the loop handed an item or signal to c's executor.
// An executor that was parked is now runnable in the loop's P run queue
// (the goroutine that readies another puts it there), where it can run only
// when the loop gives the P up or another thread steals it; the runtime
// steals from a running P's next slot last and after a pause, and on a busy
// machine the thief waits for a CPU. yieldToWoken gives the P up when that
// happened and the loop has nothing better to do.
func (w *Worker) wakeExec(c *client) {
	if c.waking || !c.blocked.Load() {
		return
	}
	c.waking = true
	w.woken = append(w.woken, c)
}

// yieldToWoken yields the loop's P (runtime.Gosched) if an executor it
// woke has not started running yet. A goroutine locked to its thread, as
// the loop is (UCX binds the worker to one thread; UCX 1.18 aborts when
// another thread touches it), hands its P to another thread and parks until
// it gets it back: two thread switches, paid only when an executor is
// really stuck behind the loop, not for every item of a saturated stream
// (whose executor is busy, not parked, when items arrive).
func (w *Worker) yieldToWoken() {
	stuck := false
	for i, c := range w.woken {
		c.waking = false
		stuck = stuck || c.blocked.Load()
		w.woken[i] = nil
	}
	w.woken = w.woken[:0]
	if stuck {
		runtime.Gosched()
	}
}

// outstanding reports whether the loop expects work soon without a new
// message: a batch or command at an executor, an executor waiting for its
// operations, UCX operations in flight or waiting for room.
func (w *Worker) outstanding() bool {
	return w.atExec > 0 || len(w.ops.ops) > len(w.ops.free) || len(w.backlog) > 0
}

// The loop's idle policy: after its last piece of work it keeps
// progressing (polling UCX and its inbox, yielding the CPU to other
// threads) for a bounded time before it sleeps in ucp.Worker.Wait, so
// that the next request of a conversation, or an executor's answer, finds
// it awake instead of costing a wake-up through the kernel.
//
//   - With nothing outstanding it spins for a window between spinMin and
//     spinMax. The window adapts to the traffic: it grows (at least
//     doubles) when work arrived shortly after the loop went to sleep (a
//     request/response conversation whose turn-around the window just
//     missed) and halves when a sleep ran its full IdleWait (the traffic
//     paused) or when the work came only after spinMax. A steady stream
//     with gaps under spinMax keeps the loop polling, as a poll-mode
//     worker does; an idle worker spins once for at most spinMax, then
//     sleeps, and after a sleep that timed out goes back to sleep at once.
//   - While something is outstanding (outstanding) it spins for up to
//     spinPending, then sleeps anyway; once a sleep ran its full IdleWait
//     it does not spin again until something happens, so an executor
//     stuck in a slow handler, or an operation UCX never completes, does
//     not keep a core busy.
const (
	spinMin     = 50 * time.Microsecond
	spinMax     = 500 * time.Microsecond
	spinPending = time.Millisecond
	// spinCheck is how many empty rounds pass between clock readings
	// (and, while something is outstanding, yields of the CPU); one round
	// is a Progress call, a few tenths of a microsecond.
	spinCheck = 16
	// yieldEvery spaces the yields of the CPU while nothing is
	// outstanding: the loop waits for the next request, and a yield
	// (sched_yield) costs about a microsecond on a small virtual machine
	// even when nothing else wants the CPU, during which a request that
	// arrives waits. Once per spinCheck rounds, in the few microseconds
	// between two turns of a conversation, that was a yield in most gaps
	// and a microsecond on most round trips. A thread that wants this CPU
	// (the initiator's, on a machine with fewer cores than polling
	// threads) waits at most this long for the loop to step aside: 8 µs
	// rather than 20, under which 64 KiB appends on shared memory leaned
	// 6% slower (docs/benchmarks/idle-policy.md).
	yieldEvery = 8 * time.Microsecond
	// quietRounds empty rounds (some 10 µs) make the loop quiet: work
	// that comes after them is a turn of a conversation, not a stream.
	quietRounds = 32
)

// spinner is the loop's idle state (see the constants above).
type spinner struct {
	window    time.Duration // idle spin of the current period
	rounds    int           // empty rounds since the last work
	since     time.Time     // when the first of them started
	spun      time.Duration // how long the last spin lasted (accounting)
	yieldAt   time.Duration // spin time of the next yield while nothing is outstanding
	timedOut  bool          // the last sleep ran its full IdleWait
	sleptAt   time.Time     // when the idle period that slept began
	sleptOnce bool          // the current idle period included a sleep
}

func (s *spinner) reset() { *s = spinner{window: spinMin} }

// active records a round that found work. It reports whether the loop
// had been quiet before: at least quietRounds empty rounds, or a sleep.
func (s *spinner) active() (quiet bool) {
	quiet = s.sleptOnce || s.rounds >= quietRounds
	if s.sleptOnce {
		// Work came after a sleep: had the window covered the gap, the
		// loop would have been awake. A gap beyond spinMax is not worth
		// spinning for: shrink, gently (one late turn of a conversation
		// should not undo the window).
		if gap := time.Since(s.sleptAt); gap < spinMax {
			s.window = min(max(2*s.window, gap+gap/2), spinMax)
		} else {
			s.window = max(s.window/2, spinMin)
		}
	}
	s.rounds, s.timedOut, s.sleptOnce = 0, false, false
	return quiet
}

// idle records an empty round and reports whether the loop should sleep.
func (s *spinner) idle(outstanding bool) bool {
	s.rounds++
	if s.rounds == 1 {
		s.spun = 0
		if s.timedOut {
			// Nothing happened for a whole IdleWait, not even to what
			// is outstanding: spinning would only burn the CPU.
			return true
		}
		s.since = time.Now()
		s.yieldAt = yieldEvery
		return false
	}
	if s.rounds%spinCheck != 0 {
		return false
	}
	limit := s.window
	if outstanding {
		limit = spinPending
	}
	if s.spun = time.Since(s.since); s.spun < limit {
		// Poll politely: let the threads that want this CPU (an
		// executor's, a peer process on a small machine, the initiator
		// of this very conversation) run first; while nothing is
		// outstanding, every yieldEvery.
		if outstanding || s.spun >= s.yieldAt {
			s.yieldAt = s.spun + yieldEvery
			syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		}
		return false
	}
	return true
}

// slept records the end of a sleep: woken by an event, or timed out.
func (s *spinner) slept(woken bool) {
	if !s.sleptOnce {
		s.sleptOnce = true
		s.sleptAt = s.since
	}
	if !woken && !s.timedOut {
		// The first sleep of this idle period that ran its full IdleWait:
		// the traffic paused or stopped.
		s.window = max(s.window/2, spinMin)
	}
	s.timedOut = !woken
	s.rounds = 0
}

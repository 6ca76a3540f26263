package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin/internal/wasmabi"
)

// instance is one instantiation of a module: its linear memory, its
// exports, and the call it runs (at most one at a time).
type instance struct {
	h   *Handler
	mod api.Module
	mem api.Memory

	fnABI, fnInfo, fnBuf, fnBatch                          api.Function
	fnWriteBack, fnRegionRemoved, fnClientRemoved, fnError api.Function
	stack                                                  [4]uint64

	// ctx is the context of every call into the instance. A call that
	// overruns its bound is stopped by timer: it sets stop, the global
	// addStopCheck's check reads at every loop head (the module traps),
	// or, for a module run without that check, closes ctx's Done channel
	// (wazero's WithCloseOnContextDone). Both are made once per instance,
	// so a call allocates no context or timer.
	ctx   *callCtx
	timer *time.Timer
	stop  api.MutableGlobal

	// The call in progress: its Target, its requests, the last failed
	// Target call's detail, scratch for Sync.
	t       rdmo.Target
	reqs    []rdmo.Request
	lastErr string
	ops     []rdmo.RemoteOp

	// The module's batch buffer (rdmo_batch_buf), asked for again only
	// when a batch needs more.
	bufPtr uint32
	bufCap uint64

	stderr tailWriter

	// The watch on the call in progress (callWithin, onTimer). A call
	// costs its goroutine two atomic stores and a compare-and-swap; the
	// timer is set only by a call that finds it unset, and the timer's
	// function sets it again while calls keep coming, every tick (an
	// eighth of the call's bound), and leaves it unset when it finds none.
	// A saturated worker so pays a few timer wake-ups a second, not a
	// timer, a mutex and three clock reads per batch, and an idle one
	// none. The tick, not the call, reads the clock.
	state   atomic.Uint64 // callSeq<<2 | callActive | callTripped
	bound   atomic.Int64  // the module's own-time bound of the call in progress, ns
	inHost  atomic.Bool   // a host function that waits (waits) is in progress
	armed   atomic.Bool   // the timer is set
	tripped atomic.Int64  // the bound that stopped the call, ns
	watchMu sync.Mutex    // onTimer's: a timer's functions may overlap
	watch   callWatch
}

// callWatch is what the ticks saw of one call: the state it ran under,
// the last tick's clock, and the wall and own time seen since the first
// tick that found it running.
type callWatch struct {
	state     uint64
	last      int64
	wall, own time.Duration
}

// The low bits of instance.state.
const (
	callActive  = 1
	callTripped = 2
)

// tickOf is the watch's period for a call bounded by d: a call is stopped
// at most one tick past its bound (it counts from the first tick that
// saw it running), and its own time is sampled once a tick (a tick that
// finds it in a host function that waits counts the interval as the
// worker's).
func tickOf(d time.Duration) time.Duration { return max(d/8, time.Millisecond) }

// epoch is the origin of monoNow.
var epoch = time.Now()

// monoNow reads the monotonic clock in nanoseconds since epoch.
func monoNow() int64 { return int64(time.Since(epoch)) }

// callCtx is an instance's context: never canceled except by its timer.
type callCtx struct {
	inst    *instance
	done    chan struct{}
	expired atomic.Bool
}

func (c *callCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *callCtx) Done() <-chan struct{}       { return c.done }
func (c *callCtx) Value(any) any               { return nil }
func (c *callCtx) Err() error {
	if c.expired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}

func (h *Handler) newInstance(ctx context.Context) (*instance, error) {
	in := &instance{h: h}
	in.ctx = &callCtx{inst: in, done: make(chan struct{})}
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions().
		WithSysWalltime().WithSysNanotime().WithRandSource(randReader).
		WithStderr(&in.stderr).WithStdout(&in.stderr)
	// Instantiation runs no code of the module (no start functions).
	mod, err := h.rt.InstantiateModule(ctx, h.cm, cfg)
	if err != nil {
		return nil, fmt.Errorf("instantiate: %w", err)
	}
	in.mod, in.mem = mod, mod.Memory()
	if in.mem == nil {
		mod.Close(context.Background())
		return nil, errors.New("module has no memory")
	}
	if h.stopCheck {
		g, ok := mod.ExportedGlobal(stopGlobal).(api.MutableGlobal)
		if !ok {
			mod.Close(context.Background())
			return nil, errors.New("module lost its stop check")
		}
		in.stop = g
	}
	in.timer = time.AfterFunc(time.Hour, in.onTimer)
	in.timer.Stop()
	// _initialize (the Go runtime and package initializers) runs under a
	// time bound like a call.
	if err := in.callWithin(mod.ExportedFunction("_initialize"), nil, max(h.opts.BatchTimeout, 10*time.Second)); err != nil {
		in.close()
		return nil, fmt.Errorf("_initialize: %w", err)
	}
	in.fnABI = mod.ExportedFunction(wasmabi.ExportABIVersion)
	in.fnInfo = mod.ExportedFunction(wasmabi.ExportInfo)
	in.fnBuf = mod.ExportedFunction(wasmabi.ExportBatchBuf)
	in.fnBatch = mod.ExportedFunction(wasmabi.ExportHandleBatch)
	in.fnWriteBack = mod.ExportedFunction(wasmabi.ExportWriteBack)
	in.fnRegionRemoved = mod.ExportedFunction(wasmabi.ExportRegionRemoved)
	in.fnClientRemoved = mod.ExportedFunction(wasmabi.ExportClientRemoved)
	in.fnError = mod.ExportedFunction(wasmabi.ExportError)
	return in, nil
}

func (in *instance) close() {
	if in.timer != nil {
		in.timer.Stop()
	}
	in.mod.Close(context.Background())
}

// errTimeout is what a call that overran BatchTimeout returns.
type errTimeout struct{ d time.Duration }

func (e errTimeout) Error() string {
	return fmt.Sprintf("stopped after the batch time bound (%v): the handler did not return", e.d)
}

// call runs fn with stack as its parameters and results, under the batch
// time bound. A non-nil error means the instance is unusable (trap, exit,
// overrun): the caller retires it.
func (in *instance) call(fn api.Function, stack []uint64) error {
	return in.callWithin(fn, stack, in.h.opts.BatchTimeout)
}

// callWithin is call with the module's own running time bounded by d, and
// the call's, host functions included, by d or BatchTimeout, whichever is
// longer (each to within a tick, tickOf).
func (in *instance) callWithin(fn api.Function, stack []uint64, d time.Duration) error {
	if in.ctx.expired.Load() {
		return errTimeout{time.Duration(in.tripped.Load())}
	}
	// The bound before the state: a tick that sees this call sees its
	// bound.
	tick := false
	if b := time.Duration(in.bound.Load()); b != d {
		in.bound.Store(int64(d))
		// A timer set for a longer bound would see this call late.
		tick = d < b
	}
	s := (in.state.Load()>>2+1)<<2 | callActive
	in.state.Store(s)
	if !in.armed.Load() && in.armed.CompareAndSwap(false, true) || tick {
		in.timer.Reset(tickOf(d))
	}
	err := fn.CallWithStack(in.ctx, stack)
	if !in.state.CompareAndSwap(s, s&^callActive) || in.ctx.expired.Load() {
		// The timer stopped the call: the instance is unusable,
		// whatever the call returned.
		return errTimeout{time.Duration(in.tripped.Load())}
	}
	if err != nil {
		var ee *sys.ExitError
		if errors.As(err, &ee) {
			if ee.ExitCode() == sys.ExitCodeDeadlineExceeded {
				return errTimeout{d}
			}
			return fmt.Errorf("module exited with code %d%s", ee.ExitCode(), in.stderrSuffix())
		}
		return fmt.Errorf("trapped: %s%s", firstLine(err.Error()), in.stderrSuffix())
	}
	return nil
}

// onTimer is a tick of the watch: it stops the call in progress if the
// module ran for its bound or the call for its wall bound, sets the timer
// again while a call runs, and leaves it unset when none does (the next
// call sets it).
func (in *instance) onTimer() {
	in.watchMu.Lock()
	defer in.watchMu.Unlock()
	in.armed.Store(false)
	s := in.state.Load()
	if s&callActive == 0 || s&callTripped != 0 {
		return
	}
	if !in.armed.CompareAndSwap(false, true) {
		return // a call that started since set the timer
	}
	now := monoNow()
	bound := time.Duration(in.bound.Load())
	wall := max(bound, in.h.opts.BatchTimeout)
	w := &in.watch
	if w.state != s {
		*w = callWatch{state: s, last: now}
	} else {
		dt := time.Duration(now - w.last)
		w.last, w.wall = now, w.wall+dt
		if !in.inHost.Load() {
			w.own += dt
		}
	}
	var b time.Duration
	switch {
	case w.wall >= wall:
		b = wall
	case w.own >= bound:
		b = bound
	default:
		in.timer.Reset(tickOf(bound))
		return
	}
	in.tripped.Store(int64(b))
	if !in.state.CompareAndSwap(s, s|callTripped) {
		// The call returned meanwhile; the timer stays set for the
		// next one (armed is true).
		in.timer.Reset(tickOf(bound))
		return
	}
	c := in.ctx
	c.expired.Store(true)
	if in.stop != nil {
		in.stop.Set(1)
	}
	close(c.done)
}

func (in *instance) stderrSuffix() string {
	if s := in.stderrTail(); s != "" {
		return " (" + s + ")"
	}
	return ""
}

// writeBatch lays the batch out in the module's batch buffer: request
// records, result records, then sub-headers and payloads.
func (in *instance) writeBatch(reqs []rdmo.Request) error {
	resOff, off := wasmabi.BatchLayout(len(reqs))
	size := uint64(off)
	for i := range reqs {
		size += uint64(len(reqs[i].Sub)) + uint64(len(reqs[i].Payload))
	}
	if size > uint64(in.mem.Size()) && size > in.h.opts.MemoryLimit {
		return fmt.Errorf("a batch of %d bytes does not fit the module's memory limit (%d bytes)", size, in.h.opts.MemoryLimit)
	}
	if size > in.bufCap {
		in.stack[0] = size
		if err := in.call(in.fnBuf, in.stack[:1]); err != nil {
			return err
		}
		in.bufPtr, in.bufCap = uint32(in.stack[0]), size
	}
	ptr := in.bufPtr
	buf, ok := in.mem.Read(ptr, uint32(size))
	if !ok || ptr == 0 && size > 0 {
		return fmt.Errorf("batch buffer [%#x, +%d) outside the module's memory", ptr, size)
	}
	clear(buf[resOff:off])
	for i := range reqs {
		q := &reqs[i]
		r := buf[i*wasmabi.ReqSize : (i+1)*wasmabi.ReqSize]
		le.PutUint64(r[wasmabi.ReqSeq:], q.Seq)
		le.PutUint64(r[wasmabi.ReqClient:], uint64(q.Client))
		le.PutUint32(r[wasmabi.ReqOp:], q.Op)
		le.PutUint32(r[wasmabi.ReqFlags:], q.Flags)
		le.PutUint64(r[wasmabi.ReqLength:], q.Length)
		var h0, h1, h2 uint64
		switch q.Op {
		case rdmo.OpFlush:
			h0 = q.Flush.FlushID
		case rdmo.OpAppend:
			h0, h1, h2 = q.Append.PtrAddr, uint64(q.Append.PtrRkey), uint64(q.Append.DataRkey)
		case rdmo.OpScatter:
			h0 = q.Scatter.Count
		}
		le.PutUint64(r[wasmabi.ReqH0:], h0)
		le.PutUint64(r[wasmabi.ReqH1:], h1)
		le.PutUint64(r[wasmabi.ReqH2:], h2)
		le.PutUint32(r[wasmabi.ReqSubOff:], uint32(off))
		le.PutUint32(r[wasmabi.ReqSubLen:], uint32(len(q.Sub)))
		off += copy(buf[off:], q.Sub)
		le.PutUint32(r[wasmabi.ReqPayOff:], uint32(off))
		le.PutUint32(r[wasmabi.ReqPayLen:], uint32(len(q.Payload)))
		off += copy(buf[off:], q.Payload)
		var rndv, has uint32
		if q.Rendezvous {
			rndv = 1
		}
		if q.Payload != nil {
			has = 1
		}
		le.PutUint32(r[wasmabi.ReqRndv:], rndv)
		le.PutUint32(r[wasmabi.ReqHasPay:], has)
	}
	return nil
}

// readResults copies the result records out of the module's memory. A
// result's Data is copied into t.Buffer memory (the module's memory is not
// the worker's to hand out).
func (in *instance) readResults(t rdmo.Target, results []rdmo.Result) error {
	resOff, _ := wasmabi.BatchLayout(len(results))
	// Linear memory never moves its bytes, but a view of it is stale
	// once it grew: read it again.
	ptr := in.bufPtr
	rec, ok := in.mem.Read(ptr+uint32(resOff), uint32(len(results)*wasmabi.ResSize))
	if !ok {
		return errors.New("result records outside the module's memory")
	}
	for i := range results {
		r := rec[i*wasmabi.ResSize:]
		res := rdmo.Result{Status: rdmo.Status(le.Uint32(r[wasmabi.ResStatus:])), Value: le.Uint64(r[wasmabi.ResValue:])}
		if n := le.Uint32(r[wasmabi.ResDetLen:]); n > 0 {
			d, ok := in.mem.Read(le.Uint32(r[wasmabi.ResDetPtr:]), min(n, 64<<10))
			if !ok {
				res = rdmo.Result{Status: rdmo.StatusHandlerFailed, Detail: "wasm module: result detail outside its memory"}
			} else {
				res.Detail = string(d)
			}
		}
		if n := le.Uint32(r[wasmabi.ResDataLen:]); n > 0 && res.Status == rdmo.StatusOK {
			d, ok := in.mem.Read(le.Uint32(r[wasmabi.ResDataPtr:]), n)
			switch {
			case n > rdmo.MaxResultData:
				// The worker fails it as it would a built-in's.
				res.Data = make([]byte, n)
			case !ok:
				res = rdmo.Result{Status: rdmo.StatusHandlerFailed, Detail: "wasm module: result data outside its memory"}
			default:
				res.Data = t.Buffer(int(n))
				copy(res.Data, d)
			}
		}
		results[i] = res
	}
	return nil
}

// hookError reads the detail of the last hook's error.
func (in *instance) hookError() string {
	var st [1]uint64
	if err := in.call(in.fnError, st[:]); err != nil {
		return "wasm module: " + err.Error()
	}
	b, ok := in.mem.Read(uint32(st[0]>>32), min(uint32(st[0]), 64<<10))
	if !ok {
		return "wasm module: error detail outside its memory"
	}
	return string(b)
}

func (in *instance) stderrTail() string { return in.stderr.tail() }

// tailWriter keeps the first bytes a module writes to stderr, for the
// failure's log line (the Go runtime's "panic:" or "fatal error:" line
// comes first, its goroutine dump after). Bounded, whatever the module
// writes.
type tailWriter struct {
	mu  sync.Mutex
	buf []byte
}

const tailMax = 4096

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if room := tailMax - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	w.mu.Unlock()
	return len(p), nil
}

func (w *tailWriter) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := string(w.buf)
	for _, key := range []string{"panic: ", "fatal error: ", "runtime: "} {
		if i := strings.Index(s, key); i >= 0 {
			return firstLine(s[i:])
		}
	}
	return strings.TrimSpace(firstLine(s))
}

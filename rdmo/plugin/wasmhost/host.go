// Package wasmhost is the worker's side of WebAssembly handler modules:
// Load compiles a module built with rdmo/plugin/wasm once (wazero, pure
// Go), runs its batches in instances inside the worker's process with the
// requests and results in the instance's linear memory, serves its Target
// calls as host functions with the worker's own checks, and replaces an
// instance that trapped or overran its time bound.
package wasmhost

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin/internal/wasmabi"
)

var le = binary.LittleEndian

// Defaults of LoadOptions.
const (
	DefaultMemoryLimit  = 128 << 20
	DefaultBatchTimeout = 2 * time.Second
	// DefaultInlineTimeout bounds a module's own running time in a call
	// on the worker's loop: short, since every client of the worker waits
	// for it, yet far above what an inline batch takes (at most 256
	// requests of some microseconds) even on a loaded machine, whose
	// scheduler keeps the loop's thread off a CPU meanwhile (the bound is
	// wall time less the module's waiting Target calls): with two CPU
	// hogs on two cores, 100 ms stopped a pipelined fetch-add batch of the
	// bench's forms rows in every run, 500 ms in none of three.
	DefaultInlineTimeout = 500 * time.Millisecond
	// MaxSyncOps bounds the remote ops of one Sync call of a module (a
	// forged count must not make the worker allocate without bound).
	MaxSyncOps = 1 << 16
)

// Suffix is the file name suffix of a module on a plugin path
// (rdmo-plugin-NAME.wasm).
const Suffix = ".wasm"

// LoadOptions configures Load.
type LoadOptions struct {
	// Logger receives one line per failed instance (trap, time bound,
	// memory limit) and the module's standard error lines. nil: none.
	Logger *zap.Logger
	// Name and Version, if set, must match the module's handshake.
	Name, Version string
	// MemoryLimit caps each instance's linear memory, in bytes (rounded
	// down to 64 KiB pages; default DefaultMemoryLimit). A module that
	// grows past it traps.
	MemoryLimit uint64
	// BatchTimeout bounds one call into the module (a batch or a hook),
	// Target calls included (default DefaultBatchTimeout). An instance
	// that overruns it is stopped and replaced; the batch fails.
	BatchTimeout time.Duration
	// InlineTimeout bounds the module's own running time in a call the
	// worker's loop makes itself (the module declares
	// rdmo.HandlerInfo.Inline and the worker chose to run a batch, or a
	// FLUSH's WriteBack, inline): a module that loops there stalls every
	// client of the worker for that long, then its call fails and the
	// instance is replaced (default DefaultInlineTimeout). Its Target
	// calls (a Sync waiting for the target on a loaded machine) do not
	// count; the call as a whole is bounded by BatchTimeout.
	InlineTimeout time.Duration
	// CacheDir, if set, keeps compiled modules on disk so that the next
	// process that loads the same module does not compile it again. It
	// must be a directory only this user can write (compiled code is run
	// from it).
	CacheDir string
	// OnFailure is called after an instance failed, with the reason.
	OnFailure func(reason string)
}

// Handler runs a module's handler; it is an rdmo.Handler like a built-in
// one. A handler that declares NoCachedState runs in a pool of instances
// (one per batch in flight); any other gets an instance per client, so
// that the state it caches for a client is where its hooks find it.
type Handler struct {
	path string
	info rdmo.HandlerInfo
	opts LoadOptions
	log  *zap.Logger
	rt   wazero.Runtime
	cm   wazero.CompiledModule
	// stopCheck: the module has addStopCheck's check, which a call's
	// timer sets; else wazero checks the call's context.
	stopCheck bool

	mu       sync.Mutex
	free     []*instance
	byClient map[rdmo.ClientID]*instance
	lost     map[rdmo.ClientID]bool // a stateful instance failed: the next WriteBack says so
	closed   bool

	failures atomic.Int64
}

// cache is the compilation cache of this process: a module loaded twice
// (probed, then served) is compiled once.
var (
	cacheMu sync.Mutex
	caches  = map[string]wazero.CompilationCache{}
)

func compilationCache(dir string) wazero.CompilationCache {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if c, ok := caches[dir]; ok {
		return c
	}
	c := wazero.NewCompilationCache()
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err == nil {
			if dc, err := wazero.NewCompilationCacheWithDir(dir); err == nil {
				c = dc
			}
		}
	}
	caches[dir] = c
	return c
}

// DefaultCacheDir is a per-user directory for compiled modules
// ($XDG_CACHE_HOME/rdmo/wasm or ~/.cache/rdmo/wasm), "" if there is none.
func DefaultCacheDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "rdmo", "wasm")
}

// Load compiles the module at path, reads its handshake from a first
// instance and checks it. The Handler serves calls until Close.
func Load(ctx context.Context, path string, opts LoadOptions) (*Handler, error) {
	if opts.MemoryLimit == 0 {
		opts.MemoryLimit = DefaultMemoryLimit
	}
	if opts.BatchTimeout <= 0 {
		opts.BatchTimeout = DefaultBatchTimeout
	}
	if opts.InlineTimeout <= 0 {
		opts.InlineTimeout = min(DefaultInlineTimeout, opts.BatchTimeout)
	}
	pages := opts.MemoryLimit / 65536
	if pages < 1 || pages > 65536 {
		return nil, fmt.Errorf("wasm module %s: memory limit %d bytes: want 64 KiB to 4 GiB", path, opts.MemoryLimit)
	}
	code, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("wasm module: %w", err)
	}
	h := &Handler{path: path, opts: opts, log: opts.Logger, byClient: map[rdmo.ClientID]*instance{}, lost: map[rdmo.ClientID]bool{}}
	if h.log == nil {
		h.log = zap.NewNop()
	}
	// A call that overruns its bound is stopped by the check addStopCheck
	// puts at every loop head; a binary it cannot read (or whose rewrite
	// does not compile) is run with wazero's own check instead, which
	// costs a goroutine per call.
	checked, cerr := addStopCheck(code)
	if cerr == nil {
		err = h.start(ctx, checked, true, pages)
		var ce compileError
		if !errors.As(err, &ce) {
			if err != nil {
				return nil, fmt.Errorf("wasm module %s: %w", path, err)
			}
			return h, nil
		}
		cerr = err
	}
	h.log.Info("wasm module: stopped by wazero's context check (slower calls)", zap.String("path", path), zap.String("reason", cerr.Error()))
	if err := h.start(ctx, code, false, pages); err != nil {
		return nil, fmt.Errorf("wasm module %s: %w", path, err)
	}
	return h, nil
}

// compileError is a module that wazero did not compile.
type compileError struct{ error }

func (e compileError) Unwrap() error { return e.error }

// start makes the runtime and compiles code in it: with stopCheck, code
// has addStopCheck's check; without, wazero checks the call's context.
func (h *Handler) start(ctx context.Context, code []byte, stopCheck bool, pages uint64) error {
	h.stopCheck = stopCheck
	cfg := wazero.NewRuntimeConfigCompiler().
		WithCloseOnContextDone(!stopCheck).
		WithMemoryLimitPages(uint32(pages)).
		WithCompilationCache(compilationCache(h.opts.CacheDir))
	h.rt = wazero.NewRuntimeWithConfig(ctx, cfg)
	if err := h.setup(ctx, code); err != nil {
		h.rt.Close(context.Background())
		return err
	}
	return nil
}

func (h *Handler) setup(ctx context.Context, code []byte) error {
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, h.rt); err != nil {
		return err
	}
	if _, err := h.hostModule().Instantiate(ctx); err != nil {
		return err
	}
	cm, err := h.rt.CompileModule(ctx, code)
	if err != nil {
		return compileError{fmt.Errorf("compile: %w", err)}
	}
	h.cm = cm
	exports := cm.ExportedFunctions()
	if _, ok := exports["_initialize"]; !ok {
		return errors.New("not a handler module: no _initialize export (build it with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared)")
	}
	if _, ok := exports[wasmabi.ExportABIVersion]; !ok {
		return fmt.Errorf("not a handler module: no %s export (import github.com/openrdmo/rdmo/rdmo/plugin/wasm and call wasm.Register)", wasmabi.ExportABIVersion)
	}
	inst, err := h.newInstance(ctx)
	if err != nil {
		return err
	}
	keep := false
	defer func() {
		if !keep {
			inst.close()
		}
	}()
	var st [1]uint64
	if err := inst.call(inst.fnABI, st[:]); err != nil {
		return err
	}
	if v := uint32(st[0]); v != wasmabi.Version {
		return fmt.Errorf("module speaks ABI version %d, this worker %d: rebuild it against this rdmo release", v, wasmabi.Version)
	}
	for _, name := range []string{wasmabi.ExportInfo, wasmabi.ExportBatchBuf, wasmabi.ExportHandleBatch,
		wasmabi.ExportWriteBack, wasmabi.ExportRegionRemoved, wasmabi.ExportClientRemoved, wasmabi.ExportError} {
		if _, ok := exports[name]; !ok {
			return fmt.Errorf("not a handler module: no %s export (import github.com/openrdmo/rdmo/rdmo/plugin/wasm and call wasm.Register)", name)
		}
	}
	st[0] = 0
	if err := inst.call(inst.fnInfo, st[:]); err != nil {
		return err
	}
	ptr, n := uint32(st[0]>>32), uint32(st[0])
	if n == 0 {
		return errors.New("the module registered no handler (call wasm.Register from an init function)")
	}
	if n > wasmabi.MaxInfo {
		return fmt.Errorf("handshake of %d bytes, at most %d", n, wasmabi.MaxInfo)
	}
	b, ok := inst.mem.Read(ptr, n)
	if !ok {
		return errors.New("handshake outside the module's memory")
	}
	wi, err := wasmabi.DecodeInfo(b)
	if err != nil {
		return err
	}
	if err := h.checkInfo(wi); err != nil {
		return err
	}
	if h.info.NoCachedState {
		// The first batch finds an instance ready: none is made on the
		// worker's loop for an inline batch, unless batches overlap.
		h.free, keep = append(h.free, inst), true
	}
	return nil
}

// checkInfo takes the handshake as pluginhost takes a process's Info: op
// names checked, statuses registered, name and version pinned.
func (h *Handler) checkInfo(wi wasmabi.Info) error {
	info := rdmo.HandlerInfo{Name: wi.Name, Version: wi.Version, Ops: wi.Ops, NoCachedState: wi.NoCachedState, Inline: wi.Inline, InlineRendezvous: wi.InlineRendezvous}
	if info.Name == "" || len(info.Ops) == 0 {
		return fmt.Errorf("handshake names no handler or no ops (%q, %v)", info.Name, info.Ops)
	}
	if len(wi.OpNames) > 0 {
		info.OpNames = make(map[uint32]string, len(wi.OpNames))
		for _, o := range wi.OpNames {
			switch {
			case !rdmo.IsUserOp(o.Op) || !slices.Contains(info.Ops, o.Op):
				return fmt.Errorf("module %s names op %d, which it does not serve (ops %v)", info.Name, o.Op, info.Ops)
			case info.OpNames[o.Op] != "":
				return fmt.Errorf("module %s names op %d twice (%q, %q)", info.Name, o.Op, info.OpNames[o.Op], o.Name)
			case o.Name == "" || len(o.Name) > rdmo.MaxOpNameLen || strings.IndexFunc(o.Name, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0:
				return fmt.Errorf("module %s names op %d %q: want 1 to %d bytes of printable ASCII without spaces", info.Name, o.Op, o.Name, rdmo.MaxOpNameLen)
			}
			info.OpNames[o.Op] = o.Name
		}
	}
	if h.opts.Name != "" && info.Name != h.opts.Name {
		return fmt.Errorf("module is handler %q, want %q", info.Name, h.opts.Name)
	}
	if h.opts.Version != "" && info.Version != h.opts.Version {
		return fmt.Errorf("module %s is version %q, want %q", info.Name, info.Version, h.opts.Version)
	}
	if len(wi.Statuses) > 1024 {
		return fmt.Errorf("module %s declares %d statuses, at most 1024", info.Name, len(wi.Statuses))
	}
	list := make([]rdmo.StatusInfo, len(wi.Statuses))
	for i, s := range wi.Statuses {
		list[i] = rdmo.StatusInfo{Code: rdmo.Status(s.Code), Name: s.Name, Text: s.Text}
	}
	if err := rdmo.RegisterStatuses(list); err != nil {
		return fmt.Errorf("module %s: its statuses: %w", info.Name, err)
	}
	h.info = info
	return nil
}

// Info is the module's handshake. A module that declares Inline may have
// its batches run on the worker's loop, under InlineTimeout.
func (h *Handler) Info() rdmo.HandlerInfo { return h.info }

// Path is the module's file.
func (h *Handler) Path() string { return h.path }

// Failures counts instances that failed (trap, time bound, memory).
func (h *Handler) Failures() int64 { return h.failures.Load() }

// Close drops every instance and the compiled module; calls after it fail
// with HandlerFailed.
func (h *Handler) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	insts := h.free
	h.free = nil
	for _, in := range h.byClient {
		insts = append(insts, in)
	}
	clear(h.byClient)
	h.mu.Unlock()
	for _, in := range insts {
		in.close()
	}
	return h.rt.Close(context.Background())
}

var errClosed = &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: "wasm module closed"}

// acquire returns the instance for a call of client: its own (stateful
// handler) or a free one of the pool.
func (h *Handler) acquire(client rdmo.ClientID) (*instance, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, errClosed
	}
	if h.info.NoCachedState {
		if n := len(h.free); n > 0 {
			in := h.free[n-1]
			h.free = h.free[:n-1]
			h.mu.Unlock()
			return in, nil
		}
	} else if in := h.byClient[client]; in != nil {
		h.mu.Unlock()
		return in, nil
	}
	h.mu.Unlock()
	in, err := h.newInstance(context.Background())
	if err != nil {
		h.failed(client, nil, "no instance: "+err.Error())
		return nil, &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: fmt.Sprintf("wasm module %s: %v", h.info.Name, err)}
	}
	if !h.info.NoCachedState {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			in.close()
			return nil, errClosed
		}
		h.byClient[client] = in
		h.mu.Unlock()
	}
	return in, nil
}

// release gives a pooled instance back after a call that did not fail.
func (h *Handler) release(in *instance) {
	if !h.info.NoCachedState {
		return
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		in.close()
		return
	}
	h.free = append(h.free, in)
	h.mu.Unlock()
}

// failed retires an instance that trapped, overran or panicked: one log
// line, and a stateful client's next WriteBack reports the loss.
func (h *Handler) failed(client rdmo.ClientID, in *instance, reason string) {
	h.failures.Add(1)
	fields := []zap.Field{zap.String("handler", h.info.Name), zap.Uint64("client", uint64(client)), zap.String("reason", reason)}
	if in != nil {
		if line := in.stderrTail(); line != "" {
			fields = append(fields, zap.String("module_stderr", line))
		}
		h.mu.Lock()
		if !h.info.NoCachedState && h.byClient[client] == in {
			delete(h.byClient, client)
			h.lost[client] = true
		}
		h.mu.Unlock()
		in.close()
	}
	h.log.Warn("wasm module instance failed; its call failed with HandlerFailed, the next call gets a new instance", fields...)
	if h.opts.OnFailure != nil {
		h.opts.OnFailure(reason)
	}
}

// HandleBatch copies the batch into the instance's memory, runs the
// module's entry point and reads the results back.
func (h *Handler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	client := t.ClientID()
	in, err := h.acquire(client)
	if err != nil {
		failAll(results, rdmo.ResultOf(err))
		return
	}
	if err := in.writeBatch(reqs); err != nil {
		h.failed(client, in, err.Error())
		failAll(results, rdmo.Result{Status: rdmo.StatusHandlerFailed, Detail: fmt.Sprintf("wasm module %s: %v", h.info.Name, err)})
		return
	}
	in.t, in.reqs = t, reqs
	in.stack[0], in.stack[1] = uint64(len(reqs)), uint64(client)
	err = in.callWithin(in.fnBatch, in.stack[:2], h.bound(t))
	in.t, in.reqs = nil, nil
	if err != nil {
		h.failed(client, in, err.Error())
		failAll(results, rdmo.Result{Status: rdmo.StatusHandlerFailed, Detail: fmt.Sprintf("wasm module %s: %v", h.info.Name, err)})
		return
	}
	code := int32(uint32(in.stack[0]))
	if code != 0 && code != wasmabi.CodePanicked {
		h.failed(client, in, fmt.Sprintf("batch entry point answered %d", code))
		failAll(results, rdmo.Result{Status: rdmo.StatusHandlerFailed, Detail: fmt.Sprintf("wasm module %s: batch entry point failed (%d)", h.info.Name, code)})
		return
	}
	if err := in.readResults(t, results); err != nil {
		h.failed(client, in, err.Error())
		failAll(results, rdmo.Result{Status: rdmo.StatusHandlerFailed, Detail: fmt.Sprintf("wasm module %s: %v", h.info.Name, err)})
		return
	}
	if code == wasmabi.CodePanicked {
		// The handler's state is not trusted any more, as for a plugin
		// process: the results say why, the instance goes.
		h.failed(client, in, "handler panicked: "+firstLine(results[0].Detail))
		return
	}
	h.release(in)
}

// bound is the time bound of a call with t: InlineTimeout when the
// worker's loop runs it (a batch, or a FLUSH's WriteBack), else
// BatchTimeout.
func (h *Handler) bound(t rdmo.Target) time.Duration {
	if il, ok := t.(inliner); ok && il.RunsInline() {
		return h.opts.InlineTimeout
	}
	return h.opts.BatchTimeout
}

// inliner is implemented by a worker's Target that can run a batch on the
// worker's loop (dpu): RunsInline reports whether it does so for the batch
// in progress.
type inliner interface{ RunsInline() bool }

func failAll(results []rdmo.Result, r rdmo.Result) {
	for i := range results {
		results[i] = r
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// hook runs one of the module's hooks for client; an instance-less
// stateful client has nothing cached, so its hooks have nothing to do.
func (h *Handler) hook(t rdmo.Target, client rdmo.ClientID, fn func(*instance) api.Function, args ...uint64) error {
	var in *instance
	if h.info.NoCachedState {
		var err error
		if in, err = h.acquire(client); err != nil {
			return err
		}
	} else {
		h.mu.Lock()
		in = h.byClient[client]
		closed := h.closed
		h.mu.Unlock()
		if closed {
			return errClosed
		}
		if in == nil {
			return nil
		}
	}
	in.t = t
	copy(in.stack[:], args)
	err := in.callWithin(fn(in), in.stack[:len(args)], h.bound(t))
	in.t = nil
	if err != nil {
		h.failed(client, in, err.Error())
		return &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: fmt.Sprintf("wasm module %s: %v", h.info.Name, err)}
	}
	st := int32(uint32(in.stack[0]))
	if st == 0 {
		h.release(in)
		return nil
	}
	detail := in.hookError()
	if st == wasmabi.CodePanicked {
		h.failed(client, in, detail)
		return &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: detail}
	}
	h.release(in)
	return &rdmo.WireError{Status: rdmo.Status(uint32(st)), Detail: detail}
}

// lostState reports (once) that client's stateful instance failed since
// its last WriteBack.
func (h *Handler) lostState(client rdmo.ClientID) error {
	h.mu.Lock()
	lost := h.lost[client]
	delete(h.lost, client)
	h.mu.Unlock()
	if lost {
		return &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: fmt.Sprintf("wasm module %s: an instance of client %d failed since its last write-back; what it cached may be lost", h.info.Name, client)}
	}
	return nil
}

// WriteBack runs the module's WriteBack hook for t's client.
func (h *Handler) WriteBack(t rdmo.Target) error {
	c := t.ClientID()
	if err := h.hook(t, c, func(in *instance) api.Function { return in.fnWriteBack }, uint64(c)); err != nil {
		return err
	}
	return h.lostState(c)
}

// RegionRemoved runs the module's RegionRemoved hook for t's client.
func (h *Handler) RegionRemoved(t rdmo.Target, id rdmo.RegionID) error {
	c := t.ClientID()
	if err := h.hook(t, c, func(in *instance) api.Function { return in.fnRegionRemoved }, uint64(c), uint64(id)); err != nil {
		return err
	}
	return h.lostState(c)
}

// ClientRemoved runs the module's hook and drops the client's instance.
func (h *Handler) ClientRemoved(id rdmo.ClientID) {
	if h.info.NoCachedState {
		_ = h.hook(nil, id, func(in *instance) api.Function { return in.fnClientRemoved }, uint64(id))
		return
	}
	h.mu.Lock()
	in := h.byClient[id]
	delete(h.byClient, id)
	delete(h.lost, id)
	h.mu.Unlock()
	if in == nil {
		return
	}
	in.stack[0] = uint64(id)
	if err := in.call(in.fnClientRemoved, in.stack[:1]); err != nil {
		h.log.Warn("wasm module instance failed in ClientRemoved", zap.String("handler", h.info.Name), zap.Uint64("client", uint64(id)), zap.Error(err))
	}
	in.close()
}

// Probe reads a module's handshake (name, version, ops, op names) without
// keeping it loaded.
func Probe(ctx context.Context, path string, opts LoadOptions) (rdmo.HandlerInfo, error) {
	h, err := Load(ctx, path, opts)
	if err != nil {
		return rdmo.HandlerInfo{}, err
	}
	defer h.Close()
	return h.Info(), nil
}

var _ rdmo.Handler = (*Handler)(nil)

// randReader is WASI's random source (the Go runtime seeds its hash maps
// from it).
var randReader = rand.Reader

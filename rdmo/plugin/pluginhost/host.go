package pluginhost

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin/internal/hclogzap"
	"github.com/openrdmo/rdmo/rdmo/plugin/internal/wire"
)

// LoadOptions configures Load. The zero value is usable.
type LoadOptions struct {
	// Logger receives the worker side's lines and, through go-plugin, the
	// plugin process's own log lines at their level. nil: no logging.
	Logger *zap.Logger
	// CallTimeout bounds every call into the plugin (a batch, a hook),
	// including the target calls it makes meanwhile. A plugin that has not
	// answered by then is killed and restarted. Default 10s.
	CallTimeout time.Duration
	// StartTimeout bounds starting the process, the handshake and the
	// first Info call. Default 10s.
	StartTimeout time.Duration
	// MinBackoff and MaxBackoff bound the delay before each restart of a
	// plugin that died: MinBackoff after the first failure, doubling with
	// every failure (a crash or a failed restart) until a call succeeds
	// again, capped at MaxBackoff. Defaults 50ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// Args are the plugin's command-line arguments (after its path).
	Args []string
	// Env is added to the worker's environment for the plugin process.
	Env []string
	// Name and Version, when set, must equal the plugin's HandlerInfo
	// (docs/PLUGINS.md, "Versions": they must match); Load fails otherwise.
	Name, Version string
	// Checksum, when set, is the SHA-256 of the plugin binary: go-plugin
	// verifies it before every start (and restart).
	Checksum []byte
	// OnFailure and OnRestart, when set, are called (on their own
	// goroutine, not under any lock of the Handler) when the plugin
	// process failed and when a restart brought it back: for counters
	// that an operator alerts on.
	OnFailure func(reason string)
	OnRestart func()
}

func (o LoadOptions) withDefaults() LoadOptions {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 10 * time.Second
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 50 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(5*time.Second, o.MinBackoff)
	}
	return o
}

// Handler is a handler running in a plugin process. It implements
// rdmo.Handler, so the worker uses it exactly like a built-in handler.
//
// # Failures
//
// A plugin process that panics, exits, is killed, breaks the protocol or
// does not answer within CallTimeout fails only the calls in flight: every
// request of an in-flight batch gets StatusHandlerFailed with a Detail
// saying what happened, and an in-flight WriteBack or RegionRemoved returns a
// StatusHandlerFailed *rdmo.WireError. The process is killed if it still
// runs, and restarted after a backoff (LoadOptions.MinBackoff doubling to
// MaxBackoff). While it is down every call fails at once with
// StatusHandlerFailed ("plugin ... is down"); no call waits for a restart.
// Once it is back, calls succeed again; Info keeps the HandlerInfo read at
// Load (a restarted binary whose name, version or ops differ is refused and
// retried later).
//
// A restart loses whatever the handler cached in the dead process (a queue
// tail, staged data). So that no flush reports success over lost state, the
// first successful WriteBack of a client after such a restart returns a
// StatusHandlerFailed error when the client had a successful batch in a
// process that has died since, with no successful WriteBack after it;
// RegionRemoved returns that error too (without clearing it), unless the
// handler declares rdmo.HandlerInfo.NoCachedState.
//
// # Target calls of a plugin
//
// The Target a plugin's handler gets forwards to the worker's Target over
// one stream, and the worker runs the calls on the goroutine that called
// HandleBatch (or WriteBack, RegionRemoved), in the order the plugin made them.
//
//   - Region, Sync, Fetch, Flush and WriteBackAll wait for the worker's answer.
//     Region answers are kept for the rest of the call.
//   - Put and Place are pipelined: they return without a round trip, and
//     travel with the next waiting call, or with the call's response, or
//     on their own once 1 MiB of them waits. Their data must stay
//     unchanged until the call returns (the rdmo.Target contract).
//   - Messages are at most 64 MiB either way: a Put of more than 32 MiB,
//     and a Sync reading more than 32 MiB, fail with LengthOverflow and
//     nothing sent; a batch too large for one message reaches the plugin
//     as several HandleBatch calls.
//   - If the region of a Put or Place was looked up with Region during the
//     call, its range is checked at once in the plugin and the worker's
//     error (UnknownRegion, RegionNotOwned, OutOfBounds) is returned with
//     nothing sent, as the worker's Target would.
//   - Any other failure of a pipelined Put or Place is known only in the
//     worker, later. The first one is reported: by the next Flush of the
//     call (as its error, once), else at the end of the call: every request
//     of the batch whose Result is OK gets that error's status (the rdmo
//     Target contract: a write that fails later fails the batch's
//     requests), and a WriteBack or RegionRemoved that returned nil returns it.
//     The calls after a failed one still run.
//   - Buffer is plugin memory, Fetch's bytes are a copy: both stay valid
//     for the plugin as long as it keeps them.
//   - A Target must not be used after its call returned (those calls fail).
type Handler struct {
	path string
	opts LoadOptions
	log  *zap.Logger
	hlog hclog.Logger
	info rdmo.HandlerInfo
	// codec is the content-subtype of every call (see libCodecName).
	codec string

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	invSeq atomic.Uint64

	mu         sync.Mutex
	inst       *instance // nil while down
	gen        uint64
	closed     bool
	downReason string
	backoff    time.Duration
	restarts   int
	dirty      map[uint64]uint64 // client -> gen of the instance holding its cached state
	// restartGate, when set (tests only), holds every restart until it
	// is closed, so a test sees the plugin down whatever the timing.
	restartGate chan struct{}

	wg sync.WaitGroup // restarts, readers, watchers, kills
}

var _ rdmo.Handler = (*Handler)(nil)

var (
	loadedMu sync.Mutex
	loaded   = make(map[*Handler]struct{})
)

// Load starts the plugin binary at path, checks its handshake and
// HandlerInfo, and returns it as an rdmo.Handler. The process is a go-plugin
// managed client: besides Close, CleanupClients (at worker shutdown) stops
// it. ctx bounds the start only.
func Load(ctx context.Context, path string, opts LoadOptions) (*Handler, error) {
	return load(ctx, path, opts, wire.CodecName)
}

func load(ctx context.Context, path string, opts LoadOptions, codec string) (*Handler, error) {
	opts = opts.withDefaults()
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("rdmo plugin: %w", err)
	} else if fi.IsDir() {
		return nil, fmt.Errorf("rdmo plugin: %s is a directory", abs)
	}
	log := opts.Logger.Named("plugin").With(zap.String("plugin_path", abs))
	h := &Handler{
		path:  abs,
		opts:  opts,
		log:   log,
		hlog:  hclogzap.New(log),
		codec: codec,
		dirty: make(map[uint64]uint64),
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	inst, info, err := h.start(ctx)
	if err != nil {
		h.cancel()
		h.wg.Wait()
		return nil, fmt.Errorf("rdmo plugin %s: %w", abs, err)
	}
	h.mu.Lock()
	h.info = info
	h.inst = inst
	h.mu.Unlock()
	loadedMu.Lock()
	loaded[h] = struct{}{}
	loadedMu.Unlock()
	log.Info("plugin loaded", zap.String("handler", info.Name), zap.String("version", info.Version),
		zap.Uint32s("ops", info.Ops), zap.Int("pid", inst.pid))
	return h, nil
}

// CleanupClients closes every Handler that Load returned (so none restarts)
// and then calls go-plugin's CleanupClients, which kills every managed
// plugin process. Call it once, when the worker shuts down.
func CleanupClients() {
	loadedMu.Lock()
	hs := make([]*Handler, 0, len(loaded))
	for h := range loaded {
		hs = append(hs, h)
	}
	loadedMu.Unlock()
	var wg sync.WaitGroup
	for _, h := range hs {
		wg.Add(1)
		go func() { defer wg.Done(); _ = h.Close() }()
	}
	wg.Wait()
	goplugin.CleanupClients()
}

// Info returns the plugin's HandlerInfo, read once at Load.
func (h *Handler) Info() rdmo.HandlerInfo {
	i := h.info
	i.Ops = slices.Clone(i.Ops)
	return i
}

// Path is the absolute path of the plugin binary.
func (h *Handler) Path() string { return h.path }

// Pid is the plugin process's pid, 0 while it is down.
func (h *Handler) Pid() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inst == nil {
		return 0
	}
	return h.inst.pid
}

// Restarts counts the restarts since Load.
func (h *Handler) Restarts() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.restarts
}

// Close stops the plugin process (gracefully, then by force) and any
// restart, and waits for them; later calls fail with StatusHandlerFailed.
// It is safe to call more than once.
func (h *Handler) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.wg.Wait()
		return nil
	}
	h.closed = true
	inst := h.inst
	h.inst = nil
	h.downReason = "closed"
	h.mu.Unlock()
	h.cancel()
	if inst != nil {
		inst.die("plugin closed", false)
	}
	h.wg.Wait()
	loadedMu.Lock()
	delete(loaded, h)
	loadedMu.Unlock()
	h.log.Debug("plugin closed")
	return nil
}

// HandleBatch implements rdmo.Handler: one call into the plugin per batch,
// or, for a batch whose requests would not fit one message (wire.MaxMsgSize),
// one per run of requests that fits. A request that cannot fit a message
// on its own fails with LengthOverflow.
func (h *Handler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	for len(reqs) > 0 {
		n := wire.FitBatch(reqs, wire.MaxMsgSize)
		if n == 0 {
			results[0] = rdmo.Fail(rdmo.StatusLengthOverflow, "request of %d header and %d payload bytes exceeds the plugin message limit of %d bytes",
				len(reqs[0].Sub), len(reqs[0].Payload), wire.MaxMsgSize)
			reqs, results = reqs[1:], results[1:]
			continue
		}
		h.handleBatch(t, reqs[:n], results[:n])
		reqs, results = reqs[n:], results[n:]
	}
}

func (h *Handler) handleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	client := uint64(t.ClientID())
	resp, inv, err := h.invoke(wire.CallBatch, t, client, 0, reqs)
	if err == nil && len(resp.Results) != len(reqs) {
		err = h.fail(inv.inst, fmt.Sprintf("protocol error: %d results for %d requests", len(resp.Results), len(reqs)))
	}
	if err != nil {
		detail := err.Error()
		var we *rdmo.WireError
		if errors.As(err, &we) {
			detail = we.Detail
		}
		for i := range results {
			results[i] = rdmo.Result{Status: rdmo.StatusHandlerFailed, Detail: detail}
		}
		return
	}
	copy(results, resp.Results)
	if aerr := inv.unreported(); aerr != nil {
		st, detail := rdmo.StatusOf(aerr), "a pipelined Put or Place of the batch failed: "+aerr.Error()
		for i := range results {
			if results[i].Status == rdmo.StatusOK {
				results[i] = rdmo.Result{Status: st, Detail: detail}
			}
		}
	}
	_ = h.succeeded(inv.inst, client, wire.CallBatch)
}

// WriteBack implements rdmo.Handler.
func (h *Handler) WriteBack(t rdmo.Target) error {
	client := uint64(t.ClientID())
	if h.downWithNothingCached(client) {
		// Nothing of this client can be lost: a restart must not fail
		// the flushes of clients that never touched the plugin.
		return nil
	}
	resp, inv, err := h.invoke(wire.CallWriteBack, t, client, 0, nil)
	if err != nil {
		if h.nothingCached(client) {
			// The plugin failed (or was down) with nothing of this
			// client to lose: its fence has nothing to write back.
			return nil
		}
		return err
	}
	if err := resp.Err.Err(); err != nil {
		return err
	}
	if aerr := inv.unreported(); aerr != nil {
		return aerr
	}
	return h.succeeded(inv.inst, client, wire.CallWriteBack)
}

// RegionRemoved implements rdmo.Handler.
func (h *Handler) RegionRemoved(t rdmo.Target, id rdmo.RegionID) error {
	region := uint64(id)
	client := uint64(t.ClientID())
	if h.downWithNothingCached(client) {
		return nil
	}
	resp, inv, err := h.invoke(wire.CallRegionRemoved, t, client, region, nil)
	if err != nil {
		if h.nothingCached(client) {
			// The plugin failed (or was down) with nothing of this
			// client to lose: its fence has nothing to write back.
			return nil
		}
		return err
	}
	if err := resp.Err.Err(); err != nil {
		return err
	}
	if aerr := inv.unreported(); aerr != nil {
		return aerr
	}
	return h.succeeded(inv.inst, client, wire.CallRegionRemoved)
}

// ClientRemoved implements rdmo.Handler. A plugin that is down has no state
// of the client anyway; failures are only logged.
func (h *Handler) ClientRemoved(id rdmo.ClientID) {
	client := uint64(id)
	h.mu.Lock()
	delete(h.dirty, client)
	h.mu.Unlock()
	if _, inv, err := h.invoke(wire.CallClientRemoved, nil, client, 0, nil); err != nil {
		h.log.Debug("ClientRemoved not delivered", zap.Uint64("client", client), zap.Error(err))
	} else {
		_ = h.succeeded(inv.inst, client, wire.CallClientRemoved)
	}
}

func (h *Handler) errf(format string, args ...any) error {
	return &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: fmt.Sprintf("plugin %s: ", h.info.Name) + fmt.Sprintf(format, args...)}
}

// current returns the running instance, or the error a call gets while
// there is none.
// downWithNothingCached reports whether the plugin is down (restarting)
// while it holds no cached state of client.
func (h *Handler) downWithNothingCached(client uint64) bool {
	h.mu.Lock()
	down := h.inst == nil && !h.closed
	h.mu.Unlock()
	return down && h.nothingCached(client)
}

// nothingCached reports whether the plugin can hold no cached state of
// client: the handler is stateless, or no batch of the client succeeded
// since its state was last written back.
func (h *Handler) nothingCached(client uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, dirty := h.dirty[client]
	return h.info.NoCachedState || !dirty
}

func (h *Handler) current() (*instance, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inst != nil {
		return h.inst, nil
	}
	if h.closed {
		return nil, h.errf("closed")
	}
	return nil, h.errf("down (%s); restarting", h.downReason)
}

// succeeded notes a successful call of inst: the backoff starts over, and
// the client's cached state now lives in inst (a batch) or was written
// back (WriteBack). For WriteBack and RegionRemoved it returns the lost-state error
// when the client had a successful batch in an earlier process since its
// last WriteBack (once, for WriteBack).
func (h *Handler) succeeded(inst *instance, client uint64, kind uint8) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.backoff = 0
	if h.info.NoCachedState {
		return nil
	}
	g, dirty := h.dirty[client]
	switch kind {
	case wire.CallBatch:
		h.dirty[client] = inst.gen
		return nil
	case wire.CallWriteBack, wire.CallClientRemoved:
		delete(h.dirty, client)
	}
	if kind == wire.CallClientRemoved || !dirty || g == inst.gen {
		return nil
	}
	return &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: fmt.Sprintf(
		"plugin %s: restarted since client %d's last fence; state it cached for the client (and writes that depended on it) may be lost",
		h.info.Name, client)}
}

// fail kills inst (if it is still current) with reason and returns the
// error the failed call reports.
func (h *Handler) fail(inst *instance, reason string) error {
	inst.die(reason, true)
	return h.errf("(pid %d) %s", inst.pid, reason)
}

// instanceDied takes a dead instance out of service and schedules its
// restart.
func (h *Handler) instanceDied(inst *instance, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inst != inst {
		return
	}
	h.inst = nil
	h.downReason = reason
	if h.closed {
		return
	}
	h.log.Warn("plugin failed; restarting", zap.Int("pid", inst.pid), zap.String("reason", reason))
	h.scheduleRestartLocked()
	if f := h.opts.OnFailure; f != nil {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			f(reason)
		}()
	}
}

func (h *Handler) scheduleRestartLocked() {
	if h.backoff == 0 {
		h.backoff = h.opts.MinBackoff
	} else {
		h.backoff = min(2*h.backoff, h.opts.MaxBackoff)
	}
	delay := h.backoff
	h.wg.Add(1)
	go h.restartAfter(delay)
}

func (h *Handler) restartAfter(delay time.Duration) {
	defer h.wg.Done()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-h.ctx.Done():
		return
	}
	h.mu.Lock()
	gate := h.restartGate
	h.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-h.ctx.Done():
			return
		}
	}
	inst, info, err := h.start(h.ctx)
	if err == nil && !sameInfo(info, h.info) {
		err = fmt.Errorf("restarted binary is %s %s (ops %v), was %s %s (ops %v)",
			info.Name, info.Version, info.Ops, h.info.Name, h.info.Version, h.info.Ops)
		inst.die("refused", true)
		inst = nil
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		if inst != nil {
			inst.die("plugin closed", false)
		}
		return
	}
	defer h.mu.Unlock()
	if err != nil {
		h.downReason = "restart failed: " + err.Error()
		h.log.Error("plugin restart failed", zap.Error(err), zap.Duration("backoff", h.backoff))
		h.scheduleRestartLocked()
		return
	}
	h.inst = inst
	h.restarts++
	h.log.Info("plugin restarted", zap.Int("pid", inst.pid), zap.Int("restarts", h.restarts))
	if f := h.opts.OnRestart; f != nil {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			f()
		}()
	}
}

// opNames checks the op names a plugin process declared: each for one of
// its user ops, once, non-empty, at most rdmo.MaxOpNameLen bytes of
// printable ASCII (a label in logs and metrics).
func opNames(info rdmo.HandlerInfo, names []wire.OpName) (map[uint32]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	m := make(map[uint32]string, len(names))
	for _, o := range names {
		switch {
		case !rdmo.IsUserOp(o.Op) || !slices.Contains(info.Ops, o.Op):
			return nil, fmt.Errorf("plugin %s names op %d, which it does not serve (ops %v)", info.Name, o.Op, info.Ops)
		case m[o.Op] != "":
			return nil, fmt.Errorf("plugin %s names op %d twice (%q, %q)", info.Name, o.Op, m[o.Op], o.Name)
		case o.Name == "" || len(o.Name) > rdmo.MaxOpNameLen || strings.IndexFunc(o.Name, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0:
			return nil, fmt.Errorf("plugin %s names op %d %q: want 1 to %d bytes of printable ASCII without spaces", info.Name, o.Op, o.Name, rdmo.MaxOpNameLen)
		}
		m[o.Op] = o.Name
	}
	return m, nil
}

// MaxStatuses bounds the plugin-defined statuses a plugin may declare.
const MaxStatuses = 1024

// registerStatuses makes the statuses a plugin process declared (its
// rdmo.DefineStatus calls) known to this process, so that the worker's
// logs, metrics and errors name them as the plugin does. A status this
// process already knows under another name (a built-in handler's, another
// plugin's) refuses the plugin: one code with two meanings would be
// reported under the wrong one.
func registerStatuses(handler string, sts []wire.StatusName) error {
	if len(sts) > MaxStatuses {
		return fmt.Errorf("plugin %s declares %d statuses, at most %d", handler, len(sts), MaxStatuses)
	}
	list := make([]rdmo.StatusInfo, len(sts))
	for i, s := range sts {
		list[i] = rdmo.StatusInfo{Code: rdmo.Status(s.Code), Name: s.Name, Text: s.Text}
	}
	if err := rdmo.RegisterStatuses(list); err != nil {
		return fmt.Errorf("plugin %s: its statuses: %w", handler, err)
	}
	return nil
}

func sameInfo(a, b rdmo.HandlerInfo) bool {
	return a.Name == b.Name && a.Version == b.Version && slices.Equal(a.Ops, b.Ops) && a.NoCachedState == b.NoCachedState
}

// start runs a plugin process and brings its protocol up: go-plugin
// handshake, Info, the Target stream and its hello.
func (h *Handler) start(ctx context.Context) (*instance, rdmo.HandlerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, h.opts.StartTimeout)
	defer cancel()

	cmd := exec.Command(h.path, h.opts.Args...)
	cmd.Env = append(os.Environ(), wire.EnvLogLevel+"="+h.hlog.GetLevel().String())
	cmd.Env = append(cmd.Env, h.opts.Env...)
	var sc *goplugin.SecureConfig
	if len(h.opts.Checksum) > 0 {
		sc = &goplugin.SecureConfig{Checksum: h.opts.Checksum, Hash: sha256.New()}
	}
	c := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  wire.Handshake,
		Plugins:          goplugin.PluginSet{wire.PluginKey: &wire.Plugin{}},
		Cmd:              cmd,
		SkipHostEnv:      true,
		SecureConfig:     sc,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		Managed:          true,
		Logger:           h.hlog,
		StartTimeout:     h.opts.StartTimeout,
		GRPCDialOptions:  wire.DialOptions(),
		SyncStdout:       h.hlog.StandardWriter(&hclog.StandardLoggerOptions{ForceLevel: hclog.Info}),
		SyncStderr:       h.hlog.StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true, ForceLevel: hclog.Info}),
	})

	// Kill the process if ctx ends before it is up; killed tells the
	// success path that it lost the race.
	var killed atomic.Bool
	startDone := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			if killed.CompareAndSwap(false, true) {
				c.Kill()
			}
		case <-startDone:
		}
	}()
	inst, info, err := h.bringUp(ctx, c, cmd)
	close(startDone)
	if err == nil && !killed.CompareAndSwap(false, true) {
		err = ctx.Err()
		if err == nil {
			err = errors.New("start abandoned")
		}
		inst.cancel()
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", err, ctx.Err())
		}
		c.Kill()
		return nil, rdmo.HandlerInfo{}, err
	}
	inst.run()
	return inst, info, nil
}

func (h *Handler) bringUp(ctx context.Context, c *goplugin.Client, cmd *exec.Cmd) (*instance, rdmo.HandlerInfo, error) {
	var info rdmo.HandlerInfo
	rpc, err := c.Client()
	if err != nil {
		return nil, info, err
	}
	if cmd.Process == nil {
		return nil, info, errors.New("no process")
	}
	raw, err := rpc.Dispense(wire.PluginKey)
	if err != nil {
		return nil, info, err
	}
	rc, ok := raw.(*wire.Client)
	if !ok {
		return nil, info, fmt.Errorf("dispensed %T", raw)
	}
	var ir wire.InfoResp
	if err := rc.Conn.Invoke(ctx, wire.MethodInfo, &wire.InfoReq{}, &ir, grpc.CallContentSubtype(h.codec)); err != nil {
		return nil, info, fmt.Errorf("Info: %w", err)
	}
	// Inline is never set: a plugin's batch waits on a process boundary,
	// which must not stall the worker's loop (rdmo.HandlerInfo.Inline).
	info = rdmo.HandlerInfo{Name: ir.Name, Version: ir.Version, Ops: ir.Ops, NoCachedState: ir.NoCachedState}
	if info.OpNames, err = opNames(info, ir.OpNames); err != nil {
		return nil, info, err
	}
	if h.opts.Name != "" && info.Name != h.opts.Name {
		return nil, info, fmt.Errorf("plugin is handler %q, want %q", info.Name, h.opts.Name)
	}
	if h.opts.Version != "" && info.Version != h.opts.Version {
		return nil, info, fmt.Errorf("plugin %s is version %q, want %q", info.Name, info.Version, h.opts.Version)
	}
	if err := registerStatuses(info.Name, ir.Statuses); err != nil {
		return nil, info, err
	}
	sctx, scancel := context.WithCancel(context.Background())
	st, err := rc.Conn.NewStream(sctx, &wire.ServiceDesc.Streams[0], wire.MethodTarget, grpc.CallContentSubtype(h.codec))
	if err != nil {
		scancel()
		return nil, info, fmt.Errorf("Target stream: %w", err)
	}
	var hello wire.Frame
	if err := st.RecvMsg(&hello); err != nil {
		scancel()
		return nil, info, fmt.Errorf("Target stream: no hello: %w", err)
	}
	if hello.Inv != 0 || len(hello.Ops) != 0 {
		scancel()
		return nil, info, errors.New("Target stream: bad hello")
	}
	h.mu.Lock()
	h.gen++
	gen := h.gen
	h.mu.Unlock()
	inst := &instance{
		h:      h,
		gen:    gen,
		client: c,
		conn:   rc.Conn,
		exited: rc.Done,
		proc:   cmd.Process,
		pid:    cmd.Process.Pid,
		stream: st,
		cancel: scancel,
		dead:   make(chan struct{}),
		invs:   make(map[uint64]*invocation),
	}
	return inst, info, nil
}

// instance is one run of the plugin process.
type instance struct {
	h      *Handler
	gen    uint64
	client *goplugin.Client
	conn   *grpc.ClientConn
	exited <-chan struct{} // closed by go-plugin when the process ends
	proc   *os.Process     // started by go-plugin, which also waits for it
	pid    int
	stream grpc.ClientStream
	cancel context.CancelFunc // ends the stream

	sendMu sync.Mutex

	deadOnce sync.Once
	dead     chan struct{}
	reason   string // why it died; set before dead is closed

	invMu sync.Mutex
	invs  map[uint64]*invocation
}

// run starts the stream reader and the exit watcher.
func (inst *instance) run() {
	h := inst.h
	h.wg.Add(2)
	go func() {
		defer h.wg.Done()
		inst.read()
	}()
	go func() {
		defer h.wg.Done()
		select {
		case <-inst.exited:
			inst.die("plugin process exited", true)
		case <-inst.dead:
		}
	}()
}

// die takes the instance out of service (once) and stops its process: by
// force unless graceful.
func (inst *instance) die(reason string, force bool) {
	inst.deadOnce.Do(func() {
		inst.reason = reason
		close(inst.dead)
		inst.h.instanceDied(inst, reason)
		stop := func() {
			if force {
				_ = inst.proc.Kill() // ErrProcessDone once it has exited
			}
			inst.client.Kill()
			inst.cancel()
		}
		if force {
			inst.h.wg.Add(1)
			go func() {
				defer inst.h.wg.Done()
				stop()
			}()
		} else {
			stop()
		}
	})
}

func (inst *instance) send(a *wire.Answer) error {
	inst.sendMu.Lock()
	defer inst.sendMu.Unlock()
	return inst.stream.SendMsg(a)
}

// read receives the plugin's frames and queues each for its invocation.
func (inst *instance) read() {
	for {
		f := new(wire.Frame)
		if err := inst.stream.RecvMsg(f); err != nil {
			inst.die("Target stream closed: "+err.Error(), true)
			return
		}
		inst.invMu.Lock()
		inv := inst.invs[f.Inv]
		inst.invMu.Unlock()
		if inv != nil {
			inv.push(f)
			continue
		}
		// The invocation is over (it failed or timed out): its pipelined
		// calls are dropped, a waiting one is told.
		for i := range f.Ops {
			if id := f.Ops[i].ID; id != 0 {
				a := &wire.Answer{ID: id, Err: wire.Fault{Status: rdmo.StatusHandlerFailed, Detail: "the worker is no longer running this call"}}
				if err := inst.send(a); err != nil {
					inst.die("Target stream send: "+err.Error(), true)
					return
				}
			}
		}
	}
}

// invocation is one call into the plugin, on the worker's side.
type invocation struct {
	inst *instance
	id   uint64
	t    rdmo.Target
	reqs []rdmo.Request

	mu    sync.Mutex
	queue []*wire.Frame
	wake  chan struct{}

	frames   uint64 // frames run
	asyncErr error  // first failure of a pipelined call
	reported bool   // asyncErr was returned by a Flush
}

func (inv *invocation) push(f *wire.Frame) {
	inv.mu.Lock()
	inv.queue = append(inv.queue, f)
	inv.mu.Unlock()
	select {
	case inv.wake <- struct{}{}:
	default:
	}
}

// unreported is the first failure of a pipelined call that the plugin did
// not get back from a Flush.
func (inv *invocation) unreported() error {
	if inv.asyncErr == nil || inv.reported {
		return nil
	}
	return inv.asyncErr
}

func (inv *invocation) noteAsync(err error) {
	if err != nil && inv.asyncErr == nil {
		inv.asyncErr = err
	}
}

// drain runs the queued frames on the calling goroutine.
func (inv *invocation) drain() error {
	for {
		inv.mu.Lock()
		q := inv.queue
		inv.queue = nil
		inv.mu.Unlock()
		if len(q) == 0 {
			return nil
		}
		for _, f := range q {
			for i := range f.Ops {
				if err := inv.exec(&f.Ops[i]); err != nil {
					return err
				}
			}
			inv.frames++
		}
	}
}

var errNoTarget = &rdmo.WireError{Status: rdmo.StatusInternal, Detail: "no Target in ClientRemoved"}

// exec runs one target call against the worker's Target and answers it if
// it waits. The error is for the stream only.
func (inv *invocation) exec(o *wire.Op) error {
	t := inv.t
	if t == nil {
		if o.ID == 0 {
			inv.noteAsync(errNoTarget)
			return nil
		}
		return inv.inst.send(&wire.Answer{ID: o.ID, Err: wire.FaultOf(errNoTarget)})
	}
	req := func() (*rdmo.Request, error) {
		if o.Req < 0 || o.Req >= int64(len(inv.reqs)) {
			return nil, &rdmo.WireError{Status: rdmo.StatusInternal, Detail: fmt.Sprintf("request index %d outside the batch", o.Req)}
		}
		return &inv.reqs[o.Req], nil
	}
	var a *wire.Answer
	switch o.Kind {
	case wire.OpPut:
		inv.noteAsync(t.Put(o.Region, o.Addr, o.Data))
	case wire.OpPlace:
		r, err := req()
		if err == nil {
			err = t.Place(r, o.Region, o.Addr)
		}
		inv.noteAsync(err)
	case wire.OpRegion:
		r, err := t.Region(o.Region)
		a = &wire.Answer{Region: r, Err: wire.FaultOf(err)}
	case wire.OpSync:
		// The answer must fit a message: the ops and the bytes they read
		// are bounded (as the plugin's Sync does) before anything is
		// allocated.
		err := wire.SyncFits(o.Sync)
		var ops []rdmo.RemoteOp
		if err == nil {
			ops = make([]rdmo.RemoteOp, len(o.Sync))
			for i, s := range o.Sync {
				ops[i] = rdmo.RemoteOp{Kind: s.Kind, Region: s.Region, Addr: s.Addr, Operand: s.Operand, Compare: s.Compare}
				if s.Kind == rdmo.RemoteGet {
					ops[i].Buf = make([]byte, s.Len)
				}
			}
			err = t.Sync(ops)
		}
		a = &wire.Answer{}
		if a.Err = wire.FaultOf(err); err == nil {
			a.Sync = make([]wire.SyncRes, len(ops))
			for i := range ops {
				a.Sync[i] = wire.SyncRes{Result: ops[i].Result, Status: ops[i].Status}
				if ops[i].Kind == rdmo.RemoteGet && ops[i].Status == rdmo.StatusOK {
					a.Sync[i].Data = ops[i].Buf
				}
			}
		}
	case wire.OpFetch:
		r, err := req()
		var data []byte
		if err == nil {
			data, err = t.Fetch(r)
		}
		if err == nil && len(data) > wire.MaxMsgSize-wire.MaxAnswerOverhead {
			// The worker's MaxRendezvousFetch is above the message limit.
			data, err = nil, &rdmo.WireError{Status: rdmo.StatusLengthOverflow,
				Detail: fmt.Sprintf("Fetch of %d bytes exceeds the plugin message limit of %d bytes", len(data), wire.MaxMsgSize)}
		}
		a = &wire.Answer{Data: data, Err: wire.FaultOf(err)}
	case wire.OpFlush:
		err := t.Flush()
		if err == nil && inv.unreported() != nil {
			err, inv.reported = inv.asyncErr, true
		}
		a = &wire.Answer{Err: wire.FaultOf(err)}
	case wire.OpWriteBackAll:
		a = &wire.Answer{Err: wire.FaultOf(t.WriteBackAll())}
	default:
		err := &rdmo.WireError{Status: rdmo.StatusInternal, Detail: fmt.Sprintf("unknown target call %d", o.Kind)}
		if o.ID == 0 {
			inv.noteAsync(err)
		} else {
			a = &wire.Answer{Err: wire.FaultOf(err)}
		}
	}
	if o.ID == 0 {
		return nil
	}
	if a == nil {
		a = &wire.Answer{Err: wire.Fault{Status: rdmo.StatusInternal, Detail: "pipelined call sent as a waiting one"}}
	}
	a.ID = o.ID
	return inv.inst.send(a)
}

// invoke makes one call into the plugin and runs the target calls it
// makes meanwhile on this goroutine. A non-nil error is a
// StatusHandlerFailed *rdmo.WireError: the call did not complete.
func (h *Handler) invoke(kind uint8, t rdmo.Target, client, region uint64, reqs []rdmo.Request) (*wire.CallResp, *invocation, error) {
	inst, err := h.current()
	if err != nil {
		return nil, nil, err
	}
	inv := &invocation{inst: inst, id: h.invSeq.Add(1), t: t, reqs: reqs, wake: make(chan struct{}, 1)}
	inst.invMu.Lock()
	inst.invs[inv.id] = inv
	inst.invMu.Unlock()
	defer func() {
		inst.invMu.Lock()
		delete(inst.invs, inv.id)
		inst.invMu.Unlock()
	}()

	ctx, cancel := context.WithTimeout(h.ctx, h.opts.CallTimeout)
	defer cancel()
	type result struct {
		resp *wire.CallResp
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp := new(wire.CallResp)
		err := inst.conn.Invoke(ctx, wire.CallMethod(kind), &wire.CallReq{Inv: inv.id, Client: client, Region: region, Reqs: reqs}, resp,
			grpc.CallContentSubtype(h.codec))
		done <- result{resp, err}
	}()

	var resp *wire.CallResp
	for resp == nil || inv.frames < resp.Frames {
		var err error
		select {
		case <-inv.wake:
			err = inv.drain()
		case r := <-done:
			if r.err != nil {
				return nil, inv, h.callFailed(inst, kind, r.err)
			}
			resp = r.resp
			err = inv.drain()
		case <-inst.dead:
			cancel()
			if resp == nil {
				<-done
			}
			return nil, inv, h.errf("(pid %d) %s during %s", inst.pid, inst.reason, wire.CallName(kind))
		case <-ctx.Done():
			if resp == nil {
				r := <-done // the call ends with ctx
				if r.err != nil {
					return nil, inv, h.callFailed(inst, kind, r.err)
				}
				resp = r.resp
				continue
			}
			return nil, inv, h.callFailed(inst, kind, ctx.Err())
		}
		if err != nil {
			return nil, inv, h.fail(inst, "Target stream send: "+err.Error())
		}
	}
	if resp.Panic != "" {
		return nil, inv, h.fail(inst, fmt.Sprintf("handler panicked in %s: %s", wire.CallName(kind), resp.Panic))
	}
	for i := range resp.Tail {
		o := &resp.Tail[i]
		if o.ID != 0 {
			return nil, inv, h.fail(inst, "protocol error: a waiting target call in a response")
		}
		if err := inv.exec(o); err != nil {
			return nil, inv, h.fail(inst, "Target stream send: "+err.Error())
		}
	}
	return resp, inv, nil
}

// callFailed turns the error of a unary call into the call's error, and
// kills the instance: whatever happened, its state is unknown now.
func (h *Handler) callFailed(inst *instance, kind uint8, err error) error {
	name := wire.CallName(kind)
	var reason string
	switch {
	case h.ctx.Err() != nil:
		reason = fmt.Sprintf("closed during %s", name)
	case errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded:
		reason = fmt.Sprintf("no answer to %s within %v (CallTimeout); killed", name, h.opts.CallTimeout)
	case status.Code(err) == codes.Unavailable || status.Code(err) == codes.Canceled:
		select {
		case <-inst.dead:
			reason = fmt.Sprintf("%s during %s", inst.reason, name)
		default:
			reason = fmt.Sprintf("process exited or crashed during %s (%v)", name, status.Convert(err).Message())
		}
	default:
		reason = fmt.Sprintf("%s failed: %v", name, err)
	}
	return h.fail(inst, reason)
}

package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/childproc"
	"github.com/openrdmo/rdmo/internal/hmacauth"
	"github.com/openrdmo/rdmo/internal/logsample"
	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/internal/uromwire"
)

// Config configures a Service.
type Config struct {
	// Listen is the TCP address hosts connect to ("127.0.0.1:0": any port).
	Listen string
	// PluginPath lists directories searched for plugin binaries named
	// rdmo-plugin-*.
	PluginPath []string
	// Builtins are the plugins linked into the worker binary.
	Builtins []urom.PluginInfo
	// Metrics is the component's per-worker series (rdmoworker.Metrics for
	// the RDMO component), served by MetricsHandler. nil: only the
	// service's own series.
	Metrics WorkerMetrics
	// Probe reads a plugin binary's name, version and ops. Without it,
	// binaries on PluginPath are ignored.
	Probe func(ctx context.Context, path string) (urom.PluginInfo, error)
	// MaxWorkers caps the worker processes (default 16).
	MaxWorkers int
	// WorkerCommand is the argv that starts a worker process; the service
	// passes the control socket as file descriptor 3 (ControlFD).
	WorkerCommand []string
	// WorkerEnv is added to every worker's environment.
	WorkerEnv []string
	// WorkerSettings are the operator's settings of every worker process
	// (for the RDMO component, its limits: rdmoworker.Setting*), handed to
	// it in its spec (WorkerSpec.Settings), apart from the host's
	// SpawnOptions.Config: a host cannot set or override them. A worker
	// refuses settings it does not know, so a bad one fails every spawn.
	WorkerSettings map[string]string
	// Component and ComponentVersion name the RDMO component workers run;
	// hosts asking for an incompatible version are refused.
	Component        string
	ComponentVersion string
	// CallTimeout bounds every command to a worker (default 30 s).
	CallTimeout time.Duration
	// Secret, if set, is a shared secret every host must prove it knows
	// before the service serves it anything (a mutual HMAC-SHA256
	// challenge–response in the hello, see auth.go); hosts without it,
	// or with another one, are refused with ErrAuth. At least
	// MinSecretLen random bytes. Empty: hosts are not authenticated.
	Secret []byte
	// HandshakeTimeout bounds a host's whole hello (and authentication),
	// from the accepted connection on (default DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// DrainTimeout is how long Serve, once its context ends, keeps
	// serving the hosts that have workers (accepting no new host or
	// worker; each host is told, ShutdownNotice) before it stops the
	// workers left. 0: stop them at once.
	DrainTimeout time.Duration
	// Build labels rdmo_build_info (MetricsHandler).
	Build  BuildInfo
	Logger *zap.Logger
}

// MinSecretLen is the shortest accepted Config.Secret and
// ClientOptions.Secret.
const MinSecretLen = hmacauth.MinSecretLen

// Service is the UROM service daemon.
type Service struct {
	cfg     Config
	log     *zap.Logger
	hsLog   *zap.Logger // refused and dropped hosts, sampled
	plugins []urom.PluginInfo

	mu       sync.Mutex
	ln       net.Listener
	workers  map[uint64]*workerProc
	sessions map[*session]struct{}
	nextID   uint64
	closed   bool
	serving  bool // Serve accepts hosts
	draining bool // Serve's context ended: no new hosts or workers
	wg       sync.WaitGroup

	stats     *serviceStats
	stopped   chan struct{} // closed when Close is done
	hurry     chan struct{} // closed by Hurry
	hurryOnce sync.Once
}

// New discovers plugins and prepares the service; Serve runs it.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = 16
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 30 * time.Second
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if len(cfg.WorkerCommand) == 0 {
		return nil, errors.New("urom: no worker command configured")
	}
	if err := hmacauth.CheckSecret(cfg.Secret); err != nil {
		return nil, fmt.Errorf("urom: Config.Secret: %w", err)
	}
	cfg.Secret = bytes.Clone(cfg.Secret)
	cfg.WorkerSettings = maps.Clone(cfg.WorkerSettings)
	if cfg.Component == "" {
		cfg.Component = "rdmo"
	}
	// Whoever reaches the port can make the service log: the first 20
	// lines of each message per second, then every 1000th.
	hsLog := logsample.Sampled(cfg.Logger, time.Second, 20, 1000)
	s := &Service{cfg: cfg, log: cfg.Logger, hsLog: hsLog, workers: map[uint64]*workerProc{}, sessions: map[*session]struct{}{},
		hurry: make(chan struct{}), stopped: make(chan struct{})}
	s.plugins = s.discover(ctx)
	s.stats = newServiceStats(s.plugins)
	return s, nil
}

// discover lists built-ins, then plugin binaries on the search path, and
// numbers them.
func (s *Service) discover(ctx context.Context) []urom.PluginInfo {
	var out []urom.PluginInfo
	for _, b := range s.cfg.Builtins {
		b.Builtin = true
		b.Path = ""
		out = append(out, b)
	}
	for _, dir := range s.cfg.PluginPath {
		entries, err := os.ReadDir(dir)
		if err != nil {
			s.log.Warn("plugin directory unreadable", zap.String("dir", dir), zap.Error(err))
			continue
		}
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "rdmo-plugin-") || e.IsDir() {
				continue
			}
			path := filepath.Join(dir, e.Name())
			// A WebAssembly module (rdmo-plugin-NAME.wasm) is read, not run.
			wasm := strings.HasSuffix(e.Name(), ".wasm")
			if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() || !wasm && fi.Mode()&0o111 == 0 {
				continue
			}
			if s.cfg.Probe == nil {
				s.log.Warn("plugin binary found but this service cannot probe plugins", zap.String("path", path))
				continue
			}
			info, err := s.cfg.Probe(ctx, path)
			if err != nil {
				s.log.Warn("plugin refused", zap.String("path", path), zap.Error(err))
				continue
			}
			info.Builtin, info.Path = false, path
			out = append(out, info)
		}
	}
	for i := range out {
		out[i].ID = i + 1
	}
	return out
}

// Plugins lists what the service offers.
func (s *Service) Plugins() []urom.PluginInfo { return append([]urom.PluginInfo(nil), s.plugins...) }

// Listen binds the service's address and returns it.
func (s *Service) Listen() (string, error) {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return "", fmt.Errorf("urom: listen: %w", err)
	}
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	return ln.Addr().String(), nil
}

// Serve accepts hosts until ctx ends, then drains (Config.DrainTimeout,
// Hurry) and stops every worker.
func (s *Service) Serve(ctx context.Context) error {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln == nil {
		if _, err := s.Listen(); err != nil {
			return err
		}
		ln = s.ln
	}
	s.log.Info("UROM service listening", zap.String("addr", ln.Addr().String()), zap.Int("plugins", len(s.plugins)), zap.Int("max_workers", s.cfg.MaxWorkers),
		zap.Bool("authenticates_hosts", len(s.cfg.Secret) > 0))
	// Sessions outlive ctx while the service drains: their hosts still
	// command and stop their workers.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, s.beginDrain)
	defer stop()
	s.mu.Lock()
	s.serving = true
	s.mu.Unlock()
	backoff := time.Duration(0)
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				s.waitDrained(s.cfg.DrainTimeout, s.hurry)
				s.Close()
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				s.Close()
				return err
			}
			// E.g. out of file descriptors, which anyone who can reach
			// the port can cause by connecting: not fatal. Log, back
			// off, accept again.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accepting a host failed; retrying", zap.Error(err), zap.Duration("in", backoff))
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			continue
		}
		backoff = 0
		sess := &session{s: s, c: uromwire.NewConn(nc, 10*time.Second), workers: map[uint64]*workerProc{}}
		s.mu.Lock()
		s.sessions[sess] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			sess.run(sctx)
		}()
	}
}

// Close stops every worker and waits for sessions to end.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.serving = false
	if s.ln != nil {
		s.ln.Close()
	}
	var workers []*workerProc
	for _, w := range s.workers {
		workers = append(workers, w)
	}
	var sessions []*session
	for sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	// Workers first, so that each host learns why its workers ended
	// before its connection closes.
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A worker drains its request queues as it exits (up to
			// the drain timeout) before it is killed.
			w.stopFor(5*time.Second+s.cfg.DrainTimeout, urom.ReasonShuttingDown)
		}()
	}
	wg.Wait()
	for _, sess := range sessions {
		sess.c.Close()
	}
	s.wg.Wait()
	close(s.stopped)
	return nil
}

// Workers lists running workers.
func (s *Service) Workers() []urom.WorkerInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []urom.WorkerInfo
	for _, w := range s.workers {
		out = append(out, w.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// resolve maps plugin names to plugins. "name" prefers the built-in,
// "builtin:name", "plugin:name" (a process) and "wasm:name" (a module)
// force one form.
func (s *Service) resolve(names []string) ([]urom.PluginInfo, error) {
	if len(names) == 0 {
		var out []urom.PluginInfo
		for _, p := range s.plugins {
			if p.Builtin {
				out = append(out, p)
			}
		}
		return out, nil
	}
	var out []urom.PluginInfo
	for _, n := range names {
		kind, name, forced := strings.Cut(n, ":")
		if !forced {
			name, kind = n, ""
		}
		var pick *urom.PluginInfo
		for i := range s.plugins {
			p := &s.plugins[i]
			if p.Name != name || (kind != "" && kind != p.Form()) {
				continue
			}
			if pick == nil || (kind == "" && p.Builtin) {
				pick = p
			}
		}
		if pick == nil {
			return nil, errorf(uromwire.CodeNotFound, "no plugin %q (have: %s)", n, s.pluginNames())
		}
		out = append(out, *pick)
	}
	return out, nil
}

func (s *Service) pluginNames() string {
	var names []string
	for _, p := range s.plugins {
		names = append(names, p.Form()+":"+p.Name+"@"+p.Version)
	}
	return strings.Join(names, ", ")
}

// session is one host connection.
type session struct {
	s       *Service
	c       *uromwire.Conn
	mu      sync.Mutex
	workers map[uint64]*workerProc
	// ended keeps why each of the session's workers ended (bounded by
	// maxEnded): a command that reaches the service after a worker's end
	// but before its host read the death notice is answered "worker
	// died", with the reason, not "no such worker".
	ended    map[uint64]string
	welcomed bool // the handshake succeeded
	notified bool // the host was told the service is shutting down
}

func (ss *session) run(ctx context.Context) {
	s := ss.s
	defer func() {
		ss.c.Close()
		ss.mu.Lock()
		var ws []*workerProc
		for _, w := range ss.workers {
			ws = append(ws, w)
		}
		ss.mu.Unlock()
		for _, w := range ws {
			w.stop(5 * time.Second)
		}
		s.mu.Lock()
		delete(s.sessions, ss)
		s.mu.Unlock()
	}()
	if ss.handshake() != nil {
		return
	}
	ss.mu.Lock()
	ss.welcomed = true
	ss.mu.Unlock()
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		ss.notifyShutdown()
	}
	for {
		env, err := ss.c.Read(0)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.log.Info("host connection ended", zap.Error(err))
			}
			return
		}
		go ss.handle(ctx, env)
	}
}

func (ss *session) handle(ctx context.Context, env *uromwire.Envelope) {
	s := ss.s
	reply := &uromwire.Envelope{Cookie: env.Cookie, Kind: env.Kind}
	var resp any
	var err error
	switch env.Kind {
	case uromwire.KindPlugins:
		resp = s.Plugins()
	case uromwire.KindWorkers:
		resp = s.describeWorkers(ctx)
	case uromwire.KindSpawn:
		var opts urom.SpawnOptions
		if err = uromwire.DecodeBody(env.Body, &opts); err != nil {
			err = errorf(uromwire.CodeBadRequest, "malformed spawn: %v", err)
			break
		}
		var w *workerProc
		if w, err = s.spawn(ctx, ss, opts); err == nil {
			resp = urom.SpawnReply{Worker: w.id, PID: w.pid}
		}
	case uromwire.KindStop:
		var req urom.StopRequest
		if err = uromwire.DecodeBody(env.Body, &req); err != nil {
			err = errorf(uromwire.CodeBadRequest, "malformed stop: %v", err)
			break
		}
		w := ss.worker(req.Worker)
		if w == nil {
			err = errorf(uromwire.CodeUnknownWorker, "no worker %d of this host", req.Worker)
			break
		}
		w.stop(5 * time.Second)
	case uromwire.KindCommand:
		var req uromwire.CommandRequest
		if err = uromwire.DecodeBody(env.Body, &req); err != nil {
			err = errorf(uromwire.CodeBadRequest, "malformed command: %v", err)
			break
		}
		w := ss.worker(req.Worker)
		if w == nil {
			err = ss.noWorker(req.Worker)
			break
		}
		var body []byte
		body, err = w.call(ctx, env.Body, s.cfg.CallTimeout)
		reply.Body = body
	default:
		err = errorf(uromwire.CodeBadRequest, "unknown request %q", env.Kind)
	}
	if err != nil {
		uromwire.SetError(reply, err)
	} else if resp != nil {
		if reply.Body, err = uromwire.EncodeBody(resp); err != nil {
			uromwire.SetError(reply, err)
		}
	}
	if err := ss.c.Write(reply); err != nil {
		s.log.Info("answering host", zap.Error(err))
	}
}

func (ss *session) worker(id uint64) *workerProc {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.workers[id]
}

// maxEnded bounds how many ended workers a session remembers.
const maxEnded = 1024

// workerEnded moves worker id from the session's running workers to its
// ended ones.
func (ss *session) workerEnded(id uint64, reason string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.workers, id)
	if ss.ended == nil {
		ss.ended = map[uint64]string{}
	}
	if len(ss.ended) >= maxEnded {
		for k := range ss.ended {
			delete(ss.ended, k)
			break
		}
	}
	ss.ended[id] = reason
}

// noWorker is the answer to a command for a worker the session does not
// run: "worker died" if it ran and ended, "no such worker" otherwise.
func (ss *session) noWorker(id uint64) error {
	ss.mu.Lock()
	reason, ok := ss.ended[id]
	ss.mu.Unlock()
	if ok {
		return errorf(uromwire.CodeWorkerDied, "worker %d died: %s", id, reason)
	}
	return errorf(uromwire.CodeUnknownWorker, "no worker %d of this host", id)
}

// spawn starts a worker process for the session.
func (s *Service) spawn(ctx context.Context, owner *session, opts urom.SpawnOptions) (_ *workerProc, err error) {
	defer func() {
		if err != nil {
			s.stats.inc(s.stats.spawnFailures, spawnFailureReason(err))
		} else {
			s.stats.mu.Lock()
			s.stats.spawns++
			s.stats.mu.Unlock()
		}
	}()
	if err := checkSpawnEnv(opts.Env); err != nil {
		return nil, err
	}
	plugins, err := s.resolve(opts.Plugins)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed || s.draining {
		s.mu.Unlock()
		return nil, errorf(uromwire.CodeShuttingDown, "%s", urom.ReasonShuttingDown)
	}
	if len(s.workers) >= s.cfg.MaxWorkers {
		s.mu.Unlock()
		return nil, errorf(uromwire.CodeLimit, "worker limit reached (%d)", s.cfg.MaxWorkers)
	}
	s.nextID++
	w := &workerProc{id: s.nextID, s: s, owner: owner, pending: map[uint64]chan *uromwire.Envelope{}, done: make(chan struct{}), started: time.Now()}
	s.workers[w.id] = w
	s.mu.Unlock()
	for _, p := range plugins {
		w.plugins = append(w.plugins, p.Name)
	}
	spec := urom.WorkerSpec{ID: w.id, Plugins: plugins, Config: opts.Config, Settings: s.cfg.WorkerSettings}
	if err := w.start(ctx, spec, opts); err != nil {
		s.mu.Lock()
		delete(s.workers, w.id)
		s.mu.Unlock()
		return nil, err
	}
	owner.mu.Lock()
	owner.workers[w.id] = w
	owner.mu.Unlock()
	s.log.Info("worker started", zap.Uint64("worker", w.id), zap.Int("pid", w.pid), zap.Strings("plugins", w.plugins))
	return w, nil
}

// SpawnEnvAllowed lists the variables a host may set in a worker's
// environment (SpawnOptions.Env): UCX transport tuning. Everything else is
// refused, because a worker runs as the service's user: variables such as
// LD_PRELOAD, UCX_MODULE_DIR or UCX_LOG_FILE would let a host load code or
// write files of its choosing there.
var SpawnEnvAllowed = map[string]bool{
	"UCX_TLS": true, "UCX_NET_DEVICES": true, "UCX_RNDV_THRESH": true, "UCX_RNDV_SCHEME": true,
	"UCX_IB_GID_INDEX": true, "UCX_MM_FIFO_SIZE": true, "UCX_MAX_EAGER_LANES": true,
	"UCX_MAX_RNDV_LANES": true, "UCX_WARN_UNUSED_ENV_VARS": true, "UCX_LOG_LEVEL": true,
	"UCX_TCP_CM_REUSEADDR": true, "UCX_SOCKADDR_TLS_PRIORITY": true,
}

func checkSpawnEnv(env []string) error {
	for _, kv := range env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || !SpawnEnvAllowed[name] {
			return errorf(uromwire.CodeBadRequest, "worker environment entry %q is not allowed (allowed: UCX transport settings such as UCX_TLS, UCX_NET_DEVICES)", name)
		}
	}
	return nil
}

// workerProc is the service's side of a worker process.
type workerProc struct {
	id      uint64
	s       *Service
	owner   *session
	plugins []string
	cmd     *exec.Cmd
	pid     int
	ctl     *uromwire.Conn

	mu      sync.Mutex
	pending map[uint64]chan *uromwire.Envelope
	next    uint64
	done    chan struct{}
	reason  string
	stopped bool
	// stopReason is what the host is told when the service stops the
	// worker ("" : "stopped").
	stopReason string
	// fatal is the reason a worker gave for ending itself
	// (ReportFatal), which its exit status alone would not tell.
	fatal string
	// running: the worker took its spec; its exit counts in
	// rdmo_urom_worker_exits_total (before, it is a failed spawn).
	running bool
	started time.Time
	ready   bool // start has read the worker's answer to its spec
}

func (w *workerProc) info() urom.WorkerInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	state := "running"
	switch {
	case w.reason != "":
		state = "exited"
	case w.stopped:
		state = "stopping"
	case !w.running:
		state = "starting"
	}
	host := ""
	if w.owner != nil {
		host = w.owner.c.C.RemoteAddr().String()
	}
	return urom.WorkerInfo{ID: w.id, PID: w.pid, Plugins: w.plugins, Host: host, State: state, Uptime: nowSince(w.started)}
}

func (w *workerProc) start(ctx context.Context, spec urom.WorkerSpec, opts urom.SpawnOptions) error {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("urom: control socket: %w", err)
	}
	parent := os.NewFile(uintptr(fds[0]), "urom-control")
	child := os.NewFile(uintptr(fds[1]), "urom-control-worker")
	// The worker gets its own process group (so stopping it also stops its
	// plugin processes) and dies with the service (childproc).
	wenv := append(append(append([]string(nil), w.s.cfg.WorkerEnv...), opts.Env...), fmt.Sprintf("RDMO_UROM_WORKER=%d", w.id))
	p, err := childproc.Start(w.s.cfg.WorkerCommand, childproc.Options{
		Name: fmt.Sprintf("worker %d", w.id), Env: wenv, CPUs: opts.CPUs, Group: true,
		Stdout: os.Stderr, Stderr: os.Stderr, ExtraFiles: []*os.File{child},
	})
	child.Close()
	if err != nil {
		close(w.done)
		parent.Close()
		return fmt.Errorf("urom: start worker: %w", err)
	}
	go func() {
		<-p.Done()
		w.exited(p.Err())
	}()
	w.mu.Lock()
	w.cmd, w.pid = p.Cmd, p.Pid()
	w.mu.Unlock()
	nc, err := net.FileConn(parent)
	parent.Close()
	if err != nil {
		w.kill()
		return fmt.Errorf("urom: control socket: %w", err)
	}
	ctl := uromwire.NewConn(nc, 10*time.Second)
	w.mu.Lock()
	w.ctl = ctl
	w.mu.Unlock()
	body, _ := uromwire.EncodeBody(spec)
	if err := w.ctl.Write(&uromwire.Envelope{Kind: uromwire.KindSpec, Body: body}); err != nil {
		w.kill()
		ctl.Close()
		return fmt.Errorf("urom: worker spec: %w", err)
	}
	if testHookBeforeReady != nil {
		testHookBeforeReady(w.done)
	}
	// The answer to the spec may be the worker's refusal, written just
	// before it exits: the socket keeps it after the process is gone, and
	// exited leaves the socket to us until we have read it (w.ready).
	env, err := w.ctl.Read(30 * time.Second)
	if err == nil {
		err = uromwire.ErrorOf(env)
		if err != nil {
			err = fmt.Errorf("urom: worker %d refused its spec: %w", w.id, err)
		}
	} else {
		w.kill()
		<-w.done
		err = errorf(uromwire.CodeWorkerDied, "worker %d did not start: %v (%s)", w.id, err, w.deathReason())
	}
	w.mu.Lock()
	w.ready = true
	gone := w.reason != ""
	w.mu.Unlock()
	if err == nil && gone {
		// It answered ready and died before we registered it.
		err = errorf(uromwire.CodeWorkerDied, "worker %d died as it started: %s", w.id, w.deathReason())
	}
	if err != nil {
		w.kill()
		ctl.Close()
		return err
	}
	w.mu.Lock()
	w.running = true
	w.mu.Unlock()
	go w.readLoop()
	return nil
}

// testHookBeforeReady, when set (tests), runs before the service reads a
// new worker's answer to its spec, with the channel closed once the
// service has seen the process exit.
var testHookBeforeReady func(exited <-chan struct{})

func (w *workerProc) readLoop() {
	for {
		env, err := w.ctl.Read(0)
		if err != nil {
			// The control socket closing means the worker is going:
			// make sure it is, so its exit is reported.
			w.kill()
			return
		}
		if env.Kind == uromwire.KindEvent && env.Cookie == 0 {
			var ev workerEvent
			if uromwire.DecodeBody(env.Body, &ev) == nil {
				w.s.event(w, ev)
			}
			continue
		}
		w.mu.Lock()
		ch := w.pending[env.Cookie]
		delete(w.pending, env.Cookie)
		w.mu.Unlock()
		if ch != nil {
			ch <- env
		}
	}
}

// call forwards a command and waits for the answer.
func (w *workerProc) call(ctx context.Context, body []byte, timeout time.Duration) ([]byte, error) {
	ch := make(chan *uromwire.Envelope, 1)
	w.mu.Lock()
	if w.reason != "" {
		reason := w.reason
		w.mu.Unlock()
		return nil, errorf(uromwire.CodeWorkerDied, "worker %d died: %s", w.id, reason)
	}
	w.next++
	cookie := w.next
	w.pending[cookie] = ch
	w.mu.Unlock()
	if err := w.ctl.Write(&uromwire.Envelope{Cookie: cookie, Kind: uromwire.KindCommand, Body: body}); err != nil {
		w.forget(cookie)
		return nil, errorf(uromwire.CodeWorkerDied, "worker %d unreachable: %v", w.id, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case env := <-ch:
		if env == nil {
			return nil, errorf(uromwire.CodeWorkerDied, "worker %d died: %s", w.id, w.deathReason())
		}
		return env.Body, uromwire.ErrorOf(env)
	case <-t.C:
		w.forget(cookie)
		return nil, errorf(uromwire.CodeTimeout, "worker %d did not answer within %v", w.id, timeout)
	case <-ctx.Done():
		w.forget(cookie)
		return nil, ctx.Err()
	}
}

func (w *workerProc) forget(cookie uint64) {
	w.mu.Lock()
	delete(w.pending, cookie)
	w.mu.Unlock()
}

func (w *workerProc) deathReason() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reason
}

// exited runs when the worker process is gone: fail its pending commands,
// tell its host, forget it.
func (w *workerProc) exited(err error) {
	reason := "exited"
	if err != nil {
		reason = err.Error()
	}
	w.mu.Lock()
	kind := exitReason(w.stopped, err)
	if w.fatal != "" {
		reason = w.fatal
	}
	if w.stopped {
		reason = "stopped"
		if w.stopReason != "" {
			reason = w.stopReason
		}
	}
	w.reason = reason
	running := w.running
	pending := w.pending
	w.pending = map[uint64]chan *uromwire.Envelope{}
	w.mu.Unlock()
	for _, ch := range pending {
		ch <- nil
	}
	// A worker still starting keeps its socket open: start reads the last
	// thing it said (a refusal of its spec), then closes it.
	w.mu.Lock()
	ctl := w.ctl
	if !w.ready {
		ctl = nil
	}
	w.mu.Unlock()
	if ctl != nil {
		ctl.Close()
	}
	s := w.s
	s.mu.Lock()
	delete(s.workers, w.id)
	s.mu.Unlock()
	if w.owner != nil {
		w.owner.workerEnded(w.id, reason)
		body, _ := uromwire.EncodeBody(urom.WorkerDied{Worker: w.id, Reason: reason})
		w.owner.c.Write(&uromwire.Envelope{Kind: uromwire.KindWorkerDied, Body: body})
	}
	if running {
		s.stats.inc(s.stats.exits, kind)
	}
	if kind == "stopped" {
		s.log.Info("worker stopped", zap.Uint64("worker", w.id))
	} else {
		s.log.Warn("worker died", zap.Uint64("worker", w.id), zap.Int("pid", w.procID()), zap.String("reason", reason))
	}
	close(w.done)
}

// control is the worker's control connection, nil until it started. Close
// may stop a worker while it is still starting, so the field is guarded.
func (w *workerProc) control() *uromwire.Conn {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ctl
}

// procID is the worker's process id, 0 until it started.
func (w *workerProc) procID() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pid
}

// kill ends the worker's process group at once.
func (w *workerProc) kill() {
	if pid := w.procID(); pid > 0 {
		syscall.Kill(-pid, syscall.SIGKILL)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// stop asks the worker to exit by closing its control socket, and kills
// its process group if it has not exited within grace.
func (w *workerProc) stop(grace time.Duration) { w.stopFor(grace, "") }

// stopFor is stop telling the host why (WorkerDied.Reason; "" is
// "stopped").
func (w *workerProc) stopFor(grace time.Duration, why string) {
	w.mu.Lock()
	if !w.stopped {
		w.stopReason = why
	}
	w.stopped = true
	ctl := w.ctl
	w.mu.Unlock()
	if ctl != nil {
		ctl.Close()
	}
	select {
	case <-w.done:
	case <-time.After(grace):
		w.kill()
		<-w.done
	}
	// Plugin processes of the worker share its process group.
	if pid := w.procID(); pid > 0 {
		syscall.Kill(-pid, syscall.SIGKILL)
	}
}

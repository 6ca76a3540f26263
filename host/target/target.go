package target

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/prefault"
	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/urom"
)

// Options configure New. The worker comes from Service if set, else from
// the service at ServiceAddress, else from an embedded service (Embedded).
type Options struct {
	// Service is a session to spawn the worker on; the Target does not
	// close it.
	Service *Service
	// ServiceAddress is a UROM service to dial (with Secret) when
	// Service is nil; the Target closes that session.
	ServiceAddress string
	Secret         []byte
	// Embedded configures the embedded service started when both
	// Service and ServiceAddress are empty; the Target stops it.
	Embedded EmbeddedOptions

	// Env is added to the worker process's environment (e.g. UCX_TLS).
	Env []string
	// CPUs restricts the worker to a CPU list (taskset syntax, "0-1,3").
	CPUs string
	// AppendStrategy is the worker's append strategy (rdmoworker's
	// ConfigAppendStrategy); "" leaves the worker's default.
	AppendStrategy string
	// Plugins names handlers the worker loads besides the reference ones
	// (append, flush, scatter, always built in): a built-in by its name
	// ("kv", from the operation pack plugins/ops), a plugin binary on the
	// service's plugin path as "plugin:NAME" (rdmo-plugin-NAME). Naming a
	// reference handler ("plugin:append") replaces the built-in one. Empty:
	// the service's default set (every built-in).
	Plugins []string

	// ClientID is this target's client id with the worker; 0 picks a
	// random one.
	ClientID uint64
	// Address is the UCP worker address of the context that owns the
	// target's memory (Local.Address): the RDMO worker connects to it.
	// Required.
	Address []byte

	// CommandTimeout bounds each command when its ctx has no earlier
	// deadline (default DefaultCommandTimeout).
	CommandTimeout time.Duration
	Logger         *zap.Logger
}

// Region is memory registered with the worker (MR_REG): initiators name it
// by ID.
type Region struct {
	ID   uint64 // the worker's region id (the wire's "rkey")
	Base uint64 // the first address
	Len  uint64
	Rkey []byte // the packed remote key the worker got, for native access
}

// Target is one RDMO worker and this process's client on it: the memory
// it registered and the request queues it opened there, undone by Close.
// Its methods are safe for concurrent use.
type Target struct {
	svc     *Service
	ownsSvc bool
	w       *urom.WorkerProcess
	remote  command.Remote
	log     *zap.Logger
	timeout time.Duration

	client      uint64
	workerAddr  []byte
	maxInFlight uint32
	caps        []string

	done     chan struct{}
	doneOnce sync.Once
	err      error // why done is closed

	mu      sync.Mutex
	closed  bool
	regions []uint64 // registered, in order
	rqs     []uint64 // created, in order
}

// New gets an RDMO worker (see Options) and registers this process with it
// as a client (CLIENT_INIT). Errors are *ServiceError, *CommandError or,
// when ctx ended, ctx.Err().
func New(ctx context.Context, opts Options) (*Target, error) {
	if len(opts.Address) == 0 {
		return nil, errors.New("target: Options.Address is empty (the UCP worker address of the target's memory)")
	}
	log := orNop(opts.Logger)
	t := &Target{
		svc: opts.Service, log: log, timeout: orDefault(opts.CommandTimeout, DefaultCommandTimeout),
		client: opts.ClientID, done: make(chan struct{}),
	}
	if t.client == 0 {
		t.client = randomID()
	}
	if t.svc == nil {
		var err error
		if opts.ServiceAddress != "" {
			t.svc, err = Dial(ctx, opts.ServiceAddress, DialOptions{Secret: opts.Secret, Timeout: opts.CommandTimeout, Logger: log})
		} else {
			eo := opts.Embedded
			if eo.Logger == nil {
				eo.Logger = log
			}
			t.svc, err = StartEmbedded(ctx, eo)
		}
		if err != nil {
			return nil, err
		}
		t.ownsSvc = true
	}
	if err := t.start(ctx, opts); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *Target) start(ctx context.Context, opts Options) error {
	if ex := t.svc.Exited(); ex != nil {
		go func() {
			select {
			case <-ex:
				t.finish(ErrServiceExited)
			case <-t.done:
			}
		}()
	}
	sctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	var config map[string]string
	if opts.AppendStrategy != "" {
		config = map[string]string{command.ConfigAppendStrategy: opts.AppendStrategy}
	}
	w, err := t.svc.uc.Spawn(sctx, urom.SpawnOptions{Env: opts.Env, CPUs: opts.CPUs, Config: config, Plugins: spawnNames(opts.Plugins)})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &ServiceError{Addr: t.svc.addr, Embedded: t.svc.Embedded(), Op: "spawning the RDMO worker", Err: err}
	}
	t.w, t.remote = w, command.Remote{W: w}
	t.log.Info("RDMO worker started", zap.Uint64("worker", w.ID), zap.Int("pid", w.PID), zap.String("append_strategy", opts.AppendStrategy))
	go func() {
		select {
		case <-w.Gone():
			if errors.Is(w.Err(), urom.ErrShuttingDown) {
				t.finish(ErrServiceShuttingDown)
			} else {
				t.finish(&WorkerDiedError{Reason: w.Reason()})
			}
		case <-t.done:
		}
	}()
	// CLIENT_INIT runs to its answer even when ctx ends meanwhile (an
	// interrupt during set-up): the worker answers once its endpoint to
	// this process is wired up both ways, and tearing down in the middle
	// of that wire-up makes UCX 1.13 (tcp) abort this process on the
	// half-done reply it still holds. The wait is bounded by the command
	// timeout; then ctx's end is reported.
	n, err := t.do(context.WithoutCancel(ctx), command.ClientInit{ID: t.client, Addr: opts.Address})
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	t.workerAddr, t.maxInFlight, t.caps = n.Addr, n.MaxInFlightPerRQ, n.Capabilities
	return nil
}

// spawnNames is the worker's handler list for Options.Plugins.
func spawnNames(plugins []string) []string {
	if len(plugins) == 0 {
		return nil
	}
	var names []string
	for _, ref := range []string{"append", "flush", "scatter"} {
		named := false
		for _, p := range plugins {
			if _, n, ok := strings.Cut(p, ":"); (ok && n == ref) || p == ref {
				named = true
			}
		}
		if !named {
			names = append(names, ref)
		}
	}
	return append(names, plugins...)
}

func randomID() uint64 {
	var b [8]byte
	for {
		crand.Read(b[:])
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// finish records why the target ended (the first reason wins).
func (t *Target) finish(err error) {
	t.doneOnce.Do(func() {
		t.err = err
		close(t.done)
	})
}

// Done is closed when the target can no longer serve: its worker died,
// its embedded service exited, or it was closed. Err then says which.
func (t *Target) Done() <-chan struct{} { return t.done }

// Err is nil while Done is open; then a *WorkerDiedError,
// ErrServiceShuttingDown,
// ErrServiceExited or ErrClosed.
func (t *Target) Err() error {
	select {
	case <-t.done:
		return t.err
	default:
		return nil
	}
}

// ClientID is this process's client id with the worker.
func (t *Target) ClientID() uint64 { return t.client }

// WorkerAddress is the RDMO worker's UCP address (from CLIENT_INIT), which
// initiators connect to.
func (t *Target) WorkerAddress() []byte { return t.workerAddr }

// MaxInFlightPerRQ is the worker's in-flight limit per request queue (from
// CLIENT_INIT), for the initiators' flow control; 0: the worker did not
// say (rdmo.DefaultMaxInFlightPerRQ).
func (t *Target) MaxInFlightPerRQ() uint32 { return t.maxInFlight }

// WorkerCapabilities are the wire extensions the worker implements (from
// CLIENT_INIT; empty from a worker too old to say), for the initiators'
// options: initiator.AggregateSupported, LargeBatchSupported,
// AckGroupSupported, LendSupported.
// A target passes them to remote initiators out of band
// (host/oob.WorkerInfo.Capabilities).
func (t *Target) WorkerCapabilities() []string { return slices.Clone(t.caps) }

// WorkerID is the worker's id at its UROM service.
func (t *Target) WorkerID() uint64 { return t.w.ID }

// WorkerPID is the worker process's id (on the service's machine).
func (t *Target) WorkerPID() int { return t.w.PID }

// Service is the session the worker runs on.
func (t *Target) Service() *Service { return t.svc }

// do sends one command, bounded, and fails fast once the target is done.
func (t *Target) do(ctx context.Context, cmd command.Command) (command.Notification, error) {
	if err := t.Err(); err != nil {
		return command.Notification{}, &CommandError{Command: cmd.CommandType(), Err: err}
	}
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	n, err := t.remote.Do(cctx, cmd)
	if err != nil {
		if derr := t.Err(); derr != nil && !errors.Is(derr, ErrClosed) {
			err = derr // the worker or the service is gone: say so
		}
		return n, &CommandError{Command: cmd.CommandType(), Err: err}
	}
	return n, nil
}

func (t *Target) checkOpen(cmd command.CommandType) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return &CommandError{Command: cmd, Err: ErrClosed}
	}
	return nil
}

// Register registers mem with the worker (MR_REG). Its packed remote key
// goes with it, and its exported memory handle where UCX can export one.
func (t *Target) Register(ctx context.Context, mem *ucp.Memory) (Region, error) {
	return t.RegisterWith(ctx, mem, RegisterOptions{})
}

// RegisterOptions tune RegisterWith.
type RegisterOptions struct {
	// Populate pays the region's page faults at registration instead of
	// at the first write into each page: the target commits mem's pages
	// in its own process, and the worker commits its mapping of them
	// (where it maps target memory, as over shared memory) on a goroutine
	// of its own before it answers, so the registration takes about as
	// long as the faults and the worker keeps serving meanwhile. Without
	// it, a worker's first append into each 4 KiB page pays a fault
	// (docs/benchmarks/large-payloads.md, the cold row).
	Populate bool
}

// RegisterWith is Register with options.
func (t *Target) RegisterWith(ctx context.Context, mem *ucp.Memory, opts RegisterOptions) (Region, error) {
	if err := t.checkOpen(command.CmdMRReg); err != nil {
		return Region{}, err
	}
	if opts.Populate {
		if _, err := prefault.Populate(mem.Bytes()); err != nil {
			return Region{}, fmt.Errorf("populating the region's pages: %w", err)
		}
	}
	rkey, err := mem.PackRkey()
	if err != nil {
		return Region{}, fmt.Errorf("packing the remote key: %w", err)
	}
	memh, err := mem.PackExported()
	if err != nil {
		memh = nil // UCX < 1.14, or transports that cannot export
	}
	r := Region{Base: mem.Address(), Len: uint64(mem.Len()), Rkey: rkey}
	n, err := t.do(ctx, command.MRReg{Client: t.client, VA: r.Base, Len: r.Len, PackedRkey: rkey, PackedMemh: memh,
		Populate: opts.Populate})
	if err != nil {
		return Region{}, err
	}
	r.ID = n.Region
	t.mu.Lock()
	t.regions = append(t.regions, r.ID)
	t.mu.Unlock()
	return r, nil
}

// Deregister removes a region (MR_DEREG): the worker writes back what it
// caches for it, and once this returns nothing writes into it any more.
// The region is forgotten even when the worker reports a failure.
func (t *Target) Deregister(ctx context.Context, region uint64) error {
	if err := t.checkOpen(command.CmdMRDereg); err != nil {
		return err
	}
	t.forget(&t.regions, region)
	_, err := t.do(ctx, command.MRDereg{Client: t.client, Region: region})
	return err
}

// CreateRQ opens a request queue for the initiator whose UCP worker
// address is addr (RQ_CREATE) and returns its id.
func (t *Target) CreateRQ(ctx context.Context, addr []byte) (uint64, error) {
	return t.CreateRQWith(ctx, addr, RQOptions{})
}

// RQOptions are the extensions of RQ_CREATE for initiators that are not
// rdmo's own (docs/PROTOCOL.md, "Extensions for reference peers").
type RQOptions struct {
	// ErrorHandling is the mode of the worker's endpoint to the initiator;
	// it must match the initiator's own (UCX refuses asymmetric modes).
	// Zero: peer-failure detection, as rdmo's initiators use.
	ErrorHandling command.RQErrorHandling
	// ZeroClientID lets this queue's requests carry client id 0 (a DOCA
	// reference initiator writes 0); docs/SECURITY.md says why that does
	// not weaken the client check of any other queue.
	ZeroClientID bool
}

// CreateRQWith is CreateRQ with the extensions of opts.
func (t *Target) CreateRQWith(ctx context.Context, addr []byte, opts RQOptions) (uint64, error) {
	if err := t.checkOpen(command.CmdRQCreate); err != nil {
		return 0, err
	}
	n, err := t.do(ctx, command.RQCreate{Client: t.client, Addr: addr, ErrorHandling: opts.ErrorHandling, ZeroClientID: opts.ZeroClientID})
	if err != nil {
		return 0, err
	}
	t.mu.Lock()
	t.rqs = append(t.rqs, n.RQ)
	t.mu.Unlock()
	return n.RQ, nil
}

// WaitFlush returns when a FLUSH of request queue rq numbered after+1 or
// later has completed (the worker's flush notification, so a target never
// polls its memory to learn that work is done), or when ctx ends. The
// worker answers within its own bound; ask again with the same after.
func (t *Target) WaitFlush(ctx context.Context, rq, after uint64) (command.FlushEvent, error) {
	if err := t.checkOpen(command.CmdRQCreate); err != nil {
		return command.FlushEvent{}, err
	}
	return t.remote.WaitFlush(ctx, t.client, rq, after)
}

// DestroyRQ closes a request queue (RQ_DESTROY): in-flight requests
// finish, then the connection closes. Call it before the initiator
// disconnects: one that left first took its queue with it, and the worker
// then reports the queue unknown. The queue is forgotten either way.
func (t *Target) DestroyRQ(ctx context.Context, rq uint64) error {
	if err := t.checkOpen(command.CmdRQDestroy); err != nil {
		return err
	}
	known := t.forget(&t.rqs, rq)
	_, err := t.do(ctx, command.RQDestroy{Client: t.client, RQ: rq})
	if known && unknownRQ(err) {
		// The worker took the queue down already, when its initiator
		// went (a normal end of a run): nothing is left to destroy.
		t.log.Debug("request queue already gone at the worker", zap.Uint64("rq", rq))
		return nil
	}
	return err
}

// unknownRQ reports whether the worker answered that it has no such
// request queue (through a worker process the sentinel arrives as the
// notification's detail).
func unknownRQ(err error) bool {
	return err != nil && (errors.Is(err, command.ErrUnknownRQ) || strings.Contains(err.Error(), command.ErrUnknownRQ.Error()))
}

func (t *Target) forget(ids *[]uint64, id uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := slices.Index(*ids, id); i >= 0 {
		*ids = slices.Delete(*ids, i, i+1)
		return true
	}
	return false
}

// Stats returns the worker's counters.
func (t *Target) Stats(ctx context.Context) (command.Stats, error) {
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return t.remote.Stats(cctx)
}

// Close tears down in order: RQ_DESTROY of every open request queue (a
// failure there, from a queue its initiator took along, is no failure of
// Close), MR_DEREG of every region (last registered first), stop the
// worker, then
// (if the Target made them) end the UROM session and stop the embedded
// service. A worker already gone is no failure. The target's memory may
// be freed once Close returned. Close is CloseContext with a 30 s bound.
func (t *Target) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultCommandTimeout)
	defer cancel()
	return t.CloseContext(ctx)
}

// CloseContext is Close bounded by ctx. Later calls return nil.
func (t *Target) CloseContext(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	rqs, regions := t.rqs, t.regions
	t.rqs, t.regions = nil, nil
	t.mu.Unlock()

	var errs []error
	alive := t.w != nil && t.Err() == nil
	gone := func(err error) bool {
		return errors.Is(err, urom.ErrWorkerDied) || errors.Is(err, urom.ErrUnknownWorker) || errors.Is(err, ErrServiceExited) ||
			errors.Is(err, urom.ErrShuttingDown)
	}
	undo := func(cmd command.Command) error {
		if !alive {
			return nil
		}
		_, err := t.do(ctx, cmd)
		if err != nil && gone(err) {
			alive = false
			return nil
		}
		return err
	}
	for _, rq := range rqs {
		// An initiator that disconnected first took its queue with it:
		// a failure here is no teardown failure.
		if err := undo(command.RQDestroy{Client: t.client, RQ: rq}); err != nil {
			t.log.Debug("RQ_DESTROY", zap.Uint64("rq", rq), zap.Error(err))
		}
	}
	for _, r := range slices.Backward(regions) {
		if err := undo(command.MRDereg{Client: t.client, Region: r}); err != nil {
			errs = append(errs, err)
		}
	}
	// From here on the worker's end is this Close, not a death.
	t.finish(ErrClosed)
	if t.w != nil {
		if err := t.w.Stop(ctx); err != nil && alive && !gone(err) {
			errs = append(errs, fmt.Errorf("stopping the RDMO worker: %w", err))
		}
	}
	if t.ownsSvc {
		errs = append(errs, t.svc.Close())
	}
	return errors.Join(errs...)
}

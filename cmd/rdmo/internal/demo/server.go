package demo

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/cli"
	"github.com/openrdmo/rdmo/cmd/rdmo/internal/dpucmd"
	"github.com/openrdmo/rdmo/cmd/rdmo/internal/ucxflag"
	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/host/oob"
	"github.com/openrdmo/rdmo/host/target"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/urom"
)

// Timeouts of the server side.
const (
	initiatorInfoTimeout = 30 * time.Second // after WorkerInfo
	seedTimeout          = 60 * time.Second // from the start barrier to the seed append
	teardownTimeout      = 30 * time.Second
)

// doneTimeout bounds the wait for Done: generous, growing with the work.
func doneTimeout(ops uint64) time.Duration {
	return 10*time.Minute + time.Duration(ops)*time.Millisecond
}

type region struct {
	name string
	id   uint64
	mem  *ucp.Memory
}

func (r *region) info() oob.RegionInfo {
	return oob.RegionInfo{ID: r.id, Base: r.mem.Address(), Len: uint64(r.mem.Len()), Name: r.name}
}

// failure is a condition that ends the run from outside its main flow
// (the worker died, the embedded service exited): ch is closed once.
type failure struct {
	once sync.Once
	ch   chan struct{}
	err  error
}

func newFailure() *failure { return &failure{ch: make(chan struct{})} }

func (f *failure) set(err error) {
	f.once.Do(func() { f.err = err; close(f.ch) })
}

func (f *failure) get() error { return f.err }

// server is the target side of one run.
type server struct {
	cfg cli.Config
	log *zap.Logger

	fail *failure

	ln    *oob.Listener
	t     *target.Target // the RDMO worker and this client on it
	local *target.Local  // the memory the worker writes into

	clientID uint64
	seed     *region
	queue    *region
	scatter  *region
	workload oob.Workload
	plan     plan

	accepted chan acceptResult // the first initiator, from acceptLoop
	// committed is closed once the run has its initiator (commit):
	// acceptLoop turns others away.
	committed  chan struct{}
	commitOnce sync.Once
	acceptWG   sync.WaitGroup // acceptLoop
	// Peers refused before authentication: a wrong secret, anything else.
	authFailures, refused atomic.Int64
	stopAccept            context.CancelFunc
	peer                  *peer
	ref                   *oob.RefConn // a reference initiator's connection (docaserver.go)
	told                  bool         // the initiator has the verdict
	initInfo              oob.InitiatorInfo
	rq                    uint64
	rqMade                bool
	verified              bool
	// workerSilent: the worker did not answer (stopped, hung): teardown
	// does not wait for it.
	workerSilent bool
}

// RunServer runs -m server, the target: it gets
// an RDMO worker from a UROM service, registers its memory, hands the
// worker to one initiator over the out-of-band channel, and when the
// initiator reports Done checks its memory byte for byte.
func RunServer(ctx context.Context, cfg cli.Config) error {
	s := &server{cfg: cfg, log: cfg.Logger, fail: newFailure(), committed: make(chan struct{})}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	err := s.run(ctx)
	if err != nil && s.peer == nil && s.accepted != nil {
		// An initiator may have connected while the set-up failed: it
		// must not wait for a WorkerInfo that never comes.
		select {
		case r := <-s.accepted:
			if r.c != nil {
				s.peer = newPeer(r.c, "initiator")
			}
			if r.ref != nil {
				r.ref.Close()
			}
		default:
		}
	}
	// Tell the initiator why this side stops (unless it knows), once its
	// request queue is gone: what it sends then is dropped quietly.
	var tell func()
	var re *RemoteError
	if err != nil && s.peer != nil && !s.told && !errors.As(err, &re) {
		msg := err.Error()
		if ctx.Err() != nil {
			msg = "target interrupted"
		}
		tell = func() { s.peer.abort(codeAborted, msg) }
	}
	s.teardown(tell)
	if err != nil && ctx.Err() != nil && !s.verified {
		return fmt.Errorf("interrupted before verification: %w", ctx.Err())
	}
	return err
}

func (s *server) run(ctx context.Context) error {
	cfg := s.cfg
	secret, err := cli.LoadSecret(cfg.SecretFile)
	if err != nil {
		return err
	}
	if w := cli.SecretWarning(cfg.SecretFile); w != "" {
		s.log.Warn(w)
	}
	devCfg, err := ucxflag.DeviceConfig(cfg.Device)
	if err != nil {
		return cli.Usagef("-d/--device: %v", err)
	}

	// Listen first, so a busy port fails at once; the initiator may
	// connect (and authenticate) while the rest is set up.
	s.ln, err = oob.Listen(net.JoinHostPort("", strconv.Itoa(int(cfg.OOBPort))), oob.Options{
		Secret: secret, Role: oob.RoleTarget, Logger: s.log.Named("oob"),
	})
	if err != nil {
		return fmt.Errorf("out-of-band channel: %w", err)
	}
	// Unbuffered: an initiator accepted while the run is being set up
	// waits in acceptLoop, which turns it away if another one is taken.
	accepted := make(chan acceptResult)
	s.accepted = accepted
	actx, stop := context.WithCancel(ctx)
	s.stopAccept = stop
	for range acceptWorkers {
		s.acceptWG.Add(1)
		go s.acceptLoop(actx, accepted)
	}

	if err := s.setupMemory(devCfg); err != nil {
		return err
	}
	if err := s.startWorker(ctx, devCfg, secret); err != nil {
		return err
	}
	if err := s.register(ctx); err != nil {
		return err
	}

	s.log.Info("waiting for the initiator", zap.String("oob", s.ln.Addr().String()), zap.Bool("authenticated", secret != nil))
	var conn *oob.Conn
	for conn == nil {
		select {
		case r := <-accepted:
			if r.err != nil {
				return r.err
			}
			if r.ref != nil {
				if err := s.runReference(ctx, r.ref); !errors.Is(err, errRefAbandoned) {
					return err
				}
				continue // the reference initiator left before its work began
			}
			conn = r.c
		case <-s.fail.ch:
			return s.fail.get()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.commit() // one initiator per run: acceptLoop turns any other away
	s.peer = newPeer(conn, "initiator")
	s.log.Info("initiator connected", zap.Stringer("from", conn.RemoteAddr()), zap.Bool("authenticated", conn.Authenticated()))

	var regions []oob.RegionInfo
	for _, r := range []*region{s.seed, s.queue, s.scatter} {
		regions = append(regions, r.info())
	}
	wl := s.workload
	if err := s.peer.send(ctx, oob.WorkerInfo{
		WorkerAddress: s.t.WorkerAddress(),
		ClientID:      s.clientID,
		Regions:       regions,
		// What the worker said it implements at CLIENT_INIT.
		Capabilities: append([]string{"append", "scatter", "flush"}, s.t.WorkerCapabilities()...),
		Workload:     &wl,
		// The initiator's flow control stays within the worker's limit.
		MaxInFlightPerRQ: s.t.MaxInFlightPerRQ(),
	}); err != nil {
		return err
	}
	m, err := s.next(ctx, "InitiatorInfo", initiatorInfoTimeout)
	if err != nil {
		return err
	}
	ii, ok := m.(oob.InitiatorInfo)
	if !ok {
		return fmt.Errorf("initiator sent %T, want InitiatorInfo", m)
	}
	s.initInfo = ii
	rq, err := s.t.CreateRQ(ctx, ii.WorkerAddress)
	if err != nil {
		return fmt.Errorf("request queue for initiator %q: %w", ii.Name, err)
	}
	s.rq, s.rqMade = rq, true
	s.log.Info("request queue created", zap.String("initiator", ii.Name), zap.Uint64("rq", s.rq))
	if err := s.peer.send(ctx, oob.Barrier{ID: barrierStart}); err != nil {
		return err
	}
	start := time.Now()

	// Seed flow: the initiator flushed its 8-byte append.
	if err := s.expectBarrier(ctx, barrierSeedAppend, seedTimeout); err != nil {
		return err
	}
	if err := checkSeedAppend(s.seed.mem.Bytes(), s.seed.mem.Address()); err != nil {
		s.sendVerdict(false, err.Error())
		return fmt.Errorf("verification FAILED: %w", err)
	}
	s.log.Info("seed append verified: 8 bytes of 0x33 at base+8, tail at base+16")
	if err := s.peer.send(ctx, oob.Barrier{ID: barrierSeedAppend}); err != nil {
		return err
	}

	// The rest: the initiator reports Done after its final flush returned,
	// so everything it did is visible; the target never polls its memory.
	m, err = s.next(ctx, "Done", doneTimeout(wl.Ops))
	if err != nil {
		return err
	}
	done, ok := m.(oob.Done)
	if !ok {
		return fmt.Errorf("initiator sent %T, want Done", m)
	}
	elapsed := time.Since(start)
	s.log.Info("initiator done", zap.Uint64("ops", done.Ops), zap.Uint64("bytes", done.Bytes), zap.Uint64("errors", done.Errors), zap.Duration("elapsed", elapsed))
	// The initiator's work is over: close its request queue now, while it
	// still waits for the verdict (so nothing can race the teardown), and
	// so that nothing it might still send can touch memory being checked.
	if err := s.t.DestroyRQ(ctx, s.rq); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.Warn("RQ_DESTROY after Done", zap.Error(err))
	}
	s.rqMade = false

	verr := checkSeed(s.seed.mem.Bytes(), s.seed.mem.Address())
	var res workloadResult
	if verr == nil {
		res, verr = newVerifier(wl.Seed).checkWorkload(wl, s.queue.mem.Bytes(), s.queue.mem.Address(), s.scatter.mem.Bytes())
	}
	var detail string
	if verr == nil {
		detail = fmt.Sprintf("%d records (%s) exactly once, intact, in order; %d scatters (%d chunks, %s) intact; seed flow intact",
			res.Records, sizeStr(res.RecordBytes), res.Scatters, res.Chunks, sizeStr(res.ChunkBytes))
	} else {
		detail = verr.Error()
	}
	s.verified = verr == nil
	if err := s.sendVerdict(verr == nil, detail); err != nil {
		s.log.Warn("could not send the verdict to the initiator", zap.Error(err))
	}
	s.printSummary(done, res, verr, elapsed, ctx)
	if verr != nil {
		return fmt.Errorf("verification FAILED: %w", verr)
	}
	return nil
}

func (s *server) sendVerdict(ok bool, detail string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.told = true
	return s.peer.send(ctx, oob.Verified{OK: ok, Detail: detail})
}

func (s *server) next(ctx context.Context, what string, timeout time.Duration) (oob.Message, error) {
	m, err := s.peer.next(ctx, s.fail.ch, s.fail.get, what, timeout)
	if err != nil && ctx.Err() == nil && s.peer.ended() {
		return nil, s.explainPeerGone(ctx, err)
	}
	return m, err
}

// Bounds of the worker check when the initiator's connection ends.
const (
	workerCheckQuiet = time.Second     // answered within this: nothing logged
	workerCheckLimit = 5 * time.Second // then the initiator's reason, and the worker is taken as stopped
)

// explainPeerGone reports the initiator's end (its connection closed, with
// or without a reason: a kill, a Ctrl-C, its own failure) as soon as this
// side knows it is not the cause. The initiator may have stopped because
// the RDMO worker failed (it sees its endpoint fail before the UROM
// service reports the worker's death), so the worker is asked at once:
// it answers within milliseconds when alive, and the reason is the
// initiator's; its death, reported meanwhile, is the reason instead.
func (s *server) explainPeerGone(ctx context.Context, gone error) error {
	select {
	case <-s.fail.ch:
		return s.fail.get()
	default:
	}
	if s.t == nil {
		return gone
	}
	cctx, cancel := context.WithTimeout(ctx, workerCheckLimit)
	defer cancel()
	answer := make(chan error, 1)
	go func() {
		_, err := s.t.Stats(cctx)
		answer <- err
	}()
	quiet := time.NewTimer(workerCheckQuiet)
	defer quiet.Stop()
	for {
		select {
		case err := <-answer:
			select {
			case <-s.fail.ch:
				return s.fail.get()
			default:
			}
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if errors.Is(err, urom.ErrWorkerDied) {
					// The target reports the death with its reason.
					select {
					case <-s.t.Done():
					case <-cctx.Done():
					}
				}
				if werr := s.t.Err(); werr != nil && !errors.Is(werr, target.ErrClosed) {
					return werr // it died: that is the reason
				}
				s.workerSilent = true
				if errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("%w; and the RDMO worker did not answer within %v", gone, workerCheckLimit)
				}
				return fmt.Errorf("%w; and the RDMO worker does not answer: %v", gone, err)
			}
			return fmt.Errorf("%w; the RDMO worker still answers", gone)
		case <-s.fail.ch:
			cancel()
			return s.fail.get()
		case <-quiet.C:
			s.log.Warn("the initiator is gone; waiting for the RDMO worker to answer, to tell whether it failed first",
				zap.NamedError("initiator", gone), zap.Duration("at_most", workerCheckLimit))
		}
	}
}

func (s *server) expectBarrier(ctx context.Context, id uint64, timeout time.Duration) error {
	m, err := s.next(ctx, fmt.Sprintf("Barrier %d", id), timeout)
	if err != nil {
		return err
	}
	if b, ok := m.(oob.Barrier); !ok || b.ID != id {
		return fmt.Errorf("initiator sent %#v, want Barrier %d", m, id)
	}
	return nil
}

type acceptResult struct {
	c   *oob.Conn
	ref *oob.RefConn // a reference initiator (the port serves both)
	err error
}

// acceptWorkers is how many handshakes the out-of-band port runs at once.
const acceptWorkers = 4

// commit closes s.committed: the run has its initiator.
func (s *server) commit() { s.commitOnce.Do(func() { close(s.committed) }) }

// busyMessage is what an initiator that connects while another one runs
// is told (codeBusy), at once rather than after its dial retries.
const busyMessage = "busy: this server already serves an initiator (one per run)"

// acceptLoop accepts initiators until the listener closes and hands each
// that completes the handshake to out, until the run is committed to one
// (s.committed closed: an rdmo initiator was taken, or a reference one got
// its queue); from then on every other is told busyMessage and closed.
// Whatever fails before the handshake completes (framing, version, role, a
// wrong secret, a port scan, a peer that hung up) comes from whoever
// reaches the port, so it is never fatal: one log line, counted, and the
// wait goes on.
//
// acceptWorkers of them run at once, so that peers that connect and stay
// silent (each for up to oob.Options.Timeout) do not keep the initiator
// from being served.
func (s *server) acceptLoop(ctx context.Context, out chan<- acceptResult) {
	defer s.acceptWG.Done()
	for {
		c, ref, err := s.ln.AcceptEither(ctx)
		if err == nil {
			select {
			case <-s.committed:
				s.turnAway(c, ref)
				continue
			default:
			}
			select {
			case out <- acceptResult{c: c, ref: ref}:
			case <-s.committed:
				s.turnAway(c, ref)
			case <-ctx.Done():
				if c != nil {
					c.Close()
				}
				if ref != nil {
					ref.Close()
				}
				return
			}
			continue
		}
		if ctx.Err() != nil || errors.Is(err, oob.ErrClosed) {
			return
		}
		if errors.Is(err, oob.ErrAuth) {
			s.log.Warn("initiator refused: "+authHint(err).Error()+"; still waiting for the initiator",
				zap.Int64("auth_failures", s.authFailures.Add(1)))
			continue
		}
		s.log.Warn("out-of-band handshake failed; still waiting for the initiator", zap.Error(err), zap.Int64("refused", s.refused.Add(1)))
	}
}

// turnAway tells an initiator that connected while another one runs that
// this server is busy, and closes its connection. A reference initiator's
// exchange has no way to say so: it only sees the connection close.
func (s *server) turnAway(c *oob.Conn, ref *oob.RefConn) {
	if ref != nil {
		s.log.Warn("a second initiator connected (reference exchange); closed: "+busyMessage, zap.Stringer("from", ref.RemoteAddr()))
		ref.Close()
		return
	}
	s.log.Warn("a second initiator connected; told: "+busyMessage, zap.Stringer("from", c.RemoteAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.Send(ctx, oob.Error{Code: codeBusy, Message: busyMessage})
	c.Close()
}

// startWorker gets an RDMO worker from a UROM service (the one at --urom,
// or an embedded one started from this binary) and registers this target
// as its client. The service at --urom gets the --secret-file secret (nil:
// none); an embedded one a random secret of the run (package target).
func (s *server) startWorker(ctx context.Context, devCfg map[string]string, secret []byte) error {
	opts := target.Options{
		ServiceAddress: s.cfg.UROMAddress,
		Secret:         secret,
		AppendStrategy: s.cfg.AppendStrategy.String(),
		Plugins:        s.cfg.Plugins,
		Address:        s.local.Address(),
		Logger:         s.log,
	}
	if opts.ServiceAddress == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("cannot find this program's executable (to start worker processes): %w", err)
		}
		// The embedded service logs only warnings unless asked for more:
		// this process reports what matters.
		lc := s.cfg.Log
		if lc.Level > cli.LogWarning && lc.Level < cli.LogDebug {
			lc.Level = cli.LogWarning
		}
		cmd := append([]string{exe, "dpu"}, lc.ChildArgs()...)
		for _, dir := range s.cfg.PluginPath {
			cmd = append(cmd, "--plugin-path", dir)
		}
		opts.Embedded = target.EmbeddedOptions{Command: cmd}
		// The worker runs on this machine: -d applies to it too.
		opts.Env = ucxflag.ConfigEnv(devCfg)
	}
	t, err := target.New(ctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var se *target.ServiceError
		if errors.As(err, &se) && se.Op == "" && se.Addr != "" {
			return dpucmd.UROMError(se.Addr, se.Err)
		}
		return err
	}
	s.t, s.clientID = t, t.ClientID()
	go func() {
		<-t.Done()
		if err := t.Err(); !errors.Is(err, target.ErrClosed) {
			s.fail.set(err)
		}
	}()
	return nil
}

// setupMemory makes the target's UCX and memory and chooses the workload.
func (s *server) setupMemory(devCfg map[string]string) error {
	local, err := target.NewLocal(target.LocalOptions{Config: devCfg, Logger: s.log})
	if err != nil {
		return fmt.Errorf("target UCX: %w", err)
	}
	s.local = local
	s.workload = oob.Workload{Kind: WorkloadKind, Ops: uint64(s.cfg.Ops), Seed: randomID(), FlushEvery: DefaultFlushEvery}
	s.plan = makePlan(s.workload)

	alloc := func(name string, n int) (*region, error) {
		m, err := local.Allocate(n)
		if err != nil {
			return nil, fmt.Errorf("allocating the %s region (%s): %w", name, sizeStr(uint64(n)), err)
		}
		return &region{name: name, mem: m}, nil
	}
	if s.seed, err = alloc(RegionSeed, SeedQueueSize); err != nil {
		return err
	}
	if s.queue, err = alloc(RegionQueue, s.plan.QueueSize); err != nil {
		return err
	}
	if s.scatter, err = alloc(RegionScatter, s.plan.ScatterSize); err != nil {
		return err
	}
	// Each queue's first word is its tail, pointing just after itself.
	for _, q := range []*region{s.seed, s.queue} {
		binary.LittleEndian.PutUint64(q.mem.Bytes(), q.mem.Address()+8)
	}
	local.Start()
	return nil
}

// register registers the target's regions with the RDMO worker.
func (s *server) register(ctx context.Context) error {
	for _, r := range []*region{s.seed, s.queue, s.scatter} {
		reg, err := s.t.Register(ctx, r.mem)
		if err != nil {
			return fmt.Errorf("registering the %s region: %w", r.name, err)
		}
		r.id = reg.ID
	}
	s.log.Info("target memory registered",
		zap.Uint64("client", s.clientID),
		zap.String("seed", sizeStr(uint64(s.seed.mem.Len()))),
		zap.String("queue", sizeStr(uint64(s.queue.mem.Len()))),
		zap.String("scatter", sizeStr(uint64(s.scatter.mem.Len()))),
		zap.Uint64("ops", s.workload.Ops),
		zap.String("seed_value", fmt.Sprintf("%#x", s.workload.Seed)))
	return nil
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

// teardown undoes whatever run did, in order, also after a failure or an
// interrupt: RQ_DESTROY, MR_DEREG, stop the worker, end the UROM session,
// stop the embedded service (target.Target.Close), then release the
// target's UCX (only once no worker can write into it any more).
func (s *server) teardown(tell func()) {
	limit := teardownTimeout
	if s.workerSilent {
		limit = silentTeardown
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	warn := func(what string, err error) {
		if err != nil {
			s.log.Warn("teardown: "+what, zap.Error(err))
		}
	}
	if s.ln != nil {
		s.stopAccept()
		s.ln.Close()
		s.acceptWG.Wait()
	}
	if s.workerSilent && s.t != nil {
		s.stopSilentWorker()
	}
	if s.t != nil && s.rqMade && s.t.Err() == nil && !s.workerSilent {
		err := s.t.DestroyRQ(ctx, s.rq)
		if !errors.Is(err, urom.ErrWorkerDied) && !errors.Is(err, urom.ErrUnknownWorker) {
			warn("RQ_DESTROY", err)
		}
	}
	if tell != nil {
		tell()
	}
	if s.t != nil {
		warn("the RDMO worker", s.t.CloseContext(ctx))
	}
	if s.local != nil {
		warn("releasing target memory", s.local.Close())
	}
	if s.ref != nil {
		s.ref.Close()
	}
	if s.peer != nil {
		// The initiator closes first once it has the verdict.
		s.peer.closeAfterPeer(2 * time.Second)
	}
	s.log.Debug("teardown complete")
}

// stopSilentWorker ends a worker that no longer answers, so that teardown
// does not spend its bound on commands it will not answer. An embedded
// service's worker runs on this machine: it is killed, after which the
// target learns it died and skips its commands, and no worker can write
// the target's memory any more. A remote service's worker is left to its
// service; teardown then waits for it at most silentTeardown.
func (s *server) stopSilentWorker() {
	if s.cfg.UROMAddress != "" {
		return
	}
	pid := s.t.WorkerPID()
	if pid <= 0 {
		return
	}
	s.log.Warn("killing the RDMO worker, which does not answer", zap.Int("pid", pid))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return
	}
	select {
	case <-s.t.Done():
	case <-time.After(silentTeardown):
	}
}

// silentTeardown bounds the teardown of a worker that does not answer.
const silentTeardown = 10 * time.Second

func (s *server) printSummary(done oob.Done, res workloadResult, verr error, elapsed time.Duration, ctx context.Context) {
	out := Stdout
	verdict := "PASSED"
	if verr != nil {
		verdict = "FAILED"
	}
	fmt.Fprintf(out, "rdmo server: verification %s\n", verdict)
	fmt.Fprintf(out, "  initiator     %s (%s)\n", s.initInfo.Name, s.peer.c.RemoteAddr())
	if verr != nil {
		fmt.Fprintf(out, "  problem       %v\n", verr)
	} else {
		fmt.Fprintf(out, "  seed flow     8-byte append (tail base+16) and 16 scattered 8-byte chunks: intact\n")
		fmt.Fprintf(out, "  queue         %d records, %s: exactly once, intact, in order; tail correct\n", res.Records, sizeStr(res.RecordBytes))
		fmt.Fprintf(out, "  scatter       %d scatters, %d chunks, %s: intact, nothing else written\n", res.Scatters, res.Chunks, sizeStr(res.ChunkBytes))
	}
	fmt.Fprintf(out, "  workload      %d ops, seed %#x, %s\n", s.workload.Ops, s.workload.Seed, s.workload.Kind)
	fmt.Fprintf(out, "  reported      %d ops, %s, %d errors; %s from start to Done\n", done.Ops, sizeStr(done.Bytes), done.Errors, elapsed.Round(time.Millisecond))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if st, err := s.t.Stats(sctx); err == nil {
		fmt.Fprintf(out, "  worker        %s\n", workerStats(st))
	}
}

func workerStats(st dpu.Stats) string {
	var total uint64
	for _, n := range st.Requests {
		total += n
	}
	appends := st.Requests[rdmo.OpAppend]
	puts := st.TargetPuts + st.MemcpyPuts + st.Places
	s := fmt.Sprintf("%d requests (%d append, %d scatter, %d flush)", total, appends, st.Requests[rdmo.OpScatter], st.Requests[rdmo.OpFlush])
	s += fmt.Sprintf("; %d target writes (%d UCX puts, %d memcpy, %d placed)", puts, st.TargetPuts, st.MemcpyPuts, st.Places)
	if st.Batches > 0 {
		s += fmt.Sprintf("; %.1f requests/batch", float64(st.BatchedRequests)/float64(st.Batches))
	}
	var failed uint64
	for _, n := range st.Failures {
		failed += n
	}
	s += fmt.Sprintf("; %d failed", failed)
	return s
}

func sizeStr(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

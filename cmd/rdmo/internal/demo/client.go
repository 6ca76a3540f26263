package demo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/cli"
	"github.com/openrdmo/rdmo/cmd/rdmo/internal/ucxflag"
	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/host/oob"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// Timeouts of the client side.
const (
	dialRetryFor      = 30 * time.Second // keep dialing while the server starts
	dialRetryInterval = 200 * time.Millisecond
	workerInfoTimeout = 90 * time.Second // the server sets up its worker first
	barrierTimeout    = 60 * time.Second
	flushTimeout      = 60 * time.Second // one flush, however busy the worker (default of FlushTimeoutEnv)
)

// FlushTimeoutEnv, when set (a Go duration, e.g. "5s"), replaces the 60 s
// bound on each flush's answer. When it runs out the worker is taken to
// have stopped: every outstanding and later request fails at once with
// that cause (initiator.Options.FlushTimeout).
const FlushTimeoutEnv = "RDMO_FLUSH_TIMEOUT"

// clientFlushTimeout is the flush bound: FlushTimeoutEnv or flushTimeout.
func clientFlushTimeout() (time.Duration, error) {
	v := os.Getenv(FlushTimeoutEnv)
	if v == "" {
		return flushTimeout, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, cli.Usagef("%s=%q: want a positive duration such as 60s", FlushTimeoutEnv, v)
	}
	return d, nil
}

// pendingFlushes is how many periodic flushes may be in flight at once, so
// that at most unflushedBudget requests are unflushed.
func pendingFlushes(flushEvery uint64) int {
	return max(1, int(unflushedBudget/max(flushEvery, 1))-1)
}

func verifiedTimeout(ops uint64) time.Duration {
	return 2*time.Minute + time.Duration(ops)*20*time.Microsecond
}

// ErrNotVerified is returned (wrapped) when the server's verdict is
// negative.
var ErrNotVerified = errors.New("the server did not verify the work")

type client struct {
	cfg cli.Config
	log *zap.Logger

	peer     *peer
	ref      *oob.RefConn // --oob-protocol doca (docaclient.go)
	in       *initiator.Initiator
	watchWG  sync.WaitGroup
	finished chan struct{}

	flushTimeout time.Duration // initiator.Options.FlushTimeout

	wi      oob.WorkerInfo
	credits int // initiator.Options.Credits, from wi.MaxInFlightPerRQ
	seed    oob.RegionInfo
	queue   oob.RegionInfo
	scatter oob.RegionInfo

	// counters, read by the progress reporter
	ops      atomic.Uint64
	appends  atomic.Uint64
	scatters atomic.Uint64
	bytes    atomic.Uint64

	mu        sync.Mutex
	flushLat  []time.Duration
	failures  uint64 // failed requests the worker reported in flush responses
	flushErrs uint64
	fatal     error // a flush failed for good (peer gone, timeout)
	fatalSet  atomic.Bool
}

// RunClient runs -m client, the initiator: it
// connects to the server's out-of-band port, creates an initiator for the
// RDMO worker the server names, runs the seed flow of the reference demo
// and then the workload, reports Done after its final flush, and succeeds
// only when the server verified every byte.
func RunClient(ctx context.Context, cfg cli.Config) error {
	c := &client{cfg: cfg, log: cfg.Logger, finished: make(chan struct{})}
	if c.log == nil {
		c.log = zap.NewNop()
	}
	err := c.run(ctx)
	// A flush timeout needs no explanation from the server: it already
	// waited the whole bound, and the server learns it from this side.
	if err != nil && c.peer != nil && ctx.Err() == nil && !errors.Is(err, ErrNotVerified) && !errors.Is(err, initiator.ErrFlushTimeout) {
		err = c.peer.explain(err)
	}
	if err != nil && c.peer != nil {
		var re *RemoteError
		msg := err.Error()
		if ctx.Err() != nil {
			msg = "initiator interrupted"
		}
		if !errors.As(err, &re) && !errors.Is(err, ErrNotVerified) {
			c.peer.abort(codeAborted, msg)
		}
	}
	c.teardown()
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("interrupted: %w", ctx.Err())
	}
	return err
}

func (c *client) run(ctx context.Context) error {
	cfg := c.cfg
	secret, err := cli.LoadSecret(cfg.SecretFile)
	if err != nil {
		return err
	}
	if w := cli.SecretWarning(cfg.SecretFile); w != "" {
		c.log.Warn(w)
	}
	devCfg, err := ucxflag.DeviceConfig(cfg.Device)
	if err != nil {
		return cli.Usagef("-d/--device: %v", err)
	}
	if c.flushTimeout, err = clientFlushTimeout(); err != nil {
		return err
	}
	if cfg.OOBProtocol == cli.OOBDOCA {
		return c.runReference(ctx, devCfg)
	}
	conn, err := c.dial(ctx, secret)
	if err != nil {
		return err
	}
	c.peer = newPeer(conn, "server")
	c.log.Info("connected to the server", zap.Stringer("server", conn.RemoteAddr()), zap.Bool("authenticated", conn.Authenticated()))

	m, err := c.next(ctx, "WorkerInfo", workerInfoTimeout)
	var re *RemoteError
	if errors.As(err, &re) && re.Msg.Code == codeBusy {
		return &busyError{addr: conn.RemoteAddr().String(), re: re}
	}
	if err != nil {
		return err
	}
	wi, ok := m.(oob.WorkerInfo)
	if !ok {
		return fmt.Errorf("server sent %T, want WorkerInfo", m)
	}
	if err := c.accept(wi); err != nil {
		c.peer.abort(codeBadWorkload, err.Error())
		return err
	}
	wl := *wi.Workload
	c.log.Info("received the RDMO worker's address", zap.Uint64("client", wi.ClientID), zap.Uint64("ops", wl.Ops), zap.String("seed", fmt.Sprintf("%#x", wl.Seed)),
		zap.Uint32("max_in_flight_per_rq", wi.MaxInFlightPerRQ), zap.Int("credits", c.credits))

	in, err := initiator.New(initiator.Options{
		WorkerAddress: wi.WorkerAddress,
		ClientID:      wi.ClientID,
		UCX:           devCfg,
		Logger:        c.log.Named("initiator"),
		// Flow control within the worker's in-flight limit (rdmo dpu's
		// "worker": {"max-in-flight-per-rq": N}), as the server tells it.
		Credits: c.credits,
		// Pack requests queued while earlier ones are in flight into one
		// message, when the worker says it understands batch containers.
		Aggregate: initiator.AggregateSupported(wi.Capabilities),
		// Large records lent from a pool the worker reads in place, when
		// it says it maps lend pools (RecordRing).
		Lend: initiator.LendSupported(wi.Capabilities),
		// Acks of many requests in one message, when the worker groups them.
		GroupAcks: initiator.AckGroupSupported(wi.Capabilities),
		// Containers of up to 60 KiB, in one piece over shared memory,
		// when the worker takes them.
		LargeBatches: initiator.LargeBatchSupported(wi.Capabilities),
		// Payloads up to 512 KiB eager where TCP is the only transport,
		// when the worker accepts them.
		LargeEager: initiator.LargeEagerSupported(wi.Capabilities),
		// A flush not answered in time fails every request at once.
		FlushTimeout: c.flushTimeout,
	})
	if err != nil {
		return fmt.Errorf("connecting to the RDMO worker: %w", err)
	}
	c.in = in
	// The out-of-band connection closing means the server (and with it
	// the worker) is gone: UCX may not notice (shared memory), so say so.
	c.watchWG.Add(1)
	go func() {
		defer c.watchWG.Done()
		select {
		case <-c.peer.done:
			in.PeerFailed(c.peer.gone())
		case <-c.finished:
		}
	}()

	host, _ := os.Hostname()
	name := fmt.Sprintf("%s/%d", host, os.Getpid())
	if err := c.peer.send(ctx, oob.InitiatorInfo{WorkerAddress: in.Address(), Name: name}); err != nil {
		return err
	}
	if err := c.expectBarrier(ctx, barrierStart); err != nil {
		return err
	}

	// The seed flow of the reference demo (docs/PROTOCOL.md section 12.1).
	if err := c.seedFlow(ctx); err != nil {
		return err
	}

	// The workload, then Done: everything is flushed and visible.
	start := time.Now()
	stopProgress := startProgress(c, wl.Ops, cfg.Log.Level >= cli.LogInfo)
	err = c.workload(ctx, wl)
	stopProgress()
	elapsed := time.Since(start)
	if err != nil {
		return err
	}
	c.mu.Lock()
	errs := c.failures + c.flushErrs
	c.mu.Unlock()
	done := oob.Done{Ops: c.ops.Load(), Bytes: c.bytes.Load(), Errors: errs}
	if errs > 0 {
		done.Message = fmt.Sprintf("%d requests failed", errs)
	}
	if err := c.peer.send(ctx, done); err != nil {
		return err
	}
	c.log.Info("work done and flushed; waiting for the server's verdict", zap.Uint64("ops", done.Ops), zap.Duration("elapsed", elapsed))
	m, err = c.next(ctx, "Verified", verifiedTimeout(wl.Ops))
	if err != nil {
		return err
	}
	v, ok := m.(oob.Verified)
	if !ok {
		return fmt.Errorf("server sent %T, want Verified", m)
	}
	c.printSummary(v, elapsed)
	if !v.OK {
		return fmt.Errorf("%w: %s", ErrNotVerified, v.Detail)
	}
	return nil
}

// dial connects to the server, retrying while nobody listens yet (the
// server may start after the client). A failed handshake is final.
func (c *client) dial(ctx context.Context, secret []byte) (*oob.Conn, error) {
	addr := net.JoinHostPort(c.cfg.ServerName, strconv.Itoa(int(c.cfg.OOBPort)))
	opts := oob.Options{Secret: secret, Role: oob.RoleInitiator, Logger: c.log.Named("oob")}
	deadline := time.Now().Add(dialRetryFor)
	logged := false
	for {
		dctx, cancel := context.WithTimeout(ctx, oob.DefaultTimeout)
		conn, err := oob.Dial(dctx, addr, opts)
		cancel()
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var he *oob.ConnError // the handshake failed (the connection was made)
		if errors.As(err, &he) {
			return nil, fmt.Errorf("server at %s refused: %w", addr, authHint(err))
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			return nil, fmt.Errorf("-s/--server-name %q: no such host", c.cfg.ServerName)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("cannot reach the server at %s (tried for %v): %w", addr, dialRetryFor, err)
		}
		if !logged {
			c.log.Info("waiting for the server to listen; retrying", zap.String("addr", addr), zap.Duration("for", dialRetryFor))
			c.log.Debug("dial", zap.Error(err))
			logged = true
		}
		select {
		case <-time.After(dialRetryInterval):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// creditsFor is the initiator's Options.Credits for a worker whose
// in-flight limit per request queue is limit (0: not said, an older
// server or worker; the initiator's default, which is the worker's).
func creditsFor(limit uint32) (int, error) {
	switch {
	case limit == 0:
		return initiator.DefaultCredits, nil
	case limit < minCredits:
		return 0, fmt.Errorf("the RDMO worker accepts %d requests in flight per queue; this client needs at least %d (rdmo dpu's \"worker\": {\"max-in-flight-per-rq\"})", limit, minCredits)
	}
	return int(min(limit, math.MaxInt32)), nil
}

// minCredits is the fewest credits the initiator's flow control works
// with (initiator.Options.Credits).
const minCredits = 3

// accept checks that the WorkerInfo describes work this client can do.
func (c *client) accept(wi oob.WorkerInfo) error {
	if len(wi.WorkerAddress) == 0 {
		return errors.New("server sent no RDMO worker address")
	}
	if wi.Workload == nil {
		return errors.New("server sent no workload (an older or different rdmo server?)")
	}
	if wi.Workload.Kind != WorkloadKind {
		return fmt.Errorf("server asks for workload %q; this client runs %q (use the same rdmo version on both sides)", wi.Workload.Kind, WorkloadKind)
	}
	if wi.Workload.FlushEvery == 0 {
		return errors.New("server sent a workload without a flush interval")
	}
	found := map[string]*oob.RegionInfo{RegionSeed: &c.seed, RegionQueue: &c.queue, RegionScatter: &c.scatter}
	have := map[string]bool{}
	for _, r := range wi.Regions {
		if p, ok := found[r.Name]; ok {
			*p = r
			have[r.Name] = true
		}
	}
	for name := range found {
		if !have[name] {
			return fmt.Errorf("server did not name a %q region", name)
		}
	}
	p := makePlan(*wi.Workload)
	if c.queue.Len < uint64(8+p.RecordBytes) || c.scatter.Len < p.ScatterSpan || c.seed.Len < SeedQueueSize {
		return errors.New("the server's regions are too small for its workload (different rdmo versions?)")
	}
	credits, err := creditsFor(wi.MaxInFlightPerRQ)
	if err != nil {
		return err
	}
	c.wi, c.credits = wi, credits
	return nil
}

func (c *client) next(ctx context.Context, what string, timeout time.Duration) (oob.Message, error) {
	return c.peer.next(ctx, nil, nil, what, timeout)
}

func (c *client) expectBarrier(ctx context.Context, id uint64) error {
	m, err := c.next(ctx, fmt.Sprintf("Barrier %d", id), barrierTimeout)
	if err != nil {
		return err
	}
	switch v := m.(type) {
	case oob.Barrier:
		if v.ID == id {
			return nil
		}
	case oob.Verified:
		if !v.OK {
			return fmt.Errorf("%w: %s", ErrNotVerified, v.Detail)
		}
	}
	return fmt.Errorf("server sent %#v, want Barrier %d", m, id)
}

// seedFlow: append 8 bytes of 0x33 to the seed queue, flush, let the
// server check them (barrier), then scatter 16 chunks of 8 bytes and flush.
func (c *client) seedFlow(ctx context.Context) error {
	s := c.in.With(ctx, 0)
	data := make([]byte, seedAppendLen)
	for i := range data {
		data[i] = seedAppendByte
	}
	if _, err := s.Append(c.seed.Base, c.seed.ID, c.seed.ID, data); err != nil {
		return fmt.Errorf("seed append: %w", err)
	}
	if err := c.flushSync(ctx); err != nil {
		return fmt.Errorf("seed flow, first flush: %w", err)
	}
	if err := c.peer.send(ctx, oob.Barrier{ID: barrierSeedAppend}); err != nil {
		return err
	}
	if err := c.expectBarrier(ctx, barrierSeedAppend); err != nil {
		return err
	}
	iovs := make([]wire.IOV, seedScatterChunks)
	chunks := make([][]byte, seedScatterChunks)
	for i := range iovs {
		iovs[i] = wire.IOV{Addr: c.seed.Base + seedScatterOffset + uint64(i*seedScatterStride), Rkey: rdmo.RegionID(c.seed.ID), Len: seedScatterLen}
		chunks[i] = seedChunk(i)
	}
	if _, err := s.Scatter(iovs, chunks); err != nil {
		return fmt.Errorf("seed scatter: %w", err)
	}
	if err := c.flushSync(ctx); err != nil {
		return fmt.Errorf("seed flow, second flush: %w", err)
	}
	return nil
}

// flushSync flushes and waits, bounded, recording the latency.
func (c *client) flushSync(ctx context.Context) error {
	t0 := time.Now()
	// Bounded by the initiator (Options.FlushTimeout), which fails
	// every flush at once when one is overdue.
	rsp, err := c.in.Flush(ctx)
	c.recordFlush(time.Since(t0), rsp, err)
	if errors.Is(err, rdmo.ErrNoQueue) {
		return noQueueError(err)
	}
	var fe *initiator.FlushError
	if errors.As(err, &fe) {
		return nil // counted; the server's verification will say what is wrong
	}
	return err
}

func (c *client) recordFlush(lat time.Duration, rsp wire.FlushResponse, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var fe *initiator.FlushError
	switch {
	case err == nil:
		c.flushLat = append(c.flushLat, lat)
	case errors.Is(err, rdmo.ErrNoQueue):
		// Nothing this initiator sends is run: no use going on.
		c.flushErrs++
		if c.fatal == nil {
			c.fatal = noQueueError(err)
			c.fatalSet.Store(true)
		}
	case errors.As(err, &fe):
		c.flushLat = append(c.flushLat, lat)
		c.failures += uint64(fe.Response.Failed)
		c.log.Warn("the worker reports failed requests", zap.Uint32("failed", fe.Response.Failed), zap.Error(err))
	default:
		c.flushErrs++
		if c.fatal == nil {
			c.fatal = err
			c.fatalSet.Store(true)
		}
	}
}

// noQueueError explains a flush answered with rdmo.StatusNoQueue.
func noQueueError(err error) error {
	return fmt.Errorf("%w (the worker does not serve this initiator's UCX endpoint: over shared memory both sides must have the same error handling, UCX_POSIX_ERROR_HANDLING and UCX_SYSV_ERROR_HANDLING; docs/SECURITY.md)", err)
}

func (c *client) fatalErr() error {
	if !c.fatalSet.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}

// flushAsync issues a periodic flush without waiting for it; at most
// cap(sem) are outstanding (flushes complete in order: a new one waits for
// the oldest).
func (c *client) flushAsync(ctx context.Context, sem chan struct{}, wg *sync.WaitGroup) error {
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	t0 := time.Now()
	fw, err := c.in.FlushAsync(ctx)
	if err != nil {
		<-sem
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() { <-sem }()
		// The initiator bounds the wait (Options.FlushTimeout).
		select {
		case <-fw.Done():
			lat := time.Since(t0)
			wctx, cancel := context.WithTimeout(context.Background(), time.Second)
			rsp, err := fw.Wait(wctx)
			cancel()
			c.recordFlush(lat, rsp, err)
		case <-ctx.Done():
			c.recordFlush(0, wire.FlushResponse{}, ctx.Err())
		}
	}()
	return nil
}

// workload runs the operations the seed describes: appends of
// self-describing records to the queue and scatters into the scatter
// region, with a pipelined flush every FlushEvery operations and a final
// flush that returns only when everything is visible.
func (c *client) workload(ctx context.Context, wl oob.Workload) error {
	g := newGenerator(wl.Seed)
	rec := make([]byte, maxRecord)
	bufs := make([][]byte, maxScatterIOV)
	for i := range bufs {
		bufs[i] = make([]byte, maxChunk)
	}
	iovs := make([]wire.IOV, 0, maxScatterIOV)
	chunks := make([][]byte, 0, maxScatterIOV)
	sem := make(chan struct{}, pendingFlushes(wl.FlushEvery))
	var wg sync.WaitGroup
	defer wg.Wait()
	var ring *RecordRing // nil: the large records go by Append, copied
	if initiator.LendSupported(c.wi.Capabilities) {
		// As Options.Lend was set: a worker without lend pools gets no
		// pool to allocate and free.
		r, err := NewRecordRing(ctx, c.in)
		if err != nil {
			// Not needed to run.
			c.log.Warn("no lend pool for the large records; they are copied", zap.Error(err))
		}
		ring = r
	}
	defer ring.Close(ctx)
	s := c.in.With(ctx, 0)
	for i := uint64(0); i < wl.Ops; i++ {
		if err := c.fatalErr(); err != nil {
			return fmt.Errorf("after %d ops: %w", i, err)
		}
		op := g.next()
		var err error
		if op.scatter {
			iovs, chunks = iovs[:0], chunks[:0]
			var n uint64
			for k, ch := range op.chunks {
				iovs = append(iovs, wire.IOV{Addr: c.scatter.Base + ch.off, Rkey: rdmo.RegionID(c.scatter.ID), Len: uint16(ch.len)})
				chunks = append(chunks, fillChunk(bufs[k], wl.Seed, op.index, k, ch.len))
				n += uint64(ch.len)
			}
			_, err = s.Scatter(iovs, chunks)
			c.scatters.Add(1)
			c.bytes.Add(n)
		} else {
			if ring.Lends(op.size) {
				err = ring.Append(ctx, s, c.queue.Base, c.queue.ID, wl.Seed, op.seq, op.size)
			} else {
				_, err = s.Append(c.queue.Base, c.queue.ID, c.queue.ID, fillRecord(rec, wl.Seed, op.seq, op.size))
			}
			c.appends.Add(1)
			c.bytes.Add(uint64(op.size))
		}
		if err != nil {
			return fmt.Errorf("op %d of %d: %w", i+1, wl.Ops, err)
		}
		c.ops.Add(1)
		if (i+1)%wl.FlushEvery == 0 && i+1 < wl.Ops {
			if err := c.flushAsync(ctx, sem, &wg); err != nil {
				return fmt.Errorf("flush after op %d: %w", i+1, err)
			}
		}
	}
	if err := c.flushSync(ctx); err != nil {
		return fmt.Errorf("final flush: %w", err)
	}
	wg.Wait()
	if err := c.fatalErr(); err != nil {
		return err
	}
	return nil
}

func (c *client) teardown() {
	close(c.finished)
	c.watchWG.Wait()
	if c.in != nil {
		if err := c.in.Close(); err != nil {
			c.log.Debug("closing the initiator", zap.Error(err))
		}
	}
	if c.peer != nil {
		c.peer.close()
	}
	if c.ref != nil {
		c.ref.Close()
	}
}

func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := len(sorted) * p / 100
	return sorted[min(i, len(sorted)-1)]
}

func (c *client) printSummary(v oob.Verified, elapsed time.Duration) {
	out := Stdout
	c.mu.Lock()
	lat := append([]time.Duration(nil), c.flushLat...)
	errs := c.failures + c.flushErrs
	c.mu.Unlock()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	verdict := "PASSED"
	if !v.OK {
		verdict = "FAILED"
	}
	ops, bytes := c.ops.Load(), c.bytes.Load()
	secs := max(elapsed.Seconds(), 1e-9)
	fmt.Fprintf(out, "rdmo client: server verification %s\n", verdict)
	fmt.Fprintf(out, "  server says   %s\n", v.Detail)
	fmt.Fprintf(out, "  ops           %d (%d appends, %d scatters) after the seed flow\n", ops, c.appends.Load(), c.scatters.Load())
	fmt.Fprintf(out, "  bytes         %s of payload\n", sizeStr(bytes))
	fmt.Fprintf(out, "  rate          %s in %s: %.1f kops/s, %s/s\n", fmtCount(ops), elapsed.Round(time.Millisecond), float64(ops)/secs/1e3, sizeStr(uint64(float64(bytes)/secs)))
	fmt.Fprintf(out, "  flushes       %d, latency p50 %v, p99 %v\n", len(lat), roundLat(percentile(lat, 50)), roundLat(percentile(lat, 99)))
	st := c.in.Stats()
	fmt.Fprintf(out, "  requests      %d appends (%d rendezvous), %d scatters, %d flushes, seed flow included; window waits %d\n", st.Appends, st.Rendezvous, st.Scatters, st.Flushes, st.WindowWaits)
	fmt.Fprintf(out, "  errors        %d\n", errs)
}

func fmtCount(n uint64) string { return strconv.FormatUint(n, 10) + " ops" }

func roundLat(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

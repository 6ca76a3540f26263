package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/demo"
	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
)

// roundSpec is one round of one row, as the driver hands it to every
// initiator.
type roundSpec struct {
	Mode     string        `json:"mode"`
	Strategy string        `json:"strategy,omitempty"` // the RDMO worker (rows with one)
	Credit   int           `json:"credit,omitempty"`   // RDMO requests past the last completed flush (0: no limit)
	Round    int           `json:"round"`
	Size     int           `json:"size"`
	Duration time.Duration `json:"duration"` // 0: no time limit
	MaxOps   int           `json:"max_ops"`  // 0: no count limit
	Sample   int           `json:"sample"`
	Window   int           `json:"window"`
	Queue    queueInfo     `json:"queue"`    // append rows
	LoadMax  int           `json:"load_max"` // flush/load: appends the queue holds for this initiator
	Scatter  queueInfo     `json:"scatter"`  // scatter rows: the region
	Layout   scatterLayout `json:"layout"`   // scatter rows

	Ops      *opsSpec      `json:"ops,omitempty"`      // op-pack rows (target_ops.go)
	Workload *workloadSpec `json:"workload,omitempty"` // the workload row (initiator_workload.go)
}

// roundResult is what one initiator did in a round.
type roundResult struct {
	Ops     uint64        `json:"ops"`
	Bytes   uint64        `json:"bytes"`   // payload bytes of the operations (and of the load)
	Elapsed time.Duration `json:"elapsed"` // first operation to the last one's completion
	Lat     Hist          `json:"lat"`
	Load    uint64        `json:"load"` // flush/load: appends of the load
	// Msgs is the active messages the RDMO initiator issued in the round
	// (fewer than requests when it packs them into BATCH containers).
	Msgs uint64 `json:"msgs"`
	// Flow is the RDMO initiator's flow control and progress loop over
	// the round (nil for rows without one).
	Flow *FlowFigures `json:"flow,omitempty"`
}

// initProc is an initiator process.
type initProc struct {
	id  int
	log *zap.Logger

	// Raw UCX, for the native rows and the AM baselines: owned by the
	// command loop's goroutine.
	uctx  *ucp.Context
	w     *ucp.Worker
	ep    *ucp.Endpoint
	rkeys map[string]*ucp.RemoteKey
	echo  echoState

	ins  map[string]*initiator.Initiator // by the worker's append strategy
	in   *initiator.Initiator            // the current round's
	acks ackTracker
	bufs map[int][][]byte // recordBuffers' buffers by size, kept from round to round
	// pool is the lend pool of poolIn (lentBuffers), kept from round to
	// round while the initiator stays.
	pool   *initiator.LendPool
	poolIn *initiator.Initiator
	lends  map[*initiator.Initiator]bool // made with Options.Lend
	// ring is the workload row's ring of large records (recordRing).
	ring   *demo.RecordRing
	ringIn *initiator.Initiator
}

// lentBuffers returns n buffers of size bytes for a round's lent records:
// from the initiator's lend pool when the worker maps lend pools (the
// worker then reads them in place), else recordBuffers'.
func (p *initProc) lentBuffers(n, size int) ([][]byte, error) {
	if !p.lends[p.in] || (p.poolIn == p.in && p.pool == nil) {
		return p.recordBuffers(n, size), nil
	}
	if p.poolIn != p.in || len(p.pool.Bytes()) < n*size {
		if p.pool != nil && p.poolIn == p.in {
			if err := p.pool.Close(context.Background()); err != nil {
				return nil, err
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pool, err := p.in.NewLendPool(ctx, max(n*size, lentRingBytes))
		if err != nil {
			return nil, err
		}
		p.pool, p.poolIn = pool, p.in
		if !pool.ByReference() {
			// Lent from Go memory as without a pool, so the row stays
			// the same where the worker cannot map it.
			p.log.Info("lend pool not mapped by the worker: records lent from Go memory", zap.Error(pool.Unmapped()))
			p.pool = nil
			if err := pool.Close(ctx); err != nil {
				return nil, err
			}
			return p.recordBuffers(n, size), nil
		}
	}
	mem := p.pool.Bytes()
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = mem[i*size : (i+1)*size : (i+1)*size]
	}
	return bufs, nil
}

// recordBuffersMax bounds the memory recordBuffers keeps across sizes.
const recordBuffersMax = 256 << 20

// recordBuffers returns n buffers of size bytes for a round's records,
// the same from round to round while the size stays: a row that made them
// every round (a window of 1 MiB buffers) charged its CPU figure with
// clearing them and collecting the last round's, which an application
// reusing its buffers does not pay. Every record is written whole before
// it is sent (fillRecord), so a buffer's old bytes never travel.
func (p *initProc) recordBuffers(n, size int) [][]byte {
	held := 0
	for sz, l := range p.bufs {
		held += sz * len(l)
	}
	if held+max(0, n-len(p.bufs[size]))*size > recordBuffersMax {
		p.bufs = map[int][][]byte{size: p.bufs[size]}
	}
	if p.bufs == nil {
		p.bufs = map[int][][]byte{}
	}
	l := p.bufs[size]
	for len(l) < n {
		l = append(l, make([]byte, size))
	}
	p.bufs[size] = l
	return l[:n:n]
}

func initiatorMain() error {
	runtime.LockOSThread()
	id, err := strconv.Atoi(os.Getenv(envID))
	if err != nil || id < 0 || id >= maxInitiators {
		return fmt.Errorf("%s=%q: want 0..%d", envID, os.Getenv(envID), maxInitiators-1)
	}
	p := &initProc{id: id, log: childLogger("initiator-" + strconv.Itoa(id)), rkeys: map[string]*ucp.RemoteKey{}, ins: map[string]*initiator.Initiator{}}
	p.acks.init()
	defer p.close()
	ls := newLineServer()
	ls.reply("READY", map[string]any{"id": id})
	for {
		verb, body, ok := ls.next()
		if !ok || verb == "quit" {
			return nil
		}
		if err := p.handle(ls, verb, body); err != nil {
			ls.fail(err)
		}
	}
}

func (p *initProc) close() {
	for _, in := range p.ins {
		in.Close()
	}
	if p.w != nil {
		if p.ep != nil {
			p.ep.Close()
		}
		p.w.Close()
	}
	if p.uctx != nil {
		p.uctx.Close()
	}
}

func (p *initProc) handle(ls *lineServer, verb string, body []byte) error {
	switch verb {
	case "target":
		var req struct {
			Addr []byte `json:"addr"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return err
		}
		if err := p.connectTarget(req.Addr); err != nil {
			return err
		}
		ls.reply("OK", map[string]any{"transports": p.ep.Transports()})
	case "rdmo":
		var req rdmoReq
		if err := json.Unmarshal(body, &req); err != nil {
			return err
		}
		if old := p.ins[req.Strategy]; old != nil {
			old.Close()
			delete(p.ins, req.Strategy)
			delete(p.lends, old)
		}
		in, err := initiator.New(initiator.Options{
			WorkerAddress: req.Addr,
			ClientID:      req.Client,
			Window:        req.Window,
			Aggregate:     req.Aggregate,
			Lend:          req.Lend,
			GroupAcks:     req.AckGroups,
			LargeBatches:  req.Large,
			// The run's worker is this binary's, with its default limits.
			LargeEager:    initiator.LargeEagerSupported(dpu.Capabilities()),
			ErrorHandling: errorHandling(req.NoDetect),
			OnAck:         p.acks.onAck,
			Name:          "bench-initiator-" + strconv.Itoa(p.id) + "-" + req.Strategy,
			Logger:        p.log,
		})
		if err != nil {
			return err
		}
		p.ins[req.Strategy] = in
		if req.Lend {
			if p.lends == nil {
				p.lends = map[*initiator.Initiator]bool{}
			}
			p.lends[in] = true
		}
		ls.reply("ADDR", map[string]any{"addr": in.Address()})
	case "rdmo-close":
		var req rdmoReq
		if err := json.Unmarshal(body, &req); err != nil {
			return err
		}
		if in := p.ins[req.Strategy]; in != nil {
			delete(p.ins, req.Strategy)
			delete(p.lends, in)
			if err := in.Close(); err != nil {
				return err
			}
		}
		ls.reply("OK", struct{}{})
	case "round":
		var s roundSpec
		if err := json.Unmarshal(body, &s); err != nil {
			return err
		}
		var st0 initiator.Stats
		in := p.ins[s.Strategy]
		if in != nil {
			st0 = in.Stats()
		}
		res, err := p.round(s)
		if in != nil {
			st := in.Stats()
			res.Msgs = st.Messages - st0.Messages
			res.Flow = flowDelta(st0, st)
		}
		if err != nil {
			return fmt.Errorf("%s round %d: %w", s.Mode, s.Round, err)
		}
		res.Lat.seal()
		ls.reply("DONE", res)
	default:
		return fmt.Errorf("unknown command %q", verb)
	}
	return nil
}

func (p *initProc) connectTarget(addr []byte) error {
	if p.w == nil {
		uctx, err := ucp.NewContext(ucp.ContextOptions{Name: "rdmo-bench-initiator"})
		if err != nil {
			return err
		}
		w, err := uctx.NewWorker(ucp.WorkerOptions{MaxOutstanding: 16384})
		if err != nil {
			uctx.Close()
			return err
		}
		p.uctx, p.w = uctx, w
		if err := w.SetHandler(amEcho, ucp.MessageHandlerFunc(p.onEcho)); err != nil {
			return err
		}
	}
	if p.ep != nil {
		return nil
	}
	ep, err := p.w.Connect(addr, ucp.EndpointOptions{Name: "bench-target"})
	if err != nil {
		return err
	}
	p.ep = ep
	return nil
}

func (p *initProc) rkey(packed []byte) (*ucp.RemoteKey, error) {
	if k := p.rkeys[string(packed)]; k != nil {
		return k, nil
	}
	k, err := p.ep.UnpackRkey(packed)
	if err != nil {
		return nil, err
	}
	p.rkeys[string(packed)] = k
	return k, nil
}

// budget ends a round after max operations or at the deadline (checked
// every `every` operations), whichever comes first.
type budget struct {
	max      int
	deadline time.Time
	every    int
}

func newBudget(s roundSpec, every int) budget {
	b := budget{max: s.MaxOps, every: every}
	if s.Duration > 0 {
		b.deadline = time.Now().Add(s.Duration)
	}
	if b.max == 0 && b.deadline.IsZero() {
		b.max = 1
	}
	return b
}

// timedOps runs op(0), op(1), ... one at a time until the round's budget
// is used up, timing each into the round's latency histogram, then
// check(n) outside the timing (nil: nothing to check). size is the bytes
// one operation counts for.
func timedOps(s roundSpec, size int, op, check func(n int) error) (roundResult, error) {
	var h Hist
	b := newBudget(s, 1)
	start := time.Now()
	n := 0
	for ; !b.done(n); n++ {
		t0 := time.Now()
		err := op(n)
		h.Add(time.Since(t0))
		if err == nil && check != nil {
			err = check(n)
		}
		if err != nil {
			return roundResult{}, err
		}
	}
	return roundResult{Ops: uint64(n), Bytes: uint64(n * size), Elapsed: time.Since(start), Lat: h}, nil
}

func (b budget) done(n int) bool {
	if b.max > 0 && n >= b.max {
		return true
	}
	return !b.deadline.IsZero() && n%b.every == 0 && n > 0 && time.Now().After(b.deadline)
}

func (p *initProc) round(s roundSpec) (roundResult, error) {
	if s.Sample < 1 {
		s.Sample = 1
	}
	if s.Window < 1 {
		s.Window = DefaultWindow
	}
	p.in = p.ins[s.Strategy]
	r, ok := rowByName(s.Mode)
	if !ok || r.Round == nil {
		return roundResult{}, fmt.Errorf("no initiator round for mode %q", s.Mode)
	}
	return r.Round(p, s)
}

// unlocked runs an RDMO round on a goroutine of its own, as an
// application calls the Initiator: the command goroutine is locked to its
// OS thread (for the raw UCX worker of the baselines), and every time a
// locked goroutine blocks (window, credits, a flush) the Go runtime hands
// its thread's P away and parks the thread on a futex, a cost no
// application that did not lock its thread would pay.
func unlocked(round func() (roundResult, error)) (roundResult, error) {
	var res roundResult
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err = round()
	}()
	<-done
	return res, err
}

// rdmoReq connects (or closes) the initiator's RDMO Initiator to the
// worker of one strategy.
type rdmoReq struct {
	Strategy  string `json:"strategy"`
	Addr      []byte `json:"addr,omitempty"`
	Client    uint64 `json:"client,omitempty"`
	Window    int    `json:"window,omitempty"`
	Aggregate bool   `json:"aggregate,omitempty"`
	Lend      bool   `json:"lend,omitempty"`
	AckGroups bool   `json:"ack_groups,omitempty"`
	Large     bool   `json:"large_batches,omitempty"`
	NoDetect  bool   `json:"no_detect,omitempty"`
}

func (p *initProc) needRDMO() error {
	if p.in == nil {
		return errors.New("no RDMO initiator for this worker (the driver did not connect one)")
	}
	return nil
}

func (p *initProc) needTarget() error {
	if p.ep == nil {
		return errors.New("not connected to the target")
	}
	return nil
}

const flushTimeout = 2 * time.Minute

func (p *initProc) flush() error { return checkFlush(p.in.Flush) }

// checkFlush makes one flush (bounded by flushTimeout) and fails unless
// every request before it succeeded.
func checkFlush(flush func(ctx context.Context) (wire.FlushResponse, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	rsp, err := flush(ctx)
	if err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if rsp.Failed != 0 {
		return fmt.Errorf("flush reports %d failed requests (first: %v)", rsp.Failed, rsp.FirstStatus)
	}
	return nil
}

// errorHandling is the RDMO initiators' endpoint mode (--no-peer-detection).
func errorHandling(none bool) ucp.ErrorHandling {
	if none {
		return ucp.ErrorHandlingNone
	}
	return ucp.ErrorHandlingPrefer
}

// flowDelta is the initiator's flow figures between two readings.
func flowDelta(a, b initiator.Stats) *FlowFigures {
	return &FlowFigures{
		CreditWaits:   b.CreditWaits - a.CreditWaits,
		WindowWaits:   b.WindowWaits - a.WindowWaits,
		CreditFlushes: b.CreditFlushes - a.CreditFlushes,
		Batches:       b.Batches - a.Batches,
		StreamRounds:  b.StreamRounds - a.StreamRounds,
		HandOvers:     b.HandOvers - a.HandOvers,
		Borrows:       b.Borrows - a.Borrows,
		Sleeps:        b.Sleeps - a.Sleeps,
		Wakes:         b.Wakes - a.Wakes,
	}
}

package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/rdmo"
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
}

// echoState is the AM baselines' view of the sink's echoes (touched only
// inside Progress, on the command goroutine).
type echoState struct {
	t0   map[uint64]time.Time // sampled seq -> send time
	hist *Hist
	last uint64 // last echoed seq + 1
	fin  bool
	errs int
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
		}
		in, err := initiator.New(initiator.Options{
			WorkerAddress: req.Addr,
			ClientID:      req.Client,
			Window:        req.Window,
			Aggregate:     req.Aggregate,
			OnAck:         p.acks.onAck,
			Name:          "bench-initiator-" + strconv.Itoa(p.id) + "-" + req.Strategy,
			Logger:        p.log,
		})
		if err != nil {
			return err
		}
		p.ins[req.Strategy] = in
		ls.reply("ADDR", map[string]any{"addr": in.Address()})
	case "rdmo-close":
		var req rdmoReq
		if err := json.Unmarshal(body, &req); err != nil {
			return err
		}
		if in := p.ins[req.Strategy]; in != nil {
			delete(p.ins, req.Strategy)
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
		var m0 uint64
		if in := p.ins[s.Strategy]; in != nil {
			m0 = in.Stats().Messages
		}
		res, err := p.round(s)
		if in := p.ins[s.Strategy]; in != nil {
			res.Msgs = in.Stats().Messages - m0
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
	switch k, isScatter := scatterIOVs(s.Mode); {
	case s.Mode == ModeRDMOAppendOwned || s.Mode == ModeRDMOAppendShared:
		return p.rdmoAppend(s)
	case isScatter && k == s.Layout.IOVs:
		return p.scatter(s)
	case s.Mode == ModeFlushIdle:
		return p.flushIdle(s)
	case s.Mode == ModeFlushLoad:
		return p.flushLoad(s)
	case s.Mode == ModeNativeBlocking:
		return p.native(s, 1)
	case s.Mode == ModeNativePipelined:
		return p.native(s, s.Window)
	case s.Mode == ModeRawAM:
		return p.rawAM(s)
	case s.Mode == ModePingPong:
		return p.pingPong(s)
	}
	return roundResult{}, fmt.Errorf("unknown mode %q", s.Mode)
}

// rdmoReq connects (or closes) the initiator's RDMO Initiator to the
// worker of one strategy.
type rdmoReq struct {
	Strategy  string `json:"strategy"`
	Addr      []byte `json:"addr,omitempty"`
	Client    uint64 `json:"client,omitempty"`
	Window    int    `json:"window,omitempty"`
	Aggregate bool   `json:"aggregate,omitempty"`
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

func (p *initProc) flush() error {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	rsp, err := p.in.Flush(ctx)
	if err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if rsp.Failed != 0 {
		return fmt.Errorf("flush reports %d failed requests (first: %v)", rsp.Failed, rsp.FirstStatus)
	}
	return nil
}

// rdmoAppend streams APPENDs of records to the queue, then flushes: when
// the flush answers, every record is in target memory.
func (p *initProc) rdmoAppend(s roundSpec) (roundResult, error) {
	if err := p.needRDMO(); err != nil {
		return roundResult{}, err
	}
	p.acks.reset()
	rec := make([]byte, s.Size)
	q := s.Queue
	b := newBudget(s, 64)
	acked := p.in.With(nil, rdmo.FlagAck)
	cr := newCreditor(p.in, s.Credit)
	start := time.Now()
	n := 0
	for ; !b.done(n); n++ {
		if err := cr.before(); err != nil {
			return roundResult{}, err
		}
		fillRecord(rec, p.id, s.Round, uint32(n))
		if n%s.Sample == 0 {
			t0 := time.Now()
			seq, err := acked.Append(q.Base, q.Region, q.Region, rec)
			if err != nil {
				return roundResult{}, err
			}
			p.acks.sent(seq, t0)
		} else if err := p.in.Append(q.Base, q.Region, q.Region, rec); err != nil {
			return roundResult{}, err
		}
		if err := cr.after(); err != nil {
			return roundResult{}, err
		}
	}
	return p.endStream(cr, start, n, s.Size)
}

// scatter sends SCATTERs of Layout.IOVs chunks of Size bytes, each chunk
// to its own lane, then flushes.
func (p *initProc) scatter(s roundSpec) (roundResult, error) {
	if err := p.needRDMO(); err != nil {
		return roundResult{}, err
	}
	p.acks.reset()
	l := s.Layout
	iovs := make([]wire.IOV, l.IOVs)
	chunks := make([][]byte, l.IOVs)
	for i := range chunks {
		chunks[i] = make([]byte, s.Size)
	}
	b := newBudget(s, 64)
	acked := p.in.With(nil, rdmo.FlagAck)
	cr := newCreditor(p.in, s.Credit)
	start := time.Now()
	n := 0
	for ; !b.done(n); n++ {
		if err := cr.before(); err != nil {
			return roundResult{}, err
		}
		for i := range iovs {
			iovs[i] = wire.IOV{Addr: l.Base + l.offset(p.id, n, i), Rkey: rdmo.RegionID(s.Scatter.Region), Len: uint16(s.Size)}
			fillRecord(chunks[i], p.id, s.Round, l.chunkSeq(n, i))
		}
		if n%s.Sample == 0 {
			t0 := time.Now()
			seq, err := acked.Scatter(iovs, chunks)
			if err != nil {
				return roundResult{}, err
			}
			p.acks.sent(seq, t0)
		} else if err := p.in.Scatter(iovs, chunks); err != nil {
			return roundResult{}, err
		}
		if err := cr.after(); err != nil {
			return roundResult{}, err
		}
	}
	return p.endStream(cr, start, n, l.IOVs*s.Size)
}

// endStream ends a streaming round of n requests of size payload bytes
// each: the credit flushes, the final flush, then the sampled acks.
func (p *initProc) endStream(cr *creditor, start time.Time, n, size int) (roundResult, error) {
	if err := cr.drain(); err != nil {
		return roundResult{}, err
	}
	if err := p.flush(); err != nil {
		return roundResult{}, err
	}
	el := time.Since(start)
	lat, err := p.acks.wait(30 * time.Second)
	if err != nil {
		return roundResult{}, err
	}
	return roundResult{Ops: uint64(n), Bytes: uint64(n) * uint64(size), Elapsed: el, Lat: lat}, nil
}

// flushIdle measures FLUSH round trips with nothing else in flight.
func (p *initProc) flushIdle(s roundSpec) (roundResult, error) {
	if err := p.needRDMO(); err != nil {
		return roundResult{}, err
	}
	var h Hist
	b := newBudget(s, 1)
	start := time.Now()
	n := 0
	for ; !b.done(n); n++ {
		t0 := time.Now()
		if err := p.flush(); err != nil {
			return roundResult{}, err
		}
		h.Add(time.Since(t0))
	}
	return roundResult{Ops: uint64(n), Elapsed: time.Since(start), Lat: h}, nil
}

// flushLoad measures FLUSH round trips while a second goroutine streams
// appends on the same connection (so every flush waits for the appends
// queued before it). The round ends when the flushes are done or the
// load's queue space is used up.
func (p *initProc) flushLoad(s roundSpec) (roundResult, error) {
	if err := p.needRDMO(); err != nil {
		return roundResult{}, err
	}
	var stop atomic.Bool
	var loaded atomic.Uint64
	loadErr := make(chan error, 1)
	in := p.in
	go func() {
		rec := make([]byte, s.Size)
		cr := newCreditor(in, s.Credit)
		n := 0
		for ; n < s.LoadMax && !stop.Load(); n++ {
			if err := cr.before(); err != nil {
				loadErr <- err
				return
			}
			fillRecord(rec, p.id, s.Round, uint32(n))
			if err := in.Append(s.Queue.Base, s.Queue.Region, s.Queue.Region, rec); err != nil {
				loadErr <- err
				return
			}
			loaded.Store(uint64(n + 1))
			if err := cr.after(); err != nil {
				loadErr <- err
				return
			}
		}
		loadErr <- cr.drain()
	}()
	var h Hist
	b := newBudget(s, 1)
	start := time.Now()
	n := 0
	var err error
	for ; !b.done(n) && loaded.Load() < uint64(s.LoadMax); n++ {
		if n == 0 {
			// Let the load fill the pipeline first.
			for loaded.Load() < uint64(min(s.LoadMax, s.Window)) && len(loadErr) == 0 {
				runtime.Gosched()
			}
		}
		t0 := time.Now()
		if err = p.flush(); err != nil {
			break
		}
		h.Add(time.Since(t0))
	}
	el := time.Since(start)
	stop.Store(true)
	if lerr := <-loadErr; lerr != nil && err == nil {
		err = lerr
	}
	if err == nil {
		err = p.flush()
	}
	if err != nil {
		return roundResult{}, err
	}
	l := loaded.Load()
	return roundResult{Ops: uint64(n), Bytes: l * uint64(s.Size), Elapsed: el, Lat: h, Load: l}, nil
}

// native appends without RDMO: fetch-add the tail in target memory by
// Size, then put the record at the fetched address. inflight bounds the
// fetch-adds outstanding: 1 is native-blocking (each put waits for its
// fetch-add, the next fetch-add for nothing else), more is
// native-pipelined (each put is issued when its fetch-add returns).
func (p *initProc) native(s roundSpec, inflight int) (roundResult, error) {
	if err := p.needTarget(); err != nil {
		return roundResult{}, err
	}
	rkey, err := p.rkey(s.Queue.Rkey)
	if err != nil {
		return roundResult{}, err
	}
	nbuf := s.Window + 1
	nt := &nativeRun{
		p: p, s: s, rkey: rkey,
		lo: s.Queue.Base + 8, hi: s.Queue.Base + s.Queue.Len,
		bufs: make([][]byte, nbuf), seq: make([]uint32, nbuf), t0: make([]time.Time, nbuf),
	}
	for i := range nt.bufs {
		nt.bufs[i] = make([]byte, s.Size)
		nt.free = append(nt.free, i)
	}
	sample := s.Sample
	if inflight == 1 {
		sample = 1
	}
	b := newBudget(s, max(16, min(inflight, 256)))
	start := time.Now()
	n := 0
	for !b.done(n) && nt.err == nil {
		if nt.fadds < inflight && len(nt.free) > 0 {
			idx := nt.free[len(nt.free)-1]
			nt.free = nt.free[:len(nt.free)-1]
			nt.seq[idx] = uint32(n)
			nt.t0[idx] = time.Time{}
			if n%sample == 0 {
				nt.t0[idx] = time.Now()
			}
			err := p.ep.Atomic(ucp.AtomicFetchAdd, uint64(s.Size), 0, s.Queue.Base, rkey, nt, tagFADD<<32|uint64(idx))
			if err == nil {
				nt.fadds++
				n++
				if nt.fadds < inflight && n%16 != 0 {
					continue
				}
			} else {
				nt.free = append(nt.free, idx)
				if !errors.Is(err, ucp.ErrTooManyOutstanding) {
					return roundResult{}, err
				}
			}
		}
		if _, err := p.w.Progress(); err != nil {
			return roundResult{}, err
		}
	}
	if err := p.w.ProgressUntil(func() bool { return nt.fadds == 0 && len(nt.free) == nbuf || nt.err != nil }, flushTimeout); err != nil {
		return roundResult{}, fmt.Errorf("waiting for the last puts: %w", err)
	}
	if nt.err != nil {
		return roundResult{}, nt.err
	}
	if err := p.ep.FlushSync(flushTimeout); err != nil {
		return roundResult{}, fmt.Errorf("endpoint flush: %w", err)
	}
	el := time.Since(start)
	return roundResult{Ops: uint64(n), Bytes: uint64(n) * uint64(s.Size), Elapsed: el, Lat: nt.hist}, nil
}

const (
	tagFADD = 1
	tagPut  = 2
)

// nativeRun is the state of a native round; its Complete runs inside
// Progress on the command goroutine.
type nativeRun struct {
	p      *initProc
	s      roundSpec
	rkey   *ucp.RemoteKey
	lo, hi uint64
	bufs   [][]byte
	free   []int
	seq    []uint32
	t0     []time.Time
	fadds  int
	hist   Hist
	err    error
}

func (nt *nativeRun) Complete(c ucp.Completion) {
	idx := int(c.Tag & 0xffffffff)
	if c.Err != nil {
		if nt.err == nil {
			nt.err = c.Err
		}
		if c.Tag>>32 == tagFADD {
			nt.fadds--
		}
		nt.free = append(nt.free, idx)
		return
	}
	switch c.Tag >> 32 {
	case tagFADD:
		nt.fadds--
		addr := c.Value
		if addr < nt.lo || addr+uint64(nt.s.Size) > nt.hi {
			if nt.err == nil {
				nt.err = fmt.Errorf("fetch-add returned %#x, outside the queue [%#x, %#x): the queue is full or its tail was moved", addr, nt.lo, nt.hi)
			}
			nt.free = append(nt.free, idx)
			return
		}
		fillRecord(nt.bufs[idx], nt.p.id, nt.s.Round, nt.seq[idx])
		if err := nt.p.ep.Put(nt.bufs[idx], addr, nt.rkey, nt, tagPut<<32|uint64(idx)); err != nil {
			if nt.err == nil {
				nt.err = fmt.Errorf("put: %w", err)
			}
			nt.free = append(nt.free, idx)
		}
	case tagPut:
		if !nt.t0[idx].IsZero() {
			nt.hist.Add(time.Since(nt.t0[idx]))
		}
		nt.free = append(nt.free, idx)
	}
}

// onEcho receives the sink's echoes (inside Progress).
func (p *initProc) onEcho(_ *ucp.Worker, msgs []ucp.Message) {
	e := &p.echo
	now := time.Now()
	for i := range msgs {
		h := msgs[i].Header
		if len(h) < sinkHeaderLen {
			e.errs++
			continue
		}
		seq := binary.LittleEndian.Uint64(h[8:])
		if h[2]&sinkFin != 0 {
			e.fin = true
			continue
		}
		if t0, ok := e.t0[seq]; ok {
			if e.hist != nil {
				e.hist.Add(now.Sub(t0))
			}
			delete(e.t0, seq)
		}
		e.last = seq + 1
	}
}

// amSender sends sink messages of one round: header and record, from
// per-slot buffers when they are too large to be copied at once.
type amSender struct {
	p      *initProc
	s      roundSpec
	inline bool
	hdr    [][sinkHeaderLen]byte
	bufs   [][]byte
	free   []int
	err    error
}

func newAMSender(p *initProc, s roundSpec) *amSender {
	a := &amSender{p: p, s: s, inline: sinkHeaderLen+s.Size <= 256}
	n := 1
	if !a.inline {
		n = s.Window
	}
	a.hdr = make([][sinkHeaderLen]byte, n)
	a.bufs = make([][]byte, n)
	for i := range a.bufs {
		a.bufs[i] = make([]byte, s.Size)
		a.free = append(a.free, i)
	}
	return a
}

func (a *amSender) Complete(c ucp.Completion) {
	if c.Err != nil && a.err == nil {
		a.err = c.Err
	}
	a.free = append(a.free, int(c.Tag))
}

// send queues message seq (flags: sinkEcho, sinkFin); false means no room
// (progress and try again).
func (a *amSender) send(seq uint64, flags byte) (bool, error) {
	if len(a.free) == 0 {
		return false, nil
	}
	idx := a.free[len(a.free)-1]
	h := a.hdr[idx][:]
	binary.LittleEndian.PutUint16(h[0:], uint16(a.p.id))
	h[2], h[3] = flags, 0
	binary.LittleEndian.PutUint32(h[4:], uint32(a.s.Round))
	binary.LittleEndian.PutUint64(h[8:], seq)
	var data []byte
	if flags&sinkFin == 0 {
		data = a.bufs[idx]
		fillRecord(data, a.p.id, a.s.Round, uint32(seq))
	}
	var sf ucp.SendFlags
	if flags != 0 {
		sf = ucp.SendReply
	}
	var c ucp.Completer
	if !a.inline {
		c = a
		a.free = a.free[:len(a.free)-1]
	}
	err := a.p.ep.SendAM(amSink, h, data, sf, c, uint64(idx))
	if err != nil {
		if !a.inline {
			a.free = append(a.free, idx)
		}
		if errors.Is(err, ucp.ErrTooManyOutstanding) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// finish sends the round's fin and waits for its echo: every message sent
// before it has then reached the sink.
func (a *amSender) finish() error {
	e := &a.p.echo
	e.fin = false
	for {
		ok, err := a.send(0, sinkFin)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		a.p.w.Progress()
	}
	if err := a.p.w.ProgressUntil(func() bool { return e.fin || a.err != nil }, flushTimeout); err != nil {
		return fmt.Errorf("waiting for the sink's fin: %w", err)
	}
	return a.err
}

// rawAM streams Size-byte AMs to the target's sink, which counts them.
func (p *initProc) rawAM(s roundSpec) (roundResult, error) {
	if err := p.needTarget(); err != nil {
		return roundResult{}, err
	}
	var h Hist
	p.echo = echoState{t0: map[uint64]time.Time{}, hist: &h}
	a := newAMSender(p, s)
	b := newBudget(s, 256)
	start := time.Now()
	n := 0
	for !b.done(n) {
		var flags byte
		if n%s.Sample == 0 {
			flags = sinkEcho
			p.echo.t0[uint64(n)] = time.Now()
		}
		ok, err := a.send(uint64(n), flags)
		if err != nil {
			return roundResult{}, err
		}
		if !ok {
			delete(p.echo.t0, uint64(n))
			p.w.Progress()
			continue
		}
		if n++; n%64 == 0 {
			p.w.Progress()
		}
	}
	if err := a.finish(); err != nil {
		return roundResult{}, err
	}
	el := time.Since(start)
	p.w.ProgressUntil(func() bool { return len(p.echo.t0) == 0 }, 10*time.Second)
	p.echo.hist = nil
	return roundResult{Ops: uint64(n), Bytes: uint64(n) * uint64(s.Size), Elapsed: el, Lat: h}, nil
}

// pingPong sends one Size-byte AM at a time and waits for its echo.
func (p *initProc) pingPong(s roundSpec) (roundResult, error) {
	if err := p.needTarget(); err != nil {
		return roundResult{}, err
	}
	var h Hist
	p.echo = echoState{t0: map[uint64]time.Time{}, hist: &h}
	a := newAMSender(p, s)
	b := newBudget(s, 1)
	start := time.Now()
	n := 0
	for ; !b.done(n); n++ {
		p.echo.t0[uint64(n)] = time.Now()
		for {
			ok, err := a.send(uint64(n), sinkEcho)
			if err != nil {
				return roundResult{}, err
			}
			if ok {
				break
			}
			p.w.Progress()
		}
		want := uint64(n) + 1
		for p.echo.last < want && a.err == nil {
			if _, err := p.w.Progress(); err != nil {
				return roundResult{}, err
			}
			if time.Since(start) > flushTimeout {
				return roundResult{}, fmt.Errorf("no echo for ping %d", n)
			}
		}
		if a.err != nil {
			return roundResult{}, a.err
		}
	}
	el := time.Since(start)
	if err := a.finish(); err != nil {
		return roundResult{}, err
	}
	p.echo.hist = nil
	return roundResult{Ops: uint64(n), Bytes: uint64(n) * uint64(s.Size), Elapsed: el, Lat: h}, nil
}

// ackTracker matches the acks of sampled RDMO requests to their send
// times. onAck runs on the RDMO initiator's goroutine.
type ackTracker struct {
	mu      sync.Mutex
	pending map[uint64]time.Time // seq -> send time
	early   map[uint64]time.Time // acks that arrived before sent() ran
	hist    Hist
	err     error
}

func (a *ackTracker) init() { a.reset() }

func (a *ackTracker) reset() {
	a.mu.Lock()
	a.pending = map[uint64]time.Time{}
	a.early = map[uint64]time.Time{}
	a.hist = Hist{}
	a.err = nil
	a.mu.Unlock()
}

func (a *ackTracker) onAck(ack wire.AckResponse, _ []byte) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if ack.Status != rdmo.StatusOK && a.err == nil {
		a.err = fmt.Errorf("%s seq %d failed: %v", rdmo.OpName(ack.Op), ack.Seq, ack.Status)
	}
	if t0, ok := a.pending[ack.Seq]; ok {
		a.hist.Add(now.Sub(t0))
		delete(a.pending, ack.Seq)
		return
	}
	a.early[ack.Seq] = now
}

func (a *ackTracker) sent(seq uint64, t0 time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t, ok := a.early[seq]; ok {
		a.hist.Add(t.Sub(t0))
		delete(a.early, seq)
		return
	}
	a.pending[seq] = t0
}

// wait waits until every sampled request was acked and returns their
// latencies.
func (a *ackTracker) wait(timeout time.Duration) (Hist, error) {
	deadline := time.Now().Add(timeout)
	for {
		a.mu.Lock()
		n, err := len(a.pending), a.err
		if n == 0 || err != nil || time.Now().After(deadline) {
			h := a.hist
			a.hist = Hist{}
			a.mu.Unlock()
			if err == nil && n > 0 {
				err = fmt.Errorf("%d sampled requests were never acked", n)
			}
			return h, err
		}
		a.mu.Unlock()
		time.Sleep(100 * time.Microsecond)
	}
}

// creditor keeps an initiator's RDMO requests that the worker may not have
// completed under a credit: the worker fails requests beyond its limit per
// request queue (dpu.Config.MaxInFlightPerRQ, TooManyInFlight), and the
// initiator's send window counts a request only until UCX sent it, so a
// fast stream overruns the worker. Every credit/4 requests the creditor
// queues a FLUSH (FlushAsync); before a request that would put more than
// credit requests past the last answered flush, it waits for the oldest
// flush. Zero credit: no limit.
type creditor struct {
	in     *initiator.Initiator
	credit int
	step   int
	sent   int
	done   int // requests before the last answered flush
	marks  []flushMark
}

type flushMark struct {
	fw   *initiator.FlushWait
	mark int // requests sent before the flush
}

func newCreditor(in *initiator.Initiator, credit int) *creditor {
	return &creditor{in: in, credit: credit, step: max(credit/4, 1)}
}

func (c *creditor) before() error {
	if c.credit <= 0 {
		return nil
	}
	for c.sent-c.done >= c.credit {
		if len(c.marks) == 0 {
			if err := c.issue(); err != nil {
				return err
			}
		}
		if err := c.waitOldest(); err != nil {
			return err
		}
	}
	return nil
}

func (c *creditor) after() error {
	c.sent++
	if c.credit > 0 && c.sent%c.step == 0 {
		return c.issue()
	}
	return nil
}

func (c *creditor) issue() error {
	fw, err := c.in.FlushAsync(nil)
	if err != nil {
		return fmt.Errorf("credit flush: %w", err)
	}
	c.marks = append(c.marks, flushMark{fw, c.sent})
	return nil
}

func (c *creditor) waitOldest() error {
	m := c.marks[0]
	c.marks = c.marks[1:]
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	rsp, err := m.fw.Wait(ctx)
	if err != nil {
		return fmt.Errorf("credit flush: %w", err)
	}
	if rsp.Failed != 0 {
		return fmt.Errorf("credit flush reports %d failed requests (first: %v)", rsp.Failed, rsp.FirstStatus)
	}
	c.done = m.mark
	return nil
}

// drain waits for every credit flush (their answers report failures).
func (c *creditor) drain() error {
	for len(c.marks) > 0 {
		if err := c.waitOldest(); err != nil {
			return err
		}
	}
	return nil
}

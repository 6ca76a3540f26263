package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/host/target"
	"github.com/openrdmo/rdmo/ucp"
)

// AM ids of the target's sink (the raw-AM baselines).
const (
	amSink = 1 // counted (and echoed on request)
	amEcho = 2 // the sink's echo, to the initiator
)

// Sink header: [0:2] initiator, [2] flags, [3] unused, [4:8] round, [8:16] seq.
const (
	sinkHeaderLen = 16
	sinkEcho      = 1 << 0 // echo the header back (latency sample, ping)
	sinkFin       = 1 << 1 // not a payload: the end of a round (echoed, not counted)
	maxInitiators = 64
)

const clientID = 1 // the target's client id on every worker it starts

// workerState is one RDMO worker the target started (one per append
// strategy): the host/target library's Target, which also remembers the
// request queues and regions to undo.
type workerState struct {
	strategy string
	tg       *target.Target
	scatReg  uint64 // the scatter region's id here, 0 if not registered
	queueReg uint64 // the queue's region id here, 0 if not registered (queue.go)
}

// benchTarget is the target process: it owns the memory the rows write
// into, starts the RDMO workers through the UROM service and registers
// with them (host/target: CLIENT_INIT, MR_REG, RQ_CREATE), counts the raw
// AMs of the baselines, and checks what landed in its memory.
type benchTarget struct {
	log  *zap.Logger
	uctx *ucp.Context
	w    *ucp.Worker
	addr []byte

	spin     atomic.Bool
	stopping atomic.Bool
	done     chan struct{}

	// Sink: written by the progress goroutine.
	sinkCount [maxInitiators]atomic.Uint64
	sinkBytes [maxInitiators]atomic.Uint64
	sinkErrs  atomic.Uint64
	sinkNext  [maxInitiators]uint64
	sinkRound [maxInitiators]uint32
	sinkSeen  sinkState // the counters at the last check

	svc       *target.Service
	workers   map[string]*workerState // by append strategy
	workerEnv []string

	queue queueMem // the append rows' queue (queue.go)
	scat  *ucp.Memory

	ops     opsTarget      // the op-pack rows' memory (target_ops.go)
	wl      workloadTarget // the workload row's (target_workload.go)
	scratch *ucp.Memory    // rendezvous payloads of the sink land here
	old     []*ucp.Memory  // earlier scratch memory, freed at the end
}

func targetMain() error {
	log := childLogger("target")
	uctx, err := ucp.NewContext(ucp.ContextOptions{Name: "rdmo-bench-target"})
	if err != nil {
		return err
	}
	defer uctx.Close()
	t := &benchTarget{log: log, uctx: uctx, done: make(chan struct{}), workers: map[string]*workerState{}}
	ready := make(chan error, 1)
	go t.progress(ready)
	if err := <-ready; err != nil {
		return err
	}
	defer t.close()
	addr := t.addr
	if s := os.Getenv(envWorkerEnv); s != "" {
		if err := json.Unmarshal([]byte(s), &t.workerEnv); err != nil {
			return fmt.Errorf("%s: %w", envWorkerEnv, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.svc, err = target.Dial(ctx, os.Getenv(envUROM), target.DialOptions{Logger: log})
	cancel()
	if err != nil {
		return err
	}
	ls := newLineServer()
	ls.reply("TARGET", map[string]any{"addr": addr})
	for {
		verb, body, ok := ls.next()
		if !ok || verb == "quit" {
			return t.teardown()
		}
		if err := t.handle(ls, verb, body); err != nil {
			ls.fail(err)
		}
	}
}

// progress is the worker's goroutine from its birth: UCX binds a worker to
// the thread that made it, so it is made, progressed and closed here.
func (t *benchTarget) progress(ready chan<- error) {
	runtime.LockOSThread()
	defer close(t.done)
	w, err := t.uctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		ready <- err
		return
	}
	defer w.Close()
	if t.addr, err = w.Address(); err == nil {
		err = w.SetHandler(amSink, ucp.MessageHandlerFunc(t.sink))
	}
	if err == nil {
		t.w = w
	}
	ready <- err
	if err != nil {
		return
	}
	idle := 0
	for !t.stopping.Load() {
		n, err := t.w.Progress()
		if err != nil {
			t.log.Error("progress", zap.Error(err))
			return
		}
		if t.spin.Load() {
			continue
		}
		if n > 0 {
			idle = 0
			continue
		}
		if idle++; idle > 64 {
			t.w.Wait(10 * time.Millisecond)
		}
	}
}

func (t *benchTarget) close() {
	t.stopping.Store(true)
	t.w.Wake()
	<-t.done
	if t.queue.mem != nil {
		t.queue.mem.Close()
	}
	if t.scat != nil {
		t.scat.Close()
	}
	if t.scratch != nil {
		t.scratch.Close()
	}
	t.opsClose()
	t.workloadClose()
	for _, m := range t.old {
		m.Close()
	}
	if t.svc != nil {
		t.svc.Close()
	}
}

// sink counts the raw AMs of the baselines (on the progress goroutine).
func (t *benchTarget) sink(w *ucp.Worker, msgs []ucp.Message) {
	for i := range msgs {
		m := &msgs[i]
		if len(m.Header) < sinkHeaderLen {
			t.sinkErrs.Add(1)
			continue
		}
		id := int(binary.LittleEndian.Uint16(m.Header))
		flags := m.Header[2]
		if id >= maxInitiators {
			t.sinkErrs.Add(1)
			continue
		}
		if flags&sinkFin == 0 {
			round := binary.LittleEndian.Uint32(m.Header[4:])
			seq := binary.LittleEndian.Uint64(m.Header[8:])
			if round != t.sinkRound[id] {
				t.sinkRound[id], t.sinkNext[id] = round, 0
			}
			// One endpoint delivers in order: a gap or a repeat is a
			// lost or duplicated message. The payload names the same
			// operation (checked by the record's header).
			ok := seq == t.sinkNext[id]
			if m.Length >= MinSize && m.Data != nil {
				gi, gr, gs := recordID(m.Data)
				ok = ok && gi == id && gr == int(uint16(round)) && uint64(gs) == seq&0xffffffff
			}
			if !ok {
				t.sinkErrs.Add(1)
			}
			t.sinkNext[id] = seq + 1
			t.sinkCount[id].Add(1)
			t.sinkBytes[id].Add(uint64(m.Length))
		}
		if m.Rendezvous {
			// Take the payload, as a real receiver would.
			if err := t.receive(m); err != nil {
				t.sinkErrs.Add(1)
			}
		}
		if flags&(sinkEcho|sinkFin) != 0 && m.Reply != nil {
			if err := m.Reply.SendAM(amEcho, m.Header[:sinkHeaderLen], nil, 0, nil, 0); err != nil {
				t.sinkErrs.Add(1)
			}
		}
	}
}

// receive fetches a rendezvous payload into scratch memory.
func (t *benchTarget) receive(m *ucp.Message) error {
	if t.scratch == nil || t.scratch.Len() < m.Length {
		if t.scratch != nil {
			t.old = append(t.old, t.scratch) // a receive may still use it
		}
		s, err := t.uctx.Allocate(max(m.Length, 1<<20))
		if err != nil {
			return err
		}
		t.scratch = s
	}
	return m.Receive(t.scratch.Bytes()[:m.Length], nil, 0)
}

// QueueInfo names a queue (or scatter region) to the initiators.
type queueInfo struct {
	Region uint64 `json:"region"` // region id with the worker (0: not registered)
	Base   uint64 `json:"base"`   // address of the tail word (queue) or of the region
	Len    uint64 `json:"len"`    // bytes from Base
	Rkey   []byte `json:"rkey"`   // packed remote key, for native access
	Data   uint64 `json:"data"`   // queue: address of its first data byte
	Pages  string `json:"pages"`  // queue: the pages backing it (host/target.Pages)
}

// targetReq is every command's argument (each uses some fields).
type targetReq struct {
	Mode     string        `json:"mode,omitempty"`     // the row (check)
	Strategy string        `json:"strategy,omitempty"` // which worker
	CPUs     string        `json:"cpus,omitempty"`
	Bytes    int           `json:"bytes,omitempty"`
	Addr     []byte        `json:"addr,omitempty"`
	On       bool          `json:"on,omitempty"`
	Size     int           `json:"size,omitempty"`
	Round    int           `json:"round,omitempty"`
	Counts   []uint64      `json:"counts,omitempty"`
	Ordered  bool          `json:"ordered,omitempty"`
	Layout   scatterLayout `json:"layout"`
	Cold     bool          `json:"cold,omitempty"`      // queue: a fresh registration (rdmo-append/owned/cold)
	NoDetect bool          `json:"no_detect,omitempty"` // rq: no peer-failure detection
	Populate bool          `json:"populate,omitempty"`  // queue: register with populated pages
}

type sinkState struct {
	Counts []uint64 `json:"counts"`
	Bytes  []uint64 `json:"bytes"`
	Errors uint64   `json:"errors"`
}

func (t *benchTarget) handle(ls *lineServer, verb string, body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var req targetReq
	if err := json.Unmarshal(body, &req); err != nil {
		return fmt.Errorf("%s: %w", verb, err)
	}
	ws := t.workers[req.Strategy]
	needWorker := func() error {
		if ws == nil {
			return fmt.Errorf("%s: no worker with the %q strategy", verb, req.Strategy)
		}
		return nil
	}
	switch verb {
	case "spawn":
		if ws != nil {
			if err := t.stopWorker(ctx, ws); err != nil {
				return err
			}
		}
		strategy, plugins := splitWorker(req.Strategy)
		tg, err := target.New(ctx, target.Options{
			Service:        t.svc,
			Env:            t.workerEnv,
			CPUs:           req.CPUs,
			AppendStrategy: strategy,
			Plugins:        plugins,
			ClientID:       clientID,
			Address:        t.addr,
			Logger:         t.log,
		})
		if err != nil {
			return fmt.Errorf("spawn RDMO worker: %w", err)
		}
		ws = &workerState{strategy: req.Strategy, tg: tg}
		t.workers[req.Strategy] = ws
		ls.reply("WORKER", map[string]any{"id": tg.WorkerID(), "pid": tg.WorkerPID(), "addr": tg.WorkerAddress()})
	case "stop-worker":
		if ws != nil {
			if err := t.stopWorker(ctx, ws); err != nil {
				return err
			}
		}
		ls.reply("OK", struct{}{})
	case "queue":
		var reg *workerState
		if req.Strategy != "" {
			if err := needWorker(); err != nil {
				return err
			}
			reg = ws
		}
		info, err := t.resetQueue(ctx, req.Bytes, reg, req.Cold, req.Populate)
		if err != nil {
			return err
		}
		ls.reply("QUEUE", info)
	case "sregion":
		if err := needWorker(); err != nil {
			return err
		}
		info, err := t.scatterRegion(ctx, req.Bytes, ws)
		if err != nil {
			return err
		}
		ls.reply("SREGION", info)
	case "rq":
		if err := needWorker(); err != nil {
			return err
		}
		var ro target.RQOptions
		if req.NoDetect {
			ro.ErrorHandling = dpu.RQErrorsNone
		}
		rq, err := ws.tg.CreateRQWith(ctx, req.Addr, ro)
		if err != nil {
			return err
		}
		ls.reply("RQ", map[string]any{"rq": rq})
	case "check":
		r, ok := rowByName(req.Mode)
		if !ok || r.Check == nil {
			return fmt.Errorf("check: mode %q has no target check", req.Mode)
		}
		if err := r.Check(t, req); err != nil {
			return err
		}
		ls.reply("CHECKED", struct{}{})
	case "spin":
		t.spin.Store(req.On)
		t.w.Wake()
		ls.reply("OK", struct{}{})
	case "stats":
		if err := needWorker(); err != nil {
			return err
		}
		st, err := ws.tg.Stats(ctx)
		if err != nil {
			return fmt.Errorf("worker stats: %w", err)
		}
		ls.reply("STATS", st)
	case "workload":
		return t.handleWorkload(ctx, ls, body)
	default:
		if ok, err := t.handleOps(ctx, ls, verb, body); ok {
			return err
		}
		return fmt.Errorf("unknown command %q", verb)
	}
	return nil
}

// scatterRegion makes sure the scatter region has at least bytes and is
// registered with the worker.
func (t *benchTarget) scatterRegion(ctx context.Context, bytes int, ws *workerState) (queueInfo, error) {
	if t.scat != nil && t.scat.Len() < bytes {
		for _, o := range t.workers {
			if o.scatReg != 0 {
				if err := o.tg.Deregister(ctx, o.scatReg); err != nil {
					return queueInfo{}, err
				}
				o.scatReg = 0
			}
		}
		t.scat.Close()
		t.scat = nil
	}
	if t.scat == nil {
		m, err := t.uctx.Allocate(bytes)
		if err != nil {
			return queueInfo{}, fmt.Errorf("allocate a %d-byte scatter region: %w", bytes, err)
		}
		t.scat = m
	}
	rkey, err := t.scat.PackRkey()
	if err != nil {
		return queueInfo{}, err
	}
	if ws.scatReg == 0 {
		reg, err := ws.tg.Register(ctx, t.scat)
		if err != nil {
			return queueInfo{}, err
		}
		ws.scatReg = reg.ID
	}
	return queueInfo{Region: ws.scatReg, Base: t.scat.Address(), Len: uint64(t.scat.Len()), Rkey: rkey}, nil
}

// stopWorker tears a worker down (target.Target.CloseContext): request
// queues, then regions (the queue's and the scatter region's, which the
// Target remembers), then the process.
func (t *benchTarget) stopWorker(ctx context.Context, ws *workerState) error {
	ws.queueReg = 0 // CloseContext deregisters it
	ws.scatReg = 0
	if t.wl.ws == ws {
		t.wl.ws, t.wl.regs = nil, nil
	}
	delete(t.ops.regs, ws)
	delete(t.workers, ws.strategy)
	return ws.tg.CloseContext(ctx)
}

func (t *benchTarget) teardown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, ws := range t.workers {
		errs = append(errs, t.stopWorker(ctx, ws))
	}
	return errors.Join(errs...)
}

package plugin

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin/internal/hclogzap"
	"github.com/openrdmo/rdmo/rdmo/plugin/internal/wire"
)

// Serve runs h as an RDMO handler plugin and returns when the worker is done
// with it (main should then return). It is all a plugin's main needs; a
// complete plugin (the same file is built and tested as
// rdmo/plugin/internal/exampleplugin):
//
//	// Command rdmo-plugin-counter serves the counter operation as a plugin.
//	package main
//
//	import (
//		"github.com/openrdmo/rdmo/examples/counter"
//		"github.com/openrdmo/rdmo/rdmo/plugin"
//	)
//
//	func main() { plugin.Serve(counter.New()) }
//
// examples/counter is the handler (and docs/PLUGINS.md walks through it).
//
// The handler runs as it would in the worker, with the Target semantics
// documented on pluginhost.Handler. Log with Logger. Run by hand (without
// the worker's handshake cookie) the binary prints a notice and exits with
// status 1.
func Serve(h rdmo.Handler) {
	log := Logger().Named("rdmo-plugin")
	info := h.Info()
	srv := newServer(h, log)
	go watchParent(log)
	log.Debug("serving", zap.String("handler", info.Name), zap.String("version", info.Version),
		zap.Uint32s("ops", info.Ops), zap.Int("protocol", wire.ProtocolVersion))
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: wire.Handshake,
		Plugins:         goplugin.PluginSet{wire.PluginKey: &wire.Plugin{Impl: srv}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, wire.ServerOptions()...)...)
		},
		Logger: hclogzap.New(log.Named("go-plugin")),
	})
}

// watchParent ends the plugin when the worker is gone without having
// stopped it (killed with SIGKILL, crashed): the plugin is then re-parented
// and would otherwise live on.
func watchParent(log *zap.Logger) {
	ppid := os.Getppid()
	if ppid <= 1 {
		return
	}
	for range time.Tick(500 * time.Millisecond) {
		if os.Getppid() != ppid {
			log.Warn("worker process is gone; exiting", zap.Int("worker_pid", ppid))
			os.Exit(2)
		}
	}
}

// server is the plugin process's side of the protocol.
type server struct {
	h   rdmo.Handler
	log *zap.Logger

	mu     sync.Mutex
	stream grpc.ServerStream // the worker's Target stream; nil until open
	gone   chan struct{}     // closed when that stream ends
	waits  map[uint64]chan *wire.Answer

	sendMu   sync.Mutex
	nextID   atomic.Uint64
	poisoned atomic.Pointer[string] // set by a handler panic
}

func newServer(h rdmo.Handler, log *zap.Logger) *server {
	return &server{h: h, log: log, waits: make(map[uint64]chan *wire.Answer)}
}

func (s *server) Info(context.Context) (*wire.InfoResp, error) {
	i := s.h.Info()
	r := &wire.InfoResp{Name: i.Name, Version: i.Version, Ops: i.Ops, Pid: int64(os.Getpid()), NoCachedState: i.NoCachedState}
	// Every plugin-defined status this process knows, so that the
	// worker's logs, metrics and errors name the handler's failures.
	for _, st := range rdmo.UserStatuses() {
		r.Statuses = append(r.Statuses, wire.StatusName{Code: uint32(st.Code), Name: st.Name, Text: st.Text})
	}
	// And its ops' names, so that they are not "counter(16)" and
	// "counter(17)" there.
	for _, op := range i.Ops {
		n, ok := i.OpNames[op]
		if !ok {
			n, ok = rdmo.DefinedOpName(op)
		}
		if ok && rdmo.IsUserOp(op) {
			r.OpNames = append(r.OpNames, wire.OpName{Op: op, Name: n})
		}
	}
	return r, nil
}

// target serves the worker's Target stream for the life of the process:
// it says hello, then delivers answers to the target calls waiting for
// them.
func (s *server) Target(st grpc.ServerStream) error {
	s.mu.Lock()
	if s.stream != nil {
		s.mu.Unlock()
		return status.Error(codes.AlreadyExists, "rdmo plugin: the Target stream is already open")
	}
	gone := make(chan struct{})
	s.stream, s.gone = st, gone
	s.mu.Unlock()

	err := s.sendFrame(&wire.Frame{})
	for err == nil {
		a := new(wire.Answer)
		if err = st.RecvMsg(a); err != nil {
			break
		}
		s.mu.Lock()
		ch := s.waits[a.ID]
		delete(s.waits, a.ID)
		s.mu.Unlock()
		if ch != nil {
			ch <- a
		}
	}
	s.mu.Lock()
	s.stream = nil
	close(gone)
	s.mu.Unlock()
	s.log.Debug("target stream closed", zap.Error(err))
	return nil
}

func (s *server) sendFrame(f *wire.Frame) error {
	s.mu.Lock()
	st := s.stream
	s.mu.Unlock()
	if st == nil {
		return &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: "plugin has no stream to the worker"}
	}
	s.sendMu.Lock()
	err := st.SendMsg(f)
	s.sendMu.Unlock()
	if err != nil {
		return &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: "plugin lost its stream to the worker: " + err.Error()}
	}
	return nil
}

// call runs one invocation of the handler.
func (s *server) Call(ctx context.Context, kind uint8, in *wire.CallReq) (*wire.CallResp, error) {
	resp := new(wire.CallResp)
	if p := s.poisoned.Load(); p != nil {
		resp.Panic = "handler panicked earlier: " + *p
		return resp, nil
	}
	t := &ptarget{s: s, ctx: ctx, inv: in.Inv, client: in.Client, reqs: in.Reqs}
	func() {
		defer func() {
			if r := recover(); r != nil {
				msg := fmt.Sprint(r)
				s.poisoned.CompareAndSwap(nil, &msg)
				resp.Panic = msg
				s.log.Error("handler panicked", zap.String("call", wire.CallName(kind)), zap.Uint64("client", in.Client),
					zap.String("panic", msg), zap.ByteString("stack", debug.Stack()))
			}
		}()
		switch kind {
		case wire.CallBatch:
			resp.Results = make([]rdmo.Result, len(in.Reqs))
			s.h.HandleBatch(t, in.Reqs, resp.Results)
		case wire.CallWriteBack:
			resp.Err = wire.FaultOf(s.h.WriteBack(t))
		case wire.CallRegionRemoved:
			resp.Err = wire.FaultOf(s.h.RegionRemoved(t, rdmo.RegionID(in.Region)))
		case wire.CallClientRemoved:
			s.h.ClientRemoved(rdmo.ClientID(in.Client))
		}
	}()
	resp.Tail, resp.Frames = t.finish()
	return resp, nil
}

// ptarget is the rdmo.Target a handler gets in the plugin process: target
// calls go to the worker over the Target stream. See pluginhost.Handler
// for the exact semantics.
type ptarget struct {
	s      *server
	ctx    context.Context
	inv    uint64
	client uint64
	reqs   []rdmo.Request

	mu           sync.Mutex
	pending      []wire.Op // pipelined calls not sent yet
	pendingBytes int
	frames       uint64 // frames sent for this invocation
	regions      map[rdmo.RegionID]regionEntry
	done         bool
}

type regionEntry struct {
	r   rdmo.Region
	err error
}

var _ rdmo.Target = (*ptarget)(nil)

func errOver() error {
	return &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: "Target used after its call returned"}
}

func (t *ptarget) ClientID() rdmo.ClientID { return rdmo.ClientID(t.client) }

// finish ends the invocation: later target calls fail, and the pipelined
// calls not sent yet travel in the response.
func (t *ptarget) finish() ([]wire.Op, uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done = true
	tail := t.pending
	t.pending, t.pendingBytes = nil, 0
	return tail, t.frames
}

// index finds req in the batch: by address, else by sequence number (a
// handler may pass a copy).
func (t *ptarget) index(req *rdmo.Request) int64 {
	for i := range t.reqs {
		if &t.reqs[i] == req {
			return int64(i)
		}
	}
	for i := range t.reqs {
		if t.reqs[i].Seq == req.Seq && t.reqs[i].Client == req.Client {
			return int64(i)
		}
	}
	return -1
}

// checkLocked checks [addr, addr+n) of region against a region this call
// already looked up, with the worker's errors; unknown regions pass (the
// worker checks them when it runs the call).
func (t *ptarget) checkLocked(region rdmo.RegionID, addr, n uint64) error {
	e, ok := t.regions[region]
	if !ok {
		return nil
	}
	if e.err != nil {
		return e.err
	}
	return e.r.CheckRange(addr, n)
}

func (t *ptarget) pipeline(o wire.Op, n int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return errOver()
	}
	if err := t.checkLocked(o.Region, o.Addr, uint64(n)); err != nil {
		return err
	}
	if t.pending == nil {
		// Most handlers Put about once per request: size for that.
		t.pending = make([]wire.Op, 0, max(8, len(t.reqs)))
	}
	if o.Kind == wire.OpPut && n > wire.MaxPutLen {
		return &rdmo.WireError{Status: rdmo.StatusLengthOverflow,
			Detail: fmt.Sprintf("Put of %d bytes: a plugin Puts at most %d bytes at once", n, wire.MaxPutLen)}
	}
	t.pending = append(t.pending, o)
	t.pendingBytes += wire.MaxOpOverhead
	if o.Kind == wire.OpPut {
		t.pendingBytes += n
	}
	if t.pendingBytes >= wire.FlushBytes {
		f := &wire.Frame{Inv: t.inv, Ops: t.pending}
		t.pending, t.pendingBytes = nil, 0
		if err := t.s.sendFrame(f); err != nil {
			return err
		}
		t.frames++
	}
	return nil
}

func (t *ptarget) Put(region rdmo.RegionID, addr uint64, data []byte) error {
	return t.pipeline(wire.Op{Kind: wire.OpPut, Region: region, Addr: addr, Data: data}, len(data))
}

func (t *ptarget) Place(req *rdmo.Request, region rdmo.RegionID, addr uint64) error {
	i := t.index(req)
	if i < 0 {
		return &rdmo.WireError{Status: rdmo.StatusInternal, Detail: fmt.Sprintf("Place: request %d is not in this batch", req.Seq)}
	}
	return t.pipeline(wire.Op{Kind: wire.OpPlace, Region: region, Addr: addr, Req: i}, int(min(req.Length, 1<<62)))
}

// wait sends the pending pipelined calls and o in one frame and waits for
// o's answer.
func (t *ptarget) wait(o wire.Op) (*wire.Answer, error) {
	s := t.s
	ch := make(chan *wire.Answer, 1)
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return nil, errOver()
	}
	o.ID = s.nextID.Add(1)
	s.mu.Lock()
	gone := s.gone
	s.waits[o.ID] = ch
	s.mu.Unlock()
	f := &wire.Frame{Inv: t.inv, Ops: append(t.pending, o)}
	t.pending, t.pendingBytes = nil, 0
	err := s.sendFrame(f)
	if err == nil {
		t.frames++
	}
	t.mu.Unlock()
	if err == nil {
		select {
		case a := <-ch:
			return a, nil
		case <-gone:
			err = &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: "plugin lost its stream to the worker"}
		case <-t.ctx.Done():
			err = &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: "call abandoned by the worker: " + t.ctx.Err().Error()}
		}
	}
	s.mu.Lock()
	delete(s.waits, o.ID)
	s.mu.Unlock()
	return nil, err
}

func (t *ptarget) Region(id rdmo.RegionID) (rdmo.Region, error) {
	t.mu.Lock()
	e, ok := t.regions[id]
	t.mu.Unlock()
	if ok {
		return e.r, e.err
	}
	a, err := t.wait(wire.Op{Kind: wire.OpRegion, Region: id})
	if err != nil {
		return rdmo.Region{}, err
	}
	e = regionEntry{r: a.Region, err: a.Err.Err()}
	if e.err != nil {
		e.r = rdmo.Region{}
		if s := rdmo.StatusOf(e.err); s != rdmo.StatusUnknownRegion && s != rdmo.StatusRegionNotOwned {
			return e.r, e.err // not an answer about the region: do not keep it
		}
	}
	t.mu.Lock()
	if t.regions == nil {
		t.regions = make(map[rdmo.RegionID]regionEntry)
	}
	t.regions[id] = e
	t.mu.Unlock()
	return e.r, e.err
}

func (t *ptarget) Sync(ops []rdmo.RemoteOp) error {
	if len(ops) == 0 {
		return nil
	}
	so := make([]wire.SyncOp, len(ops))
	for i := range ops {
		o := &ops[i]
		so[i] = wire.SyncOp{Kind: o.Kind, Region: o.Region, Addr: o.Addr, Operand: o.Operand, Compare: o.Compare}
		if o.Kind == rdmo.RemoteGet {
			so[i].Len = uint64(len(o.Buf))
		}
	}
	if err := wire.SyncFits(so); err != nil {
		return err
	}
	a, err := t.wait(wire.Op{Kind: wire.OpSync, Sync: so})
	if err != nil {
		return err
	}
	if err := a.Err.Err(); err != nil {
		return err
	}
	if len(a.Sync) != len(ops) {
		return &rdmo.WireError{Status: rdmo.StatusInternal, Detail: fmt.Sprintf("Sync: %d answers for %d ops", len(a.Sync), len(ops))}
	}
	for i := range ops {
		o, r := &ops[i], &a.Sync[i]
		o.Result, o.Status = r.Result, r.Status
		if o.Kind == rdmo.RemoteGet && r.Status == rdmo.StatusOK {
			copy(o.Buf, r.Data)
		}
	}
	return nil
}

// Buffer is plugin memory: the handler's Puts copy it to the worker.
func (t *ptarget) Buffer(n int) []byte { return make([]byte, n) }

func (t *ptarget) Fetch(req *rdmo.Request) ([]byte, error) {
	i := t.index(req)
	if i < 0 {
		return nil, &rdmo.WireError{Status: rdmo.StatusInternal, Detail: fmt.Sprintf("Fetch: request %d is not in this batch", req.Seq)}
	}
	a, err := t.wait(wire.Op{Kind: wire.OpFetch, Req: i})
	if err != nil {
		return nil, err
	}
	if err := a.Err.Err(); err != nil {
		return nil, err
	}
	if a.Data == nil {
		return []byte{}, nil
	}
	return a.Data, nil
}

func (t *ptarget) Flush() error {
	a, err := t.wait(wire.Op{Kind: wire.OpFlush})
	if err != nil {
		return err
	}
	return a.Err.Err()
}

func (t *ptarget) WriteBackAll() error {
	a, err := t.wait(wire.Op{Kind: wire.OpWriteBackAll})
	if err != nil {
		return err
	}
	return a.Err.Err()
}

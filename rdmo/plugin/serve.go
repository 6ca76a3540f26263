package plugin

import (
	"context"
	"errors"
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
)

// ProtocolVersion is the version of the worker–plugin protocol (the gRPC
// service and its messages). go-plugin compares it during the handshake: a
// plugin built against another version refuses to start with the worker,
// so the worker and its plugins must be built from matching rdmo
// releases. Bump it on any incompatible change of wire.go.
const ProtocolVersion = 1

// Handshake is the go-plugin handshake of RDMO handler plugins. The magic
// cookie only keeps the binary from being run by hand (or by another
// go-plugin host) by mistake; it is not a security measure.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "RDMO_HANDLER_PLUGIN",
	MagicCookieValue: "b1e5c0a4-rdmo-handler-v1",
}

// pluginKey is the name the handler is dispensed under.
const pluginKey = "handler"

// maxMsgSize bounds one gRPC message between the worker and a plugin,
// either way, and both sides enforce it (the plugin's server options, the
// worker's dial options): a peer cannot make the other receive more. The
// messages are kept under it by construction:
//
//   - a batch (callReq) carries its requests' headers and eager payloads
//     (rendezvous payloads stay in the worker). A dpu worker's batch is at
//     most MaxBatch requests of at most MaxEagerPayload each (1024 × 1 MiB
//     by default), so Handler.HandleBatch splits a batch that would not fit
//     into consecutive calls, and fails a single request that cannot fit
//     one (only possible with MaxEagerPayload configured near this bound)
//     with LengthOverflow;
//   - a frame of target calls holds less than flushBytes of pipelined
//     calls (their data and maxOpOverhead each) plus one call: a Put of at
//     most maxPutLen bytes, or a waiting call (a Sync's gets total at most
//     maxGetLen bytes);
//   - an answer carries a Fetch's payload (at most the worker's
//     MaxRendezvousFetch, 1 MiB by default; a larger one fails with
//     LengthOverflow) or a Sync's gets.
const maxMsgSize = 64 << 20

// maxPutLen bounds the data of one Put of a plugin, and maxGetLen the bytes
// one Sync of a plugin reads (its RemoteGets together): larger ones fail
// with LengthOverflow, nothing sent. Half a message leaves room for the
// pipelined calls that travel with them.
const (
	maxPutLen = maxMsgSize / 2
	maxGetLen = maxMsgSize / 2
)

// maxOpOverhead is the encoded size of a target call without its data or
// its Sync ops (at most 45 bytes); maxSyncOpLen that of one Sync op (at
// most 56). Pipelined calls count it against flushBytes, so a frame of
// small or empty Puts stays small too.
const (
	maxOpOverhead = 48
	maxSyncOpLen  = 56
)

// flushBytes is how much pipelined Put data the plugin holds before it sends
// a frame without waiting for a waiting call or the end of the call.
const flushBytes = 1 << 20

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
// documented on Handler. Log with Logger. Run by hand (without the worker's
// handshake cookie) the binary prints a notice and exits with status 1.
func Serve(h rdmo.Handler) {
	log := Logger().Named("rdmo-plugin")
	info := h.Info()
	srv := newServer(h, log)
	go watchParent(log)
	log.Debug("serving", zap.String("handler", info.Name), zap.String("version", info.Version),
		zap.Uint32s("ops", info.Ops), zap.Int("protocol", ProtocolVersion))
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         goplugin.PluginSet{pluginKey: &grpcPlugin{srv: srv}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, serverOptions()...)...)
		},
		Logger: NewHCLogger(log.Named("go-plugin")),
	})
}

// Flow-control windows large enough that a batch never waits for a window
// update; a fixed window also turns off gRPC's bandwidth-probing pings.
const window = 16 << 20

func serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMsgSize), grpc.MaxSendMsgSize(maxMsgSize),
		grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window),
		grpc.WriteBufferSize(128 << 10), grpc.ReadBufferSize(128 << 10),
		grpc.SharedWriteBuffer(true), grpc.NumStreamWorkers(4),
	}
}

func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		// After go-plugin's own options (2 GiB), so these apply.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)),
		grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window),
		grpc.WithWriteBufferSize(128 << 10), grpc.WithReadBufferSize(128 << 10),
		grpc.WithSharedWriteBuffer(true),
	}
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

// grpcPlugin is the go-plugin glue on both sides: srv is set in the plugin
// process, the worker only dispenses a rawClient.
type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	srv *server
}

func (p *grpcPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	if p.srv == nil {
		return errors.New("rdmo plugin: no handler to serve")
	}
	s.RegisterService(&serviceDesc, p.srv)
	return nil
}

func (p *grpcPlugin) GRPCClient(ctx context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &rawClient{conn: c, done: ctx.Done()}, nil
}

// rawClient is what the worker gets from Dispense: the connection, and a
// channel closed when go-plugin sees the process exit.
type rawClient struct {
	conn *grpc.ClientConn
	done <-chan struct{}
}

// server is the plugin process's side of the protocol.
type server struct {
	h   rdmo.Handler
	log *zap.Logger

	mu     sync.Mutex
	stream grpc.ServerStream // the worker's Target stream; nil until open
	gone   chan struct{}     // closed when that stream ends
	waits  map[uint64]chan *answer

	sendMu   sync.Mutex
	nextID   atomic.Uint64
	poisoned atomic.Pointer[string] // set by a handler panic
}

func newServer(h rdmo.Handler, log *zap.Logger) *server {
	return &server{h: h, log: log, waits: make(map[uint64]chan *answer)}
}

func (s *server) info(context.Context) (*infoResp, error) {
	i := s.h.Info()
	return &infoResp{Name: i.Name, Version: i.Version, Ops: i.Ops, Pid: int64(os.Getpid()), NoCachedState: i.NoCachedState}, nil
}

// target serves the worker's Target stream for the life of the process:
// it says hello, then delivers answers to the target calls waiting for
// them.
func (s *server) target(st grpc.ServerStream) error {
	s.mu.Lock()
	if s.stream != nil {
		s.mu.Unlock()
		return status.Error(codes.AlreadyExists, "rdmo plugin: the Target stream is already open")
	}
	gone := make(chan struct{})
	s.stream, s.gone = st, gone
	s.mu.Unlock()

	err := s.sendFrame(&frame{})
	for err == nil {
		a := new(answer)
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

func (s *server) sendFrame(f *frame) error {
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
func (s *server) call(ctx context.Context, kind uint8, in *callReq) (*callResp, error) {
	resp := new(callResp)
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
				s.log.Error("handler panicked", zap.String("call", callName(kind)), zap.Uint64("client", in.Client),
					zap.String("panic", msg), zap.ByteString("stack", debug.Stack()))
			}
		}()
		switch kind {
		case callBatch:
			resp.Results = make([]rdmo.Result, len(in.Reqs))
			s.h.HandleBatch(t, in.Reqs, resp.Results)
		case callWriteBack:
			resp.Err = toWireErr(s.h.WriteBack(t))
		case callRegionRemoved:
			resp.Err = toWireErr(s.h.RegionRemoved(t, rdmo.RegionID(in.Region)))
		case callClientRemoved:
			s.h.ClientRemoved(rdmo.ClientID(in.Client))
		}
	}()
	resp.Tail, resp.Frames = t.finish()
	return resp, nil
}

// ptarget is the rdmo.Target a handler gets in the plugin process: target
// calls go to the worker over the Target stream. See Load for the exact
// semantics.
type ptarget struct {
	s      *server
	ctx    context.Context
	inv    uint64
	client uint64
	reqs   []rdmo.Request

	mu           sync.Mutex
	pending      []op // pipelined calls not sent yet
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
func (t *ptarget) finish() ([]op, uint64) {
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

func (t *ptarget) pipeline(o op, n int) error {
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
		t.pending = make([]op, 0, max(8, len(t.reqs)))
	}
	if o.Kind == opPut && n > maxPutLen {
		return &rdmo.WireError{Status: rdmo.StatusLengthOverflow,
			Detail: fmt.Sprintf("Put of %d bytes: a plugin Puts at most %d bytes at once", n, maxPutLen)}
	}
	t.pending = append(t.pending, o)
	t.pendingBytes += maxOpOverhead
	if o.Kind == opPut {
		t.pendingBytes += n
	}
	if t.pendingBytes >= flushBytes {
		f := &frame{Inv: t.inv, Ops: t.pending}
		t.pending, t.pendingBytes = nil, 0
		if err := t.s.sendFrame(f); err != nil {
			return err
		}
		t.frames++
	}
	return nil
}

func (t *ptarget) Put(region rdmo.RegionID, addr uint64, data []byte) error {
	return t.pipeline(op{Kind: opPut, Region: region, Addr: addr, Data: data}, len(data))
}

func (t *ptarget) Place(req *rdmo.Request, region rdmo.RegionID, addr uint64) error {
	i := t.index(req)
	if i < 0 {
		return &rdmo.WireError{Status: rdmo.StatusInternal, Detail: fmt.Sprintf("Place: request %d is not in this batch", req.Seq)}
	}
	return t.pipeline(op{Kind: opPlace, Region: region, Addr: addr, Req: i}, int(min(req.Length, 1<<62)))
}

// wait sends the pending pipelined calls and o in one frame and waits for
// o's answer.
func (t *ptarget) wait(o op) (*answer, error) {
	s := t.s
	ch := make(chan *answer, 1)
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
	f := &frame{Inv: t.inv, Ops: append(t.pending, o)}
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
	a, err := t.wait(op{Kind: opRegion, Region: id})
	if err != nil {
		return rdmo.Region{}, err
	}
	e = regionEntry{r: a.Region, err: a.Err.err()}
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
	so := make([]syncOp, len(ops))
	for i := range ops {
		o := &ops[i]
		so[i] = syncOp{Kind: o.Kind, Region: o.Region, Addr: o.Addr, Operand: o.Operand, Compare: o.Compare}
		if o.Kind == rdmo.RemoteGet {
			so[i].Len = uint64(len(o.Buf))
		}
	}
	if err := syncFits(so); err != nil {
		return err
	}
	a, err := t.wait(op{Kind: opSync, Sync: so})
	if err != nil {
		return err
	}
	if err := a.Err.err(); err != nil {
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
	a, err := t.wait(op{Kind: opFetch, Req: i})
	if err != nil {
		return nil, err
	}
	if err := a.Err.err(); err != nil {
		return nil, err
	}
	if a.Data == nil {
		return []byte{}, nil
	}
	return a.Data, nil
}

func (t *ptarget) Flush() error {
	a, err := t.wait(op{Kind: opFlush})
	if err != nil {
		return err
	}
	return a.Err.err()
}

func (t *ptarget) WriteBackAll() error {
	a, err := t.wait(op{Kind: opWriteBackAll})
	if err != nil {
		return err
	}
	return a.Err.err()
}

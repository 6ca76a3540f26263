package dpu_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/internal/testutil"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

var le = binary.LittleEndian

const waitLimit = 20 * time.Second

// env is one test's world: a dpu.Worker, and a UCP context on which the
// test makes its targets and initiators.
type env struct {
	t   testing.TB
	tr  ucptest.Transport
	ctx *ucp.Context
	w   *dpu.Worker
}

// observedLogger is a worker logger that keeps every entry (debug ones
// too) for the test to wait on, and logs info and above to the test log.
func observedLogger(t testing.TB) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.DebugLevel)
	return zap.New(zapcore.NewTee(zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Core(), core)), logs
}

func newEnv(t testing.TB, tr ucptest.Transport, cfg dpu.Config) *env {
	t.Helper()
	ctx := ucptest.NewContext(t, tr)
	cfg.UCXConfig = tr.Config()
	if cfg.Logger == nil {
		level := zap.InfoLevel
		if os.Getenv("DPU_TEST_DEBUG") != "" {
			level = zap.DebugLevel
		}
		cfg.Logger = zaptest.NewLogger(t, zaptest.Level(level))
	}
	w, err := dpu.New(cfg)
	if err != nil {
		ucptest.SkipOrFail(t, "dpu.New: %v", err)
	}
	e := &env{t: t, tr: tr, ctx: ctx, w: w}
	t.Cleanup(func() {
		// A failed test may leave a slow handler blocked: open its gate,
		// or Close would wait for it forever.
		for _, h := range cfg.Handlers {
			if s, ok := h.(*slowHandler); ok {
				s.release()
			}
		}
		if err := w.Close(); err != nil {
			t.Errorf("worker close: %v", err)
		}
	})
	return e
}

// do runs a command and fails the test on error.
func (e *env) do(cmd dpu.Command, progress ...*initiator) dpu.Notification {
	e.t.Helper()
	n, err := e.try(cmd, progress...)
	if err != nil {
		e.t.Fatalf("%s: %v", cmd.CommandType(), err)
	}
	if n.Status != rdmo.StatusOK {
		e.t.Fatalf("%s: status %s without error", cmd.CommandType(), n.Status.Name())
	}
	return n
}

// try runs a command while progressing the given initiators (a graceful
// close of a connection to them may need their progress).
func (e *env) try(cmd dpu.Command, progress ...*initiator) (dpu.Notification, error) {
	type res struct {
		n   dpu.Notification
		err error
	}
	ch := make(chan res, 1)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	go func() {
		n, err := e.w.Do(ctx, cmd)
		ch <- res{n, err}
	}()
	for {
		select {
		case r := <-ch:
			return r.n, r.err
		default:
		}
		if len(progress) == 0 {
			r := <-ch
			return r.n, r.err
		}
		for _, in := range progress {
			in.w.Progress()
		}
	}
}

// targetProc plays a target process: a UCP worker progressed by its own
// goroutine and one UCX-allocated memory area, filled with guard bytes.
type targetProc struct {
	w    *ucp.Worker
	addr []byte
	mem  *ucp.Memory
	stop chan struct{}
	done chan struct{}
}

const guard = 0xEE

func (e *env) newTarget(size int) *targetProc {
	e.t.Helper()
	mem, err := e.ctx.Allocate(size)
	if err != nil {
		e.t.Fatal(err)
	}
	b := mem.Bytes()
	for i := range b {
		b[i] = guard
	}
	p := &targetProc{mem: mem, stop: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan error, 1)
	// The worker is made on the goroutine that progresses and closes it:
	// UCX binds a worker to the thread that made it.
	go func() {
		defer close(p.done)
		w, err := e.ctx.NewWorker(ucp.WorkerOptions{})
		if err == nil {
			if p.addr, err = w.Address(); err != nil {
				w.Close()
			}
		}
		ready <- err
		if err != nil {
			return
		}
		p.w = w
		defer w.Close()
		idle := 0
		for {
			select {
			case <-p.stop:
				return
			default:
			}
			n, err := w.Progress()
			if err != nil {
				return
			}
			if n > 0 {
				idle = 0
			} else if idle++; idle > 256 {
				w.Wait(time.Millisecond)
			}
		}
	}()
	e.t.Cleanup(func() { mem.Close() })
	if err := <-ready; err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(p.kill)
	return p
}

// kill stops the target's worker, as if the process died.
func (p *targetProc) kill() {
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	<-p.done
}

func (p *targetProc) packedRkey(t testing.TB) []byte {
	k, err := p.mem.PackRkey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// initiator plays an initiator: a UCP worker driven by the test goroutine.
type initiator struct {
	t       testing.TB
	w       *ucp.Worker
	addr    []byte
	ep      *ucp.Endpoint
	client  uint64
	seq     uint64
	acks    map[uint64]wire.AckResponse
	details map[uint64]string // an ack's failure detail, by seq
	flushes []wire.FlushResponse
	order   []string // "ack:<seq>" / "flush:<id>" in arrival order
	groups  []int    // the entries of each ACK group, in arrival order
	bad     []string
	sendErr []error
}

func (e *env) newInitiator(client uint64) *initiator {
	e.t.Helper()
	w, err := e.ctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	in := &initiator{t: e.t, w: w, client: client, acks: map[uint64]wire.AckResponse{}, details: map[uint64]string{}}
	if in.addr, err = w.Address(); err != nil {
		e.t.Fatal(err)
	}
	w.SetHandler(0, ucp.MessageHandlerFunc(func(_ *ucp.Worker, msgs []ucp.Message) {
		for _, m := range msgs {
			if id, _ := wire.ParseResponseID(m.Header); id == wire.RspAckGroup {
				in.ackGroup(m.Header, m.Data)
				continue
			}
			in.response(m.Header)
			if a, err := wire.ParseAck(m.Header); err == nil && a.DetailLen > 0 {
				if _, detail, err := wire.AckResult(a, m.Data); err == nil {
					in.details[a.Seq] = string(detail)
				}
			}
		}
	}))
	e.t.Cleanup(in.close)
	return in
}

// ackGroup records an ACK group's acks as response records a lone ack.
func (in *initiator) ackGroup(hdr, data []byte) {
	count, err := wire.ParseAckGroupHeader(hdr)
	if err != nil {
		in.bad = append(in.bad, err.Error())
		return
	}
	it := wire.NewAckGroupIter(data, count)
	n := 0
	for it.Next() {
		a := it.Ack()
		_, detail, err := wire.AckResult(a, it.Result())
		if err != nil {
			in.bad = append(in.bad, err.Error())
		}
		in.response(wire.AppendAck(nil, a)[:wire.AckResponseLen])
		if len(detail) > 0 {
			in.details[a.Seq] = string(detail)
		}
		n++
	}
	if it.Err() != nil {
		in.bad = append(in.bad, it.Err().Error())
	}
	in.groups = append(in.groups, n)
}

func (in *initiator) response(b []byte) {
	id, err := wire.ParseResponseID(b)
	if err != nil {
		in.bad = append(in.bad, err.Error())
		return
	}
	switch id {
	case wire.RspAck:
		a, err := wire.ParseAck(b)
		if err != nil {
			in.bad = append(in.bad, err.Error())
			return
		}
		if _, dup := in.acks[a.Seq]; dup {
			in.bad = append(in.bad, fmt.Sprintf("second ack for seq %d", a.Seq))
		}
		in.acks[a.Seq] = a
		in.order = append(in.order, fmt.Sprintf("ack:%d", a.Seq))
	case wire.RspFlush:
		f, err := wire.ParseFlushResponse(b)
		if err != nil {
			in.bad = append(in.bad, err.Error())
			return
		}
		if !f.Extended {
			in.bad = append(in.bad, "flush response not extended")
		}
		in.flushes = append(in.flushes, f)
		in.order = append(in.order, fmt.Sprintf("flush:%d", f.FlushID))
	}
}

func (in *initiator) connect(workerAddr []byte) {
	ep, err := in.w.Connect(workerAddr, ucp.EndpointOptions{Name: "initiator"})
	if err != nil {
		in.t.Fatal(err)
	}
	in.ep = ep
}

func (in *initiator) close() {
	if in.w == nil {
		return
	}
	if in.ep != nil {
		in.ep.CloseForce()
	}
	in.w.Close()
	in.w = nil
}

type sendDone struct{ in *initiator }

func (s sendDone) Complete(c ucp.Completion) {
	if c.Err != nil {
		s.in.sendErr = append(s.in.sendErr, c.Err)
	}
}

// send sends one request and returns the sequence number the worker gives it.
func (in *initiator) send(hdr, payload []byte, flags ucp.SendFlags) uint64 {
	in.t.Helper()
	h := append([]byte(nil), hdr...)
	var p []byte
	if payload != nil {
		p = append([]byte(nil), payload...)
	}
	if err := in.ep.SendAM(0, h, p, ucp.SendReply|flags, sendDone{in}, 0); err != nil {
		in.t.Fatalf("send: %v", err)
	}
	s := in.seq
	in.seq++
	return s
}

func (in *initiator) progressUntil(what string, cond func() bool) {
	in.t.Helper()
	deadline := testutil.Deadline(in.t)
	for !cond() {
		if _, err := in.w.Progress(); err != nil {
			in.t.Fatal(err)
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("timed out waiting for %s (acks %v, flushes %+v, bad %v)", what, in.acks, in.flushes, in.bad)
		}
	}
	if len(in.bad) > 0 {
		in.t.Fatalf("malformed responses: %v", in.bad)
	}
}

// progressFor progresses for d and reports nothing: for checking that
// something does NOT happen while a condition holds.
func (in *initiator) progressFor(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		in.w.Progress()
	}
}

func (in *initiator) ack(seq uint64) wire.AckResponse {
	in.t.Helper()
	in.progressUntil(fmt.Sprintf("ack of seq %d", seq), func() bool { _, ok := in.acks[seq]; return ok })
	return in.acks[seq]
}

func (in *initiator) flush(id uint64) (uint64, wire.FlushResponse) {
	in.t.Helper()
	seq := in.send(wire.AppendFlushRequest(nil, wire.Header{ClientID: in.client, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: id}), nil, 0)
	return seq, in.waitFlush(id)
}

func (in *initiator) waitFlush(id uint64) wire.FlushResponse {
	in.t.Helper()
	var got wire.FlushResponse
	in.progressUntil(fmt.Sprintf("flush %#x", id), func() bool {
		for _, f := range in.flushes {
			if f.FlushID == id {
				got = f
				return true
			}
		}
		return false
	})
	return got
}

// setup is the common arrangement: a client with one target and a region,
// one initiator with a request queue.
type setup struct {
	e      *env
	tgt    *targetProc
	in     *initiator
	client uint64
	rq     uint64
	region uint64
	base   uint64 // target address of the region's first byte
	size   uint64
	waddr  []byte
}

// newSetup registers client id with a target of memSize bytes, of which
// [regOff, regOff+regLen) is registered as a region.
func (e *env) newSetup(id uint64, memSize int, regOff, regLen uint64) *setup {
	e.t.Helper()
	s := &setup{e: e, client: id}
	s.tgt = e.newTarget(memSize)
	n := e.do(dpu.ClientInit{ID: id, Addr: s.tgt.addr})
	s.waddr = n.Addr
	s.in = e.newInitiator(id)
	s.rq = e.do(dpu.RQCreate{Client: id, Addr: s.in.addr}).RQ
	s.in.connect(s.waddr)
	s.base = s.tgt.mem.Address() + regOff
	s.size = regLen
	s.region = e.do(dpu.MRReg{Client: id, VA: s.base, Len: regLen, PackedRkey: s.tgt.packedRkey(e.t)}).Region
	return s
}

// mem returns the target's bytes at [addr, addr+n).
func (s *setup) mem(addr uint64, n int) []byte {
	off := addr - s.tgt.mem.Address()
	return s.tgt.mem.Bytes()[off : off+uint64(n)]
}

// Test handlers. Each serves one user op.
const (
	opPut   = rdmo.OpUserBase + iota // sub-header: region u64, addr u64; payload written there
	opSlow                           // waits for the gate, then writes a marker like opPut
	opSync                           // sub-header: region, addr: fetch-add 1 and a read; Value = old value
	opFetch                          // sub-header: region, addr: Fetch the payload, then Put it
	opCache                          // sub-header: region, addr, value: cached until Fence/RegionRemoved
	opPanic                          // panics
	opNull                           // does nothing
)

func userReq(client uint64, op, flags uint32, sub ...uint64) []byte {
	var b []byte
	for _, v := range sub {
		b = le.AppendUint64(b, v)
	}
	h, err := wire.AppendUserRequest(nil, wire.Header{ClientID: client, Op: op, Flags: flags}, b)
	if err != nil {
		panic(err)
	}
	return h
}

func sub(req *rdmo.Request, i int) uint64 {
	return le.Uint64(req.Sub[8*i:])
}

// regionSub is sub for a word that names a region.
func regionSub(req *rdmo.Request, i int) rdmo.RegionID { return rdmo.RegionID(sub(req, i)) }

type putHandler struct{ rdmo.BaseHandler }

func (putHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: "test-put", Version: "1", Ops: []uint32{opPut}}
}

func (putHandler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	for i := range reqs {
		r := &reqs[i]
		region, addr := regionSub(r, 0), sub(r, 1)
		var err error
		if r.Rendezvous {
			err = t.Place(r, region, addr)
		} else {
			err = t.Put(region, addr, r.Payload)
		}
		results[i] = rdmo.ResultOf(err)
		results[i].Value = addr
	}
}

// slowHandler blocks each batch until gate is closed, then Puts its
// payload like putHandler.
type slowHandler struct {
	rdmo.BaseHandler
	gate    chan struct{}
	started chan struct{}
	once    sync.Once
}

// newSlow makes a slow handler; newEnv opens its gate before closing the
// worker, so a failing test cannot hang.
func newSlow(t testing.TB) *slowHandler {
	return &slowHandler{gate: make(chan struct{}), started: make(chan struct{}, 100)}
}

func (h *slowHandler) release() { h.once.Do(func() { close(h.gate) }) }

// waitStarted progresses the initiator until a batch of the handler started.
func (h *slowHandler) waitStarted(in *initiator) {
	in.t.Helper()
	in.progressUntil("the slow handler to start", func() bool {
		select {
		case <-h.started:
			return true
		default:
			return false
		}
	})
}

func (*slowHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: "test-slow", Version: "1", Ops: []uint32{opSlow}}
}

func (h *slowHandler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	h.started <- struct{}{}
	<-h.gate
	putHandler{}.HandleBatch(t, reqs, results)
}

type syncHandler struct{ rdmo.BaseHandler }

func (syncHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: "test-sync", Version: "1", Ops: []uint32{opSync}}
}

func (syncHandler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	for i := range reqs {
		region, addr := regionSub(&reqs[i], 0), sub(&reqs[i], 1)
		buf := t.Buffer(8)
		ops := []rdmo.RemoteOp{
			{Kind: rdmo.RemoteFetchAdd, Region: region, Addr: addr, Operand: 1},
			{Kind: rdmo.RemoteGet, Region: region, Addr: addr + 8, Buf: buf},
		}
		if err := t.Sync(ops); err != nil {
			results[i] = rdmo.ResultOf(err)
			continue
		}
		if ops[0].Status != rdmo.StatusOK || ops[1].Status != rdmo.StatusOK {
			results[i] = rdmo.Fail(max(ops[0].Status, ops[1].Status), "sync op failed")
			continue
		}
		if got := le.Uint64(buf); got != 0x1122334455667788 {
			results[i] = rdmo.Fail(rdmo.StatusInternal, "read %#x", got)
			continue
		}
		results[i].Value = ops[0].Result
	}
}

type fetchHandler struct{ rdmo.BaseHandler }

func (fetchHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: "test-fetch", Version: "1", Ops: []uint32{opFetch}}
}

func (fetchHandler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	for i := range reqs {
		data, err := t.Fetch(&reqs[i])
		if err == nil {
			err = t.Put(regionSub(&reqs[i], 0), sub(&reqs[i], 1), data)
		}
		results[i] = rdmo.ResultOf(err)
	}
}

// cacheHandler keeps values in worker memory and writes them at WriteBack
// (all) or RegionRemoved (that region's), like a cached queue tail.
type cacheHandler struct {
	mu      sync.Mutex
	cached  map[uint64]map[[2]uint64]uint64 // client -> (region, addr) -> value
	removed []uint64
	gone    []uint64
}

func newCache() *cacheHandler { return &cacheHandler{cached: map[uint64]map[[2]uint64]uint64{}} }

func (*cacheHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: "test-cache", Version: "1", Ops: []uint32{opCache}}
}

func (h *cacheHandler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.cached[uint64(t.ClientID())]
	if m == nil {
		m = map[[2]uint64]uint64{}
		h.cached[uint64(t.ClientID())] = m
	}
	for i := range reqs {
		region, addr, v := sub(&reqs[i], 0), sub(&reqs[i], 1), sub(&reqs[i], 2)
		reg, err := t.Region(rdmo.RegionID(region))
		if err == nil {
			err = reg.CheckRange(addr, 8)
		}
		if err != nil {
			results[i] = rdmo.ResultOf(err)
			continue
		}
		m[[2]uint64{region, addr}] = v
	}
}

func (h *cacheHandler) write(t rdmo.Target, only uint64) error {
	var errs []error
	for k, v := range h.cached[uint64(t.ClientID())] {
		if only != 0 && k[0] != only {
			continue
		}
		b := t.Buffer(8)
		le.PutUint64(b, v)
		if err := t.Put(rdmo.RegionID(k[0]), k[1], b); err != nil {
			errs = append(errs, err)
		}
		delete(h.cached[uint64(t.ClientID())], k)
	}
	return errors.Join(errs...)
}

func (h *cacheHandler) WriteBack(t rdmo.Target) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.write(t, 0)
}

func (h *cacheHandler) RegionRemoved(t rdmo.Target, region rdmo.RegionID) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removed = append(h.removed, uint64(region))
	return h.write(t, uint64(region))
}

func (h *cacheHandler) ClientRemoved(id rdmo.ClientID) {
	client := uint64(id)
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.cached, client)
	h.gone = append(h.gone, client)
}

type panicHandler struct{ rdmo.BaseHandler }

func (panicHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: "test-panic", Version: "1", Ops: []uint32{opPanic}}
}

func (panicHandler) HandleBatch(rdmo.Target, []rdmo.Request, []rdmo.Result) { panic("boom") }

type nullHandler struct{ rdmo.BaseHandler }

func (nullHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: "test-null", Version: "1", Ops: []uint32{opNull}}
}

func (nullHandler) HandleBatch(_ rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

package plugin

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// This file is the wire between worker and plugin: a hand-written gRPC
// service (no protoc) whose messages are MessagePack, encoded by hand
// (no reflection) so a batch costs a few copies and no per-field lookups.
//
// Service rdmo.plugin.v1.Handler (the plugin process serves it):
//
//	Info          unary   infoReq  -> infoResp   name, version, ops, NoCachedState
//	HandleBatch   unary   callReq  -> callResp   one call per batch
//	WriteBack     unary   callReq  -> callResp   Handler.WriteBack
//	RegionRemoved unary   callReq  -> callResp   Handler.RegionRemoved
//	ClientRemoved unary   callReq  -> callResp   Handler.ClientRemoved
//	Target        bidi    answer  <-> frame      opened once by the worker
//
// On the Target stream the plugin sends frames (target calls of one
// invocation) and the worker sends answers (to the calls that wait).

// codecName is the content-subtype our calls carry ("application/grpc+
// rdmo-msgpack"). gRPC's server picks the codec registered under it, so
// go-plugin's own protobuf services on the same connection are unaffected.
const codecName = "rdmo-msgpack"

func init() { encoding.RegisterCodecV2(msgpackCodec{}) }

// msgpackCodec carries the messages of this file as MessagePack. The
// encoder and decoder are hand-written for these few types (msgpack_enc.go):
// no reflection, one buffer per message, byte strings decoded in place.
type msgpackCodec struct{}

// wireMsg is a message of this protocol.
type wireMsg interface {
	sizeHint() int            // an upper bound of the encoded size (or a good guess)
	appendTo(b []byte) []byte // MessagePack encoding
	decode(r *dec)            // reads what appendTo wrote; errors in r.err
}

func (msgpackCodec) Name() string { return codecName }

func (msgpackCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(wireMsg)
	if !ok {
		return nil, fmt.Errorf("rdmo plugin codec: cannot marshal %T", v)
	}
	pool := mem.DefaultBufferPool()
	p := pool.Get(m.sizeHint())
	b := m.appendTo((*p)[:0])
	if len(b) <= cap(*p) { // append did not reallocate: b is *p's array
		*p = b
		return mem.BufferSlice{mem.NewBuffer(p, pool)}, nil
	}
	pool.Put(p) // outgrown
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (msgpackCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(wireMsg)
	if !ok {
		return fmt.Errorf("rdmo plugin codec: cannot unmarshal into %T", v)
	}
	// One copy of the whole message, which the decoded byte strings (payloads,
	// Put data) then point into: gRPC frees data when we return.
	return unmarshal(data.Materialize(), m)
}

func unmarshal(b []byte, m wireMsg) error {
	r := dec{b: b}
	m.decode(&r)
	if r.err == nil && r.off != len(r.b) {
		r.err = fmt.Errorf("rdmo plugin wire: %d bytes after the message", len(r.b)-r.off)
	}
	return r.err
}

const (
	serviceName = "rdmo.plugin.v1.Handler"

	methodInfo          = "/" + serviceName + "/Info"
	methodHandleBatch   = "/" + serviceName + "/HandleBatch"
	methodWriteBack     = "/" + serviceName + "/WriteBack"
	methodRegionRemoved = "/" + serviceName + "/RegionRemoved"
	methodClientRemoved = "/" + serviceName + "/ClientRemoved"
	methodTarget        = "/" + serviceName + "/Target"
)

// Kinds of invocation (worker -> plugin unary calls with a callReq).
const (
	callBatch uint8 = iota + 1
	callWriteBack
	callRegionRemoved
	callClientRemoved
)

func callMethod(kind uint8) string {
	switch kind {
	case callBatch:
		return methodHandleBatch
	case callWriteBack:
		return methodWriteBack
	case callRegionRemoved:
		return methodRegionRemoved
	}
	return methodClientRemoved
}

func callName(kind uint8) string {
	switch kind {
	case callBatch:
		return "HandleBatch"
	case callWriteBack:
		return "WriteBack"
	case callRegionRemoved:
		return "RegionRemoved"
	}
	return "ClientRemoved"
}

// Kinds of target call (plugin -> worker, on the stream).
const (
	opPut   uint8 = iota + 1 // pipelined
	opPlace                  // pipelined
	opRegion
	opSync
	opFetch
	opFlush
	opWriteBackAll
)

// rpcServer is what the plugin process implements; serviceDesc dispatches
// to it.
type rpcServer interface {
	info(ctx context.Context) (*infoResp, error)
	call(ctx context.Context, kind uint8, in *callReq) (*callResp, error)
	target(stream grpc.ServerStream) error
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*rpcServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Info", Handler: infoHandler},
		{MethodName: "HandleBatch", Handler: callHandler(callBatch)},
		{MethodName: "WriteBack", Handler: callHandler(callWriteBack)},
		{MethodName: "RegionRemoved", Handler: callHandler(callRegionRemoved)},
		{MethodName: "ClientRemoved", Handler: callHandler(callClientRemoved)},
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Target",
		Handler:       func(srv any, s grpc.ServerStream) error { return srv.(rpcServer).target(s) },
		ServerStreams: true,
		ClientStreams: true,
	}},
}

func infoHandler(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
	in := new(infoReq)
	if err := dec(in); err != nil {
		return nil, err
	}
	s := srv.(rpcServer)
	if ic == nil {
		return s.info(ctx)
	}
	return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: methodInfo},
		func(ctx context.Context, _ any) (any, error) { return s.info(ctx) })
}

func callHandler(kind uint8) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(callReq)
		if err := dec(in); err != nil {
			return nil, err
		}
		s := srv.(rpcServer)
		if ic == nil {
			return s.call(ctx, kind, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: callMethod(kind)},
			func(ctx context.Context, req any) (any, error) { return s.call(ctx, kind, req.(*callReq)) })
	}
}

// ---- messages ----

// wireErr carries an error: Status 0 means none. The receiver rebuilds a
// *rdmo.WireError, so errors.Is against the rdmo sentinels keeps working
// across the process boundary.
type wireErr struct {
	Status rdmo.Status
	Detail string
}

func toWireErr(err error) wireErr {
	if err == nil {
		return wireErr{}
	}
	var we *rdmo.WireError
	if errors.As(err, &we) && error(we) == err {
		return wireErr{Status: rdmo.StatusOf(err), Detail: we.Detail}
	}
	return wireErr{Status: rdmo.StatusOf(err), Detail: err.Error()}
}

func (w wireErr) err() error {
	if w.Status == rdmo.StatusOK {
		return nil
	}
	return &rdmo.WireError{Status: w.Status, Detail: w.Detail}
}

type infoReq struct{}

type infoResp struct {
	Name          string
	Version       string
	Ops           []uint32
	Pid           int64
	NoCachedState bool // rdmo.HandlerInfo.NoCachedState; absent from older plugins (false)
}

// callReq is one invocation of the handler: a batch, or a hook.
type callReq struct {
	Inv    uint64 // invocation id, names the stream frames of this call
	Client uint64
	Region uint64 // RegionRemoved
	Reqs   []rdmo.Request
}

// callResp answers a callReq. Frames is how many stream frames the plugin
// sent for the invocation (the worker runs them all before it finishes the
// call); Tail holds the pipelined target calls that were not sent yet.
type callResp struct {
	Results []rdmo.Result
	Err     wireErr // WriteBack, RegionRemoved
	Frames  uint64
	Tail    []op
	Panic   string // the handler panicked: the worker restarts the plugin
}

// frame is a run of target calls of one invocation, sent by the plugin.
// Only the last op of a frame may wait (ID != 0). A frame with Inv 0 and no
// ops is the plugin's hello when the stream opens.
type frame struct {
	Inv uint64
	Ops []op
}

type op struct {
	ID     uint64 // answer id; 0 for pipelined calls (Put, Place)
	Kind   uint8
	Region rdmo.RegionID
	Addr   uint64
	Req    int64 // index of the request in the batch (Place, Fetch)
	Data   []byte
	Sync   []syncOp
}

type syncOp struct {
	Kind    rdmo.RemoteOpKind
	Region  rdmo.RegionID
	Addr    uint64
	Len     uint64 // RemoteGet
	Operand uint64
	Compare uint64
}

// answer is the worker's reply to a target call that waits.
type answer struct {
	ID     uint64
	Err    wireErr
	Region rdmo.Region
	Data   []byte
	Sync   []syncRes
}

type syncRes struct {
	Result uint64
	Status rdmo.Status
	Data   []byte
}

// ---- encoding of each message ----

// Every struct is a MessagePack array of its fields in order. A decoder
// reads the fields it knows and skips any that a newer peer appended.

func (w wireErr) size() int { return 1 + 9 + 5 + len(w.Detail) }
func (w wireErr) append(b []byte) []byte {
	b = appendArr(b, 2)
	b = appendUint(b, uint64(w.Status))
	return appendStr(b, w.Detail)
}
func (r *dec) werr() wireErr {
	x := r.fields(2)
	w := wireErr{Status: rdmo.Status(r.u32()), Detail: r.s()}
	r.skipN(x)
	return w
}

func (m *infoReq) sizeHint() int            { return 1 }
func (m *infoReq) appendTo(b []byte) []byte { return appendArr(b, 0) }
func (m *infoReq) decode(r *dec)            { r.skipN(r.fields(0)) }

func (m *infoResp) sizeHint() int { return 32 + len(m.Name) + len(m.Version) + 5*len(m.Ops) }
func (m *infoResp) appendTo(b []byte) []byte {
	b = appendArr(b, 5)
	b = appendStr(b, m.Name)
	b = appendStr(b, m.Version)
	b = appendArr(b, len(m.Ops))
	for _, o := range m.Ops {
		b = appendUint(b, uint64(o))
	}
	b = appendInt(b, m.Pid)
	return appendBool(b, m.NoCachedState)
}
func (m *infoResp) decode(r *dec) {
	x := r.fields(4)
	m.Name, m.Version = r.s(), r.s()
	if n := r.count(minOpLen); n >= 0 && r.err == nil {
		m.Ops = make([]uint32, n)
		for i := range m.Ops {
			m.Ops[i] = r.u32()
		}
	}
	m.Pid = r.i()
	if x > 0 && r.err == nil {
		m.NoCachedState = r.t()
		x--
	}
	r.skipN(x)
}

const reqFields = 8

func (m *callReq) sizeHint() int {
	n := 32
	for i := range m.Reqs {
		n += 48 + len(m.Reqs[i].Sub) + len(m.Reqs[i].Payload)
	}
	return n
}
func (m *callReq) appendTo(b []byte) []byte {
	b = appendArr(b, 4)
	b = appendUint(b, m.Inv)
	b = appendUint(b, m.Client)
	b = appendUint(b, m.Region)
	b = appendArr(b, len(m.Reqs))
	for i := range m.Reqs {
		q := &m.Reqs[i]
		b = appendArr(b, reqFields)
		b = appendUint(b, q.Seq)
		b = appendUint(b, uint64(q.Client))
		b = appendUint(b, uint64(q.Op))
		b = appendUint(b, uint64(q.Flags))
		b = appendBin(b, q.Sub) // the decoded sub-header is a function of it (wire.DecodeSub)
		b = appendBin(b, q.Payload)
		b = appendUint(b, q.Length)
		b = appendBool(b, q.Rendezvous)
	}
	return b
}
func (m *callReq) decode(r *dec) {
	x := r.fields(4)
	m.Inv, m.Client, m.Region = r.u(), r.u(), r.u()
	if n := r.count(minRequestLen); n >= 0 && r.err == nil {
		m.Reqs = make([]rdmo.Request, n)
		for i := range m.Reqs {
			q := &m.Reqs[i]
			y := r.fields(reqFields)
			q.Seq, q.Client, q.Op, q.Flags = r.u(), rdmo.ClientID(r.u()), r.u32(), r.u32()
			q.Sub, q.Payload = r.bin(), r.bin()
			if r.err == nil && !wire.DecodeSub(q) {
				r.fail(fmt.Errorf("rdmo plugin wire: %s sub-header of %d bytes", rdmo.OpName(q.Op), len(q.Sub)))
			}
			q.Length, q.Rendezvous = r.u(), r.t()
			r.skipN(y)
			if r.err != nil {
				return
			}
		}
	}
	r.skipN(x)
}

func (m *callResp) sizeHint() int {
	n := 32 + m.Err.size() + len(m.Panic) + opsSize(m.Tail)
	for i := range m.Results {
		n += 24 + len(m.Results[i].Detail)
	}
	return n
}
func (m *callResp) appendTo(b []byte) []byte {
	b = appendArr(b, 5)
	b = appendArr(b, len(m.Results))
	for i := range m.Results {
		res := &m.Results[i]
		b = appendArr(b, 3)
		b = appendUint(b, uint64(res.Status))
		b = appendStr(b, res.Detail)
		b = appendUint(b, res.Value)
	}
	b = m.Err.append(b)
	b = appendUint(b, m.Frames)
	b = appendOps(b, m.Tail)
	return appendStr(b, m.Panic)
}
func (m *callResp) decode(r *dec) {
	x := r.fields(5)
	if n := r.count(minResultLen); n >= 0 && r.err == nil {
		m.Results = make([]rdmo.Result, n)
		for i := range m.Results {
			res := &m.Results[i]
			y := r.fields(3)
			res.Status, res.Detail, res.Value = rdmo.Status(r.u32()), r.s(), r.u()
			r.skipN(y)
			if r.err != nil {
				return
			}
		}
	}
	m.Err = r.werr()
	m.Frames = r.u()
	m.Tail = r.ops()
	m.Panic = r.s()
	r.skipN(x)
}

func opsSize(ops []op) int {
	n := 8
	for i := range ops {
		n += 64 + len(ops[i].Data) + 56*len(ops[i].Sync)
	}
	return n
}

func appendOps(b []byte, ops []op) []byte {
	b = appendArr(b, len(ops))
	for i := range ops {
		o := &ops[i]
		b = appendArr(b, 7)
		b = appendUint(b, o.ID)
		b = appendUint(b, uint64(o.Kind))
		b = appendUint(b, uint64(o.Region))
		b = appendUint(b, o.Addr)
		b = appendInt(b, o.Req)
		b = appendBin(b, o.Data)
		b = appendArr(b, len(o.Sync))
		for j := range o.Sync {
			s := &o.Sync[j]
			b = appendArr(b, 6)
			b = appendUint(b, uint64(s.Kind))
			b = appendUint(b, uint64(s.Region))
			b = appendUint(b, s.Addr)
			b = appendUint(b, s.Len)
			b = appendUint(b, s.Operand)
			b = appendUint(b, s.Compare)
		}
	}
	return b
}

func (r *dec) ops() []op {
	n := r.count(minTargetOp)
	if n <= 0 || r.err != nil {
		return nil
	}
	ops := make([]op, n)
	for i := range ops {
		o := &ops[i]
		x := r.fields(7)
		o.ID, o.Kind = r.u(), r.u8()
		o.Region, o.Addr, o.Req = rdmo.RegionID(r.u()), r.u(), r.i()
		o.Data = r.bin()
		if m := r.count(minSyncOpLen); m > 0 && r.err == nil {
			o.Sync = make([]syncOp, m)
			for j := range o.Sync {
				s := &o.Sync[j]
				y := r.fields(6)
				s.Kind = rdmo.RemoteOpKind(r.u8())
				s.Region, s.Addr, s.Len, s.Operand, s.Compare = rdmo.RegionID(r.u()), r.u(), r.u(), r.u(), r.u()
				r.skipN(y)
			}
		}
		r.skipN(x)
		if r.err != nil {
			return nil
		}
	}
	return ops
}

func (m *frame) sizeHint() int { return 16 + opsSize(m.Ops) }
func (m *frame) appendTo(b []byte) []byte {
	b = appendArr(b, 2)
	b = appendUint(b, m.Inv)
	return appendOps(b, m.Ops)
}
func (m *frame) decode(r *dec) {
	x := r.fields(2)
	m.Inv = r.u()
	m.Ops = r.ops()
	r.skipN(x)
}

func (m *answer) sizeHint() int {
	n := 48 + m.Err.size() + len(m.Data)
	for i := range m.Sync {
		n += 24 + len(m.Sync[i].Data)
	}
	return n
}
func (m *answer) appendTo(b []byte) []byte {
	b = appendArr(b, 5)
	b = appendUint(b, m.ID)
	b = m.Err.append(b)
	b = appendArr(b, 3)
	b = appendUint(b, uint64(m.Region.ID))
	b = appendUint(b, m.Region.Base)
	b = appendUint(b, m.Region.Len)
	b = appendBin(b, m.Data)
	b = appendArr(b, len(m.Sync))
	for i := range m.Sync {
		s := &m.Sync[i]
		b = appendArr(b, 3)
		b = appendUint(b, s.Result)
		b = appendUint(b, uint64(s.Status))
		b = appendBin(b, s.Data)
	}
	return b
}
func (m *answer) decode(r *dec) {
	x := r.fields(5)
	m.ID = r.u()
	m.Err = r.werr()
	y := r.fields(3)
	m.Region = rdmo.Region{ID: rdmo.RegionID(r.u()), Base: r.u(), Len: r.u()}
	r.skipN(y)
	m.Data = r.bin()
	if n := r.count(minSyncResLen); n > 0 && r.err == nil {
		m.Sync = make([]syncRes, n)
		for i := range m.Sync {
			s := &m.Sync[i]
			z := r.fields(3)
			s.Result, s.Status, s.Data = r.u(), rdmo.Status(r.u32()), r.bin()
			r.skipN(z)
		}
	}
	r.skipN(x)
}

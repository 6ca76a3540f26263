package wire

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

// This file is the service and its messages. Service rdmo.plugin.v1.Handler (the plugin process serves it):
//
// Service rdmo.plugin.v1.Handler (the plugin process serves it):
//
//	Info          unary   InfoReq  -> InfoResp   name, version, ops, NoCachedState, statuses, op names
//	HandleBatch   unary   CallReq  -> CallResp   one call per batch
//	WriteBack     unary   CallReq  -> CallResp   Handler.WriteBack
//	RegionRemoved unary   CallReq  -> CallResp   Handler.RegionRemoved
//	ClientRemoved unary   CallReq  -> CallResp   Handler.ClientRemoved
//	Target        bidi    answer  <-> frame      opened once by the worker
//
// On the Target stream the plugin sends frames (target calls of one
// invocation) and the worker sends answers (to the calls that wait).

// CodecName is the content-subtype our calls carry ("application/grpc+
// rdmo-msgpack"). gRPC's server picks the codec registered under it, so
// go-plugin's own protobuf services on the same connection are unaffected.
const CodecName = "rdmo-msgpack"

func init() { encoding.RegisterCodecV2(msgpackCodec{}) }

// msgpackCodec carries the messages of this file as MessagePack. The
// encoder and decoder are hand-written for these few types (msgpack.go):
// no reflection, one buffer per message, byte strings decoded in place.
type msgpackCodec struct{}

// wireMsg is a message of this protocol.
type wireMsg interface {
	sizeHint() int            // an upper bound of the encoded size (or a good guess)
	appendTo(b []byte) []byte // MessagePack encoding
	decode(r *dec)            // reads what appendTo wrote; errors in r.err
}

func (msgpackCodec) Name() string { return CodecName }

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

	MethodInfo          = "/" + serviceName + "/Info"
	methodHandleBatch   = "/" + serviceName + "/HandleBatch"
	methodWriteBack     = "/" + serviceName + "/WriteBack"
	methodRegionRemoved = "/" + serviceName + "/RegionRemoved"
	methodClientRemoved = "/" + serviceName + "/ClientRemoved"
	MethodTarget        = "/" + serviceName + "/Target"
)

// Kinds of invocation (worker -> plugin unary calls with a CallReq).
const (
	CallBatch uint8 = iota + 1
	CallWriteBack
	CallRegionRemoved
	CallClientRemoved
)

// CallMethod is the full gRPC method name of a kind of invocation.
func CallMethod(kind uint8) string {
	switch kind {
	case CallBatch:
		return methodHandleBatch
	case CallWriteBack:
		return methodWriteBack
	case CallRegionRemoved:
		return methodRegionRemoved
	}
	return methodClientRemoved
}

// CallName names a kind of invocation for errors and logs.
func CallName(kind uint8) string {
	switch kind {
	case CallBatch:
		return "HandleBatch"
	case CallWriteBack:
		return "WriteBack"
	case CallRegionRemoved:
		return "RegionRemoved"
	}
	return "ClientRemoved"
}

// Kinds of target call (plugin -> worker, on the stream).
const (
	OpPut   uint8 = iota + 1 // pipelined
	OpPlace                  // pipelined
	OpRegion
	OpSync
	OpFetch
	OpFlush
	OpWriteBackAll
)

// Server is what the plugin process implements; ServiceDesc dispatches
// to it.
type Server interface {
	Info(ctx context.Context) (*InfoResp, error)
	Call(ctx context.Context, kind uint8, in *CallReq) (*CallResp, error)
	Target(stream grpc.ServerStream) error
}

var ServiceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*Server)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Info", Handler: infoHandler},
		{MethodName: "HandleBatch", Handler: callHandler(CallBatch)},
		{MethodName: "WriteBack", Handler: callHandler(CallWriteBack)},
		{MethodName: "RegionRemoved", Handler: callHandler(CallRegionRemoved)},
		{MethodName: "ClientRemoved", Handler: callHandler(CallClientRemoved)},
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Target",
		Handler:       func(srv any, s grpc.ServerStream) error { return srv.(Server).Target(s) },
		ServerStreams: true,
		ClientStreams: true,
	}},
}

func infoHandler(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
	in := new(InfoReq)
	if err := dec(in); err != nil {
		return nil, err
	}
	s := srv.(Server)
	if ic == nil {
		return s.Info(ctx)
	}
	return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: MethodInfo},
		func(ctx context.Context, _ any) (any, error) { return s.Info(ctx) })
}

func callHandler(kind uint8) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(CallReq)
		if err := dec(in); err != nil {
			return nil, err
		}
		s := srv.(Server)
		if ic == nil {
			return s.Call(ctx, kind, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: CallMethod(kind)},
			func(ctx context.Context, req any) (any, error) { return s.Call(ctx, kind, req.(*CallReq)) })
	}
}

// ---- messages ----

// Fault carries an error: Status 0 means none. The receiver rebuilds a
// *rdmo.WireError, so errors.Is against the rdmo sentinels keeps working
// across the process boundary.
type Fault struct {
	Status rdmo.Status
	Detail string
}

// FaultOf carries err (nil: no error) across the process boundary.
func FaultOf(err error) Fault {
	if err == nil {
		return Fault{}
	}
	var we *rdmo.WireError
	if errors.As(err, &we) && error(we) == err {
		return Fault{Status: rdmo.StatusOf(err), Detail: we.Detail}
	}
	return Fault{Status: rdmo.StatusOf(err), Detail: err.Error()}
}

// Err rebuilds the error: nil for none, else a *rdmo.WireError.
func (w Fault) Err() error {
	if w.Status == rdmo.StatusOK {
		return nil
	}
	return &rdmo.WireError{Status: w.Status, Detail: w.Detail}
}

// InfoReq asks the plugin for its handler's identity; InfoResp answers.
type InfoReq struct{}

type InfoResp struct {
	Name          string
	Version       string
	Ops           []uint32
	Pid           int64
	NoCachedState bool // rdmo.HandlerInfo.NoCachedState; absent from older plugins (false)
	// Statuses are the plugin-defined statuses the plugin process knows
	// (rdmo.UserStatuses), so the worker names them too; absent from
	// older plugins.
	Statuses []StatusName
	// OpNames name the plugin's ops (rdmo.HandlerInfo.OpNames, else
	// rdmo.DefineOp's names in the plugin process), so the worker's logs
	// and metrics say "fetch-max(17)"; absent from older plugins.
	OpNames []OpName
}

// OpName names one of a plugin's ops.
type OpName struct {
	Op   uint32
	Name string
}

// StatusName is a plugin-defined status: its code, name and text.
type StatusName struct {
	Code       uint32
	Name, Text string
}

// CallReq is one invocation of the handler: a batch, or a hook.
type CallReq struct {
	Inv    uint64 // invocation id, names the stream frames of this call
	Client uint64
	Region uint64 // RegionRemoved
	Reqs   []rdmo.Request
}

// CallResp answers a CallReq. Frames is how many stream frames the plugin
// sent for the invocation (the worker runs them all before it finishes the
// call); Tail holds the pipelined target calls that were not sent yet.
type CallResp struct {
	Results []rdmo.Result
	Err     Fault // WriteBack, RegionRemoved
	Frames  uint64
	Tail    []Op
	Panic   string // the handler panicked: the worker restarts the plugin
}

// Frame is a run of target calls of one invocation, sent by the plugin.
// Only the last op of a frame may wait (ID != 0). A frame with Inv 0 and no
// ops is the plugin's hello when the stream opens.
type Frame struct {
	Inv uint64
	Ops []Op
}

// Op is one target call of a plugin's handler.
type Op struct {
	ID     uint64 // answer id; 0 for pipelined calls (Put, Place)
	Kind   uint8
	Region rdmo.RegionID
	Addr   uint64
	Req    int64 // index of the request in the batch (Place, Fetch)
	Data   []byte
	Sync   []SyncOp
}

// SyncOp is one rdmo.RemoteOp of a Sync call.
type SyncOp struct {
	Kind    rdmo.RemoteOpKind
	Region  rdmo.RegionID
	Addr    uint64
	Len     uint64 // RemoteGet
	Operand uint64
	Compare uint64
}

// Answer is the worker's reply to a target call that waits.
type Answer struct {
	ID     uint64
	Err    Fault
	Region rdmo.Region
	Data   []byte
	Sync   []SyncRes
}

// SyncRes is the outcome of one SyncOp.
type SyncRes struct {
	Result uint64
	Status rdmo.Status
	Data   []byte
}

// ---- encoding of each message ----

// Every struct is a MessagePack array of its fields in order. A decoder
// reads the fields it knows and skips any that a newer peer appended.

func (w Fault) size() int { return 1 + 9 + 5 + len(w.Detail) }
func (w Fault) append(b []byte) []byte {
	b = appendArr(b, 2)
	b = appendUint(b, uint64(w.Status))
	return appendStr(b, w.Detail)
}
func (r *dec) werr() Fault {
	x := r.fields(2)
	w := Fault{Status: rdmo.Status(r.u32()), Detail: r.s()}
	r.skipN(x)
	return w
}

func (m *InfoReq) sizeHint() int            { return 1 }
func (m *InfoReq) appendTo(b []byte) []byte { return appendArr(b, 0) }
func (m *InfoReq) decode(r *dec)            { r.skipN(r.fields(0)) }

func (m *InfoResp) sizeHint() int {
	n := 32 + len(m.Name) + len(m.Version) + 5*len(m.Ops)
	for _, s := range m.Statuses {
		n += 16 + len(s.Name) + len(s.Text)
	}
	for _, o := range m.OpNames {
		n += 12 + len(o.Name)
	}
	return n
}
func (m *InfoResp) appendTo(b []byte) []byte {
	b = appendArr(b, 7)
	b = appendStr(b, m.Name)
	b = appendStr(b, m.Version)
	b = appendArr(b, len(m.Ops))
	for _, o := range m.Ops {
		b = appendUint(b, uint64(o))
	}
	b = appendInt(b, m.Pid)
	b = appendBool(b, m.NoCachedState)
	b = appendArr(b, len(m.Statuses))
	for _, s := range m.Statuses {
		b = appendArr(b, 3)
		b = appendUint(b, uint64(s.Code))
		b = appendStr(b, s.Name)
		b = appendStr(b, s.Text)
	}
	b = appendArr(b, len(m.OpNames))
	for _, o := range m.OpNames {
		b = appendArr(b, 2)
		b = appendUint(b, uint64(o.Op))
		b = appendStr(b, o.Name)
	}
	return b
}
func (m *InfoResp) decode(r *dec) {
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
	if x > 0 && r.err == nil {
		if n := r.count(minStatusLen); n > 0 && r.err == nil {
			m.Statuses = make([]StatusName, n)
			for i := range m.Statuses {
				y := r.fields(3)
				m.Statuses[i] = StatusName{Code: r.u32(), Name: r.s(), Text: r.s()}
				r.skipN(y)
				if r.err != nil {
					return
				}
			}
		}
		x--
	}
	if x > 0 && r.err == nil {
		if n := r.count(minOpNameLen); n > 0 && r.err == nil {
			m.OpNames = make([]OpName, n)
			for i := range m.OpNames {
				y := r.fields(2)
				m.OpNames[i] = OpName{Op: r.u32(), Name: r.s()}
				r.skipN(y)
				if r.err != nil {
					return
				}
			}
		}
		x--
	}
	r.skipN(x)
}

const reqFields = 8

func (m *CallReq) sizeHint() int {
	n := 32
	for i := range m.Reqs {
		n += 48 + len(m.Reqs[i].Sub) + len(m.Reqs[i].Payload)
	}
	return n
}
func (m *CallReq) appendTo(b []byte) []byte {
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
func (m *CallReq) decode(r *dec) {
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

func (m *CallResp) sizeHint() int {
	n := 32 + m.Err.size() + len(m.Panic) + opsSize(m.Tail)
	for i := range m.Results {
		n += 30 + len(m.Results[i].Detail) + len(m.Results[i].Data)
	}
	return n
}
func (m *CallResp) appendTo(b []byte) []byte {
	b = appendArr(b, 5)
	b = appendArr(b, len(m.Results))
	for i := range m.Results {
		res := &m.Results[i]
		b = appendArr(b, 4)
		b = appendUint(b, uint64(res.Status))
		b = appendStr(b, res.Detail)
		b = appendUint(b, res.Value)
		b = appendBin(b, res.Data)
	}
	b = m.Err.append(b)
	b = appendUint(b, m.Frames)
	b = appendOps(b, m.Tail)
	return appendStr(b, m.Panic)
}
func (m *CallResp) decode(r *dec) {
	x := r.fields(5)
	if n := r.count(minResultLen); n >= 0 && r.err == nil {
		m.Results = make([]rdmo.Result, n)
		for i := range m.Results {
			res := &m.Results[i]
			// Data (the fourth field) is newer than the other three: a
			// result of three fields is one without data.
			y := r.fields(3)
			res.Status, res.Detail, res.Value = rdmo.Status(r.u32()), r.s(), r.u()
			if y > 0 {
				res.Data = r.bin()
				y--
			}
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

func opsSize(ops []Op) int {
	n := 8
	for i := range ops {
		n += 64 + len(ops[i].Data) + 56*len(ops[i].Sync)
	}
	return n
}

func appendOps(b []byte, ops []Op) []byte {
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

func (r *dec) ops() []Op {
	n := r.count(minTargetOp)
	if n <= 0 || r.err != nil {
		return nil
	}
	ops := make([]Op, n)
	for i := range ops {
		o := &ops[i]
		x := r.fields(7)
		o.ID, o.Kind = r.u(), r.u8()
		o.Region, o.Addr, o.Req = rdmo.RegionID(r.u()), r.u(), r.i()
		o.Data = r.bin()
		if m := r.count(minSyncOpLen); m > 0 && r.err == nil {
			o.Sync = make([]SyncOp, m)
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

func (m *Frame) sizeHint() int { return 16 + opsSize(m.Ops) }
func (m *Frame) appendTo(b []byte) []byte {
	b = appendArr(b, 2)
	b = appendUint(b, m.Inv)
	return appendOps(b, m.Ops)
}
func (m *Frame) decode(r *dec) {
	x := r.fields(2)
	m.Inv = r.u()
	m.Ops = r.ops()
	r.skipN(x)
}

func (m *Answer) sizeHint() int {
	n := 48 + m.Err.size() + len(m.Data)
	for i := range m.Sync {
		n += 24 + len(m.Sync[i].Data)
	}
	return n
}
func (m *Answer) appendTo(b []byte) []byte {
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
func (m *Answer) decode(r *dec) {
	x := r.fields(5)
	m.ID = r.u()
	m.Err = r.werr()
	y := r.fields(3)
	m.Region = rdmo.Region{ID: rdmo.RegionID(r.u()), Base: r.u(), Len: r.u()}
	r.skipN(y)
	m.Data = r.bin()
	if n := r.count(minSyncResLen); n > 0 && r.err == nil {
		m.Sync = make([]SyncRes, n)
		for i := range m.Sync {
			s := &m.Sync[i]
			z := r.fields(3)
			s.Result, s.Status, s.Data = r.u(), rdmo.Status(r.u32()), r.bin()
			r.skipN(z)
		}
	}
	r.skipN(x)
}

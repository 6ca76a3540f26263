package wire

import (
	"math"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc/mem"

	"github.com/openrdmo/rdmo/rdmo"
	rdmowire "github.com/openrdmo/rdmo/rdmo/wire"
)

func roundTrip[T any, P interface {
	*T
	wireMsg
}](t *testing.T, in P) P {
	t.Helper()
	c := msgpackCodec{}
	bs, err := c.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	b := bs.Materialize()
	bs.Free()
	// It is standard MessagePack: another implementation reads it.
	var generic any
	if err := msgpack.Unmarshal(b, &generic); err != nil {
		t.Fatalf("%T: not MessagePack: %v", in, err)
	}
	out := P(new(T))
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n in  %+v\n out %+v", in, out)
	}
	// Truncated messages fail, they do not panic.
	for n := 0; n < len(b); n++ {
		if err := unmarshal(b[:n], P(new(T))); err == nil {
			t.Fatalf("%T truncated to %d of %d bytes decoded", in, n, len(b))
		}
	}
	if err := unmarshal(append(b, 0), P(new(T))); err == nil {
		t.Fatalf("%T with a trailing byte decoded", in)
	}
	return out
}

func TestWireRoundTrip(t *testing.T) {
	roundTrip(t, &InfoReq{})
	roundTrip(t, &InfoResp{Name: "x", Version: "1.0", Ops: []uint32{16, 1 << 31}, Pid: 42})
	roundTrip(t, &InfoResp{Name: "y", Ops: []uint32{2}, NoCachedState: true})
	roundTrip(t, &InfoResp{Name: "z", Ops: []uint32{38}, Statuses: []StatusName{
		{Code: 65793, Name: "NilPointer", Text: "indirect op met a nil pointer"}, {Code: 1<<17 - 1, Name: "Last"}}})
	// An older plugin's InfoResp (5 fields, no statuses) still decodes.
	old := appendBool(appendInt(appendArr(appendStr(appendStr(appendArr(nil, 5), "old"), "0.9"), 0), 9), true)
	var ir InfoResp
	if err := unmarshal(old, &ir); err != nil || ir.Name != "old" || ir.Pid != 9 || !ir.NoCachedState || ir.Statuses != nil {
		t.Errorf("older InfoResp: %+v %v", ir, err)
	}
	roundTrip(t, &InfoResp{Name: "kv", Ops: []uint32{38, 39}, OpNames: []OpName{{Op: 38, Name: "kv-lookup"}, {Op: 39, Name: "kv-insert"}}})
	// So does one of the version before op names (6 fields: statuses, no op names).
	six := appendArr(appendBool(appendInt(appendArr(appendStr(appendStr(appendArr(nil, 6), "six"), "1.0"), 0), 6), false), 0)
	ir = InfoResp{}
	if err := unmarshal(six, &ir); err != nil || ir.Name != "six" || ir.Pid != 6 || ir.OpNames != nil {
		t.Errorf("6-field InfoResp: %+v %v", ir, err)
	}
	// A reference op's decoded sub-header travels as its raw bytes.
	app := rdmo.AppendHeader{PtrAddr: 0x1000, PtrRkey: 5, DataRkey: 6}
	roundTrip(t, &CallReq{Inv: 2, Client: 2, Reqs: []rdmo.Request{
		{Seq: 3, Client: 2, Op: rdmo.OpAppend, Sub: rdmowire.AppendAppendRequest(nil, rdmowire.Header{ClientID: 2}, app)[rdmowire.HeaderLen:],
			Append: app, Payload: []byte("x"), Length: 1},
		{Seq: 4, Client: 2, Op: rdmo.OpScatter, Sub: rdmowire.AppendScatterRequest(nil, rdmowire.Header{ClientID: 2}, rdmo.ScatterHeader{Count: 9})[rdmowire.HeaderLen:],
			Scatter: rdmo.ScatterHeader{Count: 9}, Payload: []byte{}},
		{Seq: 5, Client: 2, Op: rdmo.OpFlush, Sub: rdmowire.AppendFlushRequest(nil, rdmowire.Header{ClientID: 2}, rdmo.FlushHeader{FlushID: 77})[rdmowire.HeaderLen:],
			Flush: rdmo.FlushHeader{FlushID: 77}, Payload: []byte{}},
	}})
	long := string(make([]byte, 300))
	roundTrip(t, &CallReq{Inv: 1, Client: 2, Region: math.MaxUint64, Reqs: []rdmo.Request{
		{Seq: 1, Client: 2, Op: 16, Flags: 3, Sub: []byte("0123456789abcdef"), Payload: []byte{}, Length: 0},
		{Seq: 2, Client: 2, Op: 17, Sub: []byte("h"), Payload: nil, Length: 1 << 40, Rendezvous: true},
		{Seq: 1 << 20, Op: 1 << 31, Payload: make([]byte, 70<<10), Sub: make([]byte, 300)},
	}})
	roundTrip(t, &CallResp{
		Results: []rdmo.Result{{}, {Status: rdmo.StatusOutOfBounds, Detail: "d", Value: 1 << 63}, {Detail: long}, {Value: 5, Data: []byte("result")}},
		Err:     Fault{Status: 99, Detail: "new status"},
		Frames:  3,
		Tail:    []Op{{Kind: OpPut, Region: 1, Addr: 2, Data: []byte("x")}, {Kind: OpPlace, Req: 5}},
		Panic:   "boom",
	})
	roundTrip(t, &Frame{Inv: 9, Ops: []Op{{ID: 1, Kind: OpSync, Req: -1, Sync: []SyncOp{
		{Kind: rdmo.RemoteGet, Region: 1, Addr: 2, Len: 8}, {Kind: rdmo.RemoteCompareSwap, Operand: 4, Compare: 5}}}}})
	roundTrip(t, &Answer{ID: 3, Region: rdmo.Region{ID: 1, Base: 2, Len: 3}, Data: []byte("abc"),
		Sync: []SyncRes{{Result: 1, Status: rdmo.StatusOK, Data: []byte{1}}, {Status: rdmo.StatusOutOfBounds}}})
	roundTrip(t, &Frame{})
	ops := make([]Op, 20) // an array16
	roundTrip(t, &Frame{Inv: 1, Ops: ops})
}

// TestWireIntegers: every integer encoding round-trips, through our
// decoder and another implementation.
func TestWireIntegers(t *testing.T) {
	for _, v := range []int64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64} {
		b := appendInt(nil, v)
		r := dec{b: b}
		if got := r.i(); got != v || r.err != nil || r.off != len(b) {
			t.Errorf("%d: decoded %d, %v", v, got, r.err)
		}
		var w int64
		if err := msgpack.Unmarshal(b, &w); err != nil || w != v {
			t.Errorf("%d: msgpack read %d, %v", v, w, err)
		}
		if v >= 0 {
			r := dec{b: appendUint(nil, uint64(v))}
			if got := r.u(); got != uint64(v) || r.err != nil {
				t.Errorf("u %d: %d %v", v, got, r.err)
			}
		} else {
			r := dec{b: b}
			if r.u(); r.err == nil {
				t.Errorf("u accepted %d", v)
			}
		}
	}
	r := dec{b: appendUint(nil, math.MaxUint64)}
	if r.u() != math.MaxUint64 {
		t.Error("MaxUint64")
	}
}

// TestWireSkipsNewFields: a newer peer may append fields of any type to
// any struct; this decoder skips them.
func TestWireSkipsNewFields(t *testing.T) {
	newer := []any{uint64(9), []any{[]any{uint64(1), uint64(OpPut), uint64(2), uint64(3), int64(-1), []byte("d"), []any{},
		3.5, map[string]any{"x": []any{"y", true, nil}}, float32(1)}}, "extra", map[string]int{"a": 1}}
	b, err := msgpack.Marshal(newer)
	if err != nil {
		t.Fatal(err)
	}
	var f Frame
	if err := unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	want := Frame{Inv: 9, Ops: []Op{{ID: 1, Kind: OpPut, Region: 2, Addr: 3, Req: -1, Data: []byte("d")}}}
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("got %+v", f)
	}
}

func TestWireErr(t *testing.T) {
	if FaultOf(nil).Err() != nil {
		t.Fatal("nil error")
	}
	e := FaultOf(rdmo.ErrOutOfBounds).Err()
	if e.Error() != rdmo.ErrOutOfBounds.Error() {
		t.Fatalf("%v", e)
	}
	w := FaultOf(&rdmo.WireError{Status: rdmo.StatusUnknownRegion, Detail: "r 5"})
	if w.Detail != "r 5" || w.Status != rdmo.StatusUnknownRegion {
		t.Fatalf("%+v", w)
	}
}

func TestCodecRefusesOtherTypes(t *testing.T) {
	if _, err := (msgpackCodec{}).Marshal(struct{}{}); err == nil {
		t.Fatal("marshalled a foreign type")
	}
	if err := (msgpackCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer{0x90}}, new(int)); err == nil {
		t.Fatal("unmarshalled into a foreign type")
	}
}

package wire

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"github.com/openrdmo/rdmo/rdmo"
)

// wireKinds makes an empty message of each type of the worker↔plugin wire:
// InfoResp, CallResp and Frame come from the plugin process, CallReq and
// Answer from the worker.
func wireKinds() []wireMsg {
	return []wireMsg{new(InfoReq), new(InfoResp), new(CallReq), new(CallResp), new(Frame), new(Answer)}
}

func wireSamples() []wireMsg {
	ops := []Op{
		{Kind: OpPut, Region: 3, Addr: 0x1000, Data: []byte("put")},
		{ID: 7, Kind: OpSync, Sync: []SyncOp{{Kind: rdmo.RemoteFetchAdd, Region: 3, Addr: 8, Operand: 1}, {Kind: rdmo.RemoteGet, Len: 8}}},
		{ID: 8, Kind: OpPlace, Req: 1, Region: 4, Addr: 16},
	}
	return []wireMsg{
		&InfoReq{},
		&InfoResp{Name: "scatter", Version: "1.0.0", Ops: []uint32{2, 16}, Pid: 4242},
		&InfoResp{Name: "kv", Version: "1.0.0", Ops: []uint32{38, 39}, Pid: 7, NoCachedState: true,
			Statuses: []StatusName{{Code: 65795, Name: "NotFound", Text: "key not in the table"}},
			OpNames:  []OpName{{Op: 38, Name: "kv-lookup"}, {Op: 39, Name: "kv-insert"}}},
		&CallReq{Inv: 1, Client: 2, Region: 3, Reqs: []rdmo.Request{
			{Seq: 1, Client: 2, Op: 16, Flags: 2, Sub: []byte("0123456789abcdef"), Payload: []byte("payload"), Length: 7},
			{Seq: 2, Client: 2, Op: 17, Length: 1 << 20, Rendezvous: true},
		}},
		&CallResp{Results: []rdmo.Result{{Status: rdmo.StatusOutOfBounds, Detail: "out", Value: 0}, {Value: 9}},
			Err: Fault{Status: rdmo.StatusHandlerFailed, Detail: "x"}, Frames: 2, Tail: ops, Panic: ""},
		&Frame{Inv: 5, Ops: ops},
		&Answer{ID: 7, Err: Fault{}, Region: rdmo.Region{ID: 3, Base: 0x1000, Len: 64}, Data: []byte("data"),
			Sync: []SyncRes{{Result: 1, Status: 0, Data: []byte{1, 2}}, {Status: rdmo.StatusOutOfBounds}}},
	}
}

// FuzzPluginWire decodes arbitrary bytes as each message of the plugin wire
// (kind selects the type). The hand-written decoder must never panic; what
// it accepts must re-encode to bytes that decode and re-encode to the same
// bytes; and decoding must allocate no more than a bounded multiple of the
// message's size (it checks every count against the bytes left).
func FuzzPluginWire(f *testing.F) {
	for i, m := range wireSamples() {
		f.Add(uint8(i), m.appendTo(nil))
	}
	f.Add(uint8(4), []byte{0x92, 0x01, 0xdd, 0x00, 0x00, 0xff, 0xff}) // count past the end
	f.Add(uint8(2), []byte{0x94, 0x01, 0x02, 0x03, 0xdc, 0x00, 0x03, 0x98})
	f.Add(uint8(3), []byte{0xc1})
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		k := int(kind) % len(wireKinds())
		m := wireKinds()[k]
		if err := unmarshal(b, m); err != nil {
			return
		}
		enc := m.appendTo(nil)
		m2 := wireKinds()[k]
		if err := unmarshal(enc, m2); err != nil {
			t.Fatalf("%T: re-encoding % x does not decode: %v", m, enc, err)
		}
		if enc2 := m2.appendTo(nil); !bytes.Equal(enc, enc2) {
			t.Fatalf("%T: not stable: % x then % x", m, enc, enc2)
		}
	})
}

// arr32 is a MessagePack array32 header claiming n elements.
func arr32(n uint32) []byte { return []byte{0xdd, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)} }

// cat concatenates byte strings.
func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// allocBytes is how many bytes f allocates, on average over runs: the least
// of three measurements, since MemStats counts the whole process's
// allocations and the runtime or another goroutine may allocate during
// one (seen: 1038 bytes once where f allocates 300).
func allocBytes(runs int, f func()) float64 {
	best := -1.0
	for range 3 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range runs {
			f()
		}
		runtime.ReadMemStats(&after)
		if b := float64(after.TotalAlloc-before.TotalAlloc) / float64(runs); best < 0 || b < best {
			best = b
		}
	}
	return best
}

// TestPluginWireAllocationBound: the decoder checks every count against
// the bytes left times the smallest encoding of an element, so what a
// message makes it allocate is bounded by a small multiple of its size.
// The worst case is a message made of elements at their smallest encoding:
// each costs its Go struct in memory (88 bytes for a request or an op, on
// 8 or 9 bytes of wire). Messages are at most MaxMsgSize either way.
func TestPluginWireAllocationBound(t *testing.T) {
	const n = 1 << 16
	const maxRatio = 16
	for _, c := range []struct {
		name string
		msg  func() wireMsg
		body []byte
	}{
		// A frame of n ops, each 7 fields of one byte.
		{"frame ops", func() wireMsg { return new(Frame) },
			cat([]byte{0x92, 0x01}, arr32(n), bytes.Repeat([]byte{0x97, 0, 0, 0, 0, 0, 0xc0, 0x90}, n))},
		// A frame of one op with n Sync ops.
		{"frame sync ops", func() wireMsg { return new(Frame) },
			cat([]byte{0x92, 0x01, 0x91, 0x97, 0, 0, 0, 0, 0, 0xc0}, arr32(n), bytes.Repeat([]byte{0x96, 0, 0, 0, 0, 0, 0}, n))},
		// A callResp of n results (plugin to worker).
		{"callResp results", func() wireMsg { return new(CallResp) },
			cat([]byte{0x95}, arr32(n), bytes.Repeat([]byte{0x93, 0, 0xa0, 0}, n), []byte{0x92, 0, 0xa0, 0, 0x90, 0xa0})},
		// An infoResp of n op ids.
		{"infoResp ops", func() wireMsg { return new(InfoResp) },
			cat([]byte{0x94, 0xa0, 0xa0}, arr32(n), bytes.Repeat([]byte{0x10}, n), []byte{0})},
		// An infoResp of n statuses, each 3 fields of one byte.
		{"infoResp statuses", func() wireMsg { return new(InfoResp) },
			cat([]byte{0x96, 0xa0, 0xa0, 0x90, 0, 0xc2}, arr32(n), bytes.Repeat([]byte{0x93, 0, 0xa0, 0xa0}, n))},
		// An infoResp of no statuses and n op names, each 2 fields of one byte.
		{"infoResp op names", func() wireMsg { return new(InfoResp) },
			cat([]byte{0x97, 0xa0, 0xa0, 0x90, 0, 0xc2, 0x90}, arr32(n), bytes.Repeat([]byte{0x92, 0x10, 0xa0}, n))},
		// A callReq of n requests (worker to plugin).
		{"CallReq requests", func() wireMsg { return new(CallReq) },
			cat([]byte{0x94, 0, 0, 0}, arr32(n), bytes.Repeat([]byte{0x98, 0, 0, 0x10, 0, 0xc0, 0xc0, 0, 0xc2}, n))},
		// An answer with n Sync results.
		{"answer sync results", func() wireMsg { return new(Answer) },
			cat([]byte{0x95, 0, 0x92, 0, 0xa0, 0x93, 0, 0, 0, 0xc0}, arr32(n), bytes.Repeat([]byte{0x93, 0, 0, 0xc0}, n))},
	} {
		if err := unmarshal(c.body, c.msg()); err != nil {
			t.Fatalf("%s: the worst case is a valid message: %v", c.name, err)
		}
		ratio := allocBytes(4, func() { _ = unmarshal(c.body, c.msg()) }) / float64(len(c.body))
		t.Logf("%s: a %d-byte message allocates %.1f× its size", c.name, len(c.body), ratio)
		if ratio > maxRatio {
			t.Errorf("%s: decoding allocates %.1f× the message size, want at most %d×", c.name, ratio, maxRatio)
		}
	}
}

// TestPluginWireHostileCounts: a small message whose arrays claim more
// elements than its bytes can hold fails with errCount before anything is
// allocated for them. Before the counts were checked against the smallest
// element, a count up to the bytes left was taken at its word: a message
// of element headers made the decoder allocate up to 88× its size.
func TestPluginWireHostileCounts(t *testing.T) {
	pad := bytes.Repeat([]byte{0x90}, 64) // one byte per claimed element, as the old check wanted
	for _, c := range []struct {
		name string
		msg  func() wireMsg
		body []byte
	}{
		{"frame ops: 2^32-1", func() wireMsg { return new(Frame) }, cat([]byte{0x92, 0x01}, arr32(1<<32-1), pad)},
		{"frame ops: one per byte", func() wireMsg { return new(Frame) }, cat([]byte{0x92, 0x01}, arr32(64), pad)},
		{"frame sync ops: one per byte", func() wireMsg { return new(Frame) },
			cat([]byte{0x92, 0x01, 0x91, 0x97, 0, 0, 0, 0, 0, 0xc0}, arr32(64), pad)},
		{"callResp results: one per byte", func() wireMsg { return new(CallResp) }, cat([]byte{0x95}, arr32(64), pad)},
		{"callResp tail: 2^32-1", func() wireMsg { return new(CallResp) },
			cat([]byte{0x95, 0x90, 0x92, 0, 0xa0, 0}, arr32(1<<32-1), pad)},
		{"infoResp ops: 2^32-1", func() wireMsg { return new(InfoResp) }, cat([]byte{0x94, 0xa0, 0xa0}, arr32(1<<32-1), pad)},
		{"infoResp statuses: 2^32-1", func() wireMsg { return new(InfoResp) },
			cat([]byte{0x96, 0xa0, 0xa0, 0x90, 0, 0xc2}, arr32(1<<32-1), pad)},
		{"infoResp op names: 2^32-1", func() wireMsg { return new(InfoResp) },
			cat([]byte{0x97, 0xa0, 0xa0, 0x90, 0, 0xc2, 0x90}, arr32(1<<32-1), pad)},
		{"callReq requests: one per byte", func() wireMsg { return new(CallReq) }, cat([]byte{0x94, 0, 0, 0}, arr32(64), pad)},
		{"callReq requests: 2^32-1", func() wireMsg { return new(CallReq) }, cat([]byte{0x94, 0, 0, 0}, arr32(1<<32-1), pad)},
		{"answer sync results: one per byte", func() wireMsg { return new(Answer) },
			cat([]byte{0x95, 0, 0x92, 0, 0xa0, 0x93, 0, 0, 0, 0xc0}, arr32(64), pad)},
	} {
		if err := unmarshal(c.body, c.msg()); !errors.Is(err, errCount) {
			t.Errorf("%s: %v, want errCount", c.name, err)
		}
		// The error itself is all that is allocated: a few small objects.
		allocs := testing.AllocsPerRun(10, func() { _ = unmarshal(c.body, c.msg()) })
		bytesPer := allocBytes(10, func() { _ = unmarshal(c.body, c.msg()) })
		if allocs > 8 || bytesPer > 1024 {
			t.Errorf("%s: a %d-byte message allocated %.0f objects, %.0f bytes before failing", c.name, len(c.body), allocs, bytesPer)
		}
	}
}

package plugin

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/openrdmo/rdmo/rdmo"
)

// wireKinds makes an empty message of each type of the worker↔plugin wire:
// infoResp, callResp and frame come from the plugin process, callReq and
// answer from the worker.
func wireKinds() []wireMsg {
	return []wireMsg{new(infoReq), new(infoResp), new(callReq), new(callResp), new(frame), new(answer)}
}

func wireSamples() []wireMsg {
	ops := []op{
		{Kind: opPut, Region: 3, Addr: 0x1000, Data: []byte("put")},
		{ID: 7, Kind: opSync, Sync: []syncOp{{Kind: rdmo.RemoteFetchAdd, Region: 3, Addr: 8, Operand: 1}, {Kind: rdmo.RemoteGet, Len: 8}}},
		{ID: 8, Kind: opPlace, Req: 1, Region: 4, Addr: 16},
	}
	return []wireMsg{
		&infoReq{},
		&infoResp{Name: "scatter", Version: "1.0.0", Ops: []uint32{2, 16}, Pid: 4242},
		&callReq{Inv: 1, Client: 2, Region: 3, Reqs: []rdmo.Request{
			{Seq: 1, Client: 2, Op: 1, Flags: 2, Header: []byte("0123456789abcdef"), Payload: []byte("payload"), Length: 7},
			{Seq: 2, Client: 2, Op: 2, Length: 1 << 20, Rendezvous: true},
		}},
		&callResp{Results: []rdmo.Result{{Status: rdmo.StatusOutOfBounds, Detail: "out", Value: 0}, {Value: 9}},
			Err: wireErr{Status: rdmo.StatusHandlerFailed, Detail: "x"}, Frames: 2, Tail: ops, Panic: ""},
		&frame{Inv: 5, Ops: ops},
		&answer{ID: 7, Err: wireErr{}, Region: rdmo.Region{ID: 3, Base: 0x1000, Len: 64}, Data: []byte("data"),
			Sync: []syncRes{{Result: 1, Status: 0, Data: []byte{1, 2}}, {Status: rdmo.StatusOutOfBounds}}},
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

// The decoder bounds every count by the bytes left, so a hostile count
// cannot make it allocate without limit; but each element costs far more
// in memory than its one byte on the wire. This measures the worst
// amplification, a message that is all element headers: the plugin wire's
// messages may be up to 256 MiB (serve.go maxMsgSize) from the plugin, and
// the worker side of go-plugin accepts up to 2 GiB.
func TestPluginWireAllocationBound(t *testing.T) {
	const n = 1 << 16
	for _, c := range []struct {
		name string
		msg  func() wireMsg
		body []byte
	}{
		// A frame whose op array claims n elements, each a bare fixarray.
		{"frame ops", func() wireMsg { return new(frame) },
			append([]byte{0x92, 0x01, 0xdd, 0, 1, 0, 0}, bytes.Repeat([]byte{0x90}, n)...)},
		// A callResp whose result array claims n elements.
		{"callResp results", func() wireMsg { return new(callResp) },
			append([]byte{0x95, 0xdd, 0, 1, 0, 0}, bytes.Repeat([]byte{0x90}, n)...)},
		// A callReq (worker to plugin) with n requests.
		{"callReq requests", func() wireMsg { return new(callReq) },
			append([]byte{0x94, 0, 0, 0, 0xdd, 0, 1, 0, 0}, bytes.Repeat([]byte{0x90}, n)...)},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := unmarshal(c.body, c.msg())
		runtime.ReadMemStats(&after)
		ratio := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(c.body))
		t.Logf("%s: %d-byte message allocated %.0f× its size before failing (%v)", c.name, len(c.body), ratio, err)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
		}
		if ratio > 128 {
			t.Errorf("%s: decoding allocates %.0f× the message size", c.name, ratio)
		}
	}
}

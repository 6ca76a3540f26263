package rdmoworker

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/internal/msgpackcheck"
	"github.com/openrdmo/rdmo/rdmo"
)

// commandKinds decodes a body the way Handle does for each command kind,
// and the way a host decodes what the worker answers (Notification,
// Stats), and returns the value.
var commandKinds = []func(b []byte) (any, error){
	func(b []byte) (any, error) { return decode[dpu.ClientInit](b) },
	func(b []byte) (any, error) { return decode[dpu.RQCreate](b) },
	func(b []byte) (any, error) { return decode[dpu.RQDestroy](b) },
	func(b []byte) (any, error) { return decode[dpu.MRReg](b) },
	func(b []byte) (any, error) { return decode[dpu.MRDereg](b) },
	func(b []byte) (any, error) { return decode[dpu.Notification](b) },
	func(b []byte) (any, error) { return decode[dpu.Stats](b) },
}

// FuzzDecodeCommand decodes arbitrary bytes as each RDMO command (and
// answer) that crosses the UROM command channel. A body reaches decode only
// inside a frame that passed msgpackcheck (urom's frame reader), so the
// fuzz input does too. Decoding must not panic, and what decodes must
// survive a re-encode and decode unchanged.
func FuzzDecodeCommand(f *testing.F) {
	for i, s := range []any{
		dpu.ClientInit{ID: 1, Addr: []byte{1, 2, 3}},
		dpu.RQCreate{Client: 1, Addr: []byte{4}},
		dpu.RQDestroy{Client: 1, RQ: 2},
		dpu.MRReg{Client: 1, VA: 0x1000, Len: 4096, PackedRkey: []byte{5, 6}, PackedMemh: []byte{7}},
		dpu.MRDereg{Client: 1, Region: 3},
		dpu.Notification{Type: dpu.CmdMRReg, Status: rdmo.StatusUnknownRegion, Detail: "x", Client: 1, Region: 3},
		dpu.Stats{Requests: map[uint32]uint64{1: 2}, Failures: map[rdmo.Status]uint64{rdmo.StatusOutOfBounds: 1},
			InFlight: map[uint64]int64{1: 3}, BatchSizes: [dpu.BatchSizeBuckets]uint64{4}},
	} {
		b, err := msgpack.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), b)
	}
	f.Add(uint8(3), []byte{0x81, 0xa2, 'v', 'a', 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint8(6), []byte{0x81, 0xab, 'b', 'a', 't', 'c', 'h', '_', 's', 'i', 'z', 'e', 's', 0x9f})
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		if msgpackcheck.Value(b, 32) != nil {
			return
		}
		k := int(kind) % len(commandKinds)
		v, err := commandKinds[k](b)
		if err != nil {
			return
		}
		enc, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatalf("%T: re-encode: %v", v, err)
		}
		v2, err := commandKinds[k](enc)
		if err != nil {
			t.Fatalf("%T: decoding the re-encoding: %v", v, err)
		}
		if enc2, _ := msgpack.Marshal(v2); !bytes.Equal(enc, enc2) {
			t.Fatalf("%T: round trip not stable", v)
		}
	})
}

package counter_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/openrdmo/rdmo/examples/counter"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
)

// FuzzCounterHandleBatch runs one arbitrary request through the counter
// handler (the fourth op, a plugin written from the SDK alone): no panic,
// guards and the other client's region intact, a failed request changes
// nothing, a successful one added its delta to the aligned word it names
// and returned the old value.
func FuzzCounterHandleBatch(f *testing.F) {
	f.Add(counter.Request(1, 1, 0x10008, 5, rdmo.FlagAck), []byte{})
	f.Add(counter.Request(1, 1, 0x10009, 5, rdmo.FlagAck), []byte{})
	f.Add(counter.Request(1, 3, 0x30000, 5, rdmo.FlagAck), []byte{})
	f.Add(counter.Request(1, 1, 0x10000+504, 1, 0), []byte{})
	f.Add(counter.Request(1, 1, 0x10000+512, 1, 0), []byte{})
	f.Add(counter.Request(1, 1, 0x10008, 5, 0)[:30], []byte("x"))
	f.Fuzz(func(t *testing.T, hdr, payload []byte) {
		if len(hdr) > 256 || len(payload) > 4096 {
			return
		}
		tg := rdmotest.NewTarget(1)
		own := tg.AddRegion(1, 0x10000, 512)
		for i := range own {
			own[i] = byte(i)
		}
		foreign := tg.AddRegionFor(2, 3, 0x30000, 64)
		h := counter.New()
		snapOwn, snapForeign := bytes.Clone(own), bytes.Clone(foreign)
		// The worker hands the handler only requests for its op that pass
		// its checks of the common header.
		req, err := tg.ParseReq(hdr, payload)
		if err != nil || req.Op != counter.Op {
			return
		}
		res := tg.RunBatch(h, req)[0]
		if err := tg.CheckGuards(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(foreign, snapForeign) {
			t.Fatal("the other client's region changed")
		}
		if res.Status != rdmo.StatusOK {
			if !bytes.Equal(own, snapOwn) {
				t.Fatalf("failed request (%v: %s) changed the region", res.Status, res.Detail)
			}
			return
		}
		if len(req.Sub) != counter.SubHeaderLen {
			t.Fatalf("request with a %d-byte sub-header succeeded", len(req.Sub))
		}
		addr := binary.LittleEndian.Uint64(req.Sub)
		delta := binary.LittleEndian.Uint64(req.Sub[16:])
		off := addr - 0x10000
		if old := binary.LittleEndian.Uint64(snapOwn[off:]); res.Value != old ||
			binary.LittleEndian.Uint64(own[off:]) != old+delta {
			t.Fatalf("counter at %#x: old %d (returned %d), now %d, delta %d", addr, old,
				res.Value, binary.LittleEndian.Uint64(own[off:]), delta)
		}
		copy(snapOwn[off:off+8], own[off:off+8])
		if !bytes.Equal(own, snapOwn) {
			t.Fatal("bytes besides the counter changed")
		}
	})
}

package counter_test

import (
	"encoding/binary"
	"testing"

	"github.com/openrdmo/rdmo/examples/counter"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
)

// The handler alone, against the SDK's fake target.
func TestCounterAgainstFakeTarget(t *testing.T) {
	tg := rdmotest.NewTarget(1)
	mem := tg.AddRegion(5, 0x10000, 64)
	binary.LittleEndian.PutUint64(mem[8:], 41)
	h := counter.New()
	reqs := []rdmo.Request{
		tg.Req(counter.Request(1, 5, 0x10008, 1, rdmo.FlagAck), nil),
		tg.Req(counter.Request(1, 5, 0x10008, 10, rdmo.FlagAck), nil),
		tg.Req(counter.Request(1, 5, 0x10009, 1, rdmo.FlagAck), nil), // unaligned
		tg.Req(counter.Request(1, 5, 0x20000, 1, rdmo.FlagAck), nil), // outside
		tg.Req(counter.Request(1, 6, 0x10008, 1, rdmo.FlagAck), nil), // unknown region
	}
	results := make([]rdmo.Result, len(reqs))
	h.HandleBatch(tg, reqs, results)
	tg.EndBatch()
	if results[0].Value != 41 || results[1].Value != 42 || results[0].Status != rdmo.StatusOK {
		t.Fatalf("results %+v", results[:2])
	}
	for i, want := range []rdmo.Status{rdmo.StatusOutOfBounds, rdmo.StatusOutOfBounds, rdmo.StatusUnknownRegion} {
		if got := results[2+i].Status; got != want {
			t.Errorf("request %d: %v, want %v", 2+i, got, want)
		}
	}
	if v := binary.LittleEndian.Uint64(mem[8:]); v != 52 {
		t.Fatalf("counter %d, want 52", v)
	}
	if st := tg.Stats(); st.Syncs != 1 {
		t.Errorf("%d Syncs for one batch, want 1", st.Syncs)
	}
	if err := tg.CheckGuards(); err != nil {
		t.Fatal(err)
	}
}

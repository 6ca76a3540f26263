package initiator

import (
	"math/rand/v2"
	"testing"
)

// TestAckTable runs the table against a map through the patterns the
// loop makes: acks answered in a window, stragglers that stay while the
// sequence moves far past them (numbers that then find their slot taken
// go to the spill map), and a failure that ends
// them all.
func TestAckTable(t *testing.T) {
	var tab ackTable
	model := map[uint64]ackRec{}
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(seq uint64) {
		t.Helper()
		got, ok := tab.get(seq)
		want, wok := model[seq]
		if ok != wok || got != want {
			t.Fatalf("get(%d) = %+v, %v; want %+v, %v", seq, got, ok, want, wok)
		}
	}
	var next uint64
	var window []uint64
	spilled := 0 // the most numbers the spill map held at once
	for step := range 1_500_000 {
		switch {
		case step%100_000 == 0:
			// A straggler: outstanding until the end.
			model[next] = ackRec{op: 7, cost: int(next)}
			tab.put(next, model[next])
			next++
		case len(window) < 300 && rng.IntN(3) > 0:
			seq := next
			next += 1 + uint64(rng.IntN(3)) // requests without an ack in between
			model[seq] = ackRec{op: 1, cost: int(seq)}
			tab.put(seq, model[seq])
			window = append(window, seq)
		case len(window) > 0:
			i := rng.IntN(min(len(window), 8)) // mostly in order
			seq := window[i]
			window = append(window[:i], window[i+1:]...)
			check(seq)
			tab.del(seq)
			delete(model, seq)
			check(seq)
		}
		spilled = max(spilled, len(tab.spill))
		if tab.len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, tab.len(), len(model))
		}
	}
	if len(tab.slots) > ackTableMaxSlots {
		t.Fatalf("%d slots, at most %d", len(tab.slots), ackTableMaxSlots)
	}
	if spilled == 0 {
		t.Fatal("no straggler reached the spill map: the test does not cover it")
	}
	seen := 0
	tab.each(func(seq uint64, rec ackRec) {
		if model[seq] != rec {
			t.Fatalf("each: %d = %+v, want %+v", seq, rec, model[seq])
		}
		tab.del(seq)
		seen++
	})
	if seen != len(model) || tab.len() != 0 {
		t.Fatalf("each saw %d of %d; %d left", seen, len(model), tab.len())
	}
}

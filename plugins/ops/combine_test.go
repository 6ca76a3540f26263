package ops_test

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/openrdmo/rdmo/plugins/ops"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
)

// A batch of fetch-adds on few words (combined per word) and on many words
// (more than a scan covers: the handler keeps a map) answers as if each
// request ran alone, in order; compare-swaps on a repeated word see the
// writes before them.
func TestAtomicBatchInOrder(t *testing.T) {
	for _, words := range []int{1, 3, 40} {
		rng := rand.New(rand.NewPCG(uint64(words), 7))
		tg := rdmotest.NewTarget(1)
		const region, at = 5, 0x4000
		mem := tg.AddRegion(region, at, 8*words)
		model := make([]uint64, words)
		for w := range model {
			model[w] = rng.Uint64()
			binary.LittleEndian.PutUint64(mem[8*w:], model[w])
		}
		for _, op := range []uint32{ops.OpFetchAdd, ops.OpCompareSwap} {
			var reqs []rdmo.Request
			var want []uint64
			for range 200 {
				w := rng.IntN(words)
				r := ops.AtomicReq{Region: region, Addr: at + 8*uint64(w), Operand: rng.Uint64()}
				want = append(want, model[w])
				if op == ops.OpFetchAdd {
					model[w] += r.Operand
					reqs = append(reqs, tg.UserReq(op, r.FetchAddSub(), nil, rdmo.FlagAck))
					continue
				}
				if rng.IntN(2) == 0 {
					r.Compare = model[w]
					model[w] = r.Operand
				} else {
					r.Compare = model[w] + 1
				}
				reqs = append(reqs, tg.UserReq(op, r.CompareSwapSub(), nil, rdmo.FlagAck))
			}
			res := tg.RunBatch(ops.ByName(map[uint32]string{ops.OpFetchAdd: ops.NameFetchAdd, ops.OpCompareSwap: ops.NameCompareSwap}[op]), reqs...)
			for i := range res {
				if res[i].Status != rdmo.StatusOK || res[i].Value != want[i] {
					t.Fatalf("%d words, op %d, request %d: %+v, want value %#x", words, op, i, res[i], want[i])
				}
			}
			for w := range model {
				if got := binary.LittleEndian.Uint64(tg.Memory(region)[8*w:]); got != model[w] {
					t.Fatalf("%d words, op %d: word %d is %#x, want %#x", words, op, w, got, model[w])
				}
			}
		}
	}
}

package ops_test

import (
	"encoding/binary"
	"fmt"
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

// One fetch-add handler serves batches of several clients at once (as the
// worker's executors call it), keeping its working memory between
// batches: every client's answers stay its own, whatever the batch sizes
// (one past the kept bound included).
func TestAtomicScratchShared(t *testing.T) {
	h := ops.NewFetchAdd()
	const region, at = 5, 0x4000
	done := make(chan error)
	for c := range 4 {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(c), 11))
			tg := rdmotest.NewTarget(rdmo.ClientID(c + 1))
			mem := tg.AddRegion(region, at, 8*8)
			model := make([]uint64, 8)
			for round := range 300 {
				n := 1 + rng.IntN(40)
				if round == 150 {
					n = 1025
				}
				reqs := make([]rdmo.Request, n)
				want := make([]uint64, n)
				for i := range reqs {
					w := rng.IntN(len(model))
					r := ops.AtomicReq{Region: region, Addr: at + 8*uint64(w), Operand: rng.Uint64N(100)}
					want[i] = model[w]
					model[w] += r.Operand
					reqs[i] = tg.UserReq(ops.OpFetchAdd, r.FetchAddSub(), nil, rdmo.FlagAck)
				}
				res := tg.RunBatch(h, reqs...)
				for i := range res {
					if res[i].Status != rdmo.StatusOK || res[i].Value != want[i] {
						done <- fmt.Errorf("client %d, round %d, request %d of %d: %+v, want value %d", c, round, i, n, res[i], want[i])
						return
					}
				}
			}
			for w := range model {
				if got := binary.LittleEndian.Uint64(mem[8*w:]); got != model[w] {
					done <- fmt.Errorf("client %d: word %d is %d, want %d", c, w, got, model[w])
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

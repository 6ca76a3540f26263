package wasmhost_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/openrdmo/rdmo/examples/counter"
	"github.com/openrdmo/rdmo/plugins/ops"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin/wasmhost"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
)

const fetchAddPkg = "github.com/openrdmo/rdmo/plugins/ops/cmd/rdmo-plugin-fetch-add-wasm"

// BenchmarkBatch is one batch of n requests through a module and through
// the same handler built in, against rdmotest's in-memory Target: what the
// sandbox adds per batch. counter makes one Sync of n fetch-adds;
// fetch-add (the op pack's, the bench's forms rows) combines them into one.
func BenchmarkBatch(b *testing.B) {
	for _, op := range []struct {
		name, pkg string
		builtin   rdmo.Handler
		req       func(tg *rdmotest.Target) rdmo.Request
	}{
		{"counter", counterPkg, counter.New(), func(tg *rdmotest.Target) rdmo.Request {
			return tg.UserReq(counter.Op, counter.Sub(3, 0x1000, 1), nil, rdmo.FlagAck)
		}},
		{"fetch-add", fetchAddPkg, ops.NewFetchAdd(), func(tg *rdmotest.Target) rdmo.Request {
			return tg.UserReq(ops.OpFetchAdd, ops.AtomicReq{Region: 3, Addr: 0x1000, Operand: 1}.FetchAddSub(), nil, rdmo.FlagAck)
		}},
	} {
		h, err := wasmhost.Load(context.Background(), buildModule(b, op.pkg), wasmhost.LoadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, 64} {
			for _, form := range []struct {
				name string
				h    rdmo.Handler
			}{{"builtin", op.builtin}, {"wasm", h}} {
				b.Run(fmt.Sprintf("%s/%s/%d", op.name, form.name, n), func(b *testing.B) {
					tg := rdmotest.NewTarget(7)
					tg.AddRegion(3, 0x1000, 8)
					reqs := make([]rdmo.Request, n)
					for i := range reqs {
						reqs[i] = op.req(tg)
					}
					results := make([]rdmo.Result, n)
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						clear(results)
						form.h.HandleBatch(tg, reqs, results)
						tg.EndBatch()
					}
					b.StopTimer()
					for i := range results {
						if results[i].Status != rdmo.StatusOK {
							b.Fatal(results[i])
						}
					}
					if n > 1 && results[n-1].Value != results[n-2].Value+1 {
						b.Fatalf("fetch-adds of one batch answered %d then %d", results[n-2].Value, results[n-1].Value)
					}
				})
			}
		}
		h.Close()
	}
}

package wasmhost_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/openrdmo/rdmo/examples/counter"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin/wasmhost"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
)

// BenchmarkBatch is one counter batch (n increments, one Sync) through the
// module and built in, against rdmotest's in-memory Target: what the
// sandbox adds per batch.
func BenchmarkBatch(b *testing.B) {
	h, err := wasmhost.Load(context.Background(), buildModule(b, counterPkg), wasmhost.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	for _, n := range []int{1, 64} {
		for _, form := range []struct {
			name string
			h    rdmo.Handler
		}{{"builtin", counter.New()}, {"wasm", h}} {
			b.Run(fmt.Sprintf("%s/%d", form.name, n), func(b *testing.B) {
				tg := rdmotest.NewTarget(7)
				tg.AddRegion(3, 0x1000, 8)
				reqs := make([]rdmo.Request, n)
				for i := range reqs {
					reqs[i] = tg.UserReq(counter.Op, counter.Sub(3, 0x1000, 1), nil, rdmo.FlagAck)
				}
				results := make([]rdmo.Result, n)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					clear(results)
					form.h.HandleBatch(tg, reqs, results)
					tg.EndBatch()
				}
				if results[0].Status != rdmo.StatusOK {
					b.Fatal(results[0])
				}
			})
		}
	}
}

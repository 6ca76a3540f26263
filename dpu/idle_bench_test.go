package dpu_test

import (
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/plugins/flush"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// BenchmarkFlushRoundTrip is the latency of one FLUSH sent after the
// previous flush response arrived, the worker otherwise idle: arrival, the
// flush handler on the client's executor (every handler's Fence, then
// Target.Flush), completion and the flush response. The handlers are the
// ones rdmo bench's worker runs (append, flush). The initiator spins on
// its UCP worker (no initiator library), so this is the worker's share of
// rdmo bench's flush/idle row.
func BenchmarkFlushRoundTrip(b *testing.B) {
	for _, tr := range ucptest.Transports {
		b.Run(tr.Name, func(b *testing.B) {
			e := newEnv(b, tr, dpu.Config{Logger: nopLogger(),
				Handlers: allHandlers(appendop.New(appendop.Options{}), flush.New())})
			s := e.newSetup(1, 4096, 0, 4096)
			in := s.in
			in.flush(1 << 62) // wire-up
			got := 0
			in.w.SetHandler(0, ucp.MessageHandlerFunc(func(_ *ucp.Worker, msgs []ucp.Message) {
				for _, m := range msgs {
					if f, err := wire.ParseFlushResponse(m.Header); err != nil || f.Failed != 0 {
						b.Errorf("bad answer %x: %v %+v", m.Header, err, f)
					}
					got++
				}
			}))
			var fl []byte
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				fl = wire.AppendFlushRequest(fl[:0], wire.Header{ClientID: s.client, Flags: rdmo.FlagFence},
					rdmo.FlushHeader{FlushID: uint64(i)})
				if err := in.ep.SendAM(0, fl, nil, ucp.SendReply, nil, 0); err != nil {
					b.Fatal(err)
				}
				deadline := time.Now().Add(waitLimit)
				for spins := 0; got <= i; spins++ {
					in.w.Progress()
					if spins&4095 == 4095 && time.Now().After(deadline) {
						b.Fatal("no flush response")
					}
				}
			}
		})
	}
}

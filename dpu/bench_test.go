package dpu_test

import (
	"os"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/dpu"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/plugins/flush"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// BenchmarkDispatch measures the worker's request path end to end: an
// initiator sends requests (AM id 0, eager, 8-byte payload) and, every
// window, a FLUSH whose response it waits for; the worker parses,
// validates, sequences, batches, runs the handler, completes and answers.
// One op is one request. allocs/op counts the whole process (initiator,
// worker and target), so it bounds the worker's per-request allocations.
//
// Over shared memory by default; DPU_BENCH_TLS=tcp selects TCP loopback.
func BenchmarkDispatch(b *testing.B) {
	tr := ucptest.Transports[0]
	if os.Getenv("DPU_BENCH_TLS") == "tcp" {
		tr = ucptest.Transports[1]
	}
	for _, bc := range []struct {
		name   string
		window int
		op     func(s *setup, i int) []byte
	}{
		{"null/w256", 256, func(s *setup, i int) []byte { return userReq(s.client, opNull, 0) }},
		{"null/w16", 16, func(s *setup, i int) []byte { return userReq(s.client, opNull, 0) }},
		{"put/w256", 256, func(s *setup, i int) []byte {
			return userReq(s.client, opPut, 0, s.region, s.base+uint64(i%1024)*8)
		}},
		{"append/w256", 256, func(s *setup, i int) []byte {
			return appendReq(s.client, 0, s.base, s.region, s.region)
		}},
	} {
		b.Run(tr.Name+"/"+bc.name, func(b *testing.B) {
			e := newEnv(b, tr, dpu.Config{Logger: nopLogger(),
				Handlers: allHandlers(appendop.New(appendop.Options{}), flush.New())})
			s := e.newSetup(1, 32<<20, 0, 32<<20)
			in := s.in
			le.PutUint64(s.mem(s.base, 8), s.base+8) // the append queue's tail
			// Warm up the connection (wireup) with one flush.
			in.flush(1 << 62)
			hdrs := make([][]byte, 1024)
			for i := range hdrs {
				hdrs[i] = bc.op(s, i)
			}
			payload := []byte("12345678")
			var fl []byte
			flushes := 0
			got := 0
			in.w.SetHandler(0, ucp.MessageHandlerFunc(func(_ *ucp.Worker, msgs []ucp.Message) {
				for _, m := range msgs {
					if f, err := wire.ParseFlushResponse(m.Header); err == nil && f.Failed == 0 {
						got++
					} else {
						b.Errorf("bad answer %x: %v %+v", m.Header, err, f)
					}
				}
			}))
			wait := func(n int) {
				deadline := time.Now().Add(waitLimit)
				for spins := 0; got < n; spins++ {
					in.w.Progress()
					if spins&4095 == 4095 && time.Now().After(deadline) {
						b.Fatalf("no flush response")
					}
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := in.ep.SendAM(0, hdrs[i%len(hdrs)], payload, ucp.SendReply, nil, 0); err != nil {
					b.Fatal(err)
				}
				if (i+1)%bc.window == 0 || i == b.N-1 {
					flushes++
					fl = wire.AppendFlushRequest(fl[:0], wire.Header{ClientID: s.client, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: uint64(flushes)})
					if err := in.ep.SendAM(0, fl, nil, ucp.SendReply, nil, 0); err != nil {
						b.Fatal(err)
					}
					wait(flushes)
				}
			}
			b.StopTimer()
			st := e.w.Stats()
			if st.BatchedRequests > 0 {
				b.ReportMetric(float64(st.BatchedRequests)/float64(st.Batches), "reqs/batch")
			}
		})
	}
}

func nopLogger() *zap.Logger { return zap.NewNop() }

// BenchmarkRoundTrip is the latency of one acknowledged request (a no-op
// handler) sent after the previous answer arrived: arrival, dispatch to
// the executor, completion and the ack, one at a time.
func BenchmarkRoundTrip(b *testing.B) {
	for _, tr := range ucptest.Transports {
		b.Run(tr.Name, func(b *testing.B) {
			e := newEnv(b, tr, dpu.Config{Logger: nopLogger(), Handlers: allHandlers()})
			s := e.newSetup(1, 4096, 0, 4096)
			in := s.in
			in.flush(1)
			hdr := userReq(1, opNull, rdmo.FlagAck)
			ackRoundTrips(b, in, hdr)
		})
	}
}

// ackRoundTrips times b.N requests sent one at a time, each waited for
// by polling until its ack arrives.
func ackRoundTrips(b *testing.B, in *initiator, hdr []byte) {
	acks := 0
	in.w.SetHandler(0, ucp.MessageHandlerFunc(func(_ *ucp.Worker, msgs []ucp.Message) { acks += len(msgs) }))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := in.ep.SendAM(0, hdr, nil, ucp.SendReply, nil, 0); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(waitLimit)
		for spins := 0; acks <= i; spins++ {
			in.w.Progress()
			if spins&4095 == 4095 && time.Now().After(deadline) {
				b.Fatal("no ack")
			}
		}
	}
}

// BenchmarkInlineRoundTrip is BenchmarkRoundTrip with a handler that
// declares HandlerInfo.Inline: over shared memory the loop runs each batch
// itself (no executor hand-off); over tcp the region is not mapped and it
// goes to the executor as before. allocs/op covers the inline path.
func BenchmarkInlineRoundTrip(b *testing.B) {
	for _, tr := range ucptest.Transports {
		b.Run(tr.Name, func(b *testing.B) {
			e := newEnv(b, tr, dpu.Config{Logger: nopLogger(), Handlers: []rdmo.Handler{inlineHandler{}}})
			s := e.newSetup(1, 4096, 0, 4096)
			in := s.in
			in.flush(1)
			hdr := inlineReq(1, rdmo.FlagAck, inlineNull, s.region, s.base, 0)
			st0 := e.w.Stats()
			ackRoundTrips(b, in, hdr)
			b.StopTimer()
			st := e.w.Stats()
			b.ReportMetric(float64(st.InlineBatches-st0.InlineBatches)/float64(b.N), "inline/op")
		})
	}
}

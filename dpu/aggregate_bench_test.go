package dpu_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	rdmoinit "github.com/openrdmo/rdmo/host/initiator"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/plugins/flush"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// aggRound is the number of appends of one measured round.
const aggRound = 20000

// BenchmarkAggregation compares, in the same run and on the same worker,
// pipelined 64-byte APPENDs from one initiator sent as plain requests and
// aggregated into BATCH containers (initiator.Options.Aggregate). Each
// iteration is one round of aggRound appends and a flush per mode (the
// mode that goes first alternates); the append handler reserves space with
// one fetch-and-add per batch (Shared), and the queue's tail is reset
// between rounds. It reports each mode's rate, their ratio, and the active
// messages sent per request.
//
// Over shared memory by default; DPU_BENCH_TLS=tcp selects TCP loopback.
func BenchmarkAggregation(b *testing.B) {
	tr := ucptest.Transports[0]
	if os.Getenv("DPU_BENCH_TLS") == "tcp" {
		tr = ucptest.Transports[1]
	}
	b.Run(tr.Name, func(b *testing.B) {
		// The initiator's window bounds what is unsent or unanswered, not
		// what the worker holds: lift the worker's in-flight limit so the
		// stream measures the data path, not that limit.
		e := newEnv(b, tr, dpu.Config{Logger: nopLogger(), MaxInFlightPerRQ: 1 << 20, Handlers: []rdmo.Handler{
			appendop.New(appendop.Options{Strategy: appendop.Shared}), flush.New()}})
		s := e.newSetup(1, 4<<20, 0, 4<<20)
		tail := s.mem(s.base, 8)
		le.PutUint64(tail, s.base+8)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		newInitiator := func(aggregate bool) *rdmoinit.Initiator {
			in, err := rdmoinit.New(rdmoinit.Options{WorkerAddress: s.waddr, ClientID: s.client, Context: e.ctx,
				Aggregate: aggregate && rdmoinit.AggregateSupported(dpu.Capabilities()), Logger: nopLogger()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { in.Close() })
			e.do(dpu.RQCreate{Client: s.client, Addr: in.Address()})
			return in
		}
		modes := [2]*rdmoinit.Initiator{newInitiator(false), newInitiator(true)}
		payload := make([]byte, 64)
		round := func(in *rdmoinit.Initiator) time.Duration {
			start := time.Now()
			for i := 0; i < aggRound; i++ {
				if err := in.Append(s.base, s.region, s.region, payload); err != nil {
					b.Fatal(err)
				}
			}
			rsp, err := in.Flush(ctx)
			if err != nil || rsp.Failed != 0 {
				b.Fatalf("flush: %+v, %v", rsp, err)
			}
			el := time.Since(start)
			if got := le.Uint64(tail); got != s.base+8+aggRound*64 {
				b.Fatalf("tail %#x after a round, want %#x", got, s.base+8+aggRound*64)
			}
			le.PutUint64(tail, s.base+8)
			return el
		}
		// Warm up both (wire-up, buffers, the handler's tables).
		round(modes[0])
		round(modes[1])
		var el [2]time.Duration
		var before [2]rdmoinit.Stats
		for m, in := range modes {
			before[m] = in.Stats()
		}
		b.SetBytes(2 * aggRound * 64)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			first := i % 2
			el[first] += round(modes[first])
			el[1-first] += round(modes[1-first])
		}
		b.StopTimer()
		var rate, msgsPerReq [2]float64
		for m, in := range modes {
			st := in.Stats()
			reqs := float64((st.Appends + st.Flushes) - (before[m].Appends + before[m].Flushes))
			rate[m] = float64(b.N*aggRound) / el[m].Seconds()
			msgsPerReq[m] = float64(st.Messages-before[m].Messages) / reqs
		}
		b.ReportMetric(rate[0], "plain-appends/s")
		b.ReportMetric(rate[1], "agg-appends/s")
		b.ReportMetric(rate[1]/rate[0], "agg/plain")
		b.ReportMetric(msgsPerReq[0], "plain-msgs/req")
		b.ReportMetric(msgsPerReq[1], "agg-msgs/req")
		if ws := e.w.Stats(); ws.Failures[rdmo.StatusQueueOverflow] != 0 || len(ws.Failures) != 0 {
			b.Fatalf("worker failures %v", ws.Failures)
		}
	})
}

package initiator_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// benchTransport is the transport in UCX_TLS (make bench sets shm,self),
// or shared memory.
func benchTransport() ucptest.Transport {
	tls := os.Getenv("UCX_TLS")
	if tls == "" {
		return ucptest.Transports[0]
	}
	if strings.HasPrefix(tls, "tcp") {
		return ucptest.Transport{Name: "tcp", TLS: tls}
	}
	return ucptest.Transport{Name: "shm", TLS: tls}
}

// BenchmarkAppend64 is the pipelined rate of 64-byte appends from one
// goroutine against the in-process stand-in worker (which decodes and
// validates every request), ending with a flush so every append has
// arrived and completed. allocs/op counts the whole process: the caller,
// the initiator's progress loop and the stand-in.
func BenchmarkAppend64(b *testing.B) { benchAppend64(b, initiator.Options{}) }

// BenchmarkAppend64Aggregate is BenchmarkAppend64 with Options.Aggregate:
// queued appends travel in BATCH containers (msgs/op is the active
// messages per append). dpu's BenchmarkAggregation compares both modes in
// one run against the real worker.
func BenchmarkAppend64Aggregate(b *testing.B) { benchAppend64(b, initiator.Options{Aggregate: true}) }

func benchAppend64(b *testing.B, opts initiator.Options) {
	ucptest.CheckLeaks(b)
	s, in := start(b, benchTransport(), standInConfig{countOnly: true}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	payload := make([]byte, 64)
	// Warm up: grow the queue's buffers and the stand-in's tables.
	for i := 0; i < 20000; i++ {
		if err := in.Append(8, 1, 1, payload); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := in.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	before := in.Stats()
	arrived := s.arrived.Load() - before.CreditFlushes
	b.ReportAllocs()
	b.SetBytes(64)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := in.Append(8, 1, 1, payload); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := in.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.StopTimer()
	if got := s.arrived.Load() - in.Stats().CreditFlushes - arrived; got != uint64(b.N)+1 {
		b.Fatalf("stand-in got %d requests, sent %d", got, b.N+1)
	}
	st := in.Stats()
	b.ReportMetric(float64(b.N)/el.Seconds(), "appends/s")
	b.ReportMetric(float64(b.N)/float64(max(1, st.Batches-before.Batches)), "appends/batch")
	b.ReportMetric(float64(st.Messages-before.Messages)/float64(b.N+1), "msgs/op")
	b.ReportMetric(float64(st.Wakes-before.Wakes)/float64(b.N), "wakes/op")
	b.ReportMetric(float64(st.Sleeps-before.Sleeps)/float64(b.N), "sleeps/op")
	b.ReportMetric(float64(st.WindowWaits-before.WindowWaits)/float64(b.N), "windowwaits/op")
}

// BenchmarkAppend64Parallel is BenchmarkAppend64 with GOMAXPROCS
// producers on one Initiator.
func BenchmarkAppend64Parallel(b *testing.B) {
	ucptest.CheckLeaks(b)
	s, in := start(b, benchTransport(), standInConfig{countOnly: true}, initiator.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	payload := make([]byte, 64)
	for i := 0; i < 20000; i++ {
		if err := in.Append(8, 1, 1, payload); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := in.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	arrived := s.arrived.Load() - in.Stats().CreditFlushes
	b.ReportAllocs()
	b.SetBytes(64)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 64)
		for pb.Next() {
			if err := in.Append(8, 1, 1, buf); err != nil {
				b.Error(err)
				return
			}
		}
	})
	if _, err := in.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.StopTimer()
	if got := s.arrived.Load() - in.Stats().CreditFlushes - arrived; got != uint64(b.N)+1 {
		b.Fatalf("stand-in got %d requests, sent %d", got, b.N+1)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "appends/s")
}

// startRoundTrips starts the round-trip benchmarks' initiator against a
// counting stand-in, with a context that bounds the whole benchmark.
func startRoundTrips(b *testing.B) (*initiator.Initiator, context.Context) {
	ucptest.CheckLeaks(b)
	_, in := start(b, benchTransport(), standInConfig{countOnly: true}, initiator.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	b.Cleanup(cancel)
	return in, ctx
}

// BenchmarkAppendFlush64 is the latency of one 64-byte append and a flush
// that waits for it: a full round trip through both progress loops.
func BenchmarkAppendFlush64(b *testing.B) {
	in, ctx := startRoundTrips(b)
	payload := make([]byte, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := in.Append(8, 1, 1, payload); err != nil {
			b.Fatal(err)
		}
		if _, err := in.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFlushIdle is the latency of one Flush with nothing else in
// flight, each with a deadline of its own (a fresh context.WithTimeout), as
// rdmo bench's flush/idle row and most callers make them.
func BenchmarkFlushIdle(b *testing.B) {
	in, _ := startRoundTrips(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if _, err := in.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
}

// benchCallOp is the user op of the call benchmarks; the stand-in answers
// its ack with a value and no data.
const benchCallOp = rdmo.OpUserBase + 1

// BenchmarkCall is the latency of one Call from the benchmark's goroutine:
// the request and the answer each cross between it and the initiator's
// progress loop (compare BenchmarkDriveCall).
func BenchmarkCall(b *testing.B) {
	in, ctx := startRoundTrips(b)
	sub := make([]byte, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := in.Call(ctx, benchCallOp, sub, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCallParallel is Calls from several goroutines at once on one
// Initiator (b.RunParallel, -cpu sets how many): each waits for its own
// answer, so they take turns running the loop's rounds (borrow.go).
func BenchmarkCallParallel(b *testing.B) {
	in, ctx := startRoundTrips(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		sub := make([]byte, 16)
		for pb.Next() {
			if _, err := in.Call(ctx, benchCallOp, sub, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkDriveCall is BenchmarkCall made from inside one Drive: every
// Call runs on the progress loop's thread, no hand-off. 0 allocs/op: a
// Driver reuses its Call's state (a Call with result data allocates the
// caller's copy of the data).
func BenchmarkDriveCall(b *testing.B) {
	in, ctx := startRoundTrips(b)
	sub := make([]byte, 16)
	b.ReportAllocs()
	b.ResetTimer()
	err := in.Drive(ctx, func(d *initiator.Driver) error {
		for i := 0; i < b.N; i++ {
			if _, err := d.Call(benchCallOp, sub, nil); err != nil {
				return err
			}
		}
		return nil
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDrivePipeline keeps 64 calls in flight inside one Drive with
// Driver.Start, each CallWait reused as soon as its call settled: 0
// allocs/op (a call with result data allocates the caller's copy).
func BenchmarkDrivePipeline(b *testing.B) {
	in, ctx := startRoundTrips(b)
	sub := make([]byte, 16)
	var ring [64]initiator.CallWait
	b.ReportAllocs()
	b.ResetTimer()
	err := in.Drive(ctx, func(d *initiator.Driver) error {
		for i := 0; i < b.N+len(ring); i++ {
			w := &ring[i%len(ring)]
			if i >= len(ring) {
				if _, err := d.Wait(w); err != nil {
					return err
				}
			}
			if i < b.N {
				if err := d.Start(w, benchCallOp, sub, nil); err != nil {
					return err
				}
			}
		}
		return nil
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
}

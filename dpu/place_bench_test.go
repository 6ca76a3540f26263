package dpu_test

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// BenchmarkPlace measures the worker's large-payload path: requests whose
// payload comes by rendezvous (64 KiB, 256 KiB, 1 MiB), each placed by the
// handler into target memory (Target.Place: received straight into the
// mapping on shared memory, through a bounce buffer and a put over TCP),
// a window of 16 MiB in flight, then a fenced FLUSH whose answer the
// initiator waits for. Initiator, worker and target share this process,
// so allocs/op and the CPU time per payload count all three.
//
// Over shared memory by default; DPU_BENCH_TLS=tcp selects TCP loopback.
func BenchmarkPlace(b *testing.B) {
	tr := ucptest.Transports[0]
	if os.Getenv("DPU_BENCH_TLS") == "tcp" {
		tr = ucptest.Transports[1]
	}
	const region = 32 << 20
	for _, size := range []int{64 << 10, 256 << 10, 1 << 20} {
		b.Run(tr.Name+"/"+strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			e := newEnv(b, tr, dpu.Config{Logger: nopLogger(), Handlers: allHandlers()})
			s := e.newSetup(1, region, 0, region)
			in := s.in
			in.flush(1 << 62) // wire-up
			slots := region / size
			hdrs := make([][]byte, slots)
			for i := range hdrs {
				hdrs[i] = userReq(s.client, opPut, 0, s.region, s.base+uint64(i*size))
			}
			payload := make([]byte, size)
			for i := range payload {
				payload[i] = byte(i)
			}
			window := max(1, (16<<20)/size)
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
			var fl []byte
			flushes := 0
			wait := func(n int) {
				deadline := time.Now().Add(waitLimit)
				for spins := 0; got < n; spins++ {
					in.w.Progress()
					if spins&4095 == 4095 && time.Now().After(deadline) {
						b.Fatalf("no flush response")
					}
				}
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			start, cpu0 := time.Now(), processCPU()
			for i := 0; i < b.N; i++ {
				for {
					err := in.ep.SendAM(0, hdrs[i%slots], payload, ucp.SendReply|ucp.SendRendezvous, nil, 0)
					if err == nil {
						break
					}
					if err != ucp.ErrTooManyOutstanding {
						b.Fatal(err)
					}
					in.w.Progress()
				}
				if (i+1)%window == 0 || i == b.N-1 {
					flushes++
					fl = wire.AppendFlushRequest(fl[:0], wire.Header{ClientID: s.client, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: uint64(flushes)})
					if err := in.ep.SendAM(0, fl, nil, ucp.SendReply, nil, 0); err != nil {
						b.Fatal(err)
					}
					wait(flushes)
				}
			}
			el, cpu := time.Since(start), processCPU()-cpu0
			b.StopTimer()
			last := (b.N - 1) % slots
			if got := s.mem(s.base+uint64(last*size), size); got[size-1] != payload[size-1] || got[1] != payload[1] {
				b.Fatalf("payload %d did not land", last)
			}
			b.ReportMetric(float64(b.N)*float64(size)/el.Seconds()/1e6, "MB/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is this process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package ucp_test

import (
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// Benchmarks run between two processes, like ucx_perftest, over the
// transport in UCX_TLS (make bench sets shm,self). The sink process counts
// AM id 1 and answers AM id 9 ("fin") on the reply endpoint, so the sender
// knows every message before it arrived.

func childSink() int {
	ctx, w, err := ucptest.NewChildWorker()
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	mem, err := ctx.Allocate(1 << 20)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	count := 0
	w.SetHandler(1, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) { count += len(msgs) }))
	w.SetHandler(9, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) {
		for _, m := range msgs {
			var c [8]byte
			for i := 0; i < 8; i++ {
				c[i] = byte(count >> (8 * i))
			}
			m.Reply.SendAM(9, c[:], nil, 0, nil, 0)
		}
	}))
	addr, _ := w.Address()
	rk, _ := mem.PackRkey()
	fmt.Printf("READY %x %x %d\n", addr, rk, mem.Address())
	stdinClosed := make(chan struct{})
	go func() {
		buf := make([]byte, 1)
		os.Stdin.Read(buf)
		close(stdinClosed)
	}()
	for {
		select {
		case <-stdinClosed:
			w.Close()
			mem.Close()
			ctx.Close()
			return 0
		default:
			w.Progress()
		}
	}
}

type benchPeer struct {
	w    *ucp.Worker
	ep   *ucp.Endpoint
	rkey *ucp.RemoteKey
	base uint64
	fin  int
	seen uint64 // messages the sink counted, from its last fin answer
}

func benchTransport() ucptest.Transport {
	tls := os.Getenv("UCX_TLS")
	if tls == "" {
		tls = "shm,self"
	}
	name := "shm"
	if tls[:3] == "tcp" {
		name = "tcp"
	}
	return ucptest.Transport{Name: name, TLS: tls}
}

func startSink(b *testing.B) *benchPeer {
	tr := benchTransport()
	c := startChild(b, "sink", tr)
	f := c.Must(b, "READY", 20*time.Second)
	addr, _ := hex.DecodeString(f[0])
	rk, _ := hex.DecodeString(f[1])
	base, _ := strconv.ParseUint(f[2], 10, 64)
	ctx, err := ucp.NewContext(ucp.ContextOptions{Config: tr.Config()})
	if err != nil {
		b.Fatal(err)
	}
	w, err := ctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	p := &benchPeer{w: w, base: base}
	if p.ep, err = w.Connect(addr, ucp.EndpointOptions{}); err != nil {
		b.Fatal(err)
	}
	if p.rkey, err = p.ep.UnpackRkey(rk); err != nil {
		b.Fatal(err)
	}
	w.SetHandler(9, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) {
		for _, m := range msgs {
			p.fin++
			p.seen = 0
			for i := 7; i >= 0; i-- {
				p.seen = p.seen<<8 | uint64(m.Header[i])
			}
		}
	}))
	b.Cleanup(func() {
		p.ep.Close()
		w.Close()
		ctx.Close()
	})
	return p
}

// send queues a 64-byte AM, progressing while the send window is full.
func (p *benchPeer) send(b *testing.B, payload []byte) {
	for {
		err := p.ep.SendAM(1, nil, payload, 0, nil, 0)
		if err == nil {
			return
		}
		if err != ucp.ErrTooManyOutstanding {
			b.Fatal(err)
		}
		p.w.Progress()
	}
}

// roundTrip sends a fin and waits for the sink's answer: every earlier
// message on the endpoint has then arrived.
func (p *benchPeer) roundTrip(b *testing.B) {
	want := p.fin + 1
	if err := p.ep.SendAM(9, nil, nil, ucp.SendReply, nil, 0); err != nil {
		b.Fatal(err)
	}
	if err := p.w.ProgressUntil(func() bool { return p.fin >= want }, time.Minute); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAMRate64 is the Go counterpart of `ucx_perftest -t ucp_am_bw -s
// 64`: 64-byte active messages, a send window, between two processes.
func BenchmarkAMRate64(b *testing.B) {
	p := startSink(b)
	payload := make([]byte, 64)
	// Warm up (as ucx_perftest -w) and count from the sink's zero.
	for i := 0; i < 10000; i++ {
		p.send(b, payload)
		if i%64 == 63 {
			p.w.Progress()
		}
	}
	p.roundTrip(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		p.send(b, payload)
		if i%64 == 63 {
			p.w.Progress()
		}
	}
	p.roundTrip(b)
	el := time.Since(start)
	b.StopTimer()
	if p.seen != uint64(b.N)+10000 {
		b.Fatalf("sink counted %d messages, sent %d", p.seen, b.N+10000)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "msg/s")
}

// BenchmarkPutRate64 issues 64-byte puts into the sink's memory.
func BenchmarkPutRate64(b *testing.B) {
	p := startSink(b)
	payload := make([]byte, 64)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		for {
			err := p.ep.Put(payload, p.base+uint64(i%1024)*64, p.rkey, nil, 0)
			if err == nil {
				break
			}
			if err != ucp.ErrTooManyOutstanding {
				b.Fatal(err)
			}
			p.w.Progress()
		}
		if i%64 == 63 {
			p.w.Progress()
		}
	}
	if err := p.ep.FlushSync(time.Minute); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "put/s")
}

// BenchmarkFetchAddLatency is one blocking fetch-add at a time.
func BenchmarkFetchAddLatency(b *testing.B) {
	p := startSink(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.ep.AtomicSync(ucp.AtomicFetchAdd, 1, 0, p.base, p.rkey, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAMPingPong64 is the round trip of a 64-byte AM and its answer.
func BenchmarkAMPingPong64(b *testing.B) {
	p := startSink(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.roundTrip(b)
	}
}

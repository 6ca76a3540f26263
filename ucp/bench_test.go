package ucp_test

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"syscall"
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
	ring, err := ctx.Allocate(sinkRing)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	large := &largeSink{ring: ring.Bytes()}
	w.SetHandler(amLarge, ucp.MessageHandlerFunc(large.handle))
	w.SetHandler(amLargeFin, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) {
		for _, m := range msgs {
			large.fins = append(large.fins, m.Reply)
		}
	}))
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
			ring.Close()
			mem.Close()
			ctx.Close()
			return 0
		default:
			w.Progress()
			large.answer()
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
	// UCP_BENCH_ERROR_HANDLING=none connects without peer-failure
	// detection, as ucx_perftest does without -e (over TCP UCX then has
	// zero-copy rendezvous lanes, which detection rules out).
	var eo ucp.EndpointOptions
	if os.Getenv("UCP_BENCH_ERROR_HANDLING") == "none" {
		eo.ErrorHandling = ucp.ErrorHandlingNone
	}
	if p.ep, err = w.Connect(addr, eo); err != nil {
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

// The large-message benchmark's AM ids at the sink: 2 carries a payload
// (eager or rendezvous, as UCX chooses for its size), 8 is its fin, whose
// answer (AM 8) waits until every rendezvous payload before it landed.
const (
	amLarge    = 2
	amLargeFin = 8
	// sinkRing is the sink's receive memory: rendezvous payloads land in
	// it one after another, several in flight, as ucx_perftest's receiver
	// takes each into its receive buffer.
	sinkRing = 16 << 20
)

// largeSink is the sink's state for the large-message benchmark.
type largeSink struct {
	ring    []byte
	off     int
	pending int    // receives issued, not completed
	bytes   uint64 // payload bytes that arrived (eager) or landed (rendezvous)
	fins    []*ucp.Endpoint
	errs    uint64
}

func (s *largeSink) Complete(c ucp.Completion) {
	s.pending--
	if c.Err != nil {
		s.errs++
	}
	s.bytes += c.Value
}

func (s *largeSink) handle(w *ucp.Worker, msgs []ucp.Message) {
	for i := range msgs {
		m := &msgs[i]
		if !m.Rendezvous {
			s.bytes += uint64(len(m.Data))
			continue
		}
		if s.off+m.Length > len(s.ring) {
			s.off = 0
		}
		if err := m.Receive(s.ring[s.off:s.off+m.Length], s, 0); err != nil {
			s.errs++
			continue
		}
		s.pending++
		s.off += m.Length
	}
}

// answer answers the fins whose payloads all landed: bytes, errors and the
// sink process's CPU time so far (user+system, ns).
func (s *largeSink) answer() {
	if s.pending != 0 || len(s.fins) == 0 {
		return
	}
	var h [24]byte
	binary.LittleEndian.PutUint64(h[0:], s.bytes)
	binary.LittleEndian.PutUint64(h[8:], s.errs)
	binary.LittleEndian.PutUint64(h[16:], uint64(processCPU()))
	for _, ep := range s.fins {
		ep.SendAM(amLargeFin, h[:], nil, 0, nil, 0)
	}
	s.fins = s.fins[:0]
}

// processCPU is this process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAMBandwidth is the Go counterpart of `ucx_perftest -t ucp_am_bw
// -s SIZE` for large messages: one send buffer sent over and over with
// many sends outstanding; the sink takes every rendezvous payload into its
// receive memory (Receive, several in flight), as perftest's receiver
// does. Sizes: 64 KiB, 256 KiB, 1 MiB. It reports MB/s and the CPU time
// per message of each process (send-cpu includes the benchmark harness).
func BenchmarkAMBandwidth(b *testing.B) {
	for _, size := range []int{64 << 10, 256 << 10, 1 << 20} {
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) { benchAMBandwidth(b, size) })
	}
}

func benchAMBandwidth(b *testing.B, size int) {
	p := startSink(b)
	var got struct {
		n           int
		bytes, errs uint64
		cpu         time.Duration
	}
	p.w.SetHandler(amLargeFin, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) {
		for _, m := range msgs {
			got.n++
			got.bytes = binary.LittleEndian.Uint64(m.Header[0:])
			got.errs = binary.LittleEndian.Uint64(m.Header[8:])
			got.cpu = time.Duration(binary.LittleEndian.Uint64(m.Header[16:]))
		}
	}))
	fin := func() {
		want := got.n + 1
		if err := p.ep.SendAM(amLargeFin, nil, nil, ucp.SendReply, nil, 0); err != nil {
			b.Fatal(err)
		}
		if err := p.w.ProgressUntil(func() bool { return got.n >= want }, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	payload := make([]byte, size)
	// At most this many bytes outstanding: as many sends as fit, like
	// perftest's window of one buffer, bounded so the sink's ring is
	// never overrun by receives still in flight.
	window := max(2, (sinkRing/2)/size)
	var inflight int
	done := ucp.CompleterFunc(func(c ucp.Completion) {
		inflight--
		if c.Err != nil {
			b.Error(c.Err)
		}
	})
	send := func() {
		for inflight >= window {
			p.w.Progress()
		}
		for {
			err := p.ep.SendAM(amLarge, nil, payload, 0, done, 0)
			if err == nil {
				inflight++
				return
			}
			if err != ucp.ErrTooManyOutstanding {
				b.Fatal(err)
			}
			p.w.Progress()
		}
	}
	for i := 0; i < 16; i++ {
		send()
	}
	for inflight > 0 {
		p.w.Progress()
	}
	fin()
	base, sinkCPU0 := got.bytes, got.cpu
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU()
	for i := 0; i < b.N; i++ {
		send()
		if i%8 == 7 {
			p.w.Progress()
		}
	}
	for inflight > 0 {
		p.w.Progress()
	}
	fin()
	el, cpu := time.Since(start), processCPU()-cpu0
	b.StopTimer()
	if got.errs != 0 || got.bytes-base != uint64(b.N)*uint64(size) {
		b.Fatalf("sink: %d bytes, %d errors; sent %d bytes", got.bytes-base, got.errs, uint64(b.N)*uint64(size))
	}
	b.ReportMetric(float64(b.N)*float64(size)/el.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "send-cpu-ns/op")
	b.ReportMetric(float64((got.cpu-sinkCPU0).Nanoseconds())/float64(b.N), "sink-cpu-ns/op")
}

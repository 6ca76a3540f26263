package pluginhost_test

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/rdmo"
	tp "github.com/openrdmo/rdmo/rdmo/plugin/internal/testplugin"
	"github.com/openrdmo/rdmo/rdmo/plugin/pluginhost"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
)

const benchSize = 64 // payload bytes per request

// benchBatch is the number of requests per batch.
var benchBatch = 64

// benchClient is one client with its batch: 64 Puts of 64 B, back to back
// in its own region.
type benchClient struct {
	tg      *rdmotest.Target
	reqs    []rdmo.Request
	results []rdmo.Result
}

func newBenchClients(n int) []*benchClient {
	root := rdmotest.NewTarget(1000)
	cs := make([]*benchClient, n)
	for i := range cs {
		tg := root.Peer(rdmo.ClientID(1000 + i))
		id := uint64(0x1000 + i)
		b := base + uint64(i)<<20
		tg.AddRegion(rdmo.RegionID(id), b, benchBatch*benchSize)
		c := &benchClient{tg: tg, results: make([]rdmo.Result, benchBatch)}
		for j := 0; j < benchBatch; j++ {
			c.reqs = append(c.reqs, putReq(tg, id, b+uint64(j*benchSize), tp.PutDirect, bytes.Repeat([]byte{byte(j)}, benchSize)))
		}
		cs[i] = c
	}
	return cs
}

func (c *benchClient) run(tb testing.TB, h rdmo.Handler, n int) {
	for i := 0; i < n; i++ {
		clear(c.results)
		h.HandleBatch(c.tg, c.reqs, c.results)
		c.tg.EndBatch()
	}
	for i, r := range c.results {
		if r.Status != rdmo.StatusOK {
			tb.Fatalf("result %d: %v %s", i, r.Status.Name(), r.Detail)
		}
	}
}

// runClients runs n batches on each client concurrently and returns the
// request rate.
func runClients(tb testing.TB, h rdmo.Handler, cs []*benchClient, n int) float64 {
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.run(tb, h, n)
		}()
	}
	wg.Wait()
	return float64(n*len(cs)*benchBatch) / time.Since(start).Seconds()
}

func loadBench(b *testing.B) *pluginhost.Handler {
	h, err := pluginhost.Load(b.Context(), testPluginPath, pluginhost.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close() })
	return h
}

// BenchmarkHandleBatch: one batch of 64 Puts of 64 B per op, one client.
func BenchmarkHandleBatch(b *testing.B) {
	for _, mode := range []string{"direct", "plugin"} {
		b.Run(mode, func(b *testing.B) {
			var h rdmo.Handler = tp.New()
			if mode == "plugin" {
				h = loadBench(b)
			}
			c := newBenchClients(1)[0]
			c.run(b, h, 10)
			b.ResetTimer()
			c.run(b, h, b.N)
			b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "req/s")
		})
	}
}

// BenchmarkPluginVsDirect runs the same batches through the handler called
// directly and through the plugin, in one run, and reports both request
// rates and their ratio (plugin/direct): with 1 client (latency bound) and
// with 4 clients at once (saturation). It also reports the CPU time a batch
// costs, in the worker (host-us/batch) and in the plugin process
// (plugin-us/batch), and direct/(host+plugin) CPU per batch as
// cpu-ratio: the plugin path's share of the built-in rate when CPU is
// what runs out.
func BenchmarkPluginVsDirect(b *testing.B) {
	for _, clients := range []int{1, 4} {
		b.Run("clients="+strconv.Itoa(clients), func(b *testing.B) {
			benchVs(b, clients)
		})
	}
}

// BenchmarkPluginVsDirectBatchSize is BenchmarkPluginVsDirect with 4
// clients and larger batches: how batching amortizes the per-call cost.
func BenchmarkPluginVsDirectBatchSize(b *testing.B) {
	defer func(n int) { benchBatch = n }(benchBatch)
	for _, n := range []int{16, 64, 256, 1024} {
		benchBatch = n
		b.Run("batch="+strconv.Itoa(n), func(b *testing.B) { benchVs(b, 4) })
	}
}

func benchVs(b *testing.B, clients int) {
	direct := tp.New()
	ph := loadBench(b)
	cs := newBenchClients(clients)
	runClients(b, direct, cs, 10)
	runClients(b, ph, cs, 10)
	b.ResetTimer()
	c0 := selfCPU(b)
	d := runClients(b, direct, cs, b.N)
	c1, p0 := selfCPU(b), procCPU(b, ph.Pid())
	p := runClients(b, ph, cs, b.N)
	c2, p1 := selfCPU(b), procCPU(b, ph.Pid())
	batches := float64(b.N * clients)
	dcpu := (c1 - c0).Seconds() * 1e6 / batches
	hcpu := (c2 - c1).Seconds() * 1e6 / batches
	pcpu := (p1 - p0).Seconds() * 1e6 / batches
	b.ReportMetric(d, "direct-req/s")
	b.ReportMetric(p, "plugin-req/s")
	b.ReportMetric(p/d, "plugin/direct")
	b.ReportMetric(dcpu, "direct-us/batch")
	b.ReportMetric(hcpu, "host-us/batch")
	b.ReportMetric(pcpu, "plugin-us/batch")
	b.ReportMetric(dcpu/(hcpu+pcpu), "cpu-ratio")
}

// selfCPU is the CPU time (user+system) of this process.
func selfCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the CPU time (user+system) of process pid, from /proc (in
// clock ticks of 10ms: use it over many batches).
func procCPU(tb testing.TB, pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		tb.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// Fields after the command: state is f[0]; utime and stime are fields
	// 14 and 15 of the line, f[11] and f[12] here.
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// BenchmarkCodec: a HandleBatch round trip (64 Puts of 64 B, one client)
// through a plugin process, with the hand-written codec and with the
// maintained MessagePack library (by reflection, plus the bounds check of
// untrusted input). Besides the time, it reports the CPU time a batch
// costs in the worker (host-us/batch) and in the plugin (plugin-us/batch),
// which a loaded machine disturbs less than the wall clock. Run it several
// times (-count) and compare with benchstat -col /codec.
func BenchmarkCodec(b *testing.B) {
	for _, c := range []struct{ name, codec string }{{"hand", pluginhost.HandCodec}, {"lib", pluginhost.LibCodec}} {
		codec := c.codec
		b.Run("codec="+c.name, func(b *testing.B) {
			h, err := pluginhost.LoadCodec(b.Context(), testPluginPath, pluginhost.LoadOptions{}, codec)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = h.Close() })
			c := newBenchClients(1)[0]
			c.run(b, h, 10)
			b.ReportAllocs()
			b.ResetTimer()
			c0, p0 := selfCPU(b), procCPU(b, h.Pid())
			c.run(b, h, b.N)
			c1, p1 := selfCPU(b), procCPU(b, h.Pid())
			b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "req/s")
			b.ReportMetric((c1-c0).Seconds()*1e6/float64(b.N), "host-us/batch")
			b.ReportMetric((p1-p0).Seconds()*1e6/float64(b.N), "plugin-us/batch")
		})
	}
}

package urom

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/rdmo"
)

// StatsCommand is the worker command that answers with the worker's
// dpu.Stats. It is the same string as rdmoworker.KindStats (this package
// cannot import rdmoworker, which imports it).
const StatsCommand = "stats"

// MetricsScrapeTimeout bounds how long one scrape waits for a worker's
// counters; a worker that does not answer in time is reported with
// rdmo_worker_up 0 and no other series.
const MetricsScrapeTimeout = 5 * time.Second

// WorkerStats is one live worker's counters, as WorkerStats collects them.
type WorkerStats struct {
	WorkerInfo
	Stats dpu.Stats
	// Memory is the worker process's resident memory, read from /proc on
	// the service's host (zeros when it cannot be read).
	Memory ProcessMemory
	// Err is why the counters could not be read (the worker did not
	// answer in time, died, or does not run the RDMO component).
	Err error
}

// liveWorkers lists the workers that are running, by id.
func (s *Service) liveWorkers() []*workerProc {
	s.mu.Lock()
	out := make([]*workerProc, 0, len(s.workers))
	for _, w := range s.workers {
		out = append(out, w)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	live := out[:0]
	for _, w := range out {
		w.mu.Lock()
		dead := w.reason != ""
		w.mu.Unlock()
		if !dead && w.ctl != nil {
			live = append(live, w)
		}
	}
	return live
}

// command sends one command of the given kind to the worker over its
// control socket (as a host's Worker.Call does through a session) and
// decodes the answer into resp.
func (w *workerProc) command(ctx context.Context, kind string, req, resp any, timeout time.Duration) error {
	body, err := encodeBody(req)
	if err != nil {
		return err
	}
	wrapped, err := encodeBody(commandRequest{Worker: w.id, Kind: kind, Body: body})
	if err != nil {
		return err
	}
	raw, err := w.call(ctx, wrapped, timeout)
	if err != nil {
		return err
	}
	return decodeBody(raw, resp)
}

// WorkerStats asks every live worker process, whichever host spawned it,
// for its counters (the StatsCommand over its control socket), all at
// once, each bounded by ctx and the service's CallTimeout. The result is
// ordered by worker id.
func (s *Service) WorkerStats(ctx context.Context) []WorkerStats {
	ws := s.liveWorkers()
	out := make([]WorkerStats, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		out[i].WorkerInfo = w.info()
		wg.Add(1)
		go func(i int, w *workerProc) {
			defer wg.Done()
			out[i].Err = w.command(ctx, StatsCommand, nil, &out[i].Stats, s.cfg.CallTimeout)
			out[i].Memory = ReadProcessMemory(w.procID())
		}(i, w)
	}
	wg.Wait()
	return out
}

// ProcessMemory is a process's resident memory in bytes, from
// /proc/<pid>/status: RSS (VmRSS) is Anon (private, the heap) + File
// (mapped files, the binary) + Shmem (shared memory: for an RDMO worker,
// the pages of target memory it reaches through a shared-memory mapping,
// which grow with what the targets' queues hold, not with the worker).
type ProcessMemory struct {
	RSS, Anon, File, Shmem uint64
}

// ReadProcessMemory reads process pid's resident memory (zeros when it
// cannot be read).
func ReadProcessMemory(pid int) ProcessMemory {
	var m ProcessMemory
	if pid <= 0 {
		return m
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch key {
		case "VmRSS":
			dst = &m.RSS
		case "RssAnon":
			dst = &m.Anon
		case "RssFile":
			dst = &m.File
		case "RssShmem":
			dst = &m.Shmem
		default:
			continue
		}
		if fs := strings.Fields(rest); len(fs) > 0 {
			if kb, err := strconv.ParseUint(fs[0], 10, 64); err == nil {
				*dst = kb << 10
			}
		}
	}
	return m
}

// ProcessRSS returns the resident set size of process pid in bytes
// (VmRSS); 0 when it cannot be read.
func ProcessRSS(pid int) uint64 { return ReadProcessMemory(pid).RSS }

// Metric names the collector exports. Every per-worker series carries the
// label "worker" (the UROM worker id).
const (
	metricNamespace = "rdmo"
)

// metricsCollector is a prometheus.Collector that reads every live
// worker's dpu.Stats at scrape time.
type metricsCollector struct {
	s       *Service
	timeout time.Duration

	up, rss, anon, shmem, info                *prometheus.Desc
	requests, reqBytes, dropped               *prometheus.Desc
	batches, batchSize                        *prometheus.Desc
	puts, putBytes, places, fetches           *prometheus.Desc
	syncs, syncOps, fences, flushes           *prometheus.Desc
	readbacks, panics, flushResponses, acks   *prometheus.Desc
	failures, inFlight, clients, rqs, regions *prometheus.Desc

	workers, maxWorkers, plugins *prometheus.Desc
}

func newMetricsCollector(s *Service, timeout time.Duration) *metricsCollector {
	w := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricNamespace, "worker", name), help,
			append([]string{"worker"}, labels...), nil)
	}
	svc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricNamespace, "urom", name), help, nil, nil)
	}
	return &metricsCollector{
		s:       s,
		timeout: timeout,

		up:    w("up", "1 when the worker answered the scrape's stats command, 0 when it did not (its other series are then missing)."),
		rss:   w("resident_memory_bytes", "Resident set size of the worker process (VmRSS)."),
		anon:  w("resident_anon_memory_bytes", "Private resident memory of the worker process (RssAnon): its own heap and stacks."),
		shmem: w("resident_shmem_bytes", "Shared memory resident in the worker process (RssShmem): mostly target memory it writes through shared-memory mappings."),
		info:  w("info", "Worker process facts as labels; the value is always 1.", "pid", "plugins"),

		requests: w("requests_total", "Requests that arrived on the worker's request queues, by op (failed ones included).", "op"),
		reqBytes: w("request_bytes_total", "Payload bytes of the requests that arrived."),
		dropped:  w("dropped_total", "Active messages that could not be answered (no reply endpoint, not a request queue, queue being destroyed)."),

		batches:   w("batches_total", "Handler calls (HandleBatch) for requests."),
		batchSize: w("batch_size", "Requests per handler call (buckets are powers of two)."),

		puts:     w("target_puts_total", "Writes into target memory issued by handlers, by path: ucx (a UCX put) or memcpy (through a shared-memory mapping).", "path"),
		putBytes: w("target_put_bytes_total", "Bytes written into target memory by handler puts."),
		places:   w("places_total", "Rendezvous payloads moved straight into target memory."),
		fetches:  w("fetches_total", "Rendezvous payloads brought into worker memory."),
		syncs:    w("syncs_total", "Target.Sync calls (groups of reads and atomics a handler waits for)."),
		syncOps:  w("sync_ops_total", "Operations inside Target.Sync calls."),
		fences:   w("fences_total", "Target.WriteBackAll calls (every handler writes back its cache, as FLUSH does)."),
		flushes:  w("flushes_total", "Target.Flush calls."),

		readbacks:      w("readbacks_total", "Visibility reads after a flush."),
		panics:         w("handler_panics_total", "Handler calls that panicked."),
		flushResponses: w("flush_responses_total", "Flush responses sent."),
		acks:           w("acks_total", "Acks sent for requests sent with the ACK flag."),

		failures: w("failures_total", "Failed requests by wire status name.", "status"),
		inFlight: w("in_flight_requests", "Requests accepted and not completed, by request queue.", "rq"),
		clients:  w("clients", "Clients (targets) registered with the worker."),
		rqs:      w("request_queues", "Request queues of the worker."),
		regions:  w("regions", "Memory regions registered with the worker."),

		workers:    svc("workers", "Worker processes the service runs."),
		maxWorkers: svc("max_workers", "Most worker processes the service may run at once."),
		plugins:    svc("plugins", "Plugins the service offers (built-in and found on the plugin path)."),
	}
}

// Describe sends every descriptor the collector may produce.
func (c *metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.up, c.rss, c.anon, c.shmem, c.info, c.requests, c.reqBytes, c.dropped, c.batches, c.batchSize,
		c.puts, c.putBytes, c.places, c.fetches, c.syncs, c.syncOps, c.fences, c.flushes,
		c.readbacks, c.panics, c.flushResponses, c.acks, c.failures, c.inFlight,
		c.clients, c.rqs, c.regions, c.workers, c.maxWorkers, c.plugins,
	} {
		ch <- d
	}
}

// Collect asks every live worker for its counters and sends them.
func (c *metricsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	stats := c.s.WorkerStats(ctx)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(c.workers, float64(len(stats)))
	gauge(c.maxWorkers, float64(c.s.cfg.MaxWorkers))
	gauge(c.plugins, float64(len(c.s.plugins)))
	for _, ws := range stats {
		id := strconv.FormatUint(ws.ID, 10)
		gauge(c.info, 1, id, strconv.Itoa(ws.PID), strings.Join(ws.Plugins, ","))
		if m := ws.Memory; m.RSS > 0 {
			gauge(c.rss, float64(m.RSS), id)
			gauge(c.anon, float64(m.Anon), id)
			gauge(c.shmem, float64(m.Shmem), id)
		}
		if ws.Err != nil {
			gauge(c.up, 0, id)
			continue
		}
		gauge(c.up, 1, id)
		st := &ws.Stats
		ops := make([]uint32, 0, len(st.Requests))
		for op := range st.Requests {
			ops = append(ops, op)
		}
		sort.Slice(ops, func(i, j int) bool { return ops[i] < ops[j] })
		for _, op := range ops {
			counter(c.requests, st.Requests[op], id, opLabel(op))
		}
		counter(c.reqBytes, st.Bytes, id)
		counter(c.dropped, st.Dropped, id)
		counter(c.batches, st.Batches, id)
		count, buckets := batchBuckets(st.BatchSizes)
		ch <- prometheus.MustNewConstHistogram(c.batchSize, count, float64(st.BatchedRequests), buckets, id)
		counter(c.puts, st.TargetPuts, id, "ucx")
		counter(c.puts, st.MemcpyPuts, id, "memcpy")
		counter(c.putBytes, st.PutBytes, id)
		counter(c.places, st.Places, id)
		counter(c.fetches, st.Fetches, id)
		counter(c.syncs, st.Syncs, id)
		counter(c.syncOps, st.SyncOps, id)
		counter(c.fences, st.Fences, id)
		counter(c.flushes, st.Flushes, id)
		counter(c.readbacks, st.Readbacks, id)
		counter(c.panics, st.HandlerPanics, id)
		counter(c.flushResponses, st.FlushResponses, id)
		counter(c.acks, st.Acks, id)
		failed := map[string]uint64{}
		for s, n := range st.Failures {
			failed[s.Name()] += n
		}
		for name, n := range failed {
			counter(c.failures, n, id, name)
		}
		for rq, n := range st.InFlight {
			gauge(c.inFlight, float64(n), id, strconv.FormatUint(rq, 10))
		}
		gauge(c.clients, float64(st.Clients), id)
		gauge(c.rqs, float64(st.RQs), id)
		gauge(c.regions, float64(st.Regions), id)
	}
}

// opLabel names an op for the "op" label.
func opLabel(op uint32) string {
	if op == dpu.OtherOp {
		return "other"
	}
	return rdmo.OpName(op)
}

// batchBuckets turns dpu.Stats.BatchSizes (bucket i counts batches of
// 2^i .. 2^(i+1)-1 requests, the last one everything larger) into a
// Prometheus histogram: cumulative counts by upper bound (2^(i+1)-1; the
// last bucket is +Inf, i.e. the count).
func batchBuckets(sizes [dpu.BatchSizeBuckets]uint64) (uint64, map[float64]uint64) {
	buckets := make(map[float64]uint64, len(sizes)-1)
	var cum uint64
	for i, n := range sizes {
		cum += n
		if i < len(sizes)-1 {
			buckets[float64(uint64(1)<<(i+1)-1)] = cum
		}
	}
	return cum, buckets
}

// MetricsHandler returns an http.Handler that serves the service's
// metrics in the Prometheus text format: per-worker series (read from every
// live worker at scrape time), service gauges, and the service process's own
// Go and process metrics.
func MetricsHandler(s *Service, log *zap.Logger) http.Handler {
	if log == nil {
		log = zap.NewNop()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newMetricsCollector(s, MetricsScrapeTimeout))
	reg.MustRegister(collectors.NewGoCollector())
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      zap.NewStdLog(log),
		ErrorHandling: promhttp.ContinueOnError,
		Timeout:       2 * MetricsScrapeTimeout,
	})
}

// ServeMetrics serves the service's metrics over HTTP on addr (host:port;
// port 0 picks a free one) at /metrics until ctx ends. It binds before it
// returns, so an unusable address is an error at once, and returns the
// address it listens on.
//
// `rdmo dpu --metrics-addr` calls it after urom.NewService and before
// Service.Serve.
func ServeMetrics(ctx context.Context, s *Service, addr string, log *zap.Logger) (string, error) {
	if log == nil {
		log = zap.NewNop()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("urom: metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", MetricsHandler(s, log))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "rdmo UROM service: metrics at /metrics")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	bound := ln.Addr().String()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server stopped", zap.Error(err))
		}
	}()
	log.Info("serving metrics", zap.String("addr", bound), zap.String("path", "/metrics"))
	return bound, nil
}

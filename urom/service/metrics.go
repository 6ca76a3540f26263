package service

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/internal/uromwire"
)

// MetricsScrapeTimeout bounds how long one scrape waits for a worker's
// counters; a worker that does not answer in time is reported with
// rdmo_worker_up 0 and no other series.
const MetricsScrapeTimeout = 5 * time.Second

// WorkerMetrics is a component's per-worker series. The service knows the
// worker processes (their ids, pids, memory) but not what a component
// counts: at scrape time it sends Command to every live worker and hands
// each answer to Collect. The RDMO component's is rdmoworker.Metrics; it
// is set in Config.Metrics.
type WorkerMetrics interface {
	// Command is the worker command (with no body) whose answer holds the
	// worker's counters.
	Command() string
	// Describe sends every descriptor Collect may use.
	Describe(ch chan<- *prometheus.Desc)
	// Collect decodes one worker's answer with decode and sends its
	// series, each with the label "worker" = worker first. It sends
	// nothing when decode fails (the worker is then reported down).
	Collect(ch chan<- prometheus.Metric, worker string, decode func(v any) error) error
}

// WorkerAnswer is one live worker's answer to a command sent to every
// worker (Service.AskWorkers).
type WorkerAnswer struct {
	urom.WorkerInfo
	// Answer is the worker's answer, undecoded (see Decode).
	Answer msgpack.RawMessage
	// Memory is the worker process's resident memory, read from /proc on
	// the service's host (zeros when it cannot be read).
	Memory ProcessMemory
	// Err is why the worker did not answer (it did not answer in time,
	// died, or does not know the command).
	Err error
}

// Decode decodes the answer into v.
func (a *WorkerAnswer) Decode(v any) error { return uromwire.DecodeBody(a.Answer, v) }

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
	body, err := uromwire.EncodeBody(req)
	if err != nil {
		return err
	}
	wrapped, err := uromwire.EncodeBody(uromwire.CommandRequest{Worker: w.id, Kind: kind, Body: body})
	if err != nil {
		return err
	}
	raw, err := w.call(ctx, wrapped, timeout)
	if err != nil {
		return err
	}
	return uromwire.DecodeBody(raw, resp)
}

// AskWorkers sends the command kind (with body req) to every live worker
// process, whichever host spawned it, over its control socket, all at
// once, each bounded by ctx and the service's CallTimeout. The answers are
// ordered by worker id. With kind "" nothing is sent: the answers hold only
// the workers' facts and memory.
func (s *Service) AskWorkers(ctx context.Context, kind string, req any) []WorkerAnswer {
	ws := s.liveWorkers()
	out := make([]WorkerAnswer, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		out[i].WorkerInfo = w.info()
		wg.Add(1)
		go func(i int, w *workerProc) {
			defer wg.Done()
			if kind != "" {
				out[i].Err = w.command(ctx, kind, req, &out[i].Answer, s.cfg.CallTimeout)
			}
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
// worker's counters at scrape time: the service's own series (workers,
// their processes) and the component's (Config.Metrics).
type metricsCollector struct {
	s       *Service
	timeout time.Duration
	comp    WorkerMetrics // nil: no component series

	up, rss, anon, shmem, info   *prometheus.Desc
	workers, maxWorkers, plugins *prometheus.Desc

	hosts, ready, draining, build               *prometheus.Desc
	spawns, spawnFailures, exits                *prometheus.Desc
	pluginFailures, pluginRestarts, hostRefused *prometheus.Desc
}

func newMetricsCollector(s *Service, timeout time.Duration) *metricsCollector {
	w := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricNamespace, "worker", name), help,
			append([]string{"worker"}, labels...), nil)
	}
	svc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricNamespace, "urom", name), help, labels, nil)
	}
	return &metricsCollector{
		s:       s,
		timeout: timeout,
		comp:    s.cfg.Metrics,

		up:    w("up", "1 when the worker answered the scrape's stats command, 0 when it did not (its other series are then missing)."),
		rss:   w("resident_memory_bytes", "Resident set size of the worker process (VmRSS)."),
		anon:  w("resident_anon_memory_bytes", "Private resident memory of the worker process (RssAnon): its own heap and stacks."),
		shmem: w("resident_shmem_bytes", "Shared memory resident in the worker process (RssShmem): mostly target memory it writes through shared-memory mappings."),
		info:  w("info", "Worker process facts as labels; the value is always 1.", "pid", "plugins"),

		workers:    svc("workers", "Worker processes the service runs."),
		maxWorkers: svc("max_workers", "Most worker processes the service may run at once."),
		plugins:    svc("plugins", "Plugins the service offers (built-in and found on the plugin path)."),

		hosts:    svc("hosts", "Hosts connected to the service (past their handshake)."),
		ready:    svc("ready", "1 when the service can take hosts and spawn workers (what /readyz answers 200 for), else 0."),
		draining: svc("draining", "1 while the service shuts down: it accepts no host or worker and waits for its workers' hosts."),
		build: prometheus.NewDesc("rdmo_build_info", "The running rdmo binary: version, commit, Go and UCX versions as labels; the value is always 1.",
			[]string{"version", "commit", "go_version", "ucx_version"}, nil),

		spawns:         svc("worker_spawns_total", "Worker processes started (spawned and ready)."),
		spawnFailures:  svc("worker_spawn_failures_total", "Spawn requests that started no worker, by reason: limit, bad_request, shutting_down, start (the process did not start or refused its spec).", "reason"),
		exits:          svc("worker_exits_total", "Worker processes that ended, by reason: stopped (by their host or the service), exited (on their own, status 0), failed (another status), killed (a signal the service did not send).", "reason"),
		pluginFailures: svc("plugin_failures_total", "Plugin processes of workers that died or stopped answering, by plugin.", "plugin"),
		pluginRestarts: svc("plugin_restarts_total", "Plugin processes restarted by their worker, by plugin.", "plugin"),
		hostRefused:    svc("hosts_refused_total", "Connections refused or dropped before they became a host session, by reason: auth, version, bad_request, dropped.", "reason"),
	}
}

// Describe sends every descriptor the collector may produce.
func (c *metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.up, c.rss, c.anon, c.shmem, c.info, c.workers, c.maxWorkers, c.plugins,
		c.hosts, c.ready, c.draining, c.build, c.spawns, c.spawnFailures, c.exits,
		c.pluginFailures, c.pluginRestarts, c.hostRefused,
	} {
		ch <- d
	}
	if c.comp != nil {
		c.comp.Describe(ch)
	}
}

// Collect asks every live worker for its counters and sends them.
func (c *metricsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	kind := ""
	if c.comp != nil {
		kind = c.comp.Command()
	}
	answers := c.s.AskWorkers(ctx, kind, nil)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.workers, float64(len(answers)))
	gauge(c.maxWorkers, float64(c.s.cfg.MaxWorkers))
	gauge(c.plugins, float64(len(c.s.plugins)))
	c.collectService(ch)
	for i := range answers {
		a := &answers[i]
		id := strconv.FormatUint(a.ID, 10)
		gauge(c.info, 1, id, strconv.Itoa(a.PID), strings.Join(a.Plugins, ","))
		if m := a.Memory; m.RSS > 0 {
			gauge(c.rss, float64(m.RSS), id)
			gauge(c.anon, float64(m.Anon), id)
			gauge(c.shmem, float64(m.Shmem), id)
		}
		err := a.Err
		if err == nil && c.comp != nil {
			err = c.comp.Collect(ch, id, a.Decode)
		}
		if err != nil {
			gauge(c.up, 0, id)
			continue
		}
		gauge(c.up, 1, id)
	}
}

// collectService sends the service's own series: its state and the
// counters that outlive the workers they count.
func (c *metricsCollector) collectService(ch chan<- prometheus.Metric) {
	s := c.s
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	s.mu.Lock()
	hosts := 0
	for ss := range s.sessions {
		ss.mu.Lock()
		if ss.welcomed {
			hosts++
		}
		ss.mu.Unlock()
	}
	draining := s.draining
	s.mu.Unlock()
	gauge(c.hosts, float64(hosts))
	gauge(c.ready, b(s.Ready() == nil))
	gauge(c.draining, b(draining))
	bi := s.cfg.Build
	gauge(c.build, 1, bi.Version, bi.Commit, runtime.Version(), bi.UCX)

	counters := func(d *prometheus.Desc, m map[string]uint64) {
		for k, v := range s.stats.snapshot(m) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), k)
		}
	}
	s.stats.mu.Lock()
	spawns := s.stats.spawns
	s.stats.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.spawns, prometheus.CounterValue, float64(spawns))
	counters(c.spawnFailures, s.stats.spawnFailures)
	counters(c.exits, s.stats.exits)
	counters(c.pluginFailures, s.stats.pluginFailures)
	counters(c.pluginRestarts, s.stats.pluginRestarts)
	counters(c.hostRefused, s.stats.refused)
}

// MetricsCollector is the service's collector (what MetricsHandler serves
// apart from the Go and process metrics), for a registry of the caller's.
func MetricsCollector(s *Service) prometheus.Collector {
	return newMetricsCollector(s, MetricsScrapeTimeout)
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
// port 0 picks a free one) at /metrics, with /healthz (the process is
// alive: always 200) and /readyz (200 when Service.Ready, else 503 with
// the reason), until ctx ends. It binds before it
// returns, so an unusable address is an error at once, and returns the
// address it listens on.
//
// `rdmo dpu --metrics-addr` calls it after New and before
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
	// Liveness: the process answers HTTP.
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	// Readiness: hosts can be served (Service.Ready).
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "rdmo UROM service: metrics at /metrics, liveness at /healthz, readiness at /readyz")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	bound := ln.Addr().String()
	go func() {
		<-ctx.Done()
		// A service that serves drains first: its health and metrics
		// stay up until it stopped.
		s.mu.Lock()
		serving := s.serving
		s.mu.Unlock()
		if serving {
			<-s.stopped
		}
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server stopped", zap.Error(err))
		}
	}()
	log.Info("serving metrics", zap.String("url", "http://"+bound+"/metrics"))
	return bound, nil
}

package rdmoworker

import (
	"context"
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/service"
)

// Metrics returns the RDMO component's per-worker series for
// service.Config.Metrics: a UROM service serving them asks every worker for
// its command.Stats (command.KindStats) at scrape time.
func Metrics() service.WorkerMetrics { return newMetrics() }

// metrics turns one worker's command.Stats into series named
// rdmo_worker_*, each with the label "worker" first.
type metrics struct {
	requests, reqBytes, dropped               *prometheus.Desc
	batches, batchSize                        *prometheus.Desc
	puts, putBytes, places, fetches           *prometheus.Desc
	syncs, syncOps, fences, flushes           *prometheus.Desc
	readbacks, panics, flushResponses, acks   *prometheus.Desc
	ackGroups                                 *prometheus.Desc
	inlineBatches, cpuAtomics, shmChecks      *prometheus.Desc
	shmSlotsFilled                            *prometheus.Desc
	failures, inFlight, clients, rqs, regions *prometheus.Desc
	latency                                   *prometheus.Desc
}

func newMetrics() *metrics {
	w := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("rdmo", "worker", name), help,
			append([]string{"worker"}, labels...), nil)
	}
	return &metrics{
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
		ackGroups:      w("ack_groups_total", "Messages that carried several acks (ACK groups; their acks count in acks_total)."),

		inlineBatches:  w("inline_batches_total", "Handler calls (of batches_total) that ran on the worker's loop instead of the client's executor (handlers declaring Inline)."),
		cpuAtomics:     w("cpu_atomics_total", "Atomics inside Target.Sync calls done with the CPU's atomic instructions on a mapping of target memory instead of through UCX."),
		shmChecks:      w("shm_checks_total", "Checks, each after a peer failed, that found every shared-memory receive queue of the worker delivering."),
		shmSlotsFilled: w("shm_slots_filled_total", "Shared-memory receive FIFO slots the worker filled for local peers that died while writing them; each unblocked the FIFO for every other local peer."),

		failures: w("failures_total", "Failed requests by wire status name.", "status"),
		inFlight: w("in_flight_requests", "Requests accepted and not completed, by request queue.", "rq"),
		clients:  w("clients", "Clients (targets) registered with the worker."),
		rqs:      w("request_queues", "Request queues of the worker."),
		regions:  w("regions", "Memory regions registered with the worker."),
		latency: w("request_duration_seconds", "Time from a request's arrival at the worker to its completion, by op "+
			"(requests refused before they ran are not timed; buckets are powers of two microseconds).", "op"),
	}
}

// Summary implements service.WorkerSummarizer: the clients and request
// queues `rdmo workers` shows.
func (*metrics) Summary(decode func(v any) error) (int, int, error) {
	var st command.Stats
	if err := decode(&st); err != nil {
		return 0, 0, err
	}
	return st.Clients, st.RQs, nil
}

// Command implements service.WorkerMetrics.
func (*metrics) Command() string { return command.KindStats }

// Describe implements service.WorkerMetrics.
func (c *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.requests, c.reqBytes, c.dropped, c.batches, c.batchSize,
		c.puts, c.putBytes, c.places, c.fetches, c.syncs, c.syncOps, c.fences, c.flushes,
		c.readbacks, c.panics, c.flushResponses, c.acks, c.ackGroups, c.inlineBatches, c.cpuAtomics, c.shmChecks, c.shmSlotsFilled, c.failures, c.inFlight,
		c.clients, c.rqs, c.regions, c.latency,
	} {
		ch <- d
	}
}

// Collect implements service.WorkerMetrics.
func (c *metrics) Collect(ch chan<- prometheus.Metric, id string, decode func(v any) error) error {
	var st command.Stats
	if err := decode(&st); err != nil {
		return err
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	ops := make([]uint32, 0, len(st.Requests))
	for op := range st.Requests {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i] < ops[j] })
	for _, op := range ops {
		counter(c.requests, st.Requests[op], id, opLabel(op, st.OpNames))
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
	counter(c.ackGroups, st.AckGroups, id)
	counter(c.inlineBatches, st.InlineBatches, id)
	counter(c.cpuAtomics, st.CPUAtomics, id)
	counter(c.shmChecks, st.ShmChecks, id)
	counter(c.shmSlotsFilled, st.ShmSlotsFilled, id)
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
	lops := make([]uint32, 0, len(st.Latency))
	for op := range st.Latency {
		lops = append(lops, op)
	}
	sort.Slice(lops, func(i, j int) bool { return lops[i] < lops[j] })
	for _, op := range lops {
		count, sum, buckets := latencyBuckets(st.Latency[op])
		ch <- prometheus.MustNewConstHistogram(c.latency, count, sum, buckets, id, opLabel(op, st.OpNames))
	}
	gauge(c.clients, float64(st.Clients), id)
	gauge(c.rqs, float64(st.RQs), id)
	gauge(c.regions, float64(st.Regions), id)
	return nil
}

// opLabel names an op for the "op" label: a plugin's op by its handler's
// name (dpu.OpLabel).
func opLabel(op uint32, names map[uint32]string) string {
	if op == command.OtherOp {
		return "other"
	}
	if n, ok := names[op]; ok {
		return n
	}
	return rdmo.OpName(op)
}

// batchBuckets turns command.Stats.BatchSizes (bucket i counts batches of
// 2^i .. 2^(i+1)-1 requests, the last one everything larger) into a
// Prometheus histogram: cumulative counts by upper bound (2^(i+1)-1; the
// last bucket is +Inf, i.e. the count).
func batchBuckets(sizes [command.BatchSizeBuckets]uint64) (uint64, map[float64]uint64) {
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

// latencyBuckets turns a command.OpLatency (bucket i counts requests under
// 2^i µs, the last one everything slower) into a Prometheus histogram in
// seconds.
func latencyBuckets(l command.OpLatency) (uint64, float64, map[float64]uint64) {
	buckets := make(map[float64]uint64, len(l.Buckets)-1)
	var cum uint64
	for i, n := range l.Buckets {
		cum += n
		if i < len(l.Buckets)-1 {
			buckets[float64(uint64(1)<<i)*1e-6] = cum
		}
	}
	return cum, float64(l.SumNs) * 1e-9, buckets
}

// WorkerStats is one live worker's counters, as WorkerStats collects them.
type WorkerStats struct {
	urom.WorkerInfo
	Stats command.Stats
	// Memory is the worker process's resident memory, read from /proc on
	// the service's host (zeros when it cannot be read).
	Memory service.ProcessMemory
	// Err is why the counters could not be read (the worker did not
	// answer in time, died, or does not run the RDMO component).
	Err error
}

// CollectStats asks every live worker process of s, whichever host spawned
// it, for its counters, all at once (service.Service.AskWorkers), each bounded
// by ctx and the service's CallTimeout. The result is ordered by worker id.
func CollectStats(ctx context.Context, s *service.Service) []WorkerStats {
	as := s.AskWorkers(ctx, command.KindStats, nil)
	out := make([]WorkerStats, len(as))
	for i := range as {
		out[i] = WorkerStats{WorkerInfo: as[i].WorkerInfo, Memory: as[i].Memory, Err: as[i].Err}
		if out[i].Err == nil {
			out[i].Err = as[i].Decode(&out[i].Stats)
		}
	}
	return out
}

package service_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/rdmoworker"
	"github.com/openrdmo/rdmo/urom/service"
)

// The metrics test needs real RDMO workers (the other tests of this package
// use a fake component), so the test binary has one more role, chosen
// before TestMain runs: UROM_METRICS_ROLE=rdmo-worker serves the RDMO
// component on the control socket.
func init() {
	if os.Getenv("UROM_METRICS_ROLE") != "rdmo-worker" {
		return
	}
	err := service.ServeWorker(context.Background(), os.NewFile(service.ControlFD, "control"), rdmoworker.Factory, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rdmo worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestMetricsEndpoint runs a service with two real RDMO workers, sends
// appends (and one failing request) through one of them, and scrapes
// /metrics: every per-worker series carries the worker label, and the
// values match the traffic.
func TestMetricsEndpoint(t *testing.T) {
	tr := ucptest.Transports[0] // shared memory
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	svc, err := service.New(ctx, service.Config{
		Listen:           "127.0.0.1:0",
		Builtins:         rdmoworker.Builtins(),
		Metrics:          rdmoworker.Metrics(),
		MaxWorkers:       4,
		WorkerCommand:    []string{os.Args[0], "-test.run=^$"},
		WorkerEnv:        append([]string{"UROM_METRICS_ROLE=rdmo-worker"}, tr.Env()...),
		ComponentVersion: command.ComponentVersion,
		CallTimeout:      10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := svc.Listen()
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { svc.Serve(sctx); close(served) }()
	defer func() { stop(); <-served }()

	maddr, err := service.ServeMetrics(sctx, svc, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := service.ServeMetrics(sctx, svc, maddr, nil); err == nil {
		t.Fatal("a second ServeMetrics on the same address did not fail")
	}

	c, err := urom.Dial(ctx, addr, urom.ClientOptions{ComponentVersion: command.ComponentVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w1, err := c.Spawn(ctx, urom.SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := c.Spawn(ctx, urom.SpawnOptions{Config: map[string]string{command.ConfigAppendStrategy: "shared"}})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop(context.Background())
	defer w1.Stop(context.Background())

	// A target registered with worker 1, and an initiator sending to it.
	uctx := ucptest.NewContext(t, tr)
	tw, err := uctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Close()
	taddr, _ := tw.Address()
	mem, err := uctx.Allocate(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	binary.LittleEndian.PutUint64(mem.Bytes(), mem.Address()+8)
	r := command.Remote{W: w1}
	n, err := r.Do(ctx, dpu.ClientInit{ID: 7, Addr: taddr})
	if err != nil {
		t.Fatal(err)
	}
	packed, _ := mem.PackRkey()
	reg, err := r.Do(ctx, dpu.MRReg{Client: 7, VA: mem.Address(), Len: uint64(mem.Len()), PackedRkey: packed})
	if err != nil {
		t.Fatal(err)
	}
	in, err := initiator.New(initiator.Options{WorkerAddress: n.Addr, ClientID: 7, UCX: tr.Config()})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := r.Do(ctx, dpu.RQCreate{Client: 7, Addr: in.Address()}); err != nil {
		t.Fatal(err)
	}
	const appends = 100
	rec := make([]byte, 64)
	for i := 0; i < appends; i++ {
		if err := in.Append(mem.Address(), reg.Region, reg.Region, rec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint64(mem.Bytes()); got != mem.Address()+8+appends*64 {
		t.Fatalf("tail %#x after %d appends, want %#x", got, appends, mem.Address()+8+appends*64)
	}
	// One append to a region that does not exist: a failure by status.
	if err := in.Append(mem.Address(), reg.Region+1000, reg.Region+1000, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Flush(ctx); !errors.Is(err, rdmo.ErrUnknownRegion) {
		t.Fatalf("flush after a bad append: %v, want unknown region", err)
	}

	fams := scrape(t, "http://"+maddr+"/metrics")
	id1 := fmt.Sprint(w1.ID)
	id2 := fmt.Sprint(w2.ID)
	for _, name := range []string{
		"rdmo_worker_up", "rdmo_worker_info", "rdmo_worker_resident_memory_bytes",
		"rdmo_worker_resident_anon_memory_bytes", "rdmo_worker_resident_shmem_bytes",
		"rdmo_worker_requests_total", "rdmo_worker_request_bytes_total", "rdmo_worker_dropped_total",
		"rdmo_worker_batches_total", "rdmo_worker_batch_size",
		"rdmo_worker_target_puts_total", "rdmo_worker_target_put_bytes_total",
		"rdmo_worker_places_total", "rdmo_worker_fetches_total", "rdmo_worker_syncs_total",
		"rdmo_worker_sync_ops_total", "rdmo_worker_fences_total", "rdmo_worker_flushes_total",
		"rdmo_worker_flush_responses_total", "rdmo_worker_acks_total", "rdmo_worker_ack_groups_total", "rdmo_worker_failures_total",
		"rdmo_worker_inline_batches_total", "rdmo_worker_cpu_atomics_total", "rdmo_worker_shm_checks_total",
		"rdmo_worker_in_flight_requests", "rdmo_worker_clients", "rdmo_worker_request_queues",
		"rdmo_worker_regions",
	} {
		f := fams[name]
		if f == nil {
			t.Errorf("metric %s missing", name)
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, "worker") == "" {
				t.Errorf("%s has a series without a worker label: %v", name, m)
			}
		}
		if name != "rdmo_worker_requests_total" && name != "rdmo_worker_failures_total" &&
			name != "rdmo_worker_in_flight_requests" && series(f, map[string]string{"worker": id1}) == nil {
			t.Errorf("%s has no series for worker %s", name, id1)
		}
	}
	for _, name := range []string{"rdmo_urom_workers", "rdmo_urom_plugins", "rdmo_urom_max_workers", "go_goroutines"} {
		if fams[name] == nil {
			t.Errorf("metric %s missing", name)
		}
	}
	check := func(name string, labels map[string]string, want float64) {
		t.Helper()
		m := series(fams[name], labels)
		if m == nil {
			t.Errorf("%s%v: no such series", name, labels)
			return
		}
		if got := value(m); got != want {
			t.Errorf("%s%v = %v, want %v", name, labels, got, want)
		}
	}
	check("rdmo_urom_workers", nil, 2)
	check("rdmo_urom_plugins", nil, float64(len(rdmoworker.Builtins())))
	check("rdmo_worker_up", map[string]string{"worker": id1}, 1)
	check("rdmo_worker_up", map[string]string{"worker": id2}, 1)
	check("rdmo_worker_requests_total", map[string]string{"worker": id1, "op": "append"}, appends+1)
	check("rdmo_worker_requests_total", map[string]string{"worker": id1, "op": "flush"}, 2)
	check("rdmo_worker_request_bytes_total", map[string]string{"worker": id1}, (appends+1)*64)
	check("rdmo_worker_failures_total", map[string]string{"worker": id1, "status": rdmo.StatusUnknownRegion.Name()}, 1)
	check("rdmo_worker_clients", map[string]string{"worker": id1}, 1)
	check("rdmo_worker_clients", map[string]string{"worker": id2}, 0)
	check("rdmo_worker_regions", map[string]string{"worker": id1}, 1)
	check("rdmo_worker_request_queues", map[string]string{"worker": id1}, 1)
	check("rdmo_worker_flush_responses_total", map[string]string{"worker": id1}, 2)
	if m := series(fams["rdmo_worker_in_flight_requests"], map[string]string{"worker": id1}); m == nil || label(m, "rq") == "" {
		t.Errorf("no in-flight gauge with an rq label for worker %s", id1)
	}
	puts := 0.0
	for _, path := range []string{"ucx", "memcpy"} {
		if m := series(fams["rdmo_worker_target_puts_total"], map[string]string{"worker": id1, "path": path}); m != nil {
			puts += value(m)
		} else {
			t.Errorf("no target_puts_total series with path %s", path)
		}
	}
	if puts < 1 || puts > appends {
		t.Errorf("%v target puts for %d appends", puts, appends)
	}
	if m := series(fams["rdmo_worker_resident_memory_bytes"], map[string]string{"worker": id1}); m == nil || value(m) < 1<<20 {
		t.Errorf("worker RSS series missing or implausible: %v", m)
	}
	h := series(fams["rdmo_worker_batch_size"], map[string]string{"worker": id1})
	if h == nil || h.GetHistogram() == nil {
		t.Fatal("no batch size histogram for worker 1")
	}
	if hist := h.GetHistogram(); hist.GetSampleCount() == 0 || hist.GetSampleSum() != appends+3 || len(hist.GetBucket()) != dpu.BatchSizeBuckets {
		t.Errorf("batch size histogram: count %d sum %v buckets %d; want sum %d (every request) and %d buckets (the last +Inf)",
			hist.GetSampleCount(), hist.GetSampleSum(), len(hist.GetBucket()), appends+3, dpu.BatchSizeBuckets)
	}

	// A worker that died is no longer scraped.
	if err := w2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	fams = scrape(t, "http://"+maddr+"/metrics")
	if series(fams["rdmo_worker_up"], map[string]string{"worker": id2}) != nil {
		t.Errorf("stopped worker %s still scraped", id2)
	}
	check("rdmo_urom_workers", nil, 1)

	// The Go API behind the endpoint.
	ws := rdmoworker.CollectStats(ctx, svc)
	if len(ws) != 1 || ws[0].ID != w1.ID || ws[0].Err != nil || ws[0].Stats.Requests[rdmo.OpAppend] != appends+1 || ws[0].Memory.RSS == 0 || ws[0].Memory.Anon == 0 {
		t.Errorf("WorkerStats = %+v", ws)
	}
	in.Close()
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing the scrape: %v\n%s", err, body)
	}
	return fams
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// series returns the first series of f whose labels include labels.
func series(f *dto.MetricFamily, labels map[string]string) *dto.Metric {
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		for k, v := range labels {
			if label(m, k) != v {
				continue next
			}
		}
		return m
	}
	return nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

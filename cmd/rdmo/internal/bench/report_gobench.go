package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
)

// WriteGoBench writes the report as Go benchmark results
// (golang.org/x/perf/benchfmt), for benchstat: the run's settings as
// configuration lines, then a line per measured row,
//
//	BenchmarkRDMO/mode=rdmo-append:owned/size=64  <ops>  <ns> ns/op  <MB/s> MB/s  <ns> cpu-ns/op  <n> switches/kop  <ns> p50-ns
//
// ns/op is the inverse of the row's rate (all initiators), MB/s its
// payload (rows that carry none have no MB/s), cpu-ns/op its
// CPU time per operation, switches/kop the context switches of the
// initiators and the worker per 1000 operations, p50-ns the p50 of its
// sampled latencies. Rows with an RDMO worker add init-cpu-ns/op and
// worker-cpu-ns/op (the two shares of cpu-ns/op, so that a comparison
// says which side a change moved) and reqs/msg, the requests per active
// message the worker received (1 / AMs per operation): a change that
// makes BATCH containers larger or smaller moves every per-message cost
// with it. Rows with an RDMO initiator add credit-waits/kop, the calls per
// 1000 operations that waited for flow-control credits: a stream whose
// worker falls behind shows it here. A
// row's "/" is written ":" (benchfmt splits names on "/"); failed rows are
// left out.
func (r *Report) WriteGoBench(w io.Writer) {
	fmt.Fprintf(w, "goos: %s\ngoarch: %s\npkg: github.com/openrdmo/rdmo/cmd/rdmo\n", runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "topology: %s\ninitiators: %d\naggregate: %v\ncpus: %d\n", r.Topology, r.Initiators, r.Aggregate, r.CPUs)
	for _, row := range r.Rows {
		if row.Error != "" || row.Rate <= 0 {
			continue
		}
		size := fmt.Sprint(row.Size)
		if row.Size == 0 {
			size = "mix"
		}
		fmt.Fprintf(w, "BenchmarkRDMO/mode=%s/size=%s %d %.1f ns/op",
			strings.ReplaceAll(row.Mode, "/", ":"), size, row.Ops, 1e9/row.Rate)
		if row.MBps > 0 { // rows that move payload
			fmt.Fprintf(w, " %.6g MB/s", row.MBps)
		}
		if row.CPUNsPerOp > 0 {
			fmt.Fprintf(w, " %.1f cpu-ns/op %.4g switches/kop", row.CPUNsPerOp, row.SwitchesInitPerKop+row.SwitchesWorkerPerKop)
			if row.CPUWorkerNsPerOp > 0 {
				fmt.Fprintf(w, " %.1f init-cpu-ns/op %.1f worker-cpu-ns/op", row.CPUInitNsPerOp, row.CPUWorkerNsPerOp)
			}
		}
		if row.Worker != nil && row.Worker.AMsPerOp > 0 {
			fmt.Fprintf(w, " %.4g reqs/msg", 1/row.Worker.AMsPerOp)
		}
		if row.Flow != nil {
			fmt.Fprintf(w, " %.4g credit-waits/kop", row.Flow.CreditWaitsPerKop)
		}
		if row.P50 > 0 {
			fmt.Fprintf(w, " %d p50-ns", row.P50.Nanoseconds())
		}
		fmt.Fprintln(w)
	}
}

// convert is --results-from: a results file written again in
// --results-format.
func convert(o Options) (*Report, error) {
	b, err := os.ReadFile(o.ResultsFrom)
	if err != nil {
		return nil, fmt.Errorf("bench: --results-from: %w", err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("bench: --results-from %s: %w", o.ResultsFrom, err)
	}
	if o.Results == "" {
		o.Results = "-"
	}
	return &rep, writeResults(&rep, o)
}

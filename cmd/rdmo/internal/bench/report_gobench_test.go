package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The gobench form is what benchstat reads: a config line per setting and
// a line per measured row (name, iterations, value-unit pairs); failed
// rows are left out. --results-from writes a JSON report in that form.
func TestGoBench(t *testing.T) {
	r := &Report{Topology: TopologySHM, Initiators: 1, CPUs: 2, Rows: []Row{
		{Mode: ModeRDMOAppendOwned, Size: 64, Ops: 1000, Rate: 2e6, MBps: 128, CPUNsPerOp: 350.5, CPUInitNsPerOp: 200.25, CPUWorkerNsPerOp: 150.25,
			SwitchesInitPerKop: 1.25, SwitchesWorkerPerKop: 0.5, P50: 3 * time.Microsecond, Worker: &WorkerFigures{AMsPerOp: 0.0125, BatchMean: 97.5}, Flow: &FlowFigures{CreditWaits: 2, CreditWaitsPerKop: 2}},
		{Mode: ModeNativeOwned, Size: 64, Ops: 100, Rate: 4e6, MBps: 256, CPUNsPerOp: 120, CPUInitNsPerOp: 120},
		{Mode: ModeWorkload, Size: 0, Ops: 500, Rate: 1e5, MBps: 30.125},
		{Mode: "chase/4", Size: 64, Ops: 10, Rate: 1e6, P50: 2 * time.Microsecond},
		{Mode: ModeFlushIdle, Size: 64, Error: "lost"},
	}}
	var b bytes.Buffer
	r.WriteGoBench(&b)
	want := []string{
		"topology: shm",
		"BenchmarkRDMO/mode=rdmo-append:owned/size=64 1000 500.0 ns/op 128 MB/s 350.5 cpu-ns/op 1.75 switches/kop 200.2 init-cpu-ns/op 150.2 worker-cpu-ns/op 80 reqs/msg 2 credit-waits/kop 3000 p50-ns",
		"BenchmarkRDMO/mode=native-owned/size=64 100 250.0 ns/op 256 MB/s 120.0 cpu-ns/op 0 switches/kop",
		"BenchmarkRDMO/mode=workload/size=mix 500 10000.0 ns/op 30.125 MB/s",
		"BenchmarkRDMO/mode=chase:4/size=64 10 1000.0 ns/op 2000 p50-ns",
	}
	for _, w := range want {
		if !strings.Contains(b.String(), w+"\n") {
			t.Errorf("gobench output lacks %q:\n%s", w, b.String())
		}
	}
	if strings.Contains(b.String(), "flush") {
		t.Errorf("a failed row was written:\n%s", b.String())
	}

	dir := t.TempDir()
	in := filepath.Join(dir, "r.json")
	j, _ := json.Marshal(r)
	if err := os.WriteFile(in, j, 0o644); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.ResultsFrom, o.ResultsFormat, o.Results = in, FormatGoBench, filepath.Join(dir, "r.txt")
	if _, err := Run(t.Context(), o); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(o.Results)
	if err != nil || !bytes.Equal(got, b.Bytes()) {
		t.Errorf("--results-from wrote %v:\n%s\nwant:\n%s", err, got, b.String())
	}
}

// The table fits 100 columns unless --wide asks for every column, and a
// goal is judged only on rows measured long enough.
func TestTableWidthAndVerdicts(t *testing.T) {
	all, err := expandModes([]string{"all"}, []int{1, 4, 16})
	if err != nil {
		t.Fatal(err)
	}
	r := &Report{Topology: TopologyDPU, Initiators: 1, Interval: time.Second}
	for i, m := range all {
		row := Row{Mode: m, Size: 65536, Rate: 1234567.8, MBps: 80912.3, P50: 1234567 * time.Nanosecond, P99: 98765432 * time.Nanosecond,
			Spread: 0.123, Stable: i%2 == 0, Rounds: 1, CPUNsPerOp: 12345.6, CPUInitNsPerOp: 6000, CPUWorkerNsPerOp: 6000, CPUTargetNsPerOp: 345, CPUSysShare: 0.42,
			Worker: &WorkerFigures{Requests: 10, WritesPerOp: 0.0625, AMsPerOp: 0.5, BatchMean: 12.5}, WorkerRSSStart: 30 << 20, WorkerRSSEnd: 31 << 20, WorkerAnonStart: 9 << 20, WorkerAnonEnd: 9 << 20}
		if mustRow(m).Sizeless {
			row.Size = 0
		} else if m == ModeRDMOAppendOwned {
			row.Size = 64
		}
		r.Rows = append(r.Rows, row)
	}
	r.finish()
	var narrow, wide bytes.Buffer
	r.WriteTable(&narrow)
	r.Wide = true
	r.WriteTable(&wide)
	for _, l := range strings.Split(narrow.String(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "mode") || strings.Contains(l, "  ") && !strings.Contains(l, ": ") {
			if n := len([]rune(l)); n > 100 {
				t.Errorf("table line of %d columns:\n%s", n, l)
			}
		}
	}
	if strings.Contains(narrow.String(), "worker RSS") || !strings.Contains(wide.String(), "worker RSS") {
		t.Errorf("--wide does not add the other columns:\n%s\n%s", narrow.String(), wide.String())
	}
	for _, want := range []string{
		"64 B: CPU per rdmo-append/owned, initiator + worker = 12000 ns",
		"not judged: 1 measured round(s)",
		"goal flat ±10% over 60 s): not judged: the goal is over 60 s",
	} {
		if !strings.Contains(narrow.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, narrow.String())
		}
	}
	if strings.Contains(narrow.String(), "NOT met") || strings.Contains(narrow.String(), ": met") {
		t.Errorf("a verdict on one-round rows:\n%s", narrow.String())
	}
}

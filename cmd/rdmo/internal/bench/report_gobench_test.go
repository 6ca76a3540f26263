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
		{Mode: ModeRDMOAppendOwned, Size: 64, Ops: 1000, Rate: 2e6, MBps: 128, CPUNsPerOp: 350.5, P50: 3 * time.Microsecond},
		{Mode: ModeWorkload, Size: 0, Ops: 500, Rate: 1e5, MBps: 30},
		{Mode: ModeFlushIdle, Size: 64, Error: "lost"},
	}}
	var b bytes.Buffer
	r.WriteGoBench(&b)
	want := []string{
		"topology: shm",
		"BenchmarkRDMO/mode=rdmo-append:owned/size=64 1000 500.0 ns/op 128.00 MB/s 350.5 cpu-ns/op 3000 p50-ns",
		"BenchmarkRDMO/mode=workload/size=mix 500 10000.0 ns/op 30.00 MB/s",
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

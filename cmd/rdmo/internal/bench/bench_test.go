package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/cli"
	"github.com/openrdmo/rdmo/ucp"
)

// The test binary doubles as every benchmark process (RoleMain).
func TestMain(m *testing.M) {
	if code, ok := RoleMain(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func ucxAvailable(t *testing.T) {
	t.Helper()
	ctx, err := ucp.NewContext(ucp.ContextOptions{})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("UCX unavailable: %v", err)
		}
		t.Skipf("UCX unavailable: %v", err)
	}
	ctx.Close()
}

// runShort runs `rdmo bench --short` between real processes (this test
// binary in its roles) and checks that every row ran and verified its data.
// No timing is asserted.
func runShort(t *testing.T, o Options) *Report {
	t.Helper()
	ucxAvailable(t)
	dir := t.TempDir()
	var out bytes.Buffer
	o.Short = true
	o.Executable = os.Args[0]
	o.Stdout, o.Stderr = &out, os.Stderr
	o.Results = filepath.Join(dir, "bench.json")
	o.Plot = filepath.Join(dir, "bench.svg")
	// A hang guard, not a time limit: at load 15 (two e2e loops beside
	// CPU hogs) a short run on shm took 186 s.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	vo := o
	if err := vo.validate(); err != nil {
		t.Fatal(err)
	}
	modes := vo.Modes
	want := 0
	for _, m := range modes {
		if mustRow(m).Sizeless {
			want++
		} else {
			want += len(o.Sizes)
		}
	}
	if len(rep.Rows) != want {
		t.Errorf("%d rows, want %d\n%s", len(rep.Rows), want, out.String())
	}
	for _, row := range rep.Rows {
		if mustRow(row.Mode).NoData {
			// ucx_perftest checks no data; it ran and counted.
			if row.Error != "" || row.Verified || row.Rounds != 1 || row.Ops == 0 {
				t.Errorf("row %s %d B: verified %v, rounds %d, ops %d, error %q", row.Mode, row.Size, row.Verified, row.Rounds, row.Ops, row.Error)
			}
			continue
		}
		if row.Stable {
			t.Errorf("row %s: stable in a --short run (no timing claims)", row.Mode)
		}
		if row.Error != "" || !row.Verified || row.Rounds != 1 || row.Ops == 0 {
			t.Errorf("row %s %d B: verified %v, rounds %d, ops %d, error %q", row.Mode, row.Size, row.Verified, row.Rounds, row.Ops, row.Error)
		}
		if row.Strategy != "" && (row.Worker == nil || row.Worker.Failures != 0 || row.WorkerRSSStart == 0) {
			t.Errorf("row %s: worker figures %+v, RSS %d", row.Mode, row.Worker, row.WorkerRSSStart)
		}
		if strings.HasPrefix(row.Mode, "rdmo-append") && (row.Flow == nil || row.Flow.Batches == 0) {
			t.Errorf("row %s: the initiator's flow figures %+v: no batch taken from its send queue", row.Mode, row.Flow)
		}
		if row.LatSamples == 0 {
			t.Errorf("row %s: no latency samples", row.Mode)
		}
	}
	if rep.Failed() {
		t.Errorf("report has failures\n%s", out.String())
	}
	text := out.String()
	for _, m := range modes {
		if !strings.Contains(text, m) {
			t.Errorf("output does not mention %s\n%s", m, text)
		}
	}
	b, err := os.ReadFile(o.Results)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || len(back.Rows) != len(rep.Rows) {
		t.Errorf("JSON output: %v, %d rows", err, len(back.Rows))
	}
	// The contract for tools that read the bench (docs/BENCHMARKS.md).
	var raw struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, row := range raw.Rows {
		for _, k := range []string{"mode", "size", "rate", "mb_per_s", "p50_ns", "verified", "cpu_ns_per_op", "stable"} {
			if _, ok := row[k]; !ok {
				t.Errorf("JSON row %v lacks %q", row["mode"], k)
			}
		}
	}
	svg, err := os.ReadFile(o.Plot)
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("<polyline")) {
		t.Errorf("plot: %v\n%.200s", err, svg)
	}
	return rep
}

// TestShortDPU runs every row in the DPU picture: the initiators reach the
// worker and the target over TCP only.
func TestShortDPU(t *testing.T) {
	o := DefaultOptions()
	o.Topology = TopologyDPU
	rep := runShort(t, o)
	if !slices.Equal(rep.InitiatorTransports, []string{"tcp"}) {
		t.Errorf("initiator reaches the target over %v, want tcp", rep.InitiatorTransports)
	}
	if rep.Row(ModeRDMOAppendOwned, 64).XNativeBlocking == 0 || rep.Row(ModeFlushIdle, 64).LatXPingPong == 0 ||
		rep.Row(ModeFlushIdleDrive, 64).LatXPingPong == 0 {
		t.Error("ratios to the baselines missing")
	}
}

// TestShortSHM runs every row on shared memory with two initiators and two
// sizes, so queue checks see interleaved records of several writers (and
// the workload row gives each initiator its own regions and seed).
func TestShortSHM(t *testing.T) {
	o := DefaultOptions()
	o.Topology = TopologySHM
	o.Initiators = 2
	o.Sizes = []int{8, 200}
	o.IOVs = []int{3}
	o.Modes = []string{"baselines", "rdmo-append", "scatter", "flush", "workload"}
	rep := runShort(t, o)
	for _, tr := range rep.InitiatorTransports {
		if tr == "tcp" {
			t.Errorf("shm topology, but the initiator uses %v", rep.InitiatorTransports)
		}
	}
}

// TestShortLargeAppends runs the append rows at sizes that go lent and by
// rendezvous, steady and cold, on both topologies (the DPU one also without
// peer-failure detection, and over shared memory with the queues' pages
// populated at registration, there with the records lent from Go buffers
// instead of a lend pool the worker reads in place), so every byte of
// those rows is checked; the queue rows say which pages backed the queue.
func TestShortLargeAppends(t *testing.T) {
	for _, c := range []struct {
		topo             Topology
		detect, populate bool
	}{{TopologySHM, true, false}, {TopologySHM, true, true}, {TopologyDPU, true, false}, {TopologyDPU, false, false}} {
		t.Run(fmt.Sprintf("%s/detect=%v/populate=%v/lend-pool=%v", c.topo, c.detect, c.populate, !c.populate), func(t *testing.T) {
			o := DefaultOptions()
			o.Topology = c.topo
			o.Sizes = []int{64 << 10, 1 << 20}
			o.Modes = []string{"rdmo-append", ModeNativeOwned}
			o.NoPeerDetection = !c.detect
			o.Populate = c.populate
			o.LendPool = !c.populate
			rep := runShort(t, o)
			if rep.NoPeerDetection == c.detect || rep.Populate != c.populate || rep.NoLendPool != c.populate {
				t.Errorf("report says no peer detection %v, populate %v, no lend pool %v", rep.NoPeerDetection, rep.Populate, rep.NoLendPool)
			}
			for _, row := range rep.Rows {
				if row.Pages == "" || row.Pages == "unknown" {
					t.Errorf("row %s %d B: pages %q", row.Mode, row.Size, row.Pages)
				}
			}
		})
	}
}

func TestRecords(t *testing.T) {
	for _, size := range []int{8, 9, 15, 16, 17, 64, 1000, patternPeriod + 7, patternPeriod + 8, patternPeriod + 9, 3*patternPeriod + 13, 1 << 20} {
		b := make([]byte, size)
		fillRecord(b, 3, 70000, 12345)
		if !recordOK(b, 3, 70000, 12345) {
			t.Errorf("size %d: record does not check", size)
		}
		for _, bad := range [][3]int{{4, 70000, 12345}, {3, 70001, 12345}, {3, 70000, 12346}} {
			if recordOK(b, bad[0], bad[1], uint32(bad[2])) {
				t.Errorf("size %d: record checks as %v", size, bad)
			}
		}
		if size > 8 {
			b[size-1] ^= 1
			if recordOK(b, 3, 70000, 12345) {
				t.Errorf("size %d: corrupted last byte not detected", size)
			}
			b[size-1] ^= 1
		}
		if size >= 8+2*patternPeriod {
			// A later period swapped with the first one's bytes from
			// another record (a fragment placed from the wrong payload).
			o := make([]byte, size)
			fillRecord(o, 3, 70000, 12346)
			copy(b[8+patternPeriod:8+2*patternPeriod], o[8+patternPeriod:])
			if recordOK(b, 3, 70000, 12345) {
				t.Errorf("size %d: a period from another record not detected", size)
			}
		}
		if size >= 1<<16 {
			// Two 32 KiB fragments of the body landed swapped.
			fillRecord(b, 3, 70000, 12345)
			s := append([]byte(nil), b[8:8+32<<10]...)
			copy(b[8:], b[8+32<<10:8+64<<10])
			copy(b[8+32<<10:], s)
			if recordOK(b, 3, 70000, 12345) {
				t.Errorf("size %d: swapped fragments not detected", size)
			}
		}
	}
}

// queue builds a queue of records in the given (initiator, seq) order.
func queue(size, round int, recs [][2]int) []byte {
	mem := make([]byte, size*(len(recs)+2))
	for i, r := range recs {
		fillRecord(mem[i*size:(i+1)*size], r[0], round, uint32(r[1]))
	}
	return mem
}

func TestCheckQueue(t *testing.T) {
	const size, round = 24, 7
	good := [][2]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2}}
	counts := []uint64{3, 2}
	if err := checkQueue(queue(size, round, good), uint64(len(good)*size), size, round, counts, true); err != nil {
		t.Fatalf("good queue: %v", err)
	}
	for name, c := range map[string]struct {
		recs    [][2]int
		counts  []uint64
		used    int
		ordered bool
		want    string
	}{
		"lost":       {good[:4], counts, 4, false, "lost"},
		"duplicated": {[][2]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 1}}, counts, 5, false, "twice"},
		"reordered":  {[][2]int{{0, 1}, {1, 0}, {0, 0}, {1, 1}, {0, 2}}, counts, 5, true, "reordered"},
		"foreign":    {[][2]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {2, 0}}, counts, 5, false, "not a record of this round"},
		"too many":   {good, counts, 6, false, "more than was sent"},
	} {
		mem := queue(size, round, c.recs)
		err := checkQueue(mem, uint64(c.used*size), size, round, c.counts, c.ordered)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
	// Unordered writers (native appends) may interleave freely.
	shuffled := [][2]int{{0, 2}, {1, 1}, {0, 0}, {1, 0}, {0, 1}}
	if err := checkQueue(queue(size, round, shuffled), 5*size, size, round, counts, false); err != nil {
		t.Errorf("unordered queue: %v", err)
	}
	// A record of an earlier round left in place is stale.
	mem := queue(size, round, good)
	fillRecord(mem[2*size:3*size], 0, round-1, 1)
	if err := checkQueue(mem, 5*size, size, round, counts, false); err == nil {
		t.Error("stale record not detected")
	}
}

func TestCheckScatter(t *testing.T) {
	l := scatterLayout{IOVs: 3, Size: 16, Lane: 16 * 10}
	mem := make([]byte, 2*l.area())
	counts := []uint64{4, 10}
	for id, n := range counts {
		for op := 0; op < int(n); op++ {
			for iov := 0; iov < l.IOVs; iov++ {
				off := l.offset(id, op, iov)
				fillRecord(mem[off:off+16], id, 5, l.chunkSeq(op, iov))
			}
		}
	}
	if err := checkScatter(mem, l, 5, counts); err != nil {
		t.Fatal(err)
	}
	off := l.offset(1, 9, 2)
	mem[off+3] ^= 0xff
	if err := checkScatter(mem, l, 5, counts); err == nil || !strings.Contains(err.Error(), "initiator 1 scatter 9 chunk 2") {
		t.Errorf("corrupted chunk: %v", err)
	}
	if err := checkScatter(mem, l, 5, []uint64{4, 11}); err == nil {
		t.Error("more operations than the lanes hold not detected")
	}
}

func TestHist(t *testing.T) {
	var h Hist
	for i := 1; i <= 1000; i++ {
		h.Add(time.Duration(i) * time.Microsecond)
	}
	// Evenly spread samples: the quantile interpolated within its bucket
	// is within 1% (a bucket spans up to 6.25%).
	for q, want := range map[float64]time.Duration{0.5: 500 * time.Microsecond, 0.99: 990 * time.Microsecond, 0.9: 900 * time.Microsecond} {
		got := h.Quantile(q)
		if d := got - want; d < -want/100 || d > want/100 {
			t.Errorf("q%v = %v, want %v ± 1%%", q, got, want)
		}
	}
	// Two sets of evenly spread samples, one 400 ns above the other: their
	// p50s (36.0 and 36.4 µs, both in the bucket [34816, 36863] ns) differ
	// by about as much, not by nothing.
	var lo, hi Hist
	for i := 0; i < 3000; i++ {
		lo.Add(time.Duration(30000+4*i) * time.Nanosecond)
		hi.Add(time.Duration(30400+4*i) * time.Nanosecond)
	}
	if l, h := lo.Quantile(0.5), hi.Quantile(0.5); h-l < 300 || h-l > 500 {
		t.Errorf("p50 of samples 400 ns apart: %v and %v", l, h)
	}
	var a, b Hist
	for i := 0; i < 100; i++ {
		a.Add(10 * time.Nanosecond)
		b.Add(time.Millisecond)
	}
	a.Merge(&b)
	if a.N != 200 || a.Quantile(0.25) != 10 || a.Quantile(0.75) < 900*time.Microsecond {
		t.Errorf("merged: n %d q25 %v q75 %v", a.N, a.Quantile(0.25), a.Quantile(0.75))
	}
	jb, _ := json.Marshal(&a)
	var c Hist
	if err := json.Unmarshal(jb, &c); err != nil || c.N != 200 || c.Quantile(0.75) != a.Quantile(0.75) {
		t.Errorf("JSON round trip: %v %+v", err, c)
	}
	for v := uint64(0); v < 1<<20; v = v*3/2 + 1 {
		if b := histBucket(v); histBucket(histValue(b)) != b {
			t.Fatalf("bucket %d of %d: its value %d falls in bucket %d", b, v, histValue(b), histBucket(histValue(b)))
		}
	}
}

func TestSplitArgs(t *testing.T) {
	for _, c := range []struct {
		args        []string
		bench, rest string
		ok          bool
	}{
		{[]string{"-m", "server"}, "", "-m server", false},
		{[]string{"bench", "--topology", "shm", "--ops", "5", "--short"}, "--topology shm --short", "bench --ops 5", true},
		{[]string{"-l", "60", "bench", "--size=8,64", "--plot", "x.svg", "-j", "p.json"}, "--size=8,64 --plot x.svg", "-l 60 bench -j p.json", true},
		{[]string{"bench", "--results", "-", "--short"}, "--results - --short", "bench", true},
		{[]string{"bench", "--results=out.json"}, "--results=out.json", "bench", true},
		{[]string{"bench", "--json", "params.json", "--results", "r.json"}, "--results r.json", "bench --json params.json", true},
		{[]string{"bench", "-j", "params.json"}, "", "bench -j params.json", true},
		{[]string{"bench", "-h"}, "", "bench -h", true},
		{[]string{"--urom", "bench", "dpu"}, "", "--urom bench dpu", false},
	} {
		b, r, ok := SplitArgs(c.args)
		if strings.Join(b, " ") != c.bench || strings.Join(r, " ") != c.rest || ok != c.ok {
			t.Errorf("SplitArgs(%q) = %q, %q, %v; want %q, %q, %v", c.args, b, r, ok, c.bench, c.rest, c.ok)
		}
	}
	o := DefaultOptions()
	if err := FlagSet(&o).Parse([]string{"--topology", "shm", "--size", "8,4k", "--results", "-", "--modes", "rdmo-append,raw-am", "--queue-mb", "16"}); err != nil {
		t.Fatal(err)
	}
	if o.Topology != TopologySHM || !slices.Equal(o.Sizes, []int{8, 4096}) || o.Results != "-" || o.QueueBytes != 16<<20 {
		t.Errorf("parsed %+v", o)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	if want := []string{ModeRawAM, ModeRDMOAppendOwned, ModeRDMOAppendCold, ModeRDMOAppendDrive, ModeRDMOAppendShared}; !slices.Equal(o.Modes, want) {
		t.Errorf("modes %v, want %v", o.Modes, want)
	}
}

func TestExpandModes(t *testing.T) {
	all, err := expandModes(nil, []int{1, 4, 16})
	if err != nil || len(all) != 18 {
		t.Fatalf("all modes: %v %v", all, err)
	}
	got, err := expandModes([]string{"scatter/2", "flush", "native-append/blocking"}, []int{1})
	want := []string{ModeNativeBlocking, "scatter/2", ModeFlushIdle, ModeFlushIdleDrive, ModeFlushLoad}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("got %v %v, want %v", got, err, want)
	}
	for _, bad := range []string{"rdmo", "scatter/0", "scatter/x"} {
		if _, err := expandModes([]string{bad}, nil); err == nil {
			t.Errorf("mode %q accepted", bad)
		}
	}
}

func TestReportRatiosAndPlot(t *testing.T) {
	r := &Report{Topology: TopologyDPU, Initiators: 1}
	for _, size := range []int{64, 4096} {
		r.Rows = append(r.Rows,
			Row{Mode: ModeRawAM, Size: size, Rate: 1000},
			Row{Mode: ModePingPong, Size: size, Rate: 100, P50: 10 * time.Microsecond},
			Row{Mode: ModeNativeBlocking, Size: size, Rate: 50},
			Row{Mode: ModeNativePipelined, Size: size, Rate: 200},
			Row{Mode: ModeRDMOAppendOwned, Size: size, Rate: 800, Worker: &WorkerFigures{Requests: 100, PutsPerOp: 0.01}},
			Row{Mode: ModeFlushIdle, Size: size, Rate: 30, P50: 20 * time.Microsecond},
			Row{Mode: ModeFlushLoad, Size: size, Error: "lost data"},
		)
	}
	for i := range r.Rows {
		r.Rows[i].Stable, r.Rows[i].Rounds = true, 3
	}
	r.Rows[5].Stable, r.Rows[5].Spread = false, 0.9 // flush/idle 64 B
	r.finish()
	a := r.Row(ModeRDMOAppendOwned, 64)
	if a.XRawAM != 0.8 || a.XNativeBlocking != 16 || a.XNativePipelined != 4 {
		t.Errorf("ratios %+v", a)
	}
	if f := r.Row(ModeFlushIdle, 4096); f.LatXPingPong != 2 {
		t.Errorf("flush latency ratio %v", f.LatXPingPong)
	}
	var out bytes.Buffer
	r.WriteTable(&out)
	for _, want := range []string{"64 B: rdmo-append/owned / native-append/blocking = 16 (goal ≥ 10): met",
		"FAILED flush/load 64 B: lost data", "4096 B: idle flush p50 / am-pingpong p50 = 2 (goal ≤ 2.5): met",
		"64 B: idle flush p50 / am-pingpong p50 = 2: unstable: re-run (spread flush/idle 90% over 3 rounds"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if !r.Failed() {
		t.Error("a failed row does not fail the report")
	}
	r.Rows = append(r.Rows, Row{Mode: ModeWorkload, Rate: 5000, Stable: true, Rounds: 3}) // sizeless: not plotted
	svg := r.SVG()
	if strings.Count(svg, "<polyline") != 6 || !strings.Contains(svg, ">4k<") || !strings.HasSuffix(svg, "</svg>\n") {
		t.Errorf("plot:\n%s", svg)
	}

}

func TestParsePerftestLine(t *testing.T) {
	r, ok := parsePerftestLine("[thread 0]            418513      0.030   158.287    31.420        0.39       1.94        6318       31826")
	if !ok || r.final || r.iters != 418513 || r.elapsed != time.Duration(31.420*418513*1e3) {
		t.Errorf("report line: %+v %v", r, ok)
	}
	r, ok = parsePerftestLine("Final:                 20000      3.072    46.198   118.268     1352.88     528.46       21646        8455")
	if !ok || !r.final || r.iters != 20000 {
		t.Errorf("final line: %+v %v", r, ok)
	}
	for _, l := range []string{"", "|    Stage     | # iterations |", "+------+", "[thread 0] x y"} {
		if _, ok := parsePerftestLine(l); ok {
			t.Errorf("%q parsed", l)
		}
	}
}

func TestSpreadAndCPU(t *testing.T) {
	if s := spread([]float64{100, 80, 120}); s < 0.399 || s > 0.401 {
		t.Errorf("spread %v, want 0.4", s)
	}
	if spread([]float64{5}) != 0 {
		t.Error("spread of one round")
	}
	c := readCPU(os.Getpid())
	for i := 0; c.total() == 0 && i < 1e9; i++ { // burn until a tick is accounted
		c = readCPU(os.Getpid())
	}
	if c.total() == 0 || readCPU(-1).total() != 0 {
		t.Errorf("readCPU: %+v", c)
	}
}

// Rounds that a full queue ends early count together up to an interval:
// forty-millisecond rounds alternating between two rates make a steady
// row, a short last window joins the one before it, and rounds as long as
// the interval keep a rate each.
func TestRateWindows(t *testing.T) {
	rs := &rowState{def: &rowDef{Name: ModeRDMOAppendOwned}, window: 900 * time.Millisecond}
	round := 40 * time.Millisecond
	for i := 0; i < 75; i++ { // 3 s
		ops := uint64(4000) // 100k op/s
		if i%2 == 1 {
			ops = 2000 // 50k op/s
		}
		rs.addRate(ops, round)
		rs.row.Rounds++
	}
	rates := rs.rates()
	if len(rates) != 3 {
		t.Fatalf("%d windows over 3 s of 40 ms rounds (rates %v), want 3", len(rates), rates)
	}
	if s := spread(rates); s > 0.05 {
		t.Errorf("spread %.2f of windows %v: the alternation should average out", s, rates)
	}
	if rs.last != 100000 {
		t.Errorf("last round's rate %v, want 100000", rs.last)
	}

	row := rs.finish()
	if !row.Stable || row.Rounds != 75 || row.RateMin < 73000 || row.RateMax > 77000 {
		t.Errorf("3 s of 40 ms rounds: stable %v, %d rounds, rates %.0f..%.0f", row.Stable, row.Rounds, row.RateMin, row.RateMax)
	}
	brief := &rowState{def: &rowDef{Name: ModeRDMOAppendOwned}, window: 900 * time.Millisecond}
	for i := 0; i < 25; i++ { // 1 s: one window
		brief.addRate(4000, round)
		brief.row.Rounds++
	}
	if row := brief.finish(); row.Stable {
		t.Errorf("one window of 25 rounds called stable (spread %v)", row.Spread)
	}

	long := &rowState{window: 900 * time.Millisecond}
	for _, ops := range []uint64{100, 80, 120} {
		long.addRate(ops, time.Second)
	}
	if s := spread(long.rates()); s < 0.399 || s > 0.401 {
		t.Errorf("rounds of an interval each: spread %v, want 0.4", s)
	}
}

// readSwitches counts context switches from /proc: a thread that blocks
// in the kernel adds at least one to its own count, and the process's sum
// covers its threads.
func TestReadSwitches(t *testing.T) {
	st := []byte("Name:\trdmo\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t4\n")
	if n := ctxtSwitches(st); n != 21 {
		t.Errorf("ctxtSwitches: %d, want 21", n)
	}
	if ctxtSwitches([]byte("Name:\trdmo\n")) != 0 {
		t.Error("ctxtSwitches of a status without switch counts")
	}
	type counts struct{ before, after, all uint64 }
	done := make(chan counts)
	go func() {
		// A thread of its own that blocks in nanosleep: the kernel
		// switches away from it each time. Its own count is read, so
		// that threads exiting elsewhere in the process cannot hide it.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		self := "/proc/self/task/" + strconv.Itoa(syscall.Gettid()) + "/status"
		read := func() uint64 {
			b, err := os.ReadFile(self)
			if err != nil {
				t.Errorf("reading %s: %v", self, err)
			}
			return ctxtSwitches(b)
		}
		var c counts
		c.before = read()
		for range 3 {
			ts := syscall.Timespec{Nsec: 100_000}
			syscall.Nanosleep(&ts, nil)
		}
		c.after = read()
		c.all = readSwitches(os.Getpid())
		done <- c
	}()
	c := <-done
	if c.after < c.before+3 {
		t.Errorf("a thread's switches: %d before three blocking sleeps, %d after", c.before, c.after)
	}
	if c.all < c.after {
		t.Errorf("readSwitches: %d for the process, less than one of its threads' %d", c.all, c.after)
	}
	if readSwitches(-1) != 0 {
		t.Error("readSwitches of no process")
	}
}

// rdmo bench refuses, in one line with the usage exit status, the common
// flags it has no use for; the results file has its own flag.
func TestCLIRefusesOtherModesFlags(t *testing.T) {
	for _, c := range []struct {
		set  func(*cli.Config)
		flag string
	}{
		{func(c *cli.Config) { c.Mode = cli.ModeServer }, "-m/--mode"},
		{func(c *cli.Config) { c.ServerName = "host" }, "-s/--server-name"},
		{func(c *cli.Config) { c.Device = "mlx5_0" }, "-d/--device"},
		{func(c *cli.Config) { c.OOBPort = 1 }, "--oob-port"},
		{func(c *cli.Config) { c.AppendStrategy = cli.AppendShared }, "--append-strategy"},
		{func(c *cli.Config) { c.SecretFile = "s" }, "--secret-file"},
	} {
		cfg := cli.DefaultConfig()
		c.set(&cfg)
		err := runCLI(context.Background(), cfg, nil)
		if cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(err.Error(), c.flag) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v (exit %d)", c.flag, err, cli.ExitCode(err))
		}
	}
	err := runCLI(context.Background(), cli.DefaultConfig(), []string{"--json=out.json"})
	if cli.ExitCode(err) != cli.ExitUsage {
		t.Errorf("--json as a bench flag: %v", err)
	}
}

// BenchmarkFillRecord is what writing one record costs the rows'
// initiators (docs/benchmarks/large-payloads.md, "The floor for CPU per
// 1 MiB append").
func BenchmarkFillRecord(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				fillRecord(buf, 1, 2, uint32(i))
			}
		})
	}
}

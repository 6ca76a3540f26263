package bench

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a run: one Row per mode and size, with its
// ratios to the baselines measured in the same run.
type Report struct {
	Date       time.Time `json:"date"`
	Host       string    `json:"host"`
	CPUs       int       `json:"cpus"`
	Go         string    `json:"go"`
	Topology   Topology  `json:"topology"`
	Initiators int       `json:"initiators"`
	Short      bool      `json:"short"`
	Aggregate  bool      `json:"aggregate"` // RDMO initiators pack requests into BATCH messages
	// NoPeerDetection: RDMO endpoints without peer-failure detection.
	NoPeerDetection bool `json:"no_peer_detection,omitempty"`
	// Populate: queues registered with their pages populated.
	Populate bool `json:"populate,omitempty"`
	// NoLendPool: the rdmo-append rows lent large records from Go
	// buffers, not from a lend pool the worker reads in place.
	NoLendPool bool `json:"no_lend_pool,omitempty"`
	// NoAckGroups: RDMO initiators took every ack in its own message.
	NoAckGroups bool `json:"no_ack_groups,omitempty"`
	// NoLargeBatches: RDMO initiators sent BATCH messages of at most 8 KiB.
	NoLargeBatches bool `json:"no_large_batches,omitempty"`

	Duration   time.Duration `json:"duration_ns"`
	Interval   time.Duration `json:"interval_ns"`
	Window     int           `json:"window"`
	QueueBytes int           `json:"queue_bytes"`
	Sample     int           `json:"sample"`

	// LoadAvg is /proc/loadavg at the start and at the end of the run:
	// how busy the (shared) machine was.
	LoadAvg [2]string `json:"loadavg"`

	Env                 map[string][]string `json:"env"`
	InitiatorTransports []string            `json:"initiator_transports"`
	Rows                []Row               `json:"rows"`

	// Wide: the table has every column (--wide), not only those that fit
	// 100 columns.
	Wide bool `json:"-"`
}

// Row is one mode at one size.
type Row struct {
	Mode     string `json:"mode"`
	Size     int    `json:"size"`
	Strategy string `json:"strategy,omitempty"` // the RDMO worker's append strategy
	// Plugins is the form of handler the row's worker serves its op with
	// (rowDef.Plugins: "wasm:fetch-add", "plugin:fetch-add"; "": built in).
	Plugins string `json:"plugins,omitempty"`
	// Pages is how the queue's target memory was backed (queue rows):
	// "4 KiB", "hugetlb 2048 KiB", "4 KiB, N MiB in THP" (host/target.Pages).
	Pages string `json:"pages,omitempty"`

	Rounds  int     `json:"rounds"`
	Ops     uint64  `json:"ops"`   // measured operations, all initiators
	Bytes   uint64  `json:"bytes"` // their payload bytes
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"rate"` // operations per second
	MBps    float64 `json:"mb_per_s"`
	// The slowest and fastest window of measured rounds (operations per
	// second): a round, or consecutive rounds shorter than an interval
	// (a full queue ends a round early) counted together up to one.
	RateMin float64 `json:"rate_min"`
	RateMax float64 `json:"rate_max"`
	// flush/load: the appends streamed while flushing.
	Load     uint64  `json:"load,omitempty"`
	LoadRate float64 `json:"load_rate,omitempty"`

	// Latency of the sampled operations (acks, echoes, put completions;
	// every operation of the round-trip rows).
	P50        time.Duration `json:"p50_ns"`
	P99        time.Duration `json:"p99_ns"`
	Mean       time.Duration `json:"mean_ns"`
	LatSamples uint64        `json:"lat_samples"`

	// CPU time (user + system) per operation of the row's processes over
	// its measured rounds, from their own accounting (/proc/<pid>/stat):
	// CPUNsPerOp is all of them (initiators, the RDMO worker of RDMO rows,
	// the target; for perftest rows the ucx_perftest client and server),
	// then by process. CPUSysShare is the kernel's share of it.
	CPUNsPerOp       float64 `json:"cpu_ns_per_op"`
	CPUInitNsPerOp   float64 `json:"cpu_init_ns_per_op"`
	CPUWorkerNsPerOp float64 `json:"cpu_worker_ns_per_op,omitempty"`
	CPUTargetNsPerOp float64 `json:"cpu_target_ns_per_op,omitempty"`
	CPUSysShare      float64 `json:"cpu_sys_share"`
	// Context switches (voluntary and involuntary, every thread) per
	// 1000 operations of the initiators and of the RDMO worker over the
	// measured rounds (/proc/<pid>/task/*/status): the thread hand-offs
	// and wake-ups a row's operations cost.
	SwitchesInitPerKop   float64 `json:"switches_init_per_kop"`
	SwitchesWorkerPerKop float64 `json:"switches_worker_per_kop,omitempty"`
	// Spread is (max - min) / median of the measured rounds' rates (of
	// their windows: RateMin);
	// Stable says it is within StableSpread over at least StableRounds
	// rounds (never for --short). Goals compare stable rows only.
	Spread float64 `json:"spread"`
	Stable bool    `json:"stable"`

	// Rate ratios to the baselines of the same size and run (0: the
	// baseline was not measured), and the p50 ratio to am-pingpong for
	// the round-trip rows.
	XPerftestAM      float64 `json:"x_perftest_am,omitempty"`
	XRawAM           float64 `json:"x_raw_am,omitempty"`
	XNativeOwned     float64 `json:"x_native_owned,omitempty"`
	XNativeBlocking  float64 `json:"x_native_blocking,omitempty"`
	XNativePipelined float64 `json:"x_native_pipelined,omitempty"`
	LatXPingPong     float64 `json:"lat_x_pingpong,omitempty"`
	// An op-pack row's rate and p50 ratios to its native row
	// (report_ops.go).
	XNative    float64 `json:"x_native,omitempty"`
	LatXNative float64 `json:"lat_x_native,omitempty"`

	Worker *WorkerFigures `json:"worker,omitempty"`
	// Flow is how the RDMO initiators waited and who ran their progress
	// loops' rounds (rows with an RDMO initiator).
	Flow *FlowFigures `json:"flow,omitempty"`
	// The worker process's resident memory (VmRSS) before the first and
	// after the last measured round, and its private part (RssAnon: heap
	// and stacks; the rest is the binary and shared target memory the
	// worker writes through mappings, which grows with the queues).
	WorkerRSSStart  uint64 `json:"worker_rss_start,omitempty"`
	WorkerRSSEnd    uint64 `json:"worker_rss_end,omitempty"`
	WorkerAnonStart uint64 `json:"worker_anon_start,omitempty"`
	WorkerAnonEnd   uint64 `json:"worker_anon_end,omitempty"`
	// WorkerRSS and WorkerAnon are sampled after each measured round.
	WorkerRSS  []uint64 `json:"worker_rss,omitempty"`
	WorkerAnon []uint64 `json:"worker_anon,omitempty"`

	// Verified: every round's data was checked in target memory (or at the
	// sink). A row with Error lost or corrupted data, or could not run.
	Verified bool   `json:"verified"`
	Error    string `json:"error,omitempty"`
}

// FlowFigures are the RDMO initiators' counters over a row's measured
// rounds (initiator.Stats deltas, summed over the initiators). They tell
// the regimes of a stream apart, which rates alone do not: a producer that
// waits for flow-control credits (a flush answer) because the worker is
// behind, a loop parked while the producers run its rounds themselves, a
// loop that sleeps and is woken.
type FlowFigures struct {
	CreditWaits   uint64 `json:"credit_waits"`   // calls that waited for credits
	WindowWaits   uint64 `json:"window_waits"`   // calls that waited for send-window space
	CreditFlushes uint64 `json:"credit_flushes"` // FLUSHes flow control queued
	Batches       uint64 `json:"batches"`        // batches taken from the send queue
	StreamRounds  uint64 `json:"stream_rounds"`  // rounds producers ran while the loop was parked for them
	HandOvers     uint64 `json:"hand_overs"`     // times the loop parked for a waiting caller or a stream
	Borrows       uint64 `json:"borrows"`        // waits (Flush, Call, credits) whose caller ran the rounds
	Sleeps        uint64 `json:"sleeps"`         // times the loop slept in ucp.Worker.Wait
	Wakes         uint64 `json:"wakes"`          // wake-ups of a sleeping loop by producers
	// CreditWaitsPerKop is CreditWaits per 1000 operations of the row.
	CreditWaitsPerKop float64 `json:"credit_waits_per_kop"`
}

func (f *FlowFigures) add(o *FlowFigures) {
	f.CreditWaits += o.CreditWaits
	f.WindowWaits += o.WindowWaits
	f.CreditFlushes += o.CreditFlushes
	f.Batches += o.Batches
	f.StreamRounds += o.StreamRounds
	f.HandOvers += o.HandOvers
	f.Borrows += o.Borrows
	f.Sleeps += o.Sleeps
	f.Wakes += o.Wakes
}

// coalesceGoalMax bounds the record sizes that the goal of at most one
// target write per 16 appends applies to (docs/BENCHMARKS.md states it for
// 64 B appends): small records that the worker coalesces into one put. A
// record of 4 KiB or more is a write by itself, and its goals are in
// bytes per second.
const coalesceGoalMax = 4096

// WorkerFigures are the RDMO worker's counters over a row's measured
// rounds (dpu.Stats deltas).
type WorkerFigures struct {
	Requests   uint64 `json:"requests"` // operations the initiators sent (appends for flush/load)
	AMs        uint64 `json:"ams"`      // active messages the initiators issued (requests, BATCH containers, flushes)
	Flushes    uint64 `json:"flushes"`
	UCXPuts    uint64 `json:"ucx_puts"`
	MemcpyPuts uint64 `json:"memcpy_puts"`
	SyncOps    uint64 `json:"sync_ops"` // tail reads and fetch-adds
	Places     uint64 `json:"places"`
	Batches    uint64 `json:"batches"`
	Batched    uint64 `json:"batched_requests"`
	Inline     uint64 `json:"inline_batches"` // batches the worker's loop ran itself (no executor hand-off)
	Failures   uint64 `json:"failures"`
	// PutsPerOp is target puts (UCX and memcpy) per request; WritesPerOp
	// adds the rendezvous placements (every write of target memory);
	// AccessesPerOp adds the tail reads and fetch-adds to that.
	PutsPerOp     float64 `json:"puts_per_op"`
	WritesPerOp   float64 `json:"writes_per_op"`
	AMsPerOp      float64 `json:"ams_per_op"`
	AccessesPerOp float64 `json:"accesses_per_op"`
	BatchMean     float64 `json:"batch_mean"`
}

func newReport(o Options) *Report {
	host, _ := os.Hostname()
	return &Report{
		Date: time.Now().UTC(), Host: host, CPUs: runtime.NumCPU(), Go: runtime.Version(),
		Topology: o.Topology, Initiators: o.Initiators, Short: o.Short, Aggregate: o.Aggregate, NoPeerDetection: o.NoPeerDetection, Populate: o.Populate,
		NoLendPool: !o.LendPool, NoAckGroups: !o.AckGroups, NoLargeBatches: !o.LargeBatches,
		Wide: o.Wide, Duration: o.Duration, Interval: o.Interval, Window: o.Window, QueueBytes: o.QueueBytes, Sample: o.Sample,
		LoadAvg: [2]string{loadAvg()},
	}
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Failed reports whether a row failed its data check (or could not run).
func (r *Report) Failed() bool { return r.failures() > 0 }

func (r *Report) failures() int {
	n := 0
	for _, row := range r.Rows {
		if row.Error != "" {
			n++
		}
	}
	return n
}

// Row returns the row of mode at size, or nil.
func (r *Report) Row(mode string, size int) *Row {
	for i := range r.Rows {
		if r.Rows[i].Mode == mode && r.Rows[i].Size == size && r.Rows[i].Error == "" {
			return &r.Rows[i]
		}
	}
	return nil
}

// finish computes the ratios to the baselines.
func (r *Report) finish() {
	r.LoadAvg[1] = loadAvg()
	for i := range r.Rows {
		row := &r.Rows[i]
		if row.Error != "" {
			continue
		}
		ratio := func(mode string) float64 {
			b := r.Row(mode, row.Size)
			if b == nil || b.Rate == 0 {
				return 0
			}
			return row.Rate / b.Rate
		}
		row.XPerftestAM = ratio(ModePerftestAM)
		row.XRawAM = ratio(ModeRawAM)
		row.XNativeOwned = ratio(ModeNativeOwned)
		row.XNativeBlocking = ratio(ModeNativeBlocking)
		row.XNativePipelined = ratio(ModeNativePipelined)
		def, _ := rowByName(row.Mode)
		if def != nil && def.RoundTrip {
			if pp := r.Row(ModePingPong, row.Size); pp != nil && pp.P50 > 0 {
				row.LatXPingPong = float64(row.P50) / float64(pp.P50)
			}
		}
		r.baselineRatios(row)
	}
}

// WriteTable prints the final table (without the columns no row fills)
// and the goal lines.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "\nrdmo bench: topology %s, %d initiator(s), %d CPUs, %s, load average %s → %s (ratios are to rows of the same run and size)\n",
		r.Topology, r.Initiators, r.CPUs, r.Date.Format(time.RFC3339), firstField(r.LoadAvg[0]), firstField(r.LoadAvg[1]))
	head := []string{"mode", "size", "op/s", "MB/s", "p50", "p99", "spread", "stable", "CPU/op", "init", "worker", "target", "sys",
		"×perftest-am", "×raw-am", "×native-owned", "×native-blk", "×native-pipe", "p50×pingpong", "writes/op", "AMs/op", "batch", "worker RSS", "×native", "p50×native", "switches/kop"}
	var cells [][]string
	for _, row := range r.Rows {
		c := make([]string, len(head))
		c[0], c[1] = row.Mode, sizeName(row.Size)
		if row.Error != "" {
			c[2] = "FAILED"
			cells = append(cells, c)
			continue
		}
		c[2], c[3], c[4], c[5] = rate(row.Rate), fmt.Sprintf("%.1f", row.MBps), dur(row.P50), dur(row.P99)
		if !r.Short {
			c[6] = fmt.Sprintf("%.0f%%", row.Spread*100)
			c[7] = "no"
			if row.Stable {
				c[7] = "yes"
			}
		}
		if row.CPUNsPerOp > 0 {
			c[8], c[9], c[10], c[11] = ns(row.CPUNsPerOp), ns(row.CPUInitNsPerOp), ns(row.CPUWorkerNsPerOp), ns(row.CPUTargetNsPerOp)
			c[12] = fmt.Sprintf("%.0f%%", row.CPUSysShare*100)
		}
		c[13], c[14], c[15], c[16], c[17], c[18] = x(row.XPerftestAM), x(row.XRawAM), x(row.XNativeOwned), x(row.XNativeBlocking), x(row.XNativePipelined), x(row.LatXPingPong)
		if row.Worker != nil && row.Worker.Requests > 0 {
			c[19] = fmt.Sprintf("%.4f", row.Worker.WritesPerOp)
			if def, _ := rowByName(row.Mode); def == nil || !def.hasGroup("flush") || def.Load { // an idle flush is one AM
				c[20] = fmt.Sprintf("%.3f", row.Worker.AMsPerOp)
			}
			c[21] = fmt.Sprintf("%.1f", row.Worker.BatchMean)
		}
		if row.WorkerRSSStart > 0 {
			c[22] = fmt.Sprintf("%s→%s (anon %s→%s)", mib(row.WorkerRSSStart), mib(row.WorkerRSSEnd), mib(row.WorkerAnonStart), mib(row.WorkerAnonEnd))
		}
		c[23], c[24] = x(row.XNative), x(row.LatXNative)
		if row.CPUNsPerOp > 0 {
			c[25] = fmt.Sprintf("%.1f", row.SwitchesInitPerKop)
			if row.Worker != nil {
				c[25] += fmt.Sprintf("+%.1f", row.SwitchesWorkerPerKop)
			}
		}
		cells = append(cells, c)
	}
	if !r.Wide {
		head = slices.Clone(head)
		head[14], head[18], head[23], head[24] = "×raw", "p50×pp", "×nat", "p50×nat"
		for i, row := range r.Rows {
			if row.Error == "" && !r.Short && !row.Stable {
				cells[i][2] += "?" // the stable column is not shown
			}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	for _, line := range append([][]string{head}, cells...) {
		for i, v := range line {
			if i < 3 || (r.Wide || narrowColumns[i]) && columnUsed(cells, i) {
				fmt.Fprintf(tw, "%s\t", v)
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintf(w, "CPU/op: user+system CPU time per operation of the row's processes (init: initiators or the ucx_perftest client; worker: the RDMO worker; target: the target or the ucx_perftest server), from /proc/<pid>/stat; sys: the kernel's share.\n")
	if r.Wide {
		fmt.Fprintf(w, "switches/kop: context switches (voluntary and involuntary, all threads) per 1000 operations, initiators+worker, from /proc/<pid>/task/*/status.\n")
	} else {
		fmt.Fprintf(w, "columns: those that fit 100 columns (--wide: all; ×raw: rate / raw-am's, p50×pp: p50 / am-pingpong's, ×nat and p50×nat: to the row's baseline); a ? after op/s: not stable.\n")
	}
	if !r.Short {
		fmt.Fprintf(w, "stable: at least %d measured rounds whose rates span at most %.0f%% of their median (spread = (max-min)/median; rounds a full queue cut short count together, up to an interval, as the progress lines do); goals compare stable rows only.\n", StableRounds, StableSpread*100)
	}
	if r.Topology == TopologyDPU && r.hasRow(func(d *rowDef) bool { return d.hasGroup("native-append") }) {
		fmt.Fprintf(w, "note: UCX over tcp has no network atomics: the native-append rows' fetch-adds are emulated by the target process's progress (its CPU), which an RDMA NIC would do in hardware.\n")
	}
	if r.hasRow(func(d *rowDef) bool { return d.NoData }) {
		fmt.Fprintf(w, "perftest rows: ucx_perftest at the same size and UCX_TLS, interleaved with the other rows; it checks no data (verified: false).\n")
	}
	var pages []string
	for _, row := range r.Rows {
		if row.Pages != "" && !slices.Contains(pages, row.Pages) {
			pages = append(pages, row.Pages)
		}
	}
	if len(pages) > 0 {
		hint := ""
		if len(pages) == 1 && pages[0] == "4 KiB" {
			// The host offered no huge pages: a fresh registration then
			// faults once per 4 KiB (the cold rows).
			hint = " (no huge pages on this host: docs/OPERATIONS.md, \"Huge pages for target memory\")"
		}
		fmt.Fprintf(w, "queue memory pages: %s%s\n", strings.Join(pages, "; "), hint)
	}
	if r.NoPeerDetection {
		fmt.Fprintf(w, "RDMO endpoints without peer-failure detection (--no-peer-detection)\n")
	}
	if r.Populate {
		fmt.Fprintf(w, "queues registered with their pages populated (--populate)\n")
	}
	if r.NoLendPool {
		fmt.Fprintf(w, "rdmo-append rows lend records of 4 KiB and more from Go buffers (--lend-pool=false)\n")
	}
	if r.NoAckGroups {
		fmt.Fprintf(w, "every ack in its own message (--ack-groups=false)\n")
	}
	if r.NoLargeBatches {
		fmt.Fprintf(w, "BATCH messages of at most 8 KiB (--large-batches=false)\n")
	}
	for _, row := range r.Rows {
		if row.Error != "" {
			fmt.Fprintf(w, "FAILED %s %d B: %s\n", row.Mode, row.Size, row.Error)
		}
		if row.Load > 0 && row.Error == "" {
			fmt.Fprintf(w, "%s %d B: the load streamed %s appends/s while flushing\n", row.Mode, row.Size, rate(row.LoadRate))
		}
	}
	r.writeGoals(w)
	r.writeBaselineGoals(w)
}

// narrowColumns are the table's columns without --wide: what fits a
// 100-column terminal (the rest is in the JSON results and with --wide).
var narrowColumns = map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true, 8: true, 14: true, 18: true, 23: true, 24: true}

func columnUsed(cells [][]string, i int) bool {
	for _, c := range cells {
		if c[i] != "" {
			return true
		}
	}
	return false
}

// hasRow reports whether a row of the run is one f accepts.
func (r *Report) hasRow(f func(*rowDef) bool) bool {
	for _, row := range r.Rows {
		if d, ok := rowByName(row.Mode); ok && f(d) {
			return true
		}
	}
	return false
}

// goal prints one goal line: the ratio and whether it meets want (kind
// ">=" or "<="), or "unstable: re-run" when a row it compares was not
// stable. note replaces the verdict when the goal does not apply here.
func (r *Report) goal(w io.Writer, what string, v float64, kind string, want float64, note string, rows ...*Row) {
	if r.Short {
		return
	}
	verdict := ""
	switch {
	case note != "":
		verdict = note
	case kind == ">=":
		verdict = fmt.Sprintf("(goal ≥ %g): %s", want, met(v >= want))
	default:
		verdict = fmt.Sprintf("(goal ≤ %g): %s", want, met(v <= want))
	}
	for _, row := range rows {
		if row.Rounds < StableRounds {
			fmt.Fprintf(w, "%s = %.3g: not judged: %s has %d measured round(s), a verdict needs %d (--duration ≥ %v)\n",
				what, v, row.Mode, row.Rounds, StableRounds, time.Duration(StableRounds)*r.Interval)
			return
		}
	}
	for _, row := range rows {
		if !row.Stable {
			var sp []string
			for _, o := range rows {
				sp = append(sp, fmt.Sprintf("%s %.0f%% over %d rounds", o.Mode, o.Spread*100, o.Rounds))
			}
			fmt.Fprintf(w, "%s = %.3g: unstable: re-run (spread %s; bound %.0f%% over ≥ %d rounds)\n", what, v, strings.Join(sp, ", "), StableSpread*100, StableRounds)
			return
		}
	}
	fmt.Fprintf(w, "%s = %.3g %s\n", what, v, verdict)
}

// writeGoals prints the goals (docs/BENCHMARKS.md) this run's rows speak
// to; a goal is judged only on stable rows.
func (r *Report) writeGoals(w io.Writer) {
	sizes := map[int]bool{}
	shm := r.Topology == TopologySHM
	for _, row := range r.Rows {
		if sizes[row.Size] {
			continue
		}
		sizes[row.Size] = true
		s := row.Size
		pt := r.Row(ModePerftestAM, s)
		raw := r.Row(ModeRawAM, s)
		a := r.Row(ModeRDMOAppendOwned, s)
		if pt != nil && raw != nil && raw.XPerftestAM > 0 {
			switch {
			case s == 64 && shm:
				r.goal(w, fmt.Sprintf("%d B: raw-am / perftest-am", s), raw.XPerftestAM, ">=", 0.9, "", raw, pt)
			case s == 64<<10 || s == 1<<20:
				r.goal(w, fmt.Sprintf("%d B: raw-am / perftest-am", s), raw.XPerftestAM, ">=", 0.8, "", raw, pt)
			default:
				r.goal(w, fmt.Sprintf("%d B: raw-am / perftest-am", s), raw.XPerftestAM, "", 0, "(no goal at this size and topology)", raw, pt)
			}
		}
		if f, pp := r.Row(ModeFlushIdle, s), r.Row(ModePingPong, s); f != nil && pp != nil && f.LatXPingPong > 0 {
			r.goal(w, fmt.Sprintf("%d B: idle flush p50 / am-pingpong p50", s), f.LatXPingPong, "<=", 2.5, "", f, pp)
		}
		if f, pp := r.Row(ModeFlushIdleDrive, s), r.Row(ModePingPong, s); f != nil && pp != nil && f.LatXPingPong > 0 {
			r.goal(w, fmt.Sprintf("%d B: idle flush in a Drive p50 / am-pingpong p50", s), f.LatXPingPong, "<=", 2.5, "", f, pp)
		}
		if a == nil {
			continue
		}
		if pt != nil && a.XPerftestAM > 0 {
			note := ""
			if s < 1<<10 {
				note = "(the goal is for 1 KiB to 1 MiB)"
			}
			r.goal(w, fmt.Sprintf("%d B: rdmo-append/owned bytes / perftest-am bytes", s), a.XPerftestAM, ">=", 0.8, note, a, pt)
		}
		if raw != nil && a.XRawAM > 0 && s == 64 {
			switch {
			case !r.Aggregate:
				r.goal(w, "64 B: rdmo-append/owned (aggregation off) / raw-am", a.XRawAM, ">=", 0.9, "", a, raw)
			case shm:
				r.goal(w, "64 B: rdmo-append/owned (aggregation on, all on shm) / raw-am", a.XRawAM, ">=", 1.0, "", a, raw)
			default:
				r.goal(w, "64 B: rdmo-append/owned (aggregation on) / raw-am", a.XRawAM, "", 0, "(batching: no goal in the dpu topology)", a, raw)
			}
		}
		if no := r.Row(ModeNativeOwned, s); no != nil && a.XNativeOwned > 0 && s == 64 {
			note := ""
			if shm || !r.Aggregate {
				note = "(the goal is for the dpu topology with aggregation)"
			}
			r.goal(w, "64 B: rdmo-append/owned / native-owned", a.XNativeOwned, ">=", 1.0, note, a, no)
		}
		for _, nb := range []struct {
			mode string
			v    float64
			want float64
		}{{ModeNativeBlocking, a.XNativeBlocking, 10}, {ModeNativePipelined, a.XNativePipelined, 3}} {
			if b := r.Row(nb.mode, s); b != nil && nb.v > 0 {
				note := ""
				if shm {
					note = "(the goal is for the dpu topology)"
				}
				r.goal(w, fmt.Sprintf("%d B: rdmo-append/owned / %s", s, nb.mode), nb.v, ">=", nb.want, note, a, b)
			}
		}
		if s == 64 && a.CPUNsPerOp > 0 && !r.Short {
			v := a.CPUInitNsPerOp + a.CPUWorkerNsPerOp
			verdict := met(v <= 300)
			if a.Rounds < StableRounds || !a.Stable {
				verdict = fmt.Sprintf("not judged: %d measured round(s), spread %.0f%% (needs ≥ %d rounds within %.0f%%: --duration ≥ %v)",
					a.Rounds, a.Spread*100, StableRounds, StableSpread*100, time.Duration(StableRounds)*r.Interval)
			}
			fmt.Fprintf(w, "64 B: CPU per rdmo-append/owned, initiator + worker = %.0f ns (init %.0f, worker %.0f, %.0f%% in the kernel; goal ≤ 300 ns): %s\n",
				v, a.CPUInitNsPerOp, a.CPUWorkerNsPerOp, a.CPUSysShare*100, verdict)
			if d := r.Row(ModeRDMOAppendDrive, s); d != nil && d.CPUNsPerOp > 0 {
				fmt.Fprintf(w, "64 B: CPU per rdmo-append/owned/drive (the stream inside initiator.Drive), initiator + worker = %.0f ns (init %.0f, worker %.0f)\n",
					d.CPUInitNsPerOp+d.CPUWorkerNsPerOp, d.CPUInitNsPerOp, d.CPUWorkerNsPerOp)
			}
		}
		if a.Worker != nil && a.Worker.Requests > 0 && s < coalesceGoalMax {
			r.goal(w, fmt.Sprintf("%d B: target writes (puts and placements) per append", s), a.Worker.WritesPerOp, "<=", 1.0/16, "", a)
		}
		if a.WorkerAnonStart > 0 && !r.Short {
			d := (float64(a.WorkerAnonEnd) - float64(a.WorkerAnonStart)) / float64(a.WorkerAnonStart) * 100
			q := ""
			if n := len(a.WorkerAnon); n >= 8 {
				q = fmt.Sprintf(", %s after a quarter of the rounds", mib(a.WorkerAnon[n/4]))
			}
			verdict := met(d <= 10 && d >= -10)
			if a.Seconds < memoryGoalSeconds {
				verdict = fmt.Sprintf("not judged: the goal is over %d s (--duration ≥ %ds)", memoryGoalSeconds, memoryGoalSeconds)
			}
			fmt.Fprintf(w, "%d B: worker private memory (RssAnon) over rdmo-append/owned (%.0f s): %s → %s%s (%+.1f%%; goal flat ±10%% over 60 s): %s; RSS with mapped target memory %s → %s\n",
				s, a.Seconds, mib(a.WorkerAnonStart), mib(a.WorkerAnonEnd), q, d, verdict, mib(a.WorkerRSSStart), mib(a.WorkerRSSEnd))
		}
	}
}

// sizeName is a row's size in the table: "mix" for a sizeless row.
func sizeName(size int) string {
	if size == 0 {
		return "mix"
	}
	return fmt.Sprint(size)
}

// memoryGoalSeconds is how long the worker-memory goal watches a row.
const memoryGoalSeconds = 60

func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return "?"
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func x(v float64) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f", v)
}

func rate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func dur(d time.Duration) string {
	switch {
	case d == 0:
		return ""
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func ns(v float64) string {
	if v == 0 {
		return ""
	}
	if v >= 1e4 {
		return fmt.Sprintf("%.1fµs", v/1e3)
	}
	return fmt.Sprintf("%.0fns", v)
}

func mib(b uint64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }

// lineAcc accumulates rounds until a progress line is due.
type lineAcc struct {
	ops, bytes uint64
	elapsed    time.Duration
	lat        Hist
	fig        *WorkerFigures
}

func (l *lineAcc) add(rr roundSum, res []roundResult, f *WorkerFigures) {
	l.ops += rr.ops
	l.bytes += rr.bytes
	l.elapsed += rr.elapsed
	for i := range res {
		l.lat.Merge(&res[i].Lat)
	}
	l.fig = f
}

// progress prints a line per interval of a row's measurement (the rounds
// that ended early add up into one; lineAcc), or,
// on a terminal, keeps one live status line that the final table follows.
type progress struct {
	w   io.Writer
	tty bool
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) header(r *Report) {
	fmt.Fprintf(p.w, "rdmo bench: topology %s (initiator→target over %s), %d initiator(s); a line per %v of measurement\n",
		r.Topology, strings.Join(r.InitiatorTransports, ","), r.Initiators, r.Interval)
}

func (p *progress) interval(row Row, total time.Duration, l *lineAcc) {
	r := 0.0
	if l.elapsed > 0 {
		r = float64(l.ops) / l.elapsed.Seconds()
	}
	mbs := 0.0
	if l.elapsed > 0 {
		mbs = float64(l.bytes) / l.elapsed.Seconds() / 1e6
	}
	s := fmt.Sprintf("%-26s %8s %7.1fs %10s op/s %9.1f MB/s  p50 %9s  p99 %9s",
		row.Mode, sizeName(row.Size)+" B", total.Seconds(), rate(r), mbs, dur(l.lat.Quantile(0.5)), dur(l.lat.Quantile(0.99)))
	if f := l.fig; f != nil && f.Requests > 0 {
		s += fmt.Sprintf("  puts/op %.4f", f.PutsPerOp)
		if f.Failures > 0 {
			s += fmt.Sprintf("  FAILED REQUESTS %d", f.Failures)
		}
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", s)
		return
	}
	fmt.Fprintln(p.w, s)
}

func (p *progress) failed(row Row) {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "%-26s %8s FAILED: %s\n", row.Mode, sizeName(row.Size)+" B", row.Error)
}

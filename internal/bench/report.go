package bench

import (
	"fmt"
	"io"
	"os"
	"runtime"
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

	sink sinkState // the sink's counters after the last AM round
}

// Row is one mode at one size.
type Row struct {
	Mode     string `json:"mode"`
	Size     int    `json:"size"`
	Strategy string `json:"strategy,omitempty"` // the RDMO worker's append strategy

	Rounds  int     `json:"rounds"`
	Ops     uint64  `json:"ops"`   // measured operations, all initiators
	Bytes   uint64  `json:"bytes"` // their payload bytes
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"rate"` // operations per second
	MBps    float64 `json:"mb_per_s"`
	// The slowest and fastest measured round (operations per second).
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

	// Rate ratios to the baselines of the same size and run (0: the
	// baseline was not measured), and the p50 ratio to am-pingpong for
	// the round-trip rows.
	XRawAM           float64 `json:"x_raw_am,omitempty"`
	XNativeBlocking  float64 `json:"x_native_blocking,omitempty"`
	XNativePipelined float64 `json:"x_native_pipelined,omitempty"`
	LatXPingPong     float64 `json:"lat_x_pingpong,omitempty"`

	Worker *WorkerFigures `json:"worker,omitempty"`
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
	Failures   uint64 `json:"failures"`
	// PutsPerOp is target puts (UCX and memcpy) per request; AccessesPerOp
	// adds the tail reads, fetch-adds and rendezvous placements.
	PutsPerOp     float64 `json:"puts_per_op"`
	AMsPerOp      float64 `json:"ams_per_op"`
	AccessesPerOp float64 `json:"accesses_per_op"`
	BatchMean     float64 `json:"batch_mean"`
}

func newReport(o Options) *Report {
	host, _ := os.Hostname()
	return &Report{
		Date: time.Now().UTC(), Host: host, CPUs: runtime.NumCPU(), Go: runtime.Version(),
		Topology: o.Topology, Initiators: o.Initiators, Short: o.Short,
		Duration: o.Duration, Interval: o.Interval, Window: o.Window, QueueBytes: o.QueueBytes, Sample: o.Sample,
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
		row.XRawAM = ratio(ModeRawAM)
		row.XNativeBlocking = ratio(ModeNativeBlocking)
		row.XNativePipelined = ratio(ModeNativePipelined)
		if roundTripRow(row.Mode) {
			if pp := r.Row(ModePingPong, row.Size); pp != nil && pp.P50 > 0 {
				row.LatXPingPong = float64(row.P50) / float64(pp.P50)
			}
		}
	}
}

func roundTripRow(mode string) bool {
	return mode == ModePingPong || mode == ModeFlushIdle || mode == ModeFlushLoad
}

// WriteTable prints the final table and the goal lines.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "\nrdmo bench: topology %s, %d initiator(s), %d CPUs, %s, load average %s → %s (ratios are to rows of the same run and size)\n",
		r.Topology, r.Initiators, r.CPUs, r.Date.Format(time.RFC3339), firstField(r.LoadAvg[0]), firstField(r.LoadAvg[1]))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tsize\top/s\tMB/s\tp50\tp99\t×raw-am\t×native-blk\t×native-pipe\tp50×pingpong\tputs/op\tAMs/op\tbatch\tworker RSS\t")
	for _, row := range r.Rows {
		if row.Error != "" {
			fmt.Fprintf(tw, "%s\t%d\tFAILED\t\t\t\t\t\t\t\t\t\t\t\t\n", row.Mode, row.Size)
			continue
		}
		puts, ams, batch, rss := "", "", "", ""
		if row.Worker != nil && row.Worker.Requests > 0 {
			puts = fmt.Sprintf("%.4f", row.Worker.PutsPerOp)
			if row.Mode != ModeFlushIdle {
				ams = fmt.Sprintf("%.3f", row.Worker.AMsPerOp)
			}
			batch = fmt.Sprintf("%.1f", row.Worker.BatchMean)
		}
		if row.WorkerRSSStart > 0 {
			rss = fmt.Sprintf("%s→%s (anon %s→%s)", mib(row.WorkerRSSStart), mib(row.WorkerRSSEnd), mib(row.WorkerAnonStart), mib(row.WorkerAnonEnd))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			row.Mode, row.Size, rate(row.Rate), row.MBps, dur(row.P50), dur(row.P99),
			x(row.XRawAM), x(row.XNativeBlocking), x(row.XNativePipelined), x(row.LatXPingPong), puts, ams, batch, rss)
	}
	tw.Flush()
	for _, row := range r.Rows {
		if row.Error != "" {
			fmt.Fprintf(w, "FAILED %s %d B: %s\n", row.Mode, row.Size, row.Error)
		}
		if row.Mode == ModeFlushLoad && row.Error == "" {
			fmt.Fprintf(w, "flush/load %d B: the load streamed %s appends/s while flushing\n", row.Size, rate(row.LoadRate))
		}
	}
	r.writeGoals(w)
}

// writeGoals prints the project's goals that this run's rows speak to.
func (r *Report) writeGoals(w io.Writer) {
	sizes := map[int]bool{}
	for _, row := range r.Rows {
		if sizes[row.Size] {
			continue
		}
		sizes[row.Size] = true
		s := row.Size
		if a := r.Row(ModeRDMOAppendOwned, s); a != nil {
			goal := func(v, want float64) string {
				if r.Topology != TopologyDPU {
					return "(the goal is for the dpu topology)"
				}
				return fmt.Sprintf("(goal ≥ %g×): %s", want, met(v >= want))
			}
			if a.XNativeBlocking > 0 {
				fmt.Fprintf(w, "%d B: rdmo-append/owned = %.2f× native-append/blocking %s\n", s, a.XNativeBlocking, goal(a.XNativeBlocking, 10))
			}
			if a.XNativePipelined > 0 {
				fmt.Fprintf(w, "%d B: rdmo-append/owned = %.2f× native-append/pipelined %s\n", s, a.XNativePipelined, goal(a.XNativePipelined, 3))
			}
			if a.XRawAM > 0 {
				fmt.Fprintf(w, "%d B: rdmo-append/owned = %.2f× raw-am (one AM per operation is the limit)\n", s, a.XRawAM)
			}
			if a.Worker != nil && a.Worker.Requests > 0 {
				fmt.Fprintf(w, "%d B: target puts per append at saturation = %.4f (goal ≤ 1/16 = 0.0625): %s\n", s, a.Worker.PutsPerOp, met(a.Worker.PutsPerOp <= 1.0/16))
			}
			if a.WorkerAnonStart > 0 {
				d := (float64(a.WorkerAnonEnd) - float64(a.WorkerAnonStart)) / float64(a.WorkerAnonStart) * 100
				q := ""
				if n := len(a.WorkerAnon); n >= 8 {
					q = fmt.Sprintf(", %s after a quarter of the rounds", mib(a.WorkerAnon[n/4]))
				}
				fmt.Fprintf(w, "%d B: worker private memory (RssAnon) over rdmo-append/owned (%.0f s): %s → %s%s (%+.1f%%; goal flat ±10%% over 60 s): %s; RSS with mapped target memory %s → %s\n",
					s, a.Seconds, mib(a.WorkerAnonStart), mib(a.WorkerAnonEnd), q, d, met(d <= 10 && d >= -10), mib(a.WorkerRSSStart), mib(a.WorkerRSSEnd))
			}
		}
		if f := r.Row(ModeFlushIdle, s); f != nil && f.LatXPingPong > 0 {
			fmt.Fprintf(w, "%d B: idle flush round trip p50 = %.2f× AM ping-pong p50 (goal ≤ 2.5×): %s\n", s, f.LatXPingPong, met(f.LatXPingPong <= 2.5))
		}
	}
}

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

// progress prints a line per round of a row (about one per interval), or,
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
	s := fmt.Sprintf("%-24s %6d B %7.1fs %10s op/s %9.1f MB/s  p50 %9s  p99 %9s",
		row.Mode, row.Size, total.Seconds(), rate(r), mbs, dur(l.lat.Quantile(0.5)), dur(l.lat.Quantile(0.99)))
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
	fmt.Fprintf(p.w, "%-24s %6d B FAILED: %s\n", row.Mode, row.Size, row.Error)
}

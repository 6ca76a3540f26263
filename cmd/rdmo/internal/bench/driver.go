package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/urom/rdmoworker"
	"github.com/openrdmo/rdmo/urom/service"
)

// driver is the `rdmo bench` process: it runs the UROM service (unless an
// external one is given), starts the target and the initiators, and runs
// every row round by round, checking after each round that the data
// landed.
type driver struct {
	o   Options
	log *zap.Logger
	exe string

	svc      *service.Service
	svcStop  context.CancelFunc
	svcDone  chan struct{}
	uromAddr string

	target     *child
	targetAddr []byte
	inits      []*child

	workers map[string]*workerInfo // by rowDef.worker (append strategy, plugin form)
	// noWorker holds why a plugin form's worker could not be spawned (its
	// plugin or module not on the plugin path): its rows fail with it, the
	// others run.
	noWorker map[string]error
	round    int
	rep      *Report
	out      *progress
}

// Run runs the benchmark: every row of o.Modes at every size, each in the
// same run against the same processes, so the rows' ratios are taken
// side by side. It prints progress and the final table, writes the JSON
// and plot files asked for, and returns the report. A row whose data check
// fails is reported as failed (Report.Failed), not as a number; an error
// means the run itself could not go on.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.ResultsFrom != "" {
		return convert(o)
	}
	d := &driver{o: o, log: o.Logger}
	d.exe = o.Executable
	if d.exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("bench: cannot find this program to start its processes: %w", err)
		}
		d.exe = exe
	}
	d.rep = newReport(o)
	out := o.Stdout
	if o.Results == "-" {
		out = o.Stderr
	}
	d.out = newProgress(out)
	err := d.run(ctx)
	if cerr := d.close(); err == nil && cerr != nil {
		d.log.Warn("bench: shutting the processes down", zap.Error(cerr))
	}
	if err != nil {
		return d.rep, err
	}
	d.rep.finish()
	d.rep.WriteTable(out)
	if o.Results != "" {
		if err := d.writeJSON(); err != nil {
			return d.rep, err
		}
	}
	if o.Plot != "" {
		if err := os.WriteFile(o.Plot, []byte(d.rep.SVG()), 0o644); err != nil {
			return d.rep, fmt.Errorf("bench: plot: %w", err)
		}
		fmt.Fprintf(out, "plot written to %s\n", o.Plot)
	}
	return d.rep, nil
}

func (d *driver) writeJSON() error { return writeResults(d.rep, d.o) }

// writeResults writes a report to o.Results ("-": standard output) in
// o.ResultsFormat.
func writeResults(rep *Report, o Options) error {
	var b []byte
	switch o.ResultsFormat {
	case FormatGoBench:
		var buf bytes.Buffer
		rep.WriteGoBench(&buf)
		b = buf.Bytes()
	default:
		j, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		b = append(j, '\n')
	}
	if o.Results == "-" {
		_, err := o.Stdout.Write(b)
		return err
	}
	if err := os.WriteFile(o.Results, b, 0o644); err != nil {
		return fmt.Errorf("bench: --results: %w", err)
	}
	return nil
}

// envs returns the UCX environment of the initiators and of the target
// and worker for the topology.
func (o *Options) envs() (initEnv, sideEnv []string) {
	common := []string{"UCX_WARN_UNUSED_ENV_VARS=n"}
	switch o.Topology {
	case TopologyDPU:
		dev := os.Getenv("UCX_NET_DEVICES")
		if dev == "" {
			dev = "lo" // one host: loopback stands for the DPU's network
		}
		initEnv = append(common, "UCX_TLS=tcp,self", "UCX_NET_DEVICES="+dev)
		sideEnv = append(append([]string(nil), common...), "UCX_TLS=shm,tcp,self", "UCX_NET_DEVICES="+dev)
	default:
		initEnv = append(common, "UCX_TLS=shm,self")
		sideEnv = append([]string(nil), initEnv...)
	}
	return initEnv, sideEnv
}

func (d *driver) run(ctx context.Context) error {
	initEnv, sideEnv := d.o.envs()
	d.rep.Env = map[string][]string{"initiator": initEnv, "target": sideEnv, "worker": sideEnv}
	if d.o.UROMAddress != "" {
		d.uromAddr = d.o.UROMAddress
	} else {
		sctx, cancel := context.WithCancel(context.Background())
		svc, err := service.New(sctx, service.Config{
			Listen:           "127.0.0.1:0",
			Builtins:         rdmoworker.Builtins(),
			PluginPath:       d.o.pluginPath(d.exe),
			Probe:            rdmoworker.Probe,
			Metrics:          rdmoworker.Metrics(),
			MaxWorkers:       4,
			WorkerCommand:    []string{d.exe},
			WorkerEnv:        append(append([]string{roleEnv + "=" + roleWorker}, d.o.ChildEnv...), sideEnv...),
			ComponentVersion: command.ComponentVersion,
			Logger:           d.log.Named("urom"),
		})
		if err != nil {
			cancel()
			return err
		}
		addr, err := svc.Listen()
		if err != nil {
			cancel()
			svc.Close()
			return err
		}
		d.svc, d.svcStop, d.svcDone, d.uromAddr = svc, cancel, make(chan struct{}), addr
		go func() { svc.Serve(sctx); close(d.svcDone) }()
		if d.o.MetricsAddr != "" {
			maddr, err := service.ServeMetrics(sctx, svc, d.o.MetricsAddr, d.log.Named("metrics"))
			if err != nil {
				return err
			}
			fmt.Fprintf(d.out.w, "worker metrics at http://%s/metrics\n", maddr)
		}
	}
	// The target asks the service for its workers with the UCX settings
	// only: the service refuses anything else in a worker's environment.
	// The embedded service gives its workers the rest itself (WorkerEnv).
	var spawnEnv []string
	for _, kv := range append(append([]string(nil), d.o.ChildEnv...), sideEnv...) {
		if name, _, _ := strings.Cut(kv, "="); service.SpawnEnvAllowed[name] {
			spawnEnv = append(spawnEnv, kv)
		}
	}
	wenv, _ := json.Marshal(spawnEnv)
	env := append(append([]string{roleEnv + "=" + roleTarget, envUROM + "=" + d.uromAddr, envWorkerEnv + "=" + string(wenv)}, d.o.ChildEnv...), sideEnv...)
	t, err := startChild("target", d.exe, d.o.TargetCPUs, env, d.o.Stderr)
	if err != nil {
		return err
	}
	d.target = t
	var ta struct {
		Addr []byte `json:"addr"`
	}
	if err := t.expect("TARGET", &ta, time.Minute); err != nil {
		return err
	}
	d.targetAddr = ta.Addr
	for i := 0; i < d.o.Initiators; i++ {
		env := append(append([]string{roleEnv + "=" + roleInit, envID + "=" + strconv.Itoa(i)}, d.o.ChildEnv...), initEnv...)
		c, err := startChild("initiator "+strconv.Itoa(i), d.exe, d.o.InitiatorCPUs, env, d.o.Stderr)
		if err != nil {
			return err
		}
		d.inits = append(d.inits, c)
	}
	for _, c := range d.inits {
		if err := c.expect("READY", nil, time.Minute); err != nil {
			return err
		}
		var tr struct {
			Transports []string `json:"transports"`
		}
		if err := c.call("target", map[string]any{"addr": d.targetAddr}, "OK", &tr, time.Minute); err != nil {
			return err
		}
		d.rep.InitiatorTransports = tr.Transports
	}
	if err := d.checkTransports(); err != nil {
		return err
	}
	for _, m := range d.o.Modes {
		if s := mustRow(m).worker(); s != "" && d.workers[s] == nil {
			if err := d.spawn(s); err != nil {
				if _, plugins := splitWorker(s); plugins == nil || d.workers[s] != nil {
					return err
				}
				if d.noWorker == nil {
					d.noWorker = map[string]error{}
				}
				d.noWorker[s] = err
			}
		}
	}
	d.out.header(d.rep)

	// Rows are interleaved: every pass runs one round of every row, so
	// each row's rounds are spread over the same stretch of time as the
	// baselines' (the machines are shared: a row measured alone, after
	// another, sees other weather). The first pass warms up.
	for i, size := range d.o.Sizes {
		var rows []*rowState
		for _, m := range d.o.Modes {
			if r := mustRow(m); !r.Sizeless || i == 0 {
				rows = append(rows, d.newRow(r, size))
			}
		}
		for pass := 0; ; pass++ {
			active := 0
			for _, rs := range rows {
				if rs.done {
					continue
				}
				active++
				if err := ctx.Err(); err != nil {
					return err
				}
				if err := d.runRound(rs, pass == 0); err != nil {
					return err
				}
			}
			if active == 0 {
				break
			}
		}
		for _, rs := range rows {
			d.rep.Rows = append(d.rep.Rows, rs.finish())
		}
	}
	return nil
}

// checkTransports makes sure the topology is what it claims: UCX picks
// shared memory between processes of one kernel whenever it may, so a DPU
// picture must see TCP between initiator and target.
func (d *driver) checkTransports() error {
	tr := d.rep.InitiatorTransports
	if d.o.Topology == TopologyDPU {
		for _, t := range tr {
			if t != "tcp" && t != "self" {
				return fmt.Errorf("bench: dpu topology, but the initiator reaches the target over %v (want tcp only)", tr)
			}
		}
	}
	return nil
}

// workerInfo is an RDMO worker the target started for the run.
type workerInfo struct {
	ID   uint64 `json:"id"`
	PID  int    `json:"pid"`
	Addr []byte `json:"addr"`
}

// spawn starts an RDMO worker with the strategy and connects every
// initiator to it (RQ_CREATE for each).
func (d *driver) spawn(strategy string) error {
	var w workerInfo
	if err := d.target.call("spawn", targetReq{Strategy: strategy, CPUs: d.o.WorkerCPUs}, "WORKER", &w, 2*time.Minute); err != nil {
		if _, plugins := splitWorker(strategy); plugins != nil {
			return fmt.Errorf("%w (the rows of %s need it on --plugin-path: make bench-plugins)", err, plugins[0])
		}
		return err
	}
	if d.workers == nil {
		d.workers = map[string]*workerInfo{}
	}
	d.workers[strategy] = &w
	for _, c := range d.inits {
		var a struct {
			Addr []byte `json:"addr"`
		}
		req := rdmoReq{Strategy: strategy, Addr: w.Addr, Client: clientID, Window: d.o.Window, Aggregate: d.o.Aggregate, Lend: d.o.LendPool, AckGroups: d.o.AckGroups, Large: d.o.LargeBatches, NoDetect: d.o.NoPeerDetection}
		if err := c.call("rdmo", req, "ADDR", &a, time.Minute); err != nil {
			return err
		}
		if err := d.target.call("rq", targetReq{Strategy: strategy, Addr: a.Addr, NoDetect: d.o.NoPeerDetection}, "RQ", nil, time.Minute); err != nil {
			return err
		}
	}
	return nil
}

func (d *driver) close() error {
	var errs []error
	// The initiators disconnect first (the worker then drops their
	// request queues), then the target stops its workers.
	for s := range d.workers {
		for _, c := range d.inits {
			errs = append(errs, c.call("rdmo-close", rdmoReq{Strategy: s}, "OK", nil, time.Minute))
		}
		errs = append(errs, d.target.call("stop-worker", targetReq{Strategy: s}, "OK", nil, 2*time.Minute))
	}
	for _, c := range d.inits {
		errs = append(errs, c.stop(20*time.Second))
	}
	if d.target != nil {
		errs = append(errs, d.target.stop(60*time.Second))
	}
	if d.svc != nil {
		d.svcStop()
		<-d.svcDone
		d.svc.Close()
	}
	return errors.Join(errs...)
}

func (d *driver) stats(strategy string) (dpu.Stats, error) {
	var st dpu.Stats
	err := d.target.call("stats", targetReq{Strategy: strategy}, "STATS", &st, time.Minute)
	return st, err
}

// rowState is a row being measured.
type rowState struct {
	def *rowDef
	row Row
	// windows are the measured rounds grouped into windows of about one
	// interval (addRate); last is the last round's rate, which sizes the
	// next round of rows that size theirs.
	windows []rateWindow
	window  time.Duration // a window's least length: the progress lines'
	last    float64
	cpu     cpuSample // CPU time of the measured rounds
	capOps  int
	layout  scatterLayout
	scat    queueInfo
	lat     Hist
	elapsed time.Duration
	perInit int // measured operations of the busiest initiator
	fig     WorkerFigures
	flow    *FlowFigures // the initiators' figures, if they reported any
	line    lineAcc
	done    bool
	short   bool // --short: no timing claims, so never stable
}

// A rateWindow is consecutive measured rounds counted together.
type rateWindow struct {
	ops uint64
	el  time.Duration
}

// addRate records a measured round. Rounds add up into windows of at least
// rs.window (the progress lines' length): a round that a full queue ended
// early (some 40 ms at 64 KiB on shared memory) is more exposed to a
// scheduler tick or a page-fault burst than an interval of them, and the
// spread of such rounds called a steady row unstable.
func (rs *rowState) addRate(ops uint64, el time.Duration) {
	if el <= 0 {
		return
	}
	rs.last = float64(ops) / el.Seconds()
	n := len(rs.windows)
	if n == 0 || rs.windows[n-1].el >= rs.window {
		rs.windows = append(rs.windows, rateWindow{})
		n++
	}
	rs.windows[n-1].ops += ops
	rs.windows[n-1].el += el
}

// rates are the windows' rates (operations per second). A last window
// shorter than half of rs.window is counted with the one before it.
func (rs *rowState) rates() []float64 {
	ws := rs.windows
	if n := len(ws); n >= 2 && ws[n-1].el < rs.window/2 {
		merged := rateWindow{ws[n-2].ops + ws[n-1].ops, ws[n-2].el + ws[n-1].el}
		ws = append(ws[:n-2:n-2], merged)
	}
	var r []float64
	for _, w := range ws {
		r = append(r, float64(w.ops)/w.el.Seconds())
	}
	return r
}

func (d *driver) newRow(def *rowDef, size int) *rowState {
	if def.Sizeless {
		size = 0
	}
	rs := &rowState{def: def, row: Row{Mode: def.Name, Size: size, Strategy: def.Strategy, Plugins: def.Plugins}, short: d.o.Short,
		window: d.o.Interval - d.o.Interval/10}
	if def.Capacity != nil {
		rs.capOps = def.Capacity(&d.o, size)
	}
	if def.IOVs > 0 {
		rs.layout = scatterLayout{IOVs: def.IOVs, Size: size, Lane: uint64(rs.capOps * size)}
	}
	return rs
}

func (rs *rowState) fail(err error) {
	rs.row.Error = err.Error()
	rs.done = true
}

// finish computes the row's figures from its measured rounds.
func (rs *rowState) finish() Row {
	row := rs.row
	if row.Error != "" {
		return row
	}
	row.Seconds = rs.elapsed.Seconds()
	if row.Seconds > 0 {
		row.Rate = float64(row.Ops) / row.Seconds
		row.MBps = float64(row.Bytes) / row.Seconds / 1e6
		row.LoadRate = float64(row.Load) / row.Seconds
	}
	row.P50, row.P99, row.Mean, row.LatSamples = rs.lat.Quantile(0.5), rs.lat.Quantile(0.99), rs.lat.Mean(), rs.lat.N
	if row.Ops > 0 {
		per := func(t cpuTime) float64 { return float64(t.total()) / float64(row.Ops) }
		row.CPUInitNsPerOp = per(rs.cpu.init)
		row.CPUWorkerNsPerOp = per(rs.cpu.worker)
		row.CPUTargetNsPerOp = per(rs.cpu.target)
		all := rs.cpu.init.add(rs.cpu.worker).add(rs.cpu.target)
		row.CPUNsPerOp = per(all)
		if all.total() > 0 {
			row.CPUSysShare = float64(all.sys) / float64(all.total())
		}
		perK := func(t cpuTime) float64 { return float64(t.switches) * 1000 / float64(row.Ops) }
		row.SwitchesInitPerKop, row.SwitchesWorkerPerKop = perK(rs.cpu.init), perK(rs.cpu.worker)
	}
	rates := rs.rates()
	for _, r := range rates {
		if row.RateMin == 0 || r < row.RateMin {
			row.RateMin = r
		}
		row.RateMax = max(row.RateMax, r)
	}
	row.Spread = spread(rates)
	// At least StableRounds windows, not only rounds: a second of 40 ms
	// rounds is one window, and its spread says nothing.
	row.Stable = !rs.short && row.Rounds >= StableRounds && len(rates) >= StableRounds && row.Spread <= StableSpread
	if row.Strategy != "" {
		f := rs.fig
		f.Requests = row.Ops
		if rs.def.Load {
			f.Requests = row.Load
		}
		f.finish()
		row.Worker = &f
	}
	if rs.flow != nil {
		f := *rs.flow
		if row.Ops > 0 {
			f.CreditWaitsPerKop = float64(f.CreditWaits) * 1000 / float64(row.Ops)
		}
		row.Flow = &f
	}
	row.Verified = !rs.def.NoData
	return row
}

// warmLapLimit bounds a queue row's warm-up, which fills the queue once, in
// intervals: a row too slow to fill it in that time starts its measured
// rounds with part of the queue cold.
const warmLapLimit = 10

// runRound runs one round of a row: prepares target memory, hands the
// round to every initiator at once, collects their results, checks the
// data, and (unless warming up) adds the round to the row. A round that
// loses data fails its row; an error stops the run.
func (d *driver) runRound(rs *rowState, warm bool) error {
	if rs.def.Drive != nil {
		return rs.def.Drive(d, rs, warm)
	}
	row := &rs.row
	wk := rs.def.worker() // the row's worker ("": none)
	if err := d.noWorker[wk]; err != nil {
		rs.fail(err)
		d.out.failed(rs.row)
		return nil
	}
	spec := roundSpec{
		Mode: row.Mode, Strategy: wk, Size: row.Size, Sample: d.o.Sample, Window: d.o.Window,
		Credit: d.o.Credit, Layout: rs.layout,
	}
	d.round++
	spec.Round = d.round
	if d.o.Duration > 0 {
		spec.Duration = d.o.Interval
		if !warm && d.o.Duration-rs.elapsed < spec.Duration {
			spec.Duration = max(d.o.Duration-rs.elapsed, 10*time.Millisecond)
		}
	}
	if warm && spec.Duration > 0 && rs.capOps > 0 && !rs.def.Load && d.o.MaxOps == 0 {
		// The warm-up writes the whole queue once (it ends when the
		// queue is full), so that the measured rounds write memory
		// already mapped into the worker and the target: the steady
		// state queue.go describes. One interval fills a 256 MiB queue
		// at 4 KiB and more, not at 64 B: there the first measured
		// rounds used to pay the rest of the queue's first touch (a
		// page fault per 4 KiB in the worker, counted in its CPU).
		spec.Duration = warmLapLimit * d.o.Interval
	}
	spec.MaxOps = d.o.MaxOps
	if !warm && d.o.MaxOps > 0 {
		spec.MaxOps = d.o.MaxOps - rs.perInit
	}
	if rs.capOps > 0 && !rs.def.Load && (spec.MaxOps == 0 || spec.MaxOps > rs.capOps) {
		spec.MaxOps = rs.capOps
	}
	if rs.def.Load {
		spec.LoadMax = rs.capOps
	}
	if rs.def.Setup != nil {
		if err := rs.def.Setup(d, rs, &spec); err != nil {
			rs.fail(err)
			return nil
		}
	}
	var before dpu.Stats
	if wk != "" {
		st, err := d.stats(wk)
		if err != nil {
			return err
		}
		before = st
		if !warm && row.Rounds == 0 {
			m := service.ReadProcessMemory(d.workers[wk].PID)
			row.WorkerRSSStart, row.WorkerAnonStart = m.RSS, m.Anon
		}
	}
	spin := wk == ""
	if spin {
		if err := d.target.call("spin", targetReq{On: true}, "OK", nil, time.Minute); err != nil {
			return err
		}
	}
	wpid := 0
	if w := d.workers[wk]; w != nil && wk != "" {
		wpid = w.PID
	}
	cpu0 := d.sampleCPU(wpid)
	res, err := d.roundTrip(spec)
	cpu := d.sampleCPU(wpid).sub(cpu0)
	if spin {
		if serr := d.target.call("spin", targetReq{On: false}, "OK", nil, time.Minute); serr != nil && err == nil {
			err = serr
		}
	}
	if err == nil {
		err = d.check(rs.def, spec, res)
	}
	if err != nil {
		rs.fail(err)
		d.out.failed(rs.row)
		return nil
	}
	var after dpu.Stats
	if wk != "" {
		st, err := d.stats(wk)
		if err != nil {
			return err
		}
		after = st
	}
	if warm {
		return nil
	}
	rr := sumRound(res)
	row.Rounds++
	row.Ops += rr.ops
	row.Bytes += rr.bytes
	row.Load += rr.load
	rs.elapsed += rr.elapsed
	rs.perInit += int(rr.maxOps)
	rs.addRate(rr.ops, rr.elapsed)
	rs.cpu = rs.cpu.add(cpu)
	if rr.flow != nil {
		if rs.flow == nil {
			rs.flow = &FlowFigures{}
		}
		rs.flow.add(rr.flow)
	}
	for i := range res {
		rs.lat.Merge(&res[i].Lat)
	}
	var delta *WorkerFigures
	if wk != "" {
		delta = statsDelta(before, after)
		rs.fig.add(delta)
		m := service.ReadProcessMemory(d.workers[wk].PID)
		row.WorkerRSSEnd, row.WorkerAnonEnd = m.RSS, m.Anon
		row.WorkerRSS = append(row.WorkerRSS, m.RSS)
		row.WorkerAnon = append(row.WorkerAnon, m.Anon)
		delta.Requests = rr.ops
		if rs.def.Load {
			delta.Requests = rr.load
		}
		delta.AMs = rr.msgs
		rs.fig.AMs += rr.msgs
		delta.finish()
	}
	rs.line.add(rr, res, delta)
	rs.done = d.o.Duration == 0 || rs.elapsed >= d.o.Duration || (d.o.MaxOps > 0 && rs.perInit >= d.o.MaxOps)
	// One progress line per interval of measurement, as the header says:
	// rounds that ended early (a full queue) add up into one line.
	if rs.done || rs.line.elapsed >= rs.window {
		d.out.interval(*row, rs.elapsed, &rs.line)
		rs.line = lineAcc{}
	}
	return nil
}

// roundTrip hands the round to every initiator at once and collects their
// results.
func (d *driver) roundTrip(spec roundSpec) ([]roundResult, error) {
	for _, c := range d.inits {
		if err := c.send("round", spec); err != nil {
			return nil, err
		}
	}
	res := make([]roundResult, len(d.inits))
	var errs []error
	for i, c := range d.inits {
		if err := c.expect("DONE", &res[i], spec.Duration+5*time.Minute); err != nil {
			errs = append(errs, err)
		}
	}
	return res, errors.Join(errs...)
}

// check has the target check the row's round (def.Check): that what the
// initiators report as done is in its memory (or reached its sink).
func (d *driver) check(def *rowDef, spec roundSpec, res []roundResult) error {
	if def.Check == nil {
		return nil
	}
	counts := make([]uint64, len(res))
	for i, r := range res {
		counts[i] = r.Ops
		if def.Load {
			counts[i] = r.Load
		}
	}
	req := targetReq{Mode: spec.Mode, Size: spec.Size, Round: spec.Round, Counts: counts, Layout: spec.Layout}
	return d.target.call("check", req, "CHECKED", nil, 5*time.Minute)
}

type roundSum struct {
	ops, bytes, load, maxOps, msgs uint64
	elapsed                        time.Duration
	flow                           *FlowFigures // nil: no initiator reported one
}

// sumRound adds up the initiators' results: the round lasted as long as
// its slowest initiator.
func sumRound(res []roundResult) roundSum {
	var s roundSum
	for _, r := range res {
		s.ops += r.Ops
		s.bytes += r.Bytes
		s.load += r.Load
		s.msgs += r.Msgs
		if r.Flow != nil {
			if s.flow == nil {
				s.flow = &FlowFigures{}
			}
			s.flow.add(r.Flow)
		}
		s.maxOps = max(s.maxOps, r.Ops)
		s.elapsed = max(s.elapsed, r.Elapsed)
	}
	return s
}

// statsDelta is the worker's counters over one round. Requests is left to
// the caller: the operations the initiators sent (the worker's own count
// depends on how requests were packed).
func statsDelta(a, b dpu.Stats) *WorkerFigures {
	f := &WorkerFigures{
		Flushes:    b.Requests[rdmo.OpFlush] - a.Requests[rdmo.OpFlush],
		UCXPuts:    b.TargetPuts - a.TargetPuts,
		MemcpyPuts: b.MemcpyPuts - a.MemcpyPuts,
		SyncOps:    b.SyncOps - a.SyncOps,
		Places:     b.Places - a.Places,
		Batches:    b.Batches - a.Batches,
		Batched:    b.BatchedRequests - a.BatchedRequests,
		Inline:     b.InlineBatches - a.InlineBatches,
	}
	for s, n := range b.Failures {
		f.Failures += n - a.Failures[s]
	}
	return f
}

func (f *WorkerFigures) add(o *WorkerFigures) {
	f.Flushes += o.Flushes
	f.UCXPuts += o.UCXPuts
	f.MemcpyPuts += o.MemcpyPuts
	f.SyncOps += o.SyncOps
	f.Places += o.Places
	f.Batches += o.Batches
	f.Batched += o.Batched
	f.Inline += o.Inline
	f.Failures += o.Failures
}

func (f *WorkerFigures) finish() {
	if f.Requests > 0 {
		r := float64(f.Requests)
		f.PutsPerOp = float64(f.UCXPuts+f.MemcpyPuts) / r
		f.WritesPerOp = float64(f.UCXPuts+f.MemcpyPuts+f.Places) / r
		f.AMsPerOp = float64(f.AMs) / r
		f.AccessesPerOp = float64(f.UCXPuts+f.MemcpyPuts+f.SyncOps+f.Places) / r
	}
	if f.Batches > 0 {
		f.BatchMean = float64(f.Batched) / float64(f.Batches)
	}
}

package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/cli"
	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// Topology says where the processes sit and which UCX transports they use.
type Topology string

const (
	// TopologyDPU: the RDMO worker sits next to the target (shared memory
	// and TCP between them, as on a DPU beside its host), the initiators
	// reach both the worker and the target over TCP only (UCX_TLS=tcp,self).
	TopologyDPU Topology = "dpu"
	// TopologySHM: every process on shared memory (UCX_TLS=shm,self).
	TopologySHM Topology = "shm"
)

// Options configure a benchmark run.
type Options struct {
	Topology   Topology
	Sizes      []int // message sizes in bytes (>= MinSize)
	Initiators int   // initiator processes
	// Modes are the rows to measure, by name (see the Mode constants;
	// scatter rows are "scatter/<iovs>"). Empty: all.
	Modes []string
	// IOVs are the scatter iov counts when Modes names "scatter".
	IOVs []int

	Duration time.Duration // measured time per row (after one warm-up round)
	Interval time.Duration // length of a round, and of a progress line
	// MaxOps caps a row's measured operations per initiator (0: none).
	MaxOps int
	// Window bounds the operations an initiator has outstanding: the RDMO
	// initiator's send window, native-pipelined's fetch-adds in flight.
	Window int
	// QueueBytes is the target memory per queue (and scatter region). A
	// round ends early when it is full; the queue is checked and reset.
	QueueBytes int
	// Sample: the latency of every Sample-th operation is measured (acks
	// for RDMO requests, echoes for AMs); round-trip rows measure all.
	Sample int
	// Seed is the workload row's first seed (each initiator and round
	// derives its own from it).
	Seed uint64
	// Short is the CI form: tiny counts, every check, no timing.
	Short bool
	// Credit bounds an initiator's RDMO requests past its last answered
	// flush (see creditor); 0: no bound.
	Credit int
	// Aggregate lets the RDMO initiators pack requests into BATCH
	// containers (initiator.Options.Aggregate).
	Aggregate bool
	// LendPool lets the RDMO initiators lend large records from a
	// LendPool the worker reads in place where it maps it (shared memory;
	// initiator.Options.Lend), instead of from Go memory, which goes
	// through the transport.
	LendPool bool
	// AckGroups lets the RDMO initiators take their acks in groups
	// (initiator.Options.GroupAcks).
	AckGroups bool
	// LargeBatches lets the RDMO initiators send containers of up to
	// 60 KiB, in one piece over shared memory
	// (initiator.Options.LargeBatches).
	LargeBatches bool
	// NoPeerDetection makes the RDMO initiators' endpoints and their
	// request queues' without peer-failure detection (docs/SECURITY.md
	// says what that trades: UCX 1.13 then has zero-copy rendezvous lanes).
	NoPeerDetection bool
	// Populate registers the append rows' queues with
	// target.RegisterOptions.Populate: the worker commits its mapping's
	// pages at MR_REG, before a round starts, instead of faulting them in
	// during the cold row's rounds.
	Populate bool

	Results string // the results: "" off, "-" standard output, else a file
	// ResultsFormat is FormatJSON (the report, for tools) or FormatGoBench
	// (Go benchmark lines, for benchstat).
	ResultsFormat string
	// ResultsFrom: run nothing; read this results file (JSON) and write it
	// to Results in ResultsFormat.
	ResultsFrom string
	Plot        string // SVG file of rate against size, "" none
	Wide        bool   // the table has every column, not only what fits 100 columns
	MetricsAddr string // serve the run's worker metrics here ("" none)
	UROMAddress string // an external UROM service ("" runs one in this process)
	// PluginPath lists the directories where the embedded UROM service
	// finds the handler-form rows' plugin binary and WebAssembly module
	// (rdmo-plugin-fetch-add, rdmo-plugin-fetch-add.wasm). Empty: the
	// directory plugins beside the executable (bin/plugins for bin/rdmo,
	// where `make bench-plugins` puts them).
	PluginPath []string

	WorkerCPUs, InitiatorCPUs, TargetCPUs string // taskset CPU lists ("" unpinned)
	// CPUProfile: every child process writes a CPU profile into this
	// directory (<role>-<pid>.pprof), for `go tool pprof`.
	CPUProfile string

	// Executable is the program re-executed in the benchmark's process
	// roles (default: this program).
	Executable string
	// ChildEnv is added to every child process's environment.
	ChildEnv []string
	Stdout   io.Writer
	Stderr   io.Writer
	Logger   *zap.Logger
}

// Defaults.
const (
	DefaultSize       = 64
	DefaultInitiators = 1
	DefaultDuration   = 5 * time.Second
	DefaultInterval   = time.Second
	DefaultWindow     = 1024
	DefaultQueueBytes = 256 << 20
	DefaultSample     = 128
	// DefaultCredit 0 leaves flow control to the initiator
	// (initiator.Options.Credits).
	DefaultCredit = 0
)

// DefaultOptions returns the defaults: DPU topology, 64-byte messages, one
// initiator, every row.
func DefaultOptions() Options {
	return Options{
		Topology:      TopologyDPU,
		Sizes:         []int{DefaultSize},
		Initiators:    DefaultInitiators,
		IOVs:          []int{1, 4, 16},
		Duration:      DefaultDuration,
		Interval:      DefaultInterval,
		Window:        DefaultWindow,
		QueueBytes:    DefaultQueueBytes,
		Sample:        DefaultSample,
		Credit:        DefaultCredit,
		Seed:          1,
		ResultsFormat: FormatJSON,
		Aggregate:     initiator.AggregateSupported(dpu.Capabilities()),
		LendPool:      initiator.LendSupported(dpu.Capabilities()),
		AckGroups:     initiator.AckGroupSupported(dpu.Capabilities()),
		LargeBatches:  initiator.LargeBatchSupported(dpu.Capabilities()),
	}
}

// The --results formats.
const (
	FormatJSON    = "json"
	FormatGoBench = "gobench"
)

// validate checks and completes the options.
func (o *Options) validate() error {
	switch o.ResultsFormat {
	case "", FormatJSON:
		o.ResultsFormat = FormatJSON
	case FormatGoBench:
		if o.Results == "" {
			o.Results = "-"
		}
	default:
		return fmt.Errorf("--results-format %q; valid: %s, %s", o.ResultsFormat, FormatJSON, FormatGoBench)
	}
	switch o.Topology {
	case TopologyDPU, TopologySHM:
	default:
		return fmt.Errorf("--topology: %q; valid: dpu, shm", o.Topology)
	}
	if len(o.Sizes) == 0 {
		o.Sizes = []int{DefaultSize}
	}
	for _, s := range o.Sizes {
		if s < MinSize || s > 1<<20 {
			return fmt.Errorf("--size %d: want %d bytes to 1 MiB", s, MinSize)
		}
	}
	if len(o.IOVs) == 0 {
		o.IOVs = []int{1, 4, 16}
	}
	for _, k := range o.IOVs {
		if k < 1 || k > 1024 {
			return fmt.Errorf("--iovs %d: want 1 to 1024", k)
		}
	}
	if o.Initiators < 1 || o.Initiators > 64 {
		return fmt.Errorf("--initiators %d: want 1 to 64", o.Initiators)
	}
	modes, err := expandModes(o.Modes, o.IOVs)
	if err != nil {
		return err
	}
	if o.Initiators > 1 {
		// One writer owns the tail: with several initiators there is no
		// such writer. Dropped from groups, refused by name.
		for _, m := range o.Modes {
			m = strings.ToLower(strings.TrimSpace(m))
			if r, ok := rowByName(m); ok && r.SingleWriter {
				return fmt.Errorf("mode %s: a single writer owns the queue; it runs with --initiators 1", m)
			}
		}
		modes = slices.DeleteFunc(modes, func(m string) bool { return mustRow(m).SingleWriter })
	}
	o.Modes = modes
	for _, m := range o.Modes {
		if mustRow(m).IOVs > 0 && slices.Max(o.Sizes) > 65535 {
			return fmt.Errorf("--size %d: scatter chunks are at most 65535 bytes", slices.Max(o.Sizes))
		}
	}
	if o.Duration < 0 || o.Interval <= 0 {
		return fmt.Errorf("--duration must not be negative and --interval must be positive")
	}
	if o.Window < 1 {
		o.Window = DefaultWindow
	}
	if o.QueueBytes <= 0 {
		o.QueueBytes = DefaultQueueBytes
	}
	if o.Sample < 1 {
		o.Sample = 1
	}
	if o.Credit < 0 {
		return fmt.Errorf("--credit must not be negative")
	}
	if o.Short {
		o.Duration = 0
		if o.QueueBytes > 4<<20 {
			o.QueueBytes = 4 << 20
		}
		if o.MaxOps == 0 {
			o.MaxOps = 400
		}
		if o.Sample > 16 {
			o.Sample = 16
		}
	}
	maxSize := 0
	for _, s := range o.Sizes {
		maxSize = max(maxSize, s)
	}
	maxIOVs, scatters := 1, false
	for _, m := range o.Modes {
		if k := mustRow(m).IOVs; k > 0 {
			maxIOVs, scatters = max(maxIOVs, k), true
		}
	}
	if scatters {
		// A scatter goes eager, whole: the worker refuses one larger than
		// its eager payload limit (LengthOverflow).
		if payload := maxIOVs * (wire.IOVDescLen + maxSize); payload > dpu.DefaultMaxEagerPayload {
			return fmt.Errorf("--iovs %d × --size %d: a scatter payload of %d bytes exceeds the worker's eager payload limit of %d bytes",
				maxIOVs, maxSize, payload, dpu.DefaultMaxEagerPayload)
		}
	}
	need := queueSlotBytes + o.Initiators*maxIOVs*maxSize*16
	if o.Short {
		o.QueueBytes = max(o.QueueBytes, need) // the short cap, but room for the largest size
	}
	if o.QueueBytes < need {
		return fmt.Errorf("--queue-mb: %d bytes hold fewer than 16 operations per initiator of the largest size; want at least %d", o.QueueBytes, need)
	}
	if o.CPUProfile != "" {
		if err := os.MkdirAll(o.CPUProfile, 0o755); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		for _, e := range profileEnv(o.CPUProfile) {
			if !slices.Contains(o.ChildEnv, e) {
				o.ChildEnv = append(o.ChildEnv, e)
			}
		}
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return nil
}

// FlagSet returns the benchmark's own flags, bound to o. `rdmo bench`
// accepts them besides its common flags (see SplitArgs).
func FlagSet(o *Options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("rdmo bench", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.Var((*topologyValue)(&o.Topology), "topology", "Where the processes sit: dpu (worker next to the target on shared memory, initiators over TCP) or shm (all on shared memory)")
	fs.Var((*intsValue)(&o.Sizes), "size", "Message size(s) in bytes, comma-separated (e.g. 8,64,512,4096)")
	fs.IntVar(&o.Initiators, "initiators", o.Initiators, "Initiator processes")
	fs.StringSliceVar(&o.Modes, "modes", o.Modes, "Rows to measure (default: all but ops): perftest[-am|-put], raw-am, am-pingpong, native-owned (one initiator only), native-append[/blocking|/pipelined], rdmo-append[/owned|/shared], scatter[/N], flush[/idle|/load], workload (the demo's mix, rdmo -m client), baselines, ops (chase/N, kv-lookup, fetch-add inside initiator.Drive, their /call twins with Initiator.Call, chase/4/pipelined (many chases in flight: the rate at saturation), and their native-* rows), forms (fetch-add/pipelined, fetch-add/wasm[/pipelined] and fetch-add/plugin[/pipelined]: the same handler as a WebAssembly module in the worker and as a plugin process, from --plugin-path), all")
	fs.Var((*intsValue)(&o.IOVs), "iovs", "Scatter iov counts of the scatter rows")
	// The rule of every duration flag of rdmo (cli.ParseDuration): "5s",
	// or a bare number of seconds.
	cli.DurationVar(fs, &o.Duration, "duration", "Measured time per row (after one warm-up round): "+cli.DurationHelp)
	cli.DurationVar(fs, &o.Interval, "interval", "Length of a round and of a progress line: "+cli.DurationHelp)
	fs.IntVar(&o.MaxOps, "count", o.MaxOps, "Cap on a row's measured operations per initiator (0: none; --ops sets it too)")
	fs.IntVar(&o.Window, "window", o.Window, "Operations an initiator keeps outstanding (RDMO send window, native-pipelined fetch-adds)")
	fs.Var((*mibValue)(&o.QueueBytes), "queue-mb", "Target memory per queue in MiB; a round ends early when its queue is full")
	fs.IntVar(&o.Sample, "sample", o.Sample, "Measure the latency of every N-th operation of the streaming rows")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "The workload row's seed (each initiator and round derives its own from it)")
	fs.BoolVar(&o.Short, "short", o.Short, "CI form: small counts, every data check, no timing claims")
	fs.IntVar(&o.Credit, "credit", o.Credit, "application-level pacing: RDMO requests an initiator may have past its last answered flush of its own (0: only the initiator's built-in flow control)")
	fs.BoolVar(&o.NoPeerDetection, "no-peer-detection", o.NoPeerDetection, "RDMO initiators' endpoints (and the worker's to them) without peer-failure detection")
	fs.BoolVar(&o.Populate, "populate", o.Populate, "Register the append rows' queues with their pages populated (the worker commits its mapping at MR_REG, outside the rounds)")
	fs.BoolVar(&o.Aggregate, "aggregate", o.Aggregate, "Let RDMO initiators pack queued requests into BATCH messages")
	fs.BoolVar(&o.AckGroups, "ack-groups", o.AckGroups, "Let RDMO initiators take the acks of their calls in groups, many in one message")
	fs.BoolVar(&o.LargeBatches, "large-batches", o.LargeBatches, "Let RDMO initiators send BATCH messages of up to 60 KiB (in one piece over shared memory) instead of 8 KiB")
	fs.BoolVar(&o.LendPool, "lend-pool", o.LendPool, "Let RDMO initiators lend records of 4 KiB and more from a lend pool the worker reads in place where it can (shared memory), instead of from Go buffers")
	fs.StringVar(&o.Results, "results", o.Results, "Write the results as JSON to this file (- for standard output); -j/--json stays the DOCA params file")
	fs.StringVar(&o.ResultsFormat, "results-format", o.ResultsFormat, "Format of --results: json (the report) or gobench (Go benchmark lines for benchstat; --results defaults to standard output)")
	fs.StringVar(&o.ResultsFrom, "results-from", o.ResultsFrom, "Run nothing: read a JSON results file written by --results and write it again in --results-format")
	fs.BoolVar(&o.Wide, "wide", o.Wide, "Print every column of the table (default: what fits 100 columns; the JSON results have everything)")
	fs.StringVar(&o.Plot, "plot", o.Plot, "Write an SVG plot of rate against message size per row to this file")
	cli.PathListVar(fs, (*cli.PathList)(&o.PluginPath), "plugin-path", "Directories, ':'-separated, where the embedded UROM service finds the plugin binary and WebAssembly module of the fetch-add/plugin and fetch-add/wasm rows (default: plugins beside this executable; make bench-plugins builds them into bin/plugins)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", o.MetricsAddr, "Serve the run's worker metrics (Prometheus) on host:port")
	fs.StringVar(&o.WorkerCPUs, "worker-cpus", o.WorkerCPUs, "Pin the RDMO worker process to these CPUs (taskset list)")
	fs.StringVar(&o.InitiatorCPUs, "initiator-cpus", o.InitiatorCPUs, "Pin the initiator processes to these CPUs")
	fs.StringVar(&o.TargetCPUs, "target-cpus", o.TargetCPUs, "Pin the target process to these CPUs")
	fs.StringVar(&o.CPUProfile, "cpuprofile", o.CPUProfile, "Write CPU (and heap) profiles of every process (worker, target, initiators) into this directory, in 5 s segments (the worker's only with the embedded UROM service)")
	return fs
}

type topologyValue Topology

func (t *topologyValue) String() string { return string(*t) }
func (t *topologyValue) Type() string   { return "{dpu, shm}" }
func (t *topologyValue) Set(s string) error {
	switch v := Topology(strings.ToLower(strings.TrimSpace(s))); v {
	case TopologyDPU, TopologySHM:
		*t = topologyValue(v)
		return nil
	}
	return fmt.Errorf("invalid topology %q; valid: dpu, shm", s)
}

type intsValue []int

func (v *intsValue) String() string {
	var s []string
	for _, n := range *v {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, ",")
}
func (v *intsValue) Type() string { return "N[,N...]" }
func (v *intsValue) Set(s string) error {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := parseSize(f)
		if err != nil {
			return err
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return fmt.Errorf("empty list")
	}
	*v = out
	return nil
}

// parseSize reads "64", "4k", "1m".
func parseSize(s string) (int, error) {
	mul := 1
	switch {
	case strings.HasSuffix(strings.ToLower(s), "k"):
		mul, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(strings.ToLower(s), "m"):
		mul, s = 1<<20, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid number %q", s)
	}
	return n * mul, nil
}

type mibValue int

func (m *mibValue) String() string { return strconv.Itoa(int(*m) >> 20) }
func (m *mibValue) Type() string   { return "MiB" }
func (m *mibValue) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 1<<14 {
		return fmt.Errorf("invalid size %q; want 1 to 16384 MiB", s)
	}
	*m = mibValue(n << 20)
	return nil
}

// pluginPath is the embedded service's plugin path for the run's
// executable exe (PluginPath's default resolved).
func (o *Options) pluginPath(exe string) []string {
	if len(o.PluginPath) > 0 {
		return o.PluginPath
	}
	dir := filepath.Join(filepath.Dir(exe), "plugins")
	if _, err := os.Stat(dir); err != nil {
		return nil // no plugins built: the service has nothing to warn about
	}
	return []string{dir}
}

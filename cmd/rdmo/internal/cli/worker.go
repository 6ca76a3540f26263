package cli

import (
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/openrdmo/rdmo/internal/limits"
)

// GroupWorker is the params-file group of `rdmo dpu --config` that holds
// the limits of the RDMO workers the service spawns:
//
//	"worker": {"max-in-flight-per-rq": 256, "max-clients": 16}
//
// A key K of the group sets the flag --worker-K (WorkerFlagPrefix); the
// flat spelling "worker-K" at the top level does too.
const GroupWorker = "worker"

// WorkerFlagPrefix starts the long name of every worker limit flag.
const WorkerFlagPrefix = "worker-"

// GroupWorkerFlags is the help heading of the worker limit flags.
const GroupWorkerFlags = "Worker Limits"

// DefaultWorkerDrainTimeout is the default of the worker limit
// "drain-timeout", which the service also waits on SIGTERM.
const DefaultWorkerDrainTimeout = limits.DefaultDrainTimeout

// WorkerLimits are the limits of every RDMO worker process a `rdmo dpu`
// service spawns: the limits of dpu.Config, under the same names (the
// worker limits table, internal/limits, applies to both by field name).
// The service hands them to each worker (urom.Config.WorkerSettings, see
// Settings); a host cannot change them. 0 means the dpu default.
type WorkerLimits struct {
	MaxInFlightPerRQ    int           // "max-in-flight-per-rq": requests of one queue accepted and not completed
	MaxClients          int           // "max-clients": clients (targets) of one worker
	MaxRQsPerClient     int           // "max-rqs-per-client": request queues of one client
	MaxRegionsPerClient int           // "max-regions-per-client": registered regions of one client
	MaxRendezvousFetch  int           // "max-rendezvous-fetch": bytes of a rendezvous payload brought into worker memory
	MaxEagerPayload     int           // "max-eager-payload": bytes of an eager payload
	MaxBatch            int           // "max-batch": requests per handler call
	DrainTimeout        time.Duration // "drain-timeout": how long a closing queue waits for its requests
	MaxWasmMemory       int           // "max-wasm-memory": bytes of linear memory of one WebAssembly handler instance
}

// DefaultWorkerLimits are the dpu defaults.
func DefaultWorkerLimits() WorkerLimits {
	var l WorkerLimits
	for _, lim := range limits.Table {
		lim.Set(&l, lim.Default)
	}
	return l
}

// WorkerSettingKeys lists the keys of the "worker" group, in help order.
func WorkerSettingKeys() []string {
	keys := make([]string, len(limits.Table))
	for i, l := range limits.Table {
		keys[i] = l.Key
	}
	return keys
}

// RegisterFlags adds the --worker-* flags to fs, bound to l.
func (l *WorkerLimits) RegisterFlags(fs *pflag.FlagSet) {
	for _, lim := range limits.Table {
		name := WorkerFlagPrefix + lim.Key
		fs.Var(&limitFlag{lim: lim, dst: l}, name, lim.Help)
		Annotate(fs, name, GroupWorkerFlags, lim.Unit.Arg())
	}
}

// Validate checks the limits (values set through a flag or a file are
// checked as they are parsed; this catches a WorkerLimits built in code).
func (l WorkerLimits) Validate() error {
	for _, lim := range limits.Table {
		if v := lim.Get(&l); v < 0 {
			return Usagef("worker limit %q (--%s%s): negative (%s)", lim.Key, WorkerFlagPrefix, lim.Key, lim.Format(v))
		}
	}
	return nil
}

// Settings spells the limits as the settings a worker process is started
// with (urom.Config.WorkerSettings, read by rdmoworker.ApplySettings): the
// keys of the "worker" group, integers in decimal, the drain timeout as a
// Go duration.
func (l WorkerLimits) Settings() map[string]string {
	return limits.Settings(&l)
}

// limitFlag is a worker limit as a flag, bound to its field of dst: a
// value limits.Limit.Parse reads; a duration may also be a number of
// seconds (a params file may give 5 or 0.5).
type limitFlag struct {
	lim limits.Limit
	dst *WorkerLimits
}

func (f *limitFlag) String() string {
	if f.dst == nil {
		return ""
	}
	return f.lim.Format(f.lim.Get(f.dst))
}

func (f *limitFlag) Type() string {
	if f.lim.Unit == limits.Duration {
		return "duration"
	}
	return "N"
}

func (f *limitFlag) Set(s string) error {
	if f.lim.Unit != limits.Duration {
		v, err := f.lim.Parse(s)
		if err != nil {
			return err
		}
		f.lim.Set(f.dst, v)
		return nil
	}
	d, err := ParseDuration(s) // the binary's one rule for durations
	if err != nil {
		return err
	}
	f.lim.Set(f.dst, int64(d))
	return nil
}

// workerFileKeys lists the keys fs accepts in the "worker" group, sorted.
func workerFileKeys(fs *pflag.FlagSet) []string {
	var keys []string
	fs.VisitAll(func(f *pflag.Flag) {
		if k, ok := strings.CutPrefix(f.Name, WorkerFlagPrefix); ok && !f.Hidden {
			keys = append(keys, k)
		}
	})
	sort.Strings(keys)
	return keys
}

package cli

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
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

// The defaults of the worker limits: those of dpu.Config (the dpu
// package's Default* constants; urom/rdmoworker's tests check they agree).
const (
	DefaultWorkerMaxInFlightPerRQ    = 1024
	DefaultWorkerMaxClients          = 64
	DefaultWorkerMaxRQsPerClient     = 64
	DefaultWorkerMaxRegionsPerClient = 1024
	DefaultWorkerMaxRendezvousFetch  = 1 << 20
	DefaultWorkerMaxEagerPayload     = 1 << 20
	DefaultWorkerMaxBatch            = 1024
	DefaultWorkerDrainTimeout        = 5 * time.Second
	DefaultWorkerMaxWasmMemory       = 128 << 20 // wasmhost.DefaultMemoryLimit
)

// WorkerLimits are the limits of every RDMO worker process a `rdmo dpu`
// service spawns: the limits of dpu.Config, under the same names. The
// service hands them to each worker (urom.Config.WorkerSettings, see
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
	return WorkerLimits{
		MaxInFlightPerRQ:    DefaultWorkerMaxInFlightPerRQ,
		MaxClients:          DefaultWorkerMaxClients,
		MaxRQsPerClient:     DefaultWorkerMaxRQsPerClient,
		MaxRegionsPerClient: DefaultWorkerMaxRegionsPerClient,
		MaxRendezvousFetch:  DefaultWorkerMaxRendezvousFetch,
		MaxEagerPayload:     DefaultWorkerMaxEagerPayload,
		MaxBatch:            DefaultWorkerMaxBatch,
		DrainTimeout:        DefaultWorkerDrainTimeout,
		MaxWasmMemory:       DefaultWorkerMaxWasmMemory,
	}
}

// workerLimit describes one worker limit: its key (the worker setting and,
// with WorkerFlagPrefix, the flag), its help text, and its field.
type workerLimit struct {
	key   string
	usage string
	arg   string
	count func(*WorkerLimits) *int           // integer limits
	dur   func(*WorkerLimits) *time.Duration // DrainTimeout
}

var workerLimits = []workerLimit{
	{key: "max-in-flight-per-rq", arg: "<N>", count: func(l *WorkerLimits) *int { return &l.MaxInFlightPerRQ },
		usage: "Requests of one request queue a worker accepts before they complete; more fail with TooManyInFlight. Initiators learn it (CLIENT_INIT) and keep within it"},
	{key: "max-clients", arg: "<N>", count: func(l *WorkerLimits) *int { return &l.MaxClients },
		usage: "Clients (targets, CLIENT_INIT) of one worker"},
	{key: "max-rqs-per-client", arg: "<N>", count: func(l *WorkerLimits) *int { return &l.MaxRQsPerClient },
		usage: "Request queues (RQ_CREATE) of one client"},
	{key: "max-regions-per-client", arg: "<N>", count: func(l *WorkerLimits) *int { return &l.MaxRegionsPerClient },
		usage: "Registered memory regions (MR_REG) of one client"},
	{key: "max-rendezvous-fetch", arg: "<bytes>", count: func(l *WorkerLimits) *int { return &l.MaxRendezvousFetch },
		usage: "Largest rendezvous payload a worker brings into its own memory"},
	{key: "max-eager-payload", arg: "<bytes>", count: func(l *WorkerLimits) *int { return &l.MaxEagerPayload },
		usage: "Largest eager payload (of a request, or a batch container) a worker accepts"},
	{key: "max-batch", arg: "<N>", count: func(l *WorkerLimits) *int { return &l.MaxBatch },
		usage: "Most requests handed to one handler call"},
	{key: "drain-timeout", arg: "<duration>", dur: func(l *WorkerLimits) *time.Duration { return &l.DrainTimeout },
		usage: "How long a closing request queue waits for its requests, and how long the service, on SIGTERM, lets hosts keep their workers: " + DurationHelp + "; 0: the default"},
	{key: "max-wasm-memory", arg: "<bytes>", count: func(l *WorkerLimits) *int { return &l.MaxWasmMemory },
		usage: "Linear memory of one instance of a WebAssembly handler module (rdmo-plugin-NAME.wasm); a module that grows past it traps and its batch fails"},
}

// WorkerSettingKeys lists the keys of the "worker" group, in help order.
func WorkerSettingKeys() []string {
	keys := make([]string, len(workerLimits))
	for i, l := range workerLimits {
		keys[i] = l.key
	}
	return keys
}

// RegisterFlags adds the --worker-* flags to fs, bound to l.
func (l *WorkerLimits) RegisterFlags(fs *pflag.FlagSet) {
	for _, wl := range workerLimits {
		name := WorkerFlagPrefix + wl.key
		if wl.count != nil {
			fs.Var((*limitValue)(wl.count(l)), name, wl.usage)
		} else {
			DurationVar(fs, wl.dur(l), name, wl.usage)
		}
		Annotate(fs, name, GroupWorkerFlags, wl.arg)
	}
}

// Validate checks the limits (values set through a flag or a file are
// checked as they are parsed; this catches a WorkerLimits built in code).
func (l WorkerLimits) Validate() error {
	for _, wl := range workerLimits {
		if wl.count != nil && *wl.count(&l) < 0 {
			return Usagef("worker limit %q (--%s%s): negative (%d)", wl.key, WorkerFlagPrefix, wl.key, *wl.count(&l))
		}
		if wl.dur != nil && *wl.dur(&l) < 0 {
			return Usagef("worker limit %q (--%s%s): negative (%v)", wl.key, WorkerFlagPrefix, wl.key, *wl.dur(&l))
		}
	}
	return nil
}

// Settings spells the limits as the settings a worker process is started
// with (urom.Config.WorkerSettings, read by rdmoworker.ApplySettings): the
// keys of the "worker" group, integers in decimal, the drain timeout as a
// Go duration.
func (l WorkerLimits) Settings() map[string]string {
	m := make(map[string]string, len(workerLimits))
	for _, wl := range workerLimits {
		if wl.count != nil {
			m[wl.key] = strconv.Itoa(*wl.count(&l))
		} else {
			m[wl.key] = wl.dur(&l).String()
		}
	}
	return m
}

// limitValue is a worker limit: a whole number of at least 0 (0: the
// default of the worker).
type limitValue int

func (v limitValue) String() string { return strconv.Itoa(int(v)) }
func (v *limitValue) Type() string  { return "N" }
func (v *limitValue) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return fmt.Errorf("invalid limit %q; want a whole number of at least 0 (0: the default)", s)
	}
	*v = limitValue(n)
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

// Package limits is the one table of an RDMO worker's limits (name, key,
// default, unit, help), read by dpu, the rdmo CLI and urom/rdmoworker.
//
// dpu.Config takes its defaults from it, `rdmo dpu` its --worker-* flags and
// the "worker" group of its params file, and a worker process the settings
// its service starts it with (urom.Config.WorkerSettings). A limit applies
// to a struct by its field name (Limit.Field): dpu.Config, and the CLI's
// WorkerLimits, have a field of that name for every limit.
package limits

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/openrdmo/rdmo/rdmo/wire"
)

// Unit is what a limit counts.
type Unit uint8

// The units of the limits.
const (
	Count    Unit = iota // requests, clients, queues, regions (an int field)
	Bytes                // bytes (an int field)
	Duration             // a time.Duration field, spelled as a Go duration ("5s")
)

// Arg is the placeholder of a value of the unit in help text.
func (u Unit) Arg() string {
	switch u {
	case Bytes:
		return "<bytes>"
	case Duration:
		return "<duration>"
	}
	return "<N>"
}

// Limit is one limit of a worker.
type Limit struct {
	// Field names the dpu.Config field the limit sets: an int, or a
	// time.Duration for the unit Duration.
	Field string
	// Key spells the limit in a worker's settings and in the "worker"
	// group of `rdmo dpu --config`; the CLI's flag is "--worker-" + Key.
	Key string
	// Default is the value of a field left 0: the count or the bytes, or
	// the nanoseconds of a Duration.
	Default int64
	Unit    Unit
	// Help is the flag's usage text.
	Help string
	// NotEngine marks a limit the worker process applies outside
	// dpu.Config (to its WebAssembly handlers): dpu.Config has no field
	// for it, and Apply only checks its value there.
	NotEngine bool
}

// Keys of the limits.
const (
	KeyMaxInFlightPerRQ    = "max-in-flight-per-rq"
	KeyMaxClients          = "max-clients"
	KeyMaxRQsPerClient     = "max-rqs-per-client"
	KeyMaxRegionsPerClient = "max-regions-per-client"
	KeyMaxRendezvousFetch  = "max-rendezvous-fetch"
	KeyMaxEagerPayload     = "max-eager-payload"
	KeyMaxBatch            = "max-batch"
	KeyDrainTimeout        = "drain-timeout"
	KeyMaxWasmMemory       = "max-wasm-memory"
)

// Defaults of the limits (dpu's Default* constants are these).
const (
	// DefaultMaxInFlightPerRQ is the protocol's (an initiator that does
	// not learn the worker's limit assumes it).
	DefaultMaxInFlightPerRQ    = wire.DefaultMaxInFlightPerRQ
	DefaultMaxClients          = 64
	DefaultMaxRQsPerClient     = 64
	DefaultMaxRegionsPerClient = 1024
	DefaultMaxRendezvousFetch  = 1 << 20
	DefaultMaxEagerPayload     = 1 << 20
	DefaultMaxBatch            = 1024
	DefaultDrainTimeout        = 5 * time.Second
	DefaultMaxWasmMemory       = 128 << 20 // rdmo/plugin/wasmhost.DefaultMemoryLimit
)

// Table lists the limits, in help order. Read only.
var Table = []Limit{
	{"MaxInFlightPerRQ", KeyMaxInFlightPerRQ, DefaultMaxInFlightPerRQ, Count,
		"Requests of one request queue a worker accepts before they complete; more fail with TooManyInFlight. Initiators learn it (CLIENT_INIT) and keep within it", false},
	{"MaxClients", KeyMaxClients, DefaultMaxClients, Count,
		"Clients (targets, CLIENT_INIT) of one worker", false},
	{"MaxRQsPerClient", KeyMaxRQsPerClient, DefaultMaxRQsPerClient, Count,
		"Request queues (RQ_CREATE) of one client", false},
	{"MaxRegionsPerClient", KeyMaxRegionsPerClient, DefaultMaxRegionsPerClient, Count,
		"Registered memory regions (MR_REG) of one client", false},
	{"MaxRendezvousFetch", KeyMaxRendezvousFetch, DefaultMaxRendezvousFetch, Bytes,
		"Largest rendezvous payload a worker brings into its own memory", false},
	{"MaxEagerPayload", KeyMaxEagerPayload, DefaultMaxEagerPayload, Bytes,
		"Largest eager payload (of a request, or a batch container) a worker accepts", false},
	{"MaxBatch", KeyMaxBatch, DefaultMaxBatch, Count,
		"Most requests handed to one handler call", false},
	{"DrainTimeout", KeyDrainTimeout, int64(DefaultDrainTimeout), Duration,
		"How long a closing request queue waits for its requests, and how long the service, on SIGTERM, lets hosts keep their workers (e.g. 5s; a number is seconds)", false},
	{"MaxWasmMemory", KeyMaxWasmMemory, DefaultMaxWasmMemory, Bytes,
		"Linear memory of one instance of a WebAssembly handler module (rdmo-plugin-NAME.wasm); a module that grows past it traps and its batch fails", true},
}

// Lookup finds the limit with the key.
func Lookup(key string) (Limit, bool) {
	for _, l := range Table {
		if l.Key == key {
			return l, true
		}
	}
	return Limit{}, false
}

// Format spells a value of the limit as Parse reads it: decimal, or a Go
// duration.
func (l Limit) Format(v int64) string {
	if l.Unit == Duration {
		return time.Duration(v).String()
	}
	return strconv.FormatInt(v, 10)
}

// Parse reads a value of the limit, at least 0 (0: the default).
func (l Limit) Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if l.Unit == Duration {
		d, err := time.ParseDuration(t)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("invalid duration %q; want a duration of at least 0 such as 5s", s)
		}
		return int64(d), nil
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid limit %q; want a whole number of at least 0 (0: the default)", s)
	}
	return int64(n), nil
}

// Addr returns the field of the limit in the struct dst points to: an
// *int, or a *time.Duration for the unit Duration. It panics if the struct
// has no such field (the tests of dpu and of the CLI read every limit).
func (l Limit) Addr(dst any) any {
	f := reflect.ValueOf(dst).Elem().FieldByName(l.Field)
	if !f.IsValid() {
		panic(fmt.Sprintf("limits: %T has no field %s", dst, l.Field))
	}
	return f.Addr().Interface()
}

// Get reads the limit's field of the struct dst points to.
func (l Limit) Get(dst any) int64 {
	switch p := l.Addr(dst).(type) {
	case *int:
		return int64(*p)
	case *time.Duration:
		return int64(*p)
	}
	panic(fmt.Sprintf("limits: field %s of %T is neither an int nor a time.Duration", l.Field, dst))
}

// Set writes the limit's field of the struct dst points to.
func (l Limit) Set(dst any, v int64) {
	switch p := l.Addr(dst).(type) {
	case *int:
		*p = int(v)
	case *time.Duration:
		*p = time.Duration(v)
	default:
		panic(fmt.Sprintf("limits: field %s of %T is neither an int nor a time.Duration", l.Field, dst))
	}
}

// Apply sets the limits of the struct dst points to from settings keyed by
// Key (a worker's settings), in key order: a missing key leaves its field
// as it is; an unknown key or a value Parse refuses is an error naming the
// key.
func Apply(dst any, settings map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		l, ok := Lookup(k)
		if !ok {
			return fmt.Errorf("unknown worker setting %q (a newer rdmo dpu than this worker?)", k)
		}
		v, err := l.Parse(settings[k])
		if err != nil {
			return fmt.Errorf("worker setting %s: %w", k, err)
		}
		if l.NotEngine && !l.In(dst) {
			continue // checked; applied by whoever has the field
		}
		l.Set(dst, v)
	}
	return nil
}

// In reports whether the struct dst points to has the limit's field.
func (l Limit) In(dst any) bool {
	return reflect.ValueOf(dst).Elem().FieldByName(l.Field).IsValid()
}

// Settings spells the limits of the struct src points to as a worker's
// settings, the inverse of Apply.
func Settings(src any) map[string]string {
	m := make(map[string]string, len(Table))
	for _, l := range Table {
		if l.NotEngine && !l.In(src) {
			continue
		}
		m[l.Key] = l.Format(l.Get(src))
	}
	return m
}

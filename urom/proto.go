package urom

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Message kinds between hosts and the service.
const (
	kindHello      = "hello"
	kindAuth       = "auth" // the host's proof, with a shared secret (auth.go)
	kindPlugins    = "plugins"
	kindSpawn      = "spawn"
	kindStop       = "stop"
	kindWorkers    = "workers"
	kindCommand    = "cmd"
	kindWorkerDied = "worker-died" // event, cookie 0
	kindShutdown   = "shutdown"    // event, cookie 0: ShutdownNotice
	kindEvent      = "event"       // worker process -> service, cookie 0: workerEvent
	kindReady      = "ready"       // worker process -> service, at start
)

// Hello opens a host's session: the host names the RDMO component version it
// speaks; a service without a compatible one refuses the session. With a
// shared secret (ClientOptions.Secret) the host says so and sends its
// nonce; the session then starts only after the mutual authentication
// (auth.go).
type Hello struct {
	Component        string `msgpack:"component"`
	ComponentVersion string `msgpack:"version"`
	Auth             bool   `msgpack:"auth,omitempty"`
	Nonce            []byte `msgpack:"nonce,omitempty"`
}

// HelloReply is the service's answer to Hello. To a host with a secret
// the service first answers with its challenge (Auth and Nonce, nothing
// else), then, once the host's proof is right, with its version and its
// own proof (MAC).
type HelloReply struct {
	Service          string `msgpack:"service"`
	ComponentVersion string `msgpack:"version"`
	Auth             bool   `msgpack:"auth,omitempty"`
	Nonce            []byte `msgpack:"nonce,omitempty"`
	MAC              []byte `msgpack:"mac,omitempty"`
}

// authProof is the host's proof of the shared secret.
type authProof struct {
	MAC []byte `msgpack:"mac"`
}

// PluginInfo describes a plugin the service offers.
type PluginInfo struct {
	ID      int      `msgpack:"id"`
	Name    string   `msgpack:"name"`
	Version string   `msgpack:"version"`
	Ops     []uint32 `msgpack:"ops"`
	Builtin bool     `msgpack:"builtin"`
	Path    string   `msgpack:"path,omitempty"` // plugin binary, empty for built-ins
	// OpNames are the names the handler gives its user ops
	// (rdmo.HandlerInfo.OpNames; a plugin's as its process declares them).
	OpNames map[uint32]string `msgpack:"op_names,omitempty"`
}

// Form is how the worker runs the plugin: "builtin" (linked in),
// "plugin" (a go-plugin process) or "wasm" (a WebAssembly module,
// rdmo-plugin-NAME.wasm, run inside the worker).
func (p PluginInfo) Form() string {
	switch {
	case p.Builtin:
		return "builtin"
	case strings.HasSuffix(p.Path, ".wasm"):
		return "wasm"
	}
	return "plugin"
}

// SpawnOptions choose what a new worker runs.
type SpawnOptions struct {
	// Plugins names the plugins to load (by name); empty loads every
	// built-in.
	Plugins []string `msgpack:"plugins"`
	// Env is added to the worker's environment (e.g. UCX_TLS=...).
	Env []string `msgpack:"env"`
	// CPUs restricts the worker to a CPU list (taskset syntax, "0-1,3").
	CPUs string `msgpack:"cpus"`
	// Config is handed to the worker (e.g. "append-strategy": "shared").
	Config map[string]string `msgpack:"config"`
}

// WorkerSpec is what a worker process is started with.
type WorkerSpec struct {
	ID      uint64            `msgpack:"id"`
	Plugins []PluginInfo      `msgpack:"plugins"`
	Config  map[string]string `msgpack:"config"` // the host's SpawnOptions.Config
	// Settings are the operator's (Config.WorkerSettings of the service),
	// the same for every worker; no host can set or change them.
	Settings map[string]string `msgpack:"settings,omitempty"`
}

// SpawnReply names the new worker.
type SpawnReply struct {
	Worker uint64 `msgpack:"worker"`
	PID    int    `msgpack:"pid"`
}

// StopRequest stops a worker.
type StopRequest struct {
	Worker uint64 `msgpack:"worker"`
}

// WorkerInfo describes a running worker.
type WorkerInfo struct {
	ID      uint64   `msgpack:"id" json:"id"`
	PID     int      `msgpack:"pid" json:"pid"`
	Plugins []string `msgpack:"plugins" json:"plugins"`
	// Host is the address of the host that spawned the worker.
	Host string `msgpack:"host,omitempty" json:"host"`
	// State is starting, running, stopping or exited.
	State string `msgpack:"state,omitempty" json:"state"`
	// Uptime is how long ago the service started the worker.
	Uptime time.Duration `msgpack:"uptime,omitempty" json:"uptime_ns"`
	// Clients and RequestQueues are the worker's own counts, in answers
	// to Client.Workers when the component reports them
	// (WorkerSummarizer); -1 when the worker did not answer.
	Clients       int `msgpack:"clients,omitempty" json:"clients"`
	RequestQueues int `msgpack:"rqs,omitempty" json:"request_queues"`
}

// BuildInfo is what rdmo_build_info labels (Config.Build); the Go version
// is the running binary's.
type BuildInfo struct {
	Version, Commit, UCX string
}

// commandRequest carries one worker command through the service.
type commandRequest struct {
	Worker uint64             `msgpack:"worker"`
	Kind   string             `msgpack:"kind"`
	Body   msgpack.RawMessage `msgpack:"body"`
}

// WorkerDied tells a host that one of its workers exited.
type WorkerDied struct {
	Worker uint64 `msgpack:"worker"`
	Reason string `msgpack:"reason"`
}

// Error classes carried in envelopes; they survive the wire and come back as
// *Error values that match the sentinels below with errors.Is.
const (
	codeVersion       = "version"
	codeAuth          = "auth"
	codeLimit         = "limit"
	codeUnknownWorker = "unknown-worker"
	codeWorkerDied    = "worker-died"
	codeBadRequest    = "bad-request"
	codeTimeout       = "timeout"
	codeNotFound      = "not-found"
	codeCommand       = "command"
	codeInternal      = "internal"
	codeShuttingDown  = "shutting-down"
)

// Error is an error the service or a worker answered with.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return "urom: " + e.Message }

// Is matches the sentinel of the same class.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	ErrVersion       = &Error{Code: codeVersion}       // no compatible component version
	ErrAuth          = &Error{Code: codeAuth}          // the shared secrets differ, or only one side has one
	ErrLimit         = &Error{Code: codeLimit}         // too many workers
	ErrUnknownWorker = &Error{Code: codeUnknownWorker} // no such worker (of this host)
	ErrWorkerDied    = &Error{Code: codeWorkerDied}    // the worker process exited
	ErrBadRequest    = &Error{Code: codeBadRequest}    // malformed request
	ErrTimeout       = &Error{Code: codeTimeout}       // no answer before the deadline
	ErrNotFound      = &Error{Code: codeNotFound}      // unknown plugin
	ErrCommand       = &Error{Code: codeCommand}       // the worker refused the command
	ErrInternal      = &Error{Code: codeInternal}
	ErrShuttingDown  = &Error{Code: codeShuttingDown} // the service is shutting down (ReasonShuttingDown)
)

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func errorFromEnvelope(env *envelope) error {
	if env.Status == "" {
		return nil
	}
	return &Error{Code: env.Code, Message: env.Status}
}

func setError(env *envelope, err error) {
	var ue *Error
	if errors.As(err, &ue) {
		env.Code, env.Status = ue.Code, ue.Message
		return
	}
	env.Code, env.Status = codeInternal, err.Error()
}

// compatible reports whether a host asking for version want can use a
// component of version have: same major version, have at least want.
func compatible(want, have string) bool {
	wm, wn, ok1 := majorMinor(want)
	hm, hn, ok2 := majorMinor(have)
	return ok1 && ok2 && wm == hm && hn >= wn
}

func majorMinor(v string) (int, int, bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

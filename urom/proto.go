package urom

import (
	"strings"
	"time"

	"github.com/openrdmo/rdmo/urom/internal/uromwire"
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

// WorkerDied tells a host that one of its workers exited.
type WorkerDied struct {
	Worker uint64 `msgpack:"worker"`
	Reason string `msgpack:"reason"`
}

// Error is an error the service or a worker answered with; it matches the
// sentinel of its class (errors.Is).
type Error = uromwire.Error

// Sentinels for errors.Is.
var (
	ErrVersion       = &Error{Code: uromwire.CodeVersion}       // no compatible component version
	ErrAuth          = &Error{Code: uromwire.CodeAuth}          // the shared secrets differ, or only one side has one
	ErrLimit         = &Error{Code: uromwire.CodeLimit}         // too many workers
	ErrUnknownWorker = &Error{Code: uromwire.CodeUnknownWorker} // no such worker (of this host)
	ErrWorkerDied    = &Error{Code: uromwire.CodeWorkerDied}    // the worker process exited
	ErrBadRequest    = &Error{Code: uromwire.CodeBadRequest}    // malformed request
	ErrTimeout       = &Error{Code: uromwire.CodeTimeout}       // no answer before the deadline
	ErrNotFound      = &Error{Code: uromwire.CodeNotFound}      // unknown plugin
	ErrCommand       = &Error{Code: uromwire.CodeCommand}       // the worker refused the command
	ErrInternal      = &Error{Code: uromwire.CodeInternal}
	ErrShuttingDown  = &Error{Code: uromwire.CodeShuttingDown} // the service is shutting down (ReasonShuttingDown)
)

func errorf(code, format string, args ...any) *Error {
	return uromwire.Errorf(code, format, args...)
}

// ReasonShuttingDown is the reason a host's workers end with when the
// service stops them on its way down (WorkerDied.Reason,
// WorkerProcess.Reason); WorkerProcess.Err then matches ErrShuttingDown.
const ReasonShuttingDown = "the UROM service is shutting down"

// ShutdownNotice tells a connected host that the service is shutting down
// (an event, cookie 0): it accepts nothing new and stops the host's
// workers once Drain has passed (or the host released them).
type ShutdownNotice struct {
	Drain time.Duration `msgpack:"drain"`
}

// Limits of the protocol's frames.
const (
	// ProtocolVersion is the version of the UROM frames this package
	// speaks.
	ProtocolVersion = uromwire.ProtocolVersion
	// MaxFrame bounds a frame body; larger ones are refused before any
	// allocation.
	MaxFrame = uromwire.MaxFrame
)

// ErrFrameTooLarge reports a frame over MaxFrame.
var ErrFrameTooLarge = uromwire.ErrFrameTooLarge

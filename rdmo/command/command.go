// Package command is the vocabulary between a target and its RDMO worker:
// the five commands (CLIENT_INIT, RQ_CREATE, RQ_DESTROY, MR_REG, MR_DEREG)
// and rdmo's flush wait, the notifications that answer them, their errors,
// the worker's counters, their names on the UROM command channel, and
// Remote, which sends them over that channel. Pure Go: the worker (dpu,
// urom/rdmoworker) and the target library (host/target) both import it,
// so a target links neither the worker nor the service.
//
// The types are plain structs with msgpack tags; the encoding the command
// channel carries is theirs and never changes (docs/PROTOCOL.md).
package command

import (
	"errors"
	"strconv"

	"github.com/openrdmo/rdmo/rdmo"
)

// CommandType identifies a command and the notification that answers it.
// The values follow the order of the reference's command enum
// (UROM_WORKER_CMD_RDMO_*): they travel on the command channel and never
// change.
type CommandType uint8

const (
	CmdClientInit CommandType = 0
	CmdRQCreate   CommandType = 1
	CmdRQDestroy  CommandType = 2
	CmdMRReg      CommandType = 3
	CmdMRDereg    CommandType = 4
	// CmdRQFlushWait is rdmo's: the worker's WaitFlush, answered on the
	// command channel when a FLUSH of a queue completed (not a Command: it
	// does not go through the worker's loop).
	CmdRQFlushWait CommandType = 16
)

func (t CommandType) String() string {
	switch t {
	case CmdClientInit:
		return "CLIENT_INIT"
	case CmdRQCreate:
		return "RQ_CREATE"
	case CmdRQDestroy:
		return "RQ_DESTROY"
	case CmdMRReg:
		return "MR_REG"
	case CmdMRDereg:
		return "MR_DEREG"
	case CmdRQFlushWait:
		return "RQ_FLUSH_WAIT"
	}
	return "CommandType(" + strconv.Itoa(int(t)) + ")"
}

// Command is one of ClientInit, RQCreate, RQDestroy, MRReg and MRDereg
// (as a value or a pointer). Commands are plain structs with msgpack tags so
// a command channel can carry them as they are.
type Command interface {
	CommandType() CommandType
}

// ClientInit registers a client (a target process): the worker connects its
// host-access endpoint to Addr, the target's UCP worker address, and
// answers with its own address (Notification.Addr). ID is the target's
// choice; it must not be in use.
type ClientInit struct {
	ID   uint64 `msgpack:"id"`
	Addr []byte `msgpack:"addr"`
}

// RQCreate creates a request queue: the worker connects to the initiator's
// UCP worker address Addr, and requests arriving on that connection are
// Client's. The answer carries the queue id (Notification.RQ).
//
// ErrorHandling and ZeroClientID are rdmo extensions (docs/PROTOCOL.md,
// "Extensions for reference peers"), for initiators written like the
// reference's client; the zero values are what rdmo's own initiators need.
type RQCreate struct {
	Client uint64 `msgpack:"client"`
	Addr   []byte `msgpack:"addr"`
	// ErrorHandling is the error-handling mode of the worker's endpoint to
	// the initiator. UCX requires both ends of a connection to use the same
	// mode, so it must be the initiator's: RQErrorsPeer for rdmo's
	// initiators, RQErrorsNone for one that asks for none (the reference
	// client).
	ErrorHandling RQErrorHandling `msgpack:"err_mode,omitempty"`
	// ZeroClientID makes the queue accept client id 0 in request headers
	// as its own client's id, as well as that id (the reference client
	// writes 0 in every header). Requests on other queues still have to
	// name their queue's client exactly.
	ZeroClientID bool `msgpack:"zero_client_id,omitempty"`
}

// RQErrorHandling is the error-handling mode of a request queue's endpoint.
type RQErrorHandling uint8

const (
	// RQErrorsPeer asks UCX for peer-failure detection where a transport
	// to the initiator can detect it, and connects without it otherwise
	// (ucp.ErrorHandlingPrefer): what rdmo's initiators do.
	RQErrorsPeer RQErrorHandling = 0
	// RQErrorsNone asks for no detection (ucp.ErrorHandlingNone): what the
	// reference client does. The worker then learns that such an
	// initiator is gone only from its target (RQ_DESTROY, or the target's
	// removal); see docs/SECURITY.md.
	RQErrorsNone RQErrorHandling = 1
)

func (m RQErrorHandling) String() string {
	switch m {
	case RQErrorsPeer:
		return "peer"
	case RQErrorsNone:
		return "none"
	}
	return "RQErrorHandling(" + strconv.Itoa(int(m)) + ")"
}

// RQDestroy stops a request queue: no new requests are accepted, in-flight
// ones finish (for at most Config.DrainTimeout), the connection is closed.
type RQDestroy struct {
	Client uint64 `msgpack:"client"`
	RQ     uint64 `msgpack:"rq"`
}

// MRReg registers [VA, VA+Len) of the client's memory, reachable with the
// packed remote key PackedRkey. PackedMemh (an exported memory handle) may
// be empty; it is stored but not used (UCX 1.13 cannot import it). The
// answer carries the region id (Notification.Region), which requests name
// the region by (the wire's "rkey"). Populate asks the worker to commit
// its own mapping of the region's pages before it answers (where it maps
// target memory; docs/benchmarks/large-payloads.md): the registration then
// takes the time of the page faults the first writes would take.
type MRReg struct {
	Client     uint64 `msgpack:"client"`
	VA         uint64 `msgpack:"va"`
	Len        uint64 `msgpack:"len"`
	PackedRkey []byte `msgpack:"packed_rkey"`
	PackedMemh []byte `msgpack:"packed_memh"`
	Populate   bool   `msgpack:"populate,omitempty"`
}

// MRDereg deregisters a region: every handler writes back what it caches
// for the region (RegionRemoved), the writes are made visible, and then
// the region is gone. The region is removed even when a write-back fails;
// the notification's status then reports the failure.
type MRDereg struct {
	Client uint64 `msgpack:"client"`
	Region uint64 `msgpack:"region"`
}

func (ClientInit) CommandType() CommandType { return CmdClientInit }
func (RQCreate) CommandType() CommandType   { return CmdRQCreate }
func (RQDestroy) CommandType() CommandType  { return CmdRQDestroy }
func (MRReg) CommandType() CommandType      { return CmdMRReg }
func (MRDereg) CommandType() CommandType    { return CmdMRDereg }

// Notification answers a command. Status is StatusOK on success; otherwise
// it and Detail say why the command failed. The other fields are set by the
// command they answer: Addr and MaxInFlightPerRQ (CLIENT_INIT: the worker's
// UCP address and its in-flight limit), RQ (RQ_CREATE, RQ_DESTROY), Region
// (MR_REG, MR_DEREG). Client echoes the command's client.
type Notification struct {
	Type   CommandType `msgpack:"type"`
	Status rdmo.Status `msgpack:"status"`
	Detail string      `msgpack:"detail,omitempty"`
	Client uint64      `msgpack:"client"`
	Addr   []byte      `msgpack:"addr,omitempty"`
	RQ     uint64      `msgpack:"rq,omitempty"`
	Region uint64      `msgpack:"region,omitempty"`
	// MaxInFlightPerRQ is the worker's Config.MaxInFlightPerRQ, the most
	// requests of one request queue it accepts before they complete, so
	// that the target can tell its initiators (initiator.Options.Credits).
	// Added after the first release: 0 (an older worker) means unknown,
	// which is wire.DefaultMaxInFlightPerRQ.
	MaxInFlightPerRQ uint32 `msgpack:"max_in_flight_per_rq,omitempty"`
	// Capabilities (CLIENT_INIT) are the wire extensions the worker
	// implements (dpu.Capabilities), which the target passes to its
	// initiators so that they enable them (initiator.AggregateSupported,
	// AckGroupSupported, LendSupported). Added after the first release:
	// nil from an older worker.
	Capabilities []string `msgpack:"capabilities,omitempty"`
}

// Err returns nil for a successful notification, else an error matching
// the rdmo sentinel of its Status (errors.Is).
func (n Notification) Err() error {
	if n.Status == rdmo.StatusOK {
		return nil
	}
	return &rdmo.WireError{Status: n.Status, Detail: n.Type.String() + ": " + n.Detail}
}

// Errors of commands. A refused command is a *CommandError that matches
// one of them and the rdmo status sentinel of the notification
// (errors.Is). The texts keep the worker's "dpu:" prefix they always had.
var (
	ErrClosed          = errors.New("dpu: worker closed")
	ErrClientExists    = errors.New("dpu: client id already in use")
	ErrUnknownClient   = errors.New("dpu: unknown client")
	ErrUnknownRQ       = errors.New("dpu: unknown request queue")
	ErrRQExists        = errors.New("dpu: initiator address already has a request queue")
	ErrUnknownRegion   = errors.New("dpu: unknown region")
	ErrRegionNotOwned  = errors.New("dpu: region belongs to another client")
	ErrRegionBusy      = errors.New("dpu: region is being deregistered")
	ErrTooManyClients  = errors.New("dpu: too many clients")
	ErrTooManyRQs      = errors.New("dpu: too many request queues for the client")
	ErrTooManyRegions  = errors.New("dpu: too many regions for the client")
	ErrInvalidCommand  = errors.New("dpu: invalid command")
	ErrConnect         = errors.New("dpu: cannot connect")
	ErrRkey            = errors.New("dpu: cannot unpack remote key")
	ErrWriteBackFailed = errors.New("dpu: write-back of cached state failed")
)

// commandStatus is the wire status a command error is reported with. The
// catalogue has no command-specific codes yet; these are the closest.
var commandStatus = map[error]rdmo.Status{
	ErrClosed:          rdmo.StatusInternal,
	ErrClientExists:    rdmo.StatusClientMismatch,
	ErrUnknownClient:   rdmo.StatusClientMismatch,
	ErrUnknownRQ:       rdmo.StatusInternal,
	ErrRQExists:        rdmo.StatusClientMismatch,
	ErrUnknownRegion:   rdmo.StatusUnknownRegion,
	ErrRegionNotOwned:  rdmo.StatusRegionNotOwned,
	ErrRegionBusy:      rdmo.StatusRegionGone,
	ErrTooManyClients:  rdmo.StatusTooManyInFlight,
	ErrTooManyRQs:      rdmo.StatusTooManyInFlight,
	ErrTooManyRegions:  rdmo.StatusTooManyInFlight,
	ErrInvalidCommand:  rdmo.StatusPayloadMismatch,
	ErrConnect:         rdmo.StatusTargetUnreachable,
	ErrRkey:            rdmo.StatusTargetUnreachable,
	ErrWriteBackFailed: rdmo.StatusTargetUnreachable,
}

// CommandError is a failed command.
type CommandError struct {
	Type   CommandType
	Kind   error // one of the Err* sentinels of this package
	Status rdmo.Status
	Detail string
}

func (e *CommandError) Error() string {
	s := e.Type.String() + ": " + e.Kind.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap lets errors.Is match both the kind and the status sentinel.
func (e *CommandError) Unwrap() []error {
	return []error{e.Kind, e.Status.Err()}
}

// NewError is the error of a command of type t that failed for kind (one
// of the Err* sentinels), with the status the catalogue gives that kind.
func NewError(t CommandType, kind error, detail string) *CommandError {
	st, ok := commandStatus[kind]
	if !ok {
		st = rdmo.StatusInternal
	}
	return &CommandError{Type: t, Kind: kind, Status: st, Detail: detail}
}

// Notification is the notification that answers the command this error
// failed, for client.
func (e *CommandError) Notification(client uint64) Notification {
	d := e.Kind.Error()
	if e.Detail != "" {
		d += ": " + e.Detail
	}
	return Notification{Type: e.Type, Status: e.Status, Detail: d, Client: client}
}

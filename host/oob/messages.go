package oob

import (
	"fmt"
	"reflect"
)

// Type is the wire number of a message type (the type field of the frame
// prefix). The numbers are part of the wire format: never renumber or reuse
// one. 1–15 are the handshake; 16 and up are application messages.
type Type uint16

// Message type numbers. See the package documentation for the table.
const (
	TypeHello         Type = 1  // Hello: first frame in each direction
	TypeAuthChallenge Type = 2  // authChallenge: 32-byte nonce
	TypeAuthProof     Type = 3  // authProof: HMAC-SHA256 over the transcript
	TypeWorkerInfo    Type = 16 // WorkerInfo: target → initiator
	TypeInitiatorInfo Type = 17 // InitiatorInfo: initiator → target
	TypeDone          Type = 18 // Done: initiator → target, work complete and visible
	TypeVerified      Type = 19 // Verified: target → initiator, the target's verdict
	TypeBarrier       Type = 20 // Barrier: either direction
	TypeError         Type = 21 // Error: either direction; also rejects a failed authentication
)

// Message is one application or handshake message. Every message type is a
// plain struct with msgpack tags and a MessageType method with a value
// receiver, so both T and *T can be sent; Receive returns values (T).
//
// To add a message type: declare the struct with msgpack tags, give it a
// MessageType method returning a new, never used number, and add it to
// registry below. Old peers reject the new type (ErrUnexpected);
// adding a field to an existing type is compatible both ways (unknown map
// keys are ignored, missing keys decode as zero values).
type Message interface {
	MessageType() Type
}

// Role says which side of the RDMO bootstrap a peer plays. It is exchanged in
// Hello; two peers claiming the same role are refused.
type Role uint8

// Roles. The zero Role means "default": RoleTarget for Listen, RoleInitiator
// for Dial.
const (
	RoleTarget    Role = 1 // owns the memory and the worker; sends WorkerInfo
	RoleInitiator Role = 2 // sends requests to the worker; sends InitiatorInfo and Done
)

func (r Role) String() string {
	switch r {
	case RoleTarget:
		return "target"
	case RoleInitiator:
		return "initiator"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// Hello is the first frame each side sends, before authentication. It
// carries nothing secret. The frame prefix carries the same version; the
// prefix is what a mismatch is detected on.
type Hello struct {
	Role    Role   `msgpack:"role"`
	Version uint16 `msgpack:"version"`
	// Auth is true when this side has a shared secret and will accept
	// nothing but a successful mutual authentication.
	Auth bool `msgpack:"auth"`
}

// RegionInfo names one registered memory region (docs/ARCHITECTURE.md,
// "Setting up", steps 3 and 4): ID is the region id returned by MR_REG (the
// `rkey` of the API), Base and Len the target virtual address range it
// covers.
type RegionInfo struct {
	ID   uint64 `msgpack:"id"`
	Base uint64 `msgpack:"base"`
	Len  uint64 `msgpack:"len"`
	Name string `msgpack:"name"`
}

// WorkerInfo is what the target tells the initiator: the worker's UCP
// address, the client id the worker knows the target by, the regions the
// initiator may name, and optional capability strings.
type WorkerInfo struct {
	WorkerAddress []byte       `msgpack:"worker_address"`
	ClientID      uint64       `msgpack:"client_id"`
	Regions       []RegionInfo `msgpack:"regions"`
	Capabilities  []string     `msgpack:"capabilities"`
	// Workload, if set, is the work the target expects of the initiator
	// (added after version 1 shipped: older peers ignore it, and a body
	// without it decodes as nil).
	Workload *Workload `msgpack:"workload,omitempty"`
	// MaxInFlightPerRQ is the worker's in-flight limit per request queue
	// (its answer to CLIENT_INIT), which the initiator's flow control must
	// stay within (initiator.Options.Credits). Added after version 1
	// shipped: 0 (an older target, or a worker that did not say) means
	// wire.DefaultMaxInFlightPerRQ.
	MaxInFlightPerRQ uint32 `msgpack:"max_in_flight_per_rq,omitempty"`
}

// Workload describes a deterministic workload: both sides derive the same
// operations from it, so the target can check its memory byte for byte
// without being told what was written. Kind names the generator and its
// version; a peer that does not know Kind must refuse the workload rather
// than guess.
type Workload struct {
	Kind       string `msgpack:"kind"`
	Ops        uint64 `msgpack:"ops"`
	Seed       uint64 `msgpack:"seed"`
	FlushEvery uint64 `msgpack:"flush_every"`
}

// InitiatorInfo is what the initiator tells the target: its own UCP worker
// address (for RQ_CREATE) and a free-form name for logs.
type InitiatorInfo struct {
	WorkerAddress []byte `msgpack:"worker_address"`
	Name          string `msgpack:"name"`
}

// Done is sent by the initiator once its work is complete and flushed, i.e.
// visible in target memory, so the target never spins on its own memory
// (docs/SECURITY.md section 6, defect 10).
type Done struct {
	Ops     uint64 `msgpack:"ops"`
	Bytes   uint64 `msgpack:"bytes"`
	Errors  uint64 `msgpack:"errors"`
	Message string `msgpack:"message"`
}

// Verified is the target's verdict on the initiator's work.
type Verified struct {
	OK     bool   `msgpack:"ok"`
	Detail string `msgpack:"detail"`
}

// Barrier is a rendezvous point; both sides agree on the meaning of ID.
type Barrier struct {
	ID uint64 `msgpack:"id"`
}

// ErrorCode classifies an Error message. 1–99 are reserved for this
// package; applications use 100 and up.
type ErrorCode uint32

// Error codes used by this package.
const (
	CodeProtocol ErrorCode = 1 // the peer broke the protocol
	CodeAuth     ErrorCode = 2 // authentication failed (sent by the listener to a dialer whose proof is wrong)
	CodeInternal ErrorCode = 3 // the peer failed for a reason of its own
)

// Error is a message that reports a failure to the peer. It is also an
// error: Expect returns a received Error as its error value.
type Error struct {
	Code    ErrorCode `msgpack:"code"`
	Message string    `msgpack:"message"`
}

func (e Error) Error() string {
	return fmt.Sprintf("oob: peer reported error %d: %s", uint32(e.Code), e.Message)
}

// authChallenge carries one side's fresh random nonce.
type authChallenge struct {
	Nonce []byte `msgpack:"nonce"`
}

// authProof carries one side's HMAC-SHA256 over the handshake transcript.
type authProof struct {
	MAC []byte `msgpack:"mac"`
}

func (Hello) MessageType() Type         { return TypeHello }
func (authChallenge) MessageType() Type { return TypeAuthChallenge }
func (authProof) MessageType() Type     { return TypeAuthProof }
func (WorkerInfo) MessageType() Type    { return TypeWorkerInfo }
func (InitiatorInfo) MessageType() Type { return TypeInitiatorInfo }
func (Done) MessageType() Type          { return TypeDone }
func (Verified) MessageType() Type      { return TypeVerified }
func (Barrier) MessageType() Type       { return TypeBarrier }
func (Error) MessageType() Type         { return TypeError }

// registry maps each wire type number to its Go struct type.
var registry = map[Type]reflect.Type{}

func register(m Message) {
	t := m.MessageType()
	if _, dup := registry[t]; dup {
		panic(fmt.Sprintf("oob: message type %d registered twice", t))
	}
	registry[t] = reflect.TypeOf(m)
}

func init() {
	register(Hello{})
	register(authChallenge{})
	register(authProof{})
	register(WorkerInfo{})
	register(InitiatorInfo{})
	register(Done{})
	register(Verified{})
	register(Barrier{})
	register(Error{})
}

// handshakeType reports whether t may only appear during the handshake.
func handshakeType(t Type) bool { return t < 16 }

func (t Type) String() string {
	if rt, ok := registry[t]; ok {
		return fmt.Sprintf("%s(%d)", rt.Name(), uint16(t))
	}
	return fmt.Sprintf("unknown(%d)", uint16(t))
}

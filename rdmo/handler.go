package rdmo

import (
	"bytes"
	"errors"
	"fmt"
	"math"
)

// This file is the handler SDK: what an operation handler implements and the
// view of target memory it gets. It is pure Go and its values are plain data
// (no channels, no callbacks), so the same interface works in the worker's
// process and across a process boundary (go-plugin).

// HandlerInfo describes a handler to the worker that loads it.
type HandlerInfo struct {
	Name    string   // e.g. "append"
	Version string   // semantic version of the handler
	Ops     []uint32 // the op ids it serves
	// OpNames optionally names ops of Ops for logs and metrics
	// ("fetch-max" for op 17 reads "fetch-max(17)"), at most MaxOpNameLen
	// bytes each. An op without one goes by the name DefineOp gave it,
	// else by the handler's Name and its id ("counter(16)"). A plugin
	// process sends both kinds of names to the worker that loads it.
	OpNames map[uint32]string
	// NoCachedState declares that the handler keeps nothing between
	// batches that WriteBack would have to write (BaseHandler's hooks are
	// enough). When such a handler runs as a plugin and its process is
	// restarted, nothing was lost, so the next flush need not fail. The
	// default (false) is the safe assumption.
	NoCachedState bool
	// Inline declares that HandleBatch may run on the worker's loop (the
	// goroutine that drives UCX for every client) instead of the client's
	// executor goroutine, which saves the two thread hand-offs of a batch
	// (docs/ARCHITECTURE.md, "dpu"). A handler that declares it does
	// nothing that blocks besides Target calls, takes about a microsecond
	// per request, and is safe to call from any goroutine (calls for one
	// client still never overlap). The worker decides per batch: only when
	// the client's executor is idle, every Target call the batch can make
	// completes without waiting for the loop (all of the client's regions
	// mapped into the worker, no rendezvous payload), within a budget of
	// requests and payload bytes per loop round; otherwise the batch goes
	// to the executor as usual. Order, FENCE, results and a caught panic
	// are the same either way. A plugin's handler runs on the executor
	// whatever it declares (its calls cross a process boundary), and the
	// flag does not travel over the plugin protocol. A WebAssembly
	// module's does (rdmo/plugin/wasmhost), and its inline batches run
	// under a short time bound instead of the batch time bound. The
	// default (false) is the safe assumption.
	Inline bool
	// InlineRendezvous extends Inline to the batches Inline leaves to the
	// executor because one of their Target calls could wait for the loop:
	// batches that carry rendezvous payloads, and batches that start while
	// the client's earlier Places are still landing. A handler that
	// declares it moves rendezvous payloads only with Target.Place (which
	// never waits: the worker completes the request once its payload has
	// landed) and calls neither Target.Fetch nor Target.Flush from
	// HandleBatch; in a batch on the loop those two fail with
	// StatusHandlerFailed instead of waiting. It means nothing without
	// Inline. The built-in append handler declares it, so a stream of
	// large appends costs no thread hand-off per batch. The default
	// (false) is the safe assumption.
	InlineRendezvous bool
}

// Request is one RDMO request as the worker hands it to a handler. It is
// valid until HandleBatch returns. The worker has already decoded and
// checked its header: the op is one this handler serves, the client is the
// connection's, a reference op's sub-header has exactly its size and an
// eager reference payload its shape (a FLUSH none, an APPEND at least one
// byte, a SCATTER exactly Scatter.Count well-formed iovs). A rendezvous
// payload is not checked, since the worker has not received it.
type Request struct {
	Seq    uint64   // arrival number on its connection, counted from 0
	Client ClientID // the client the connection belongs to
	Op     uint32
	Flags  uint32 // FlagFence, FlagAck
	// The decoded sub-header of a reference op: the one matching Op is
	// set, the others are zero.
	Flush   FlushHeader   // OpFlush
	Append  AppendHeader  // OpAppend
	Scatter ScatterHeader // OpScatter
	// Sub is the raw sub-header: the header bytes after the 16-byte common
	// header (0..48 bytes). For a user op it is the only form, the
	// handler's to decode and check.
	Sub []byte
	// Payload is the eager payload; nil when Rendezvous.
	Payload []byte
	// Length is the payload length, also for rendezvous payloads.
	Length uint64
	// Rendezvous payloads are still at the initiator: move them with
	// Target.Place or Target.Fetch.
	Rendezvous bool
}

// Result is a handler's outcome for one request. What reaches the
// initiator travels in the request's ack (FlagAck; docs/PROTOCOL.md
// section 6.4): Status, Value, Data and the first MaxResultDetail bytes of
// Detail.
type Result struct {
	// Status is StatusOK, or why the request failed: a catalogue code or
	// one of the plugin's own (StatusUserBase..StatusUserLast).
	Status Status
	// Detail says more about a failure: all of it goes to the worker's log
	// line, its first MaxResultDetail bytes to the initiator.
	Detail string
	// Value is returned to the initiator in the request's ack (FlagAck),
	// for operations that produce a value.
	Value uint64
	// Data is returned with the ack of a successful request, at most
	// MaxResultData bytes (more fails the request with HandlerFailed). It
	// may point into Target.Buffer memory or into the request's payload:
	// the worker copies it when the request completes.
	Data []byte
}

// Equal reports whether r and o are the same result (Data compared by
// content). Result holds a slice, so == does not compile.
func (r Result) Equal(o Result) bool {
	return r.Status == o.Status && r.Detail == o.Detail && r.Value == o.Value && bytes.Equal(r.Data, o.Data)
}

// Fail returns a failed Result.
func Fail(s Status, format string, args ...any) Result {
	return Result{Status: s, Detail: fmt.Sprintf(format, args...)}
}

// ResultOf turns an error into a Result: a *WireError keeps its status, any
// other error is HandlerFailed.
func ResultOf(err error) Result {
	if err == nil {
		return Result{}
	}
	var we *WireError
	if errors.As(err, &we) {
		return Result{Status: we.Status, Detail: err.Error()}
	}
	return Result{Status: StatusHandlerFailed, Detail: err.Error()}
}

// Handler executes one or more kinds of operation. A worker makes one
// Handler per handler kind and calls it for every client; calls for one
// client never overlap (they come from that client's executor), calls for
// different clients may run concurrently, so state kept per client needs
// no lock once found.
type Handler interface {
	Info() HandlerInfo
	// HandleBatch runs reqs, which arrived together on one connection of
	// one client, in arrival order, and writes results[i] for reqs[i]
	// (len(results) == len(reqs), zeroed). Requests of one batch may be
	// coalesced: the worker completes them when HandleBatch has returned
	// and every Put and Place it issued has completed.
	HandleBatch(t Target, reqs []Request, results []Result)
	// WriteBack writes back whatever the handler caches for t's client
	// (for example a cached queue tail), so that after the flush that
	// follows, target memory holds every effect of every completed request.
	// FLUSH calls it through Target.WriteBackAll.
	WriteBack(t Target) error
	// RegionRemoved writes back and then drops state tied to a region that
	// is being deregistered. Requests naming it fail from now on.
	RegionRemoved(t Target, region RegionID) error
	// ClientRemoved drops every state of a client that is gone (its target
	// died or it was torn down). Nothing can be written back any more.
	ClientRemoved(client ClientID)
}

// Region is a registered region of target memory.
type Region struct {
	ID   RegionID // the id requests name it by (the wire's "rkey")
	Base uint64   // target virtual address of its first byte
	Len  uint64
	// Local reports that the worker reaches the region as memory of its
	// own (mapped through shared memory), so a Put into it is a memory
	// copy done when Put returns: staging several payloads into one Put
	// saves no network operation, only adds a copy. False where Puts go
	// through UCX, and wherever a handler's host does not say (plugin
	// processes, WebAssembly modules).
	Local bool
}

// Contains reports whether [addr, addr+n) lies inside the region, without
// overflow for any addr and n.
func (r Region) Contains(addr, n uint64) bool {
	if addr < r.Base {
		return false
	}
	off := addr - r.Base
	return off <= r.Len && n <= r.Len-off
}

// CheckRange returns ErrOutOfBounds (with detail) unless [addr, addr+n) is
// inside the region; addr+n wrapping past 2^64 is out of bounds too.
func (r Region) CheckRange(addr, n uint64) error {
	if n > math.MaxUint64-addr || !r.Contains(addr, n) {
		return wireErr(StatusOutOfBounds, fmt.Sprintf("[%#x, +%d) is outside region %d [%#x, +%d)", addr, n, r.ID, r.Base, r.Len))
	}
	return nil
}

// RemoteOpKind is a remote operation whose result a handler waits for
// (Target.Sync). The atomics work on the u64 at Addr, which must be 8-byte
// aligned, and return the value it had before in RemoteOp.Result; each op
// reports its own RemoteOp.Status (OutOfBounds, UnknownRegion,
// RegionNotOwned: that op did nothing).
type RemoteOpKind uint8

const (
	// RemoteGet reads len(Buf) bytes at Addr into Buf; Result is unused.
	RemoteGet RemoteOpKind = iota + 1
	// RemoteFetchAdd adds Operand to the u64 at Addr; Result is the old value.
	RemoteFetchAdd
	// RemoteCompareSwap stores Operand at Addr if the u64 there equals
	// Compare; Result is the old value (the swap happened iff it equals
	// Compare).
	RemoteCompareSwap
	// RemoteSwap stores Operand at Addr; Result is the old value.
	RemoteSwap
)

// RemoteOp is one operation of Target.Sync.
type RemoteOp struct {
	Kind    RemoteOpKind
	Region  RegionID
	Addr    uint64 // atomics: 8-byte aligned
	Buf     []byte // RemoteGet destination
	Operand uint64
	Compare uint64
	// Out:
	Result uint64
	Status Status // StatusOK, or why this op failed
}

// Target is the view of one client's target memory that a handler gets. The
// worker checks every address against the client's registered regions
// before UCX sees it; an out-of-bounds call fails and touches nothing.
type Target interface {
	// ClientID is the client whose memory this is.
	ClientID() ClientID
	// Region returns a registered region of this client: ErrUnknownRegion
	// for an id nobody registered, ErrRegionNotOwned for another client's.
	Region(id RegionID) (Region, error)
	// Put writes data to [addr, addr+len(data)) in the region. It returns
	// once the write is issued; data must stay unchanged until the batch
	// completes (use Buffer for staging). A write that fails later fails
	// the batch's requests with StatusTargetUnreachable.
	Put(region RegionID, addr uint64, data []byte) error
	// Sync runs the operations together (one round trip for all of them,
	// so a batch never waits on one remote read after another) and returns
	// when all are done. Each op reports its own Status; the error is for
	// failures of the whole call.
	Sync(ops []RemoteOp) error
	// Buffer returns n bytes of worker memory that stay valid until the
	// current batch completes: staging for coalesced writes.
	Buffer(n int) []byte
	// Place moves the rendezvous payload of req straight from the initiator
	// into [addr, addr+req.Length) of the region (through target memory
	// mapped into the worker when the transport allows, else a bounded
	// bounce buffer). Asynchronous like Put.
	Place(req *Request, region RegionID, addr uint64) error
	// Fetch brings the rendezvous payload of req into worker memory valid
	// until the batch completes. Payloads over the worker's limit fail with
	// ErrRendezvousRefused.
	Fetch(req *Request) ([]byte, error)
	// Flush returns when every earlier Put and Place of this client is
	// visible in target memory (remote completion).
	Flush() error
	// WriteBackAll calls every handler's WriteBack for this client (the
	// flush operation uses it before Flush).
	WriteBackAll() error
}

// BaseHandler gives a handler with no cached state empty WriteBack,
// RegionRemoved and ClientRemoved methods (such a handler also sets
// HandlerInfo.NoCachedState).
type BaseHandler struct{}

func (BaseHandler) WriteBack(Target) error               { return nil }
func (BaseHandler) RegionRemoved(Target, RegionID) error { return nil }
func (BaseHandler) ClientRemoved(ClientID)               {}

// FetchAdd is a single remote fetch-and-add through t.Sync.
func FetchAdd(t Target, region RegionID, addr, delta uint64) (uint64, error) {
	ops := [1]RemoteOp{{Kind: RemoteFetchAdd, Region: region, Addr: addr, Operand: delta}}
	if err := t.Sync(ops[:]); err != nil {
		return 0, err
	}
	return ops[0].Result, ops[0].Status.Err()
}

// Get is a single remote read through t.Sync.
func Get(t Target, region RegionID, addr uint64, buf []byte) error {
	ops := [1]RemoteOp{{Kind: RemoteGet, Region: region, Addr: addr, Buf: buf}}
	if err := t.Sync(ops[:]); err != nil {
		return err
	}
	return ops[0].Status.Err()
}

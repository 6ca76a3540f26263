package rdmo

import (
	"strconv"
	"sync"
)

// Operation ids (op_id in the common request header, docs/PROTOCOL.md).
const (
	OpFlush   uint32 = 0 // reference: write back cached state, then answer with a flush response
	OpAppend  uint32 = 1 // reference: append the payload to a queue in target memory
	OpScatter uint32 = 2 // reference: put each iov's data at its address

	// OpBatch (extension) is a container of several complete requests in
	// one AM (rdmo/wire, docs/PROTOCOL.md section 11). Handlers never see
	// it: the worker unpacks it and hands over the inner requests.
	OpBatch uint32 = 3

	// OpLendPool (extension) registers memory of the initiator's, a lend
	// pool, on its connection, or releases it, so that requests with
	// FlagByRef name their payload in it instead of carrying it
	// (docs/PROTOCOL.md section 13). Handlers never see it: the worker
	// answers it itself.
	OpLendPool uint32 = 4

	// OpUserBase is the first op id for plugin-defined operations. Ids from
	// 5 to OpUserBase-1 are reserved for future reference-style ops.
	OpUserBase uint32 = 16
)

// Request flags.
const (
	// FlagFence (reference): every earlier request on the connection has
	// completed before this one runs. The worker enforces it; a handler
	// only sees it.
	FlagFence uint32 = 1 << 0
	// FlagAck (extension): the worker answers this request with its own
	// ack, carrying Result.Value, when it completes.
	FlagAck uint32 = 1 << 1
	// FlagByRef (extension): the payload is not the request's bytes but a
	// reference to them in a lend pool the initiator registered on the
	// connection (OpLendPool), which the worker reads in place. It needs
	// FlagAck: the ack tells the initiator its bytes were read. A handler
	// sees the bytes, as if they had come with the request.
	FlagByRef uint32 = 1 << 2
	// FlagAckGroup (extension): the initiator takes this request's ack
	// in an ACK group, many acks in one message (docs/PROTOCOL.md
	// section 14). Only with FlagAck, and only to a worker that
	// advertises the capability: an older one refuses the flag.
	FlagAckGroup uint32 = 1 << 3
)

// IsUserOp reports whether op belongs to the plugin-defined range.
func IsUserOp(op uint32) bool { return op >= OpUserBase }

var userOps sync.Map // uint32 -> string

// DefineOp names a user op for OpName ("kv-insert(39)" instead of
// "user(39)") wherever the package defining it is linked in (the plugin,
// an initiator using its encoders), and returns op. It panics for an op
// outside the user range, or one already defined under another name.
func DefineOp(op uint32, name string) uint32 {
	if !IsUserOp(op) {
		panic("rdmo: DefineOp(" + strconv.FormatUint(uint64(op), 10) + ", " + name + "): not a user op")
	}
	if old, loaded := userOps.LoadOrStore(op, name); loaded && old.(string) != name {
		panic("rdmo: op " + strconv.FormatUint(uint64(op), 10) + " defined twice: " + old.(string) + " and " + name)
	}
	return op
}

// MaxOpNameLen bounds an op's name (DefineOp, HandlerInfo.OpNames) as a
// worker accepts it from a plugin process: a label in every log line and
// metric of the op, not a text.
const MaxOpNameLen = 64

// DefinedOpName returns the name DefineOp gave op, if any.
func DefinedOpName(op uint32) (string, bool) {
	n, ok := userOps.Load(op)
	if !ok {
		return "", false
	}
	return n.(string), true
}

// OpName names an op id for logs and errors: "append", "kv-insert(39)" for
// a user op named with DefineOp, "user(17)" for another.
func OpName(op uint32) string {
	switch {
	case op == OpFlush:
		return "flush"
	case op == OpAppend:
		return "append"
	case op == OpScatter:
		return "scatter"
	case op == OpBatch:
		return "batch"
	case op == OpLendPool:
		return "lend-pool"
	case IsUserOp(op):
		if n, ok := userOps.Load(op); ok {
			return n.(string) + "(" + strconv.FormatUint(uint64(op), 10) + ")"
		}
		return "user(" + strconv.FormatUint(uint64(op), 10) + ")"
	}
	return "reserved(" + strconv.FormatUint(uint64(op), 10) + ")"
}

// ClientID names a client: one target process of the worker. Its own type
// keeps it from being passed where a region id or an address is expected.
type ClientID uint64

// RegionID names a registered region of target memory (the wire's "rkey").
type RegionID uint64

// FlushHeader is the FLUSH sub-header, struct urom_rdmo_flush_hdr.
type FlushHeader struct {
	FlushID uint64 // echoed in the flush response so the initiator can match it
}

// AppendHeader is the APPEND sub-header, struct urom_rdmo_append_hdr.
type AppendHeader struct {
	PtrAddr  uint64   // target address of the queue's u64 tail pointer
	PtrRkey  RegionID // region holding the tail pointer
	DataRkey RegionID // region the data is written into
}

// ScatterHeader is the SCATTER sub-header, struct urom_rdmo_scatter_hdr.
type ScatterHeader struct {
	Count uint64 // number of iovs in the payload
}

package wire

import "github.com/openrdmo/rdmo/rdmo"

// Lend pools (docs/PROTOCOL.md section 13): an initiator registers memory
// of its own on its connection (LEND_POOL), and a request with
// rdmo.FlagByRef then carries a PoolRef naming its payload there instead of
// the payload itself. A worker that can map the pool (shared memory on one
// host) reads the bytes in place: one copy, the worker's, instead of the
// initiator's into the transport and the worker's out of it.

// CapabilityLend is the capability string of a worker that takes LEND_POOL
// and FlagByRef. An initiator sends neither to a worker without it: a
// reference worker drops op 4 unanswered, and an older one of ours fails
// FlagByRef with UnknownFlags.
const CapabilityLend = "lend-v1"

// LEND_POOL sub-header: pool u64, va u64, len u64. len > 0 registers
// len bytes at the initiator's address va under the initiator's pool id
// (the AM data is the packed remote key of that memory); len 0 releases
// the pool (no data). A registration's ack says whether the worker mapped
// the pool: value LendPoolMapped, or 0 when no transport maps it there
// (over TCP, to another host), which is an answer, not a failure.
const (
	LendPoolHeaderLen = HeaderLen + 24
	LendPoolIDOffset  = 16
	LendPoolVAOffset  = 24
	LendPoolLenOffset = 32
)

// PoolRef, the payload of a request with rdmo.FlagByRef: pool u64,
// offset u64, len u64.
const (
	PoolRefLen          = 24
	PoolRefPoolOffset   = 0
	PoolRefOffsetOffset = 8
	PoolRefLenOffset    = 16
)

// LendPoolMapped is the value of a registration's ack when the worker
// mapped the pool and reads FlagByRef payloads from it.
const LendPoolMapped = 1

const (
	_ = uint(LendPoolHeaderLen - (LendPoolLenOffset + 8))
	_ = uint(PoolRefLen - (PoolRefLenOffset + 8))
)

// PoolID names a lend pool on one connection; the initiator chooses it.
type PoolID uint64

// LendPoolHeader is the LEND_POOL sub-header.
type LendPoolHeader struct {
	Pool PoolID
	VA   uint64 // the pool's address in the initiator
	Len  uint64 // its length; 0 releases the pool
}

// PoolRef is where a FlagByRef request's payload is: Len bytes at Offset
// in Pool.
type PoolRef struct {
	Pool   PoolID
	Offset uint64
	Len    uint64
}

// AppendLendPoolRequest appends a LEND_POOL request header to dst.
func AppendLendPoolRequest(dst []byte, h Header, p LendPoolHeader) []byte {
	h.Op = rdmo.OpLendPool
	dst = appendHeader(dst, h)
	dst = le.AppendUint64(dst, uint64(p.Pool))
	dst = le.AppendUint64(dst, p.VA)
	return le.AppendUint64(dst, p.Len)
}

// AppendPoolRef appends r's 24 bytes to dst.
func AppendPoolRef(dst []byte, r PoolRef) []byte {
	dst = le.AppendUint64(dst, uint64(r.Pool))
	dst = le.AppendUint64(dst, r.Offset)
	return le.AppendUint64(dst, r.Len)
}

// ParsePoolRef decodes a FlagByRef request's payload: exactly PoolRefLen
// bytes, naming at least one byte (PayloadMismatch otherwise). Whether the
// pool exists and holds the bytes is the worker's to check.
func ParsePoolRef(b []byte) (PoolRef, error) {
	if len(b) != PoolRefLen {
		return PoolRef{}, wireErr(rdmo.StatusPayloadMismatch,
			"a BYREF payload is "+itoa(len(b))+" bytes, exactly 24 (pool, offset, len) required")
	}
	r := PoolRef{
		Pool:   PoolID(le.Uint64(b[PoolRefPoolOffset:])),
		Offset: le.Uint64(b[PoolRefOffsetOffset:]),
		Len:    le.Uint64(b[PoolRefLenOffset:]),
	}
	if r.Len == 0 {
		return r, wireErr(rdmo.StatusPayloadMismatch, "a BYREF payload names no bytes")
	}
	return r, nil
}

// checkByRef is ParseRequest's check of rdmo.FlagByRef: only requests
// that carry a payload to a handler (APPEND, SCATTER, user ops) may name it
// in a pool, and only with rdmo.FlagAck, since the ack is what tells the
// initiator the worker has read its bytes.
func checkByRef(h Header) error {
	if h.Flags&rdmo.FlagByRef == 0 {
		return nil
	}
	switch h.Op {
	case rdmo.OpFlush, rdmo.OpBatch, rdmo.OpLendPool:
		return wireErr(rdmo.StatusPayloadMismatch, rdmo.OpName(h.Op)+" cannot carry a BYREF payload")
	}
	if h.Flags&rdmo.FlagAck == 0 {
		return wireErr(rdmo.StatusPayloadMismatch, "BYREF without ACK: the ack is what returns the lent bytes")
	}
	return nil
}

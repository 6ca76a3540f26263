package ops

import (
	"encoding/binary"
	"fmt"

	"github.com/openrdmo/rdmo/rdmo"
)

var le = binary.LittleEndian

// Sub-header lengths.
const (
	GetSubLen         = 24 // region, addr, len
	FetchAddSubLen    = 24 // region, addr, delta
	CompareSwapSubLen = 32 // region, addr, expected, desired
	IndirectSubLen    = 24 // region, addr, shape (depth u16, len u16, off u32)
	AllocSubLen       = 16 // region, head
	KVSubLen          = 24 // region, table, key
)

func words(ws ...uint64) []byte {
	b := make([]byte, 0, 8*len(ws))
	for _, w := range ws {
		b = le.AppendUint64(b, w)
	}
	return b
}

// GetReq reads Len bytes at Addr in Region.
type GetReq struct {
	Region rdmo.RegionID
	Addr   uint64
	Len    uint64 // 0..rdmo.MaxResultData
}

// Sub encodes the sub-header.
func (r GetReq) Sub() []byte { return words(uint64(r.Region), r.Addr, r.Len) }

// AtomicReq is a fetch-add (Operand is the delta) or a compare-swap
// (Compare is the expected value, Operand the desired one) on the 8-byte
// aligned u64 at Addr.
type AtomicReq struct {
	Region  rdmo.RegionID
	Addr    uint64
	Operand uint64
	Compare uint64
}

// FetchAddSub encodes a fetch-add sub-header.
func (r AtomicReq) FetchAddSub() []byte { return words(uint64(r.Region), r.Addr, r.Operand) }

// CompareSwapSub encodes a compare-swap sub-header.
func (r AtomicReq) CompareSwapSub() []byte {
	return words(uint64(r.Region), r.Addr, r.Compare, r.Operand)
}

// IndirectReq follows Depth pointers starting at Addr (each an 8-byte
// aligned u64 target address inside Region, nil ends the walk with
// StatusNilPointer), then reads Len bytes (OpIndirectRead) or writes the
// payload (OpIndirectWrite) at the last pointer plus Off, also inside
// Region. Depth 0 accesses Addr+Off itself.
type IndirectReq struct {
	Region rdmo.RegionID
	Addr   uint64
	Depth  uint16 // 0..MaxDepth
	Len    uint16 // read: 0..rdmo.MaxResultData; write: 0 (the payload's length counts)
	Off    uint32
}

// Sub encodes the sub-header.
func (r IndirectReq) Sub() []byte {
	shape := uint64(r.Depth) | uint64(r.Len)<<16 | uint64(r.Off)<<32
	return words(uint64(r.Region), r.Addr, shape)
}

// AllocReq pops a block from the free list whose head (an 8-byte aligned
// u64 holding the address of the first free block, 0 when empty) is at Head.
type AllocReq struct {
	Region rdmo.RegionID
	Head   uint64
}

// Sub encodes the sub-header.
func (r AllocReq) Sub() []byte { return words(uint64(r.Region), r.Head) }

// KVReq names a key of the table at Table (docs/OPS.md layout).
type KVReq struct {
	Region rdmo.RegionID
	Table  uint64
	Key    uint64 // not 0
}

// Sub encodes the sub-header.
func (r KVReq) Sub() []byte { return words(uint64(r.Region), r.Table, r.Key) }

func checkShape(req *rdmo.Request, op string, subLen int, payload bool) error {
	switch {
	case len(req.Sub) < subLen:
		return &rdmo.WireError{Status: rdmo.StatusShortHeader, Detail: fmt.Sprintf("%s sub-header is %d bytes, want %d", op, len(req.Sub), subLen)}
	case len(req.Sub) > subLen:
		return &rdmo.WireError{Status: rdmo.StatusHeaderTooLong, Detail: fmt.Sprintf("%s sub-header is %d bytes, want %d", op, len(req.Sub), subLen)}
	case req.Rendezvous:
		return &rdmo.WireError{Status: rdmo.StatusRendezvousRefused, Detail: op + " takes its payload eager only"}
	case !payload && req.Length != 0:
		return &rdmo.WireError{Status: rdmo.StatusPayloadMismatch, Detail: fmt.Sprintf("%s carries no payload, got %d bytes", op, req.Length)}
	}
	return nil
}

// DecodeGet decodes and checks a get request (not its addresses).
func DecodeGet(req *rdmo.Request) (GetReq, error) {
	if err := checkShape(req, "get", GetSubLen, false); err != nil {
		return GetReq{}, err
	}
	r := GetReq{Region: rdmo.RegionID(le.Uint64(req.Sub)), Addr: le.Uint64(req.Sub[8:]), Len: le.Uint64(req.Sub[16:])}
	if r.Len > rdmo.MaxResultData {
		return r, &rdmo.WireError{Status: rdmo.StatusLengthOverflow, Detail: fmt.Sprintf("get of %d bytes, at most %d", r.Len, rdmo.MaxResultData)}
	}
	return r, nil
}

// DecodeAtomic decodes and checks a fetch-add or compare-swap request.
func DecodeAtomic(req *rdmo.Request) (AtomicReq, error) {
	if atomicOK(req) {
		return atomicFields(req), nil
	}
	name, n := "fetch-add", FetchAddSubLen
	if req.Op == OpCompareSwap {
		name, n = "compare-swap", CompareSwapSubLen
	}
	if err := checkShape(req, name, n, false); err != nil {
		return AtomicReq{}, err
	}
	r := atomicFields(req)
	return r, &rdmo.WireError{Status: rdmo.StatusOutOfBounds, Detail: fmt.Sprintf("%s at %#x is not 8-byte aligned", name, r.Addr)}
}

// atomicOK reports whether DecodeAtomic takes req: a sub-header of the
// op's length, no payload, an 8-byte aligned address (the low byte of the
// little-endian address word). It is small enough to inline, so the
// atomics' batch loop checks a request without a call (a call costs a
// WebAssembly module tens of nanoseconds).
func atomicOK(req *rdmo.Request) bool {
	n := FetchAddSubLen
	if req.Op == OpCompareSwap {
		n = CompareSwapSubLen
	}
	return len(req.Sub) == n && !req.Rendezvous && req.Length == 0 && req.Sub[8]&7 == 0
}

// atomicFields reads the fields of a request whose sub-header has the
// op's length. It does not inline; the atomics' batch loop reads them
// itself.
func atomicFields(req *rdmo.Request) AtomicReq {
	r := AtomicReq{Region: rdmo.RegionID(le.Uint64(req.Sub)), Addr: le.Uint64(req.Sub[8:])}
	if req.Op == OpCompareSwap {
		r.Compare, r.Operand = le.Uint64(req.Sub[16:]), le.Uint64(req.Sub[24:])
	} else {
		r.Operand = le.Uint64(req.Sub[16:])
	}
	return r
}

// DecodeIndirect decodes and checks an indirect read or write request.
func DecodeIndirect(req *rdmo.Request) (IndirectReq, error) {
	write := req.Op == OpIndirectWrite
	name := "indirect read"
	if write {
		name = "indirect write"
	}
	if err := checkShape(req, name, IndirectSubLen, write); err != nil {
		return IndirectReq{}, err
	}
	shape := le.Uint64(req.Sub[16:])
	r := IndirectReq{Region: rdmo.RegionID(le.Uint64(req.Sub)), Addr: le.Uint64(req.Sub[8:]),
		Depth: uint16(shape), Len: uint16(shape >> 16), Off: uint32(shape >> 32)}
	switch {
	case r.Depth > MaxDepth:
		return r, &rdmo.WireError{Status: rdmo.StatusLengthOverflow, Detail: fmt.Sprintf("%s of depth %d, at most %d", name, r.Depth, MaxDepth)}
	case !write && r.Len > rdmo.MaxResultData:
		return r, &rdmo.WireError{Status: rdmo.StatusLengthOverflow, Detail: fmt.Sprintf("indirect read of %d bytes, at most %d", r.Len, rdmo.MaxResultData)}
	case write && r.Len != 0:
		return r, &rdmo.WireError{Status: rdmo.StatusPayloadMismatch, Detail: "indirect write: len must be 0 (the payload's length counts)"}
	case write && (req.Length == 0 || req.Length > MaxIndirectWrite):
		return r, &rdmo.WireError{Status: rdmo.StatusPayloadMismatch, Detail: fmt.Sprintf("indirect write of %d bytes: 1 to %d", req.Length, MaxIndirectWrite)}
	case r.Depth > 0 && r.Addr%8 != 0:
		return r, &rdmo.WireError{Status: rdmo.StatusOutOfBounds, Detail: fmt.Sprintf("first pointer at %#x is not 8-byte aligned", r.Addr)}
	}
	return r, nil
}

// DecodeAlloc decodes and checks an alloc request.
func DecodeAlloc(req *rdmo.Request) (AllocReq, error) {
	if err := checkShape(req, "alloc", AllocSubLen, false); err != nil {
		return AllocReq{}, err
	}
	r := AllocReq{Region: rdmo.RegionID(le.Uint64(req.Sub)), Head: le.Uint64(req.Sub[8:])}
	if r.Head%8 != 0 {
		return r, &rdmo.WireError{Status: rdmo.StatusOutOfBounds, Detail: fmt.Sprintf("free-list head at %#x is not 8-byte aligned", r.Head)}
	}
	return r, nil
}

// DecodeKV decodes and checks a kv lookup or insert request (the insert's
// value length is checked against the table).
func DecodeKV(req *rdmo.Request) (KVReq, error) {
	insert := req.Op == OpKVInsert
	name := "kv lookup"
	if insert {
		name = "kv insert"
	}
	if err := checkShape(req, name, KVSubLen, insert); err != nil {
		return KVReq{}, err
	}
	r := KVReq{Region: rdmo.RegionID(le.Uint64(req.Sub)), Table: le.Uint64(req.Sub[8:]), Key: le.Uint64(req.Sub[16:])}
	switch {
	case r.Key == 0:
		return r, &rdmo.WireError{Status: StatusBadKey, Detail: "key 0 marks an empty bucket"}
	case r.Table%8 != 0:
		return r, &rdmo.WireError{Status: rdmo.StatusOutOfBounds, Detail: fmt.Sprintf("table at %#x is not 8-byte aligned", r.Table)}
	}
	return r, nil
}

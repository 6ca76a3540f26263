// Package wire is the RDMO wire codec: request headers, the BATCH container,
// scatter iovs and responses, in the byte layout of docs/PROTOCOL.md.
package wire

import (
	"encoding/binary"
	"strconv"

	"github.com/openrdmo/rdmo/rdmo"
)

// The wire is little-endian and follows the C structs of NVIDIA DOCA 3.0's
// urom_rdmo with natural alignment. Every size and offset below is checked
// against a C compiler by layout_test.go; docs/PROTOCOL.md has the tables.

// Request header (struct urom_rdmo_hdr) and limits.
const (
	HeaderLen    = 16 // sizeof(struct urom_rdmo_hdr)
	MaxHeaderLen = 64 // longest AM header a worker accepts

	HeaderClientIDOffset = 0  // id u64: the client the request belongs to
	HeaderOpOffset       = 8  // op_id u32
	HeaderFlagsOffset    = 12 // flags u32
	SubHeaderOffset      = HeaderLen
)

// Reference op sub-headers. Each follows the request header at offset 16.
const (
	FlushHeaderLen = HeaderLen + 8 // + struct urom_rdmo_flush_hdr
	FlushIDOffset  = 16            // flush_id u64

	AppendHeaderLen      = HeaderLen + 24 // + struct urom_rdmo_append_hdr
	AppendPtrAddrOffset  = 16             // ptr_addr u64: address of the queue's tail pointer
	AppendPtrRkeyOffset  = 24             // ptr_rkey u64: region holding the tail pointer
	AppendDataRkeyOffset = 32             // data_rkey u64: region receiving the data

	ScatterHeaderLen   = HeaderLen + 8 // + struct urom_rdmo_scatter_hdr
	ScatterCountOffset = 16            // count u64: number of iovs in the payload
)

// Scatter iov descriptor (struct urom_rdmo_scatter_iov). Offsets are from
// the start of the descriptor, which need not be aligned in the payload.
const (
	IOVDescLen    = 24 // sizeof: 18 bytes of fields + 6 bytes of tail padding
	IOVAddrOffset = 0  // addr u64
	IOVRkeyOffset = 8  // rkey u64
	IOVLenOffset  = 16 // len u16
	MaxIOVLen     = 65535
)

// Responses, sent by the worker to the initiator on AM id 0 as the AM header.
const (
	ResponseIDOffset = 0 // rsp_id u32 (struct urom_rdmo_rsp_hdr)

	// The reference flush response: rsp_hdr (4 bytes) then
	// struct urom_rdmo_flush_rsp_hdr, so flush_id sits unaligned at 4.
	ReferenceFlushResponseLen  = 12
	FlushResponseFlushIDOffset = 4

	// Our extension after the reference 12 bytes.
	FlushResponseLen               = 32
	FlushResponseFailedOffset      = 12 // failed u32
	FlushResponseFirstOpOffset     = 16 // first_op u32
	FlushResponseFirstStatusOffset = 20 // first_status u32
	FlushResponseFirstSeqOffset    = 24 // first_seq u64

	AckResponseLen    = 32
	AckOpOffset       = 4  // op_id u32
	AckSeqOffset      = 8  // seq u64
	AckStatusOffset   = 16 // status u32
	AckReservedOffset = 20 // reserved u32: sent as zero, ignored on receipt
	AckValueOffset    = 24 // value u64

	// The result extension (CapabilityResult): an ack that carries result
	// data or a failure's detail is 40 bytes, and the AM data holds the
	// data_len bytes of data followed by the detail_len bytes of detail.
	AckResultLen       = 40
	AckDataLenOffset   = 32 // data_len u32, at most rdmo.MaxResultData
	AckDetailLenOffset = 36 // detail_len u32, at most rdmo.MaxResultDetail
	MaxAckMessageLen   = AckResultLen + rdmo.MaxResultData + rdmo.MaxResultDetail
)

// Each message's last field must end inside it. A wrong constant then fails
// the build (a negative constant converted to uint) instead of letting a
// decoder, which checks only the message length, read out of range.
const (
	_ = uint(FlushHeaderLen - (FlushIDOffset + 8))
	_ = uint(AppendHeaderLen - (AppendDataRkeyOffset + 8))
	_ = uint(ScatterHeaderLen - (ScatterCountOffset + 8))
	_ = uint(IOVDescLen - (IOVLenOffset + 2))
	_ = uint(ReferenceFlushResponseLen - (FlushResponseFlushIDOffset + 8))
	_ = uint(FlushResponseLen - (FlushResponseFirstSeqOffset + 8))
	_ = uint(AckResponseLen - (AckValueOffset + 8))
	_ = uint(AckResultLen - (AckDetailLenOffset + 4))
	_ = uint(MaxHeaderLen - AppendHeaderLen)
)

// knownFlags are the request flags a worker accepts.
const knownFlags = rdmo.FlagFence | rdmo.FlagAck | rdmo.FlagByRef | rdmo.FlagAckGroup

// DefaultMaxInFlightPerRQ is how many requests of one request queue our
// worker accepts before they complete, unless configured otherwise
// (dpu.Config.MaxInFlightPerRQ); more fail with rdmo.StatusTooManyInFlight. An
// initiator keeps its unconfirmed requests below it (host/initiator
// Options.Credits).
const DefaultMaxInFlightPerRQ = 1024

// Response ids (rsp_id).
const (
	RspFlush uint32 = 0 // reference: the answer to a FLUSH
	RspAck   uint32 = 1 // extension: the answer to a request sent with rdmo.FlagAck
)

var le = binary.LittleEndian

// Header is the common request header, struct urom_rdmo_hdr.
type Header struct {
	ClientID uint64
	Op       uint32
	Flags    uint32
}

// Fenced reports whether rdmo.FlagFence is set.
func (h Header) Fenced() bool { return h.Flags&rdmo.FlagFence != 0 }

// WantsAck reports whether rdmo.FlagAck is set.
func (h Header) WantsAck() bool { return h.Flags&rdmo.FlagAck != 0 }

// Put writes the 16 header bytes to b[0:16]. It panics if b is shorter,
// like binary.LittleEndian.PutUint64: a short buffer is a caller bug.
func (h Header) Put(b []byte) {
	_ = b[HeaderLen-1]
	le.PutUint64(b[HeaderClientIDOffset:], h.ClientID)
	le.PutUint32(b[HeaderOpOffset:], h.Op)
	le.PutUint32(b[HeaderFlagsOffset:], h.Flags)
}

// IOV is one scatter descriptor, struct urom_rdmo_scatter_iov.
type IOV struct {
	Addr uint64        // target address of the chunk
	Rkey rdmo.RegionID // region id of the chunk
	Len  uint16        // chunk length; the data follows the descriptor
}

// End returns Addr+Len and false if that sum wraps around 2^64, so a bounds
// check never accepts a range that wraps to a small address.
func (v IOV) End() (uint64, bool) {
	end := v.Addr + uint64(v.Len)
	return end, end >= v.Addr
}

// RequestHeader is a request's decoded AM header: the common header and
// the sub-header of its op. Only the sub-header of Header.Op is meaningful;
// User aliases the input bytes and is set only for user ops.
type RequestHeader struct {
	Header  Header
	Flush   rdmo.FlushHeader
	Append  rdmo.AppendHeader
	Scatter rdmo.ScatterHeader
	Batch   BatchHeader
	Pool    LendPoolHeader // LEND_POOL
	// User is the opaque sub-header of a plugin op: the header bytes after
	// offset 16 (possibly empty). It aliases the slice given to ParseRequest.
	User []byte
}

// ParseHeader decodes and validates the common request header. Checks run
// in this order, and the first failure is returned: ShortHeader (< 16
// bytes), HeaderTooLong (> 64 bytes), UnknownOp (5..15), UnknownFlags.
// Whenever the first 16 bytes are present the decoded Header is returned,
// even with an error, so a worker can report which op and client failed.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, wireErr(rdmo.StatusShortHeader,
			"request header is "+itoa(len(b))+" bytes, at least 16 needed")
	}
	h := Header{
		ClientID: le.Uint64(b[HeaderClientIDOffset:]),
		Op:       le.Uint32(b[HeaderOpOffset:]),
		Flags:    le.Uint32(b[HeaderFlagsOffset:]),
	}
	if len(b) > MaxHeaderLen {
		return h, wireErr(rdmo.StatusHeaderTooLong,
			"request header is "+itoa(len(b))+" bytes, at most 64 allowed")
	}
	if h.Op > rdmo.OpLendPool && !rdmo.IsUserOp(h.Op) {
		return h, wireErr(rdmo.StatusUnknownOp, "op id "+utoa(uint64(h.Op))+" is reserved")
	}
	if unknown := h.Flags &^ knownFlags; unknown != 0 {
		return h, wireErr(rdmo.StatusUnknownFlags, "flags "+hex32(unknown)+" are not defined")
	}
	return h, nil
}

// ParseRequest decodes and validates a request's AM header. After the
// checks of ParseHeader, a reference op's header, and a BATCH container's,
// must be exactly its size (shorter: ShortHeader; longer: HeaderTooLong); a
// user op may carry 0..48 bytes of opaque sub-header. A container with any
// flag set fails with UnknownFlags (FENCE and ACK go on its inner requests).
// The payload is checked separately by RequestHeader.CheckPayload.
// ParseRequest allocates only to return an error.
func ParseRequest(b []byte) (RequestHeader, error) {
	var r RequestHeader
	err := ParseRequestInto(&r, b)
	return r, err
}

// ParseRequestInto is ParseRequest decoding into *r (overwritten whole),
// for a caller that parses a request per message: an 88-byte result
// copied back through the stack per request was a measurable part of a
// worker's time per small request.
func ParseRequestInto(r *RequestHeader, b []byte) error {
	h, err := ParseHeader(b)
	*r = RequestHeader{Header: h}
	if err != nil {
		return err
	}
	var want int
	switch h.Op {
	case rdmo.OpFlush:
		want = FlushHeaderLen
	case rdmo.OpAppend:
		want = AppendHeaderLen
	case rdmo.OpScatter:
		want = ScatterHeaderLen
	case rdmo.OpBatch:
		want = BatchHeaderLen
	case rdmo.OpLendPool:
		want = LendPoolHeaderLen
	default:
		r.User = b[SubHeaderOffset:len(b):len(b)]
		return checkByRef(h)
	}
	if len(b) != want {
		s := rdmo.StatusShortHeader
		if len(b) > want {
			s = rdmo.StatusHeaderTooLong
		}
		return wireErr(s, rdmo.OpName(h.Op)+" header is "+itoa(len(b))+" bytes, exactly "+itoa(want)+" required")
	}
	switch h.Op {
	case rdmo.OpFlush:
		r.Flush.FlushID = le.Uint64(b[FlushIDOffset:])
	case rdmo.OpAppend:
		r.Append = rdmo.AppendHeader{
			PtrAddr:  le.Uint64(b[AppendPtrAddrOffset:]),
			PtrRkey:  rdmo.RegionID(le.Uint64(b[AppendPtrRkeyOffset:])),
			DataRkey: rdmo.RegionID(le.Uint64(b[AppendDataRkeyOffset:])),
		}
	case rdmo.OpScatter:
		r.Scatter.Count = le.Uint64(b[ScatterCountOffset:])
	case rdmo.OpBatch:
		r.Batch.Count = le.Uint64(b[BatchCountOffset:])
		if h.Flags != 0 {
			return wireErr(rdmo.StatusUnknownFlags, "a batch container carries no flags of its own (flags "+
				hex32(h.Flags)+"); FENCE and ACK go on its inner requests")
		}
	case rdmo.OpLendPool:
		r.Pool = LendPoolHeader{
			Pool: PoolID(le.Uint64(b[LendPoolIDOffset:])),
			VA:   le.Uint64(b[LendPoolVAOffset:]),
			Len:  le.Uint64(b[LendPoolLenOffset:]),
		}
	}
	return checkByRef(h)
}

// CheckPayload validates the AM data that came with r: a FLUSH has none, an
// APPEND has at least one byte, a SCATTER payload holds exactly Count
// well-formed iovs, and a BATCH container's data holds exactly Count
// well-framed entries (CheckBatchPayload; the inner requests are checked one
// by one, see BatchIter). User op payloads are the plugin's to check. A worker
// should call it before touching target memory, so a malformed scatter
// writes nothing rather than its first few chunks. It allocates only to
// return an error.
func (r *RequestHeader) CheckPayload(payload []byte) error {
	switch r.Header.Op {
	case rdmo.OpFlush:
		if len(payload) != 0 {
			return wireErr(rdmo.StatusPayloadMismatch, "flush carries "+itoa(len(payload))+" payload bytes, none allowed")
		}
	case rdmo.OpAppend:
		if len(payload) == 0 {
			return rdmo.ErrEmptyAppend
		}
	case rdmo.OpScatter:
		it := NewScatterIter(payload, r.Scatter.Count)
		for it.Next() {
		}
		return it.Err()
	case rdmo.OpBatch:
		return CheckBatchPayload(payload, r.Batch.Count)
	case rdmo.OpLendPool:
		switch {
		case r.Pool.Len > 0 && len(payload) == 0:
			return wireErr(rdmo.StatusPayloadMismatch, "a LEND_POOL registration carries the pool's packed remote key, none came")
		case r.Pool.Len == 0 && len(payload) != 0:
			return wireErr(rdmo.StatusPayloadMismatch, "a LEND_POOL release carries no payload, "+itoa(len(payload))+" bytes came")
		}
	}
	return nil
}

// Request returns the rdmo.Request a worker hands to a handler for a
// request with this decoded header, arriving as number seq on a connection
// of client, with the raw header hdr (what ParseRequest decoded) and its
// eager payload. The checks are the caller's (ParseRequest, the client,
// CheckPayload); Request only copies what they decoded.
func (r *RequestHeader) Request(seq uint64, client rdmo.ClientID, hdr, payload []byte) rdmo.Request {
	req := rdmo.Request{Seq: seq, Client: client, Op: r.Header.Op, Flags: r.Header.Flags,
		Payload: payload, Length: uint64(len(payload))}
	if len(hdr) > SubHeaderOffset {
		req.Sub = hdr[SubHeaderOffset:len(hdr):len(hdr)]
	}
	req.Flush, req.Append, req.Scatter = r.Flush, r.Append, r.Scatter
	return req
}

// DecodeSub sets the decoded sub-header of req (Flush, Append or Scatter,
// by req.Op) from req.Sub, for a request whose header a worker has already
// checked and that crossed a process boundary as raw bytes (rdmo/plugin).
// It reports false, changing nothing, when Sub does not have its op's size.
func DecodeSub(req *rdmo.Request) bool {
	b := req.Sub
	switch req.Op {
	case rdmo.OpFlush:
		if len(b) != FlushHeaderLen-HeaderLen {
			return false
		}
		req.Flush.FlushID = le.Uint64(b[FlushIDOffset-HeaderLen:])
	case rdmo.OpAppend:
		if len(b) != AppendHeaderLen-HeaderLen {
			return false
		}
		req.Append = rdmo.AppendHeader{
			PtrAddr:  le.Uint64(b[AppendPtrAddrOffset-HeaderLen:]),
			PtrRkey:  rdmo.RegionID(le.Uint64(b[AppendPtrRkeyOffset-HeaderLen:])),
			DataRkey: rdmo.RegionID(le.Uint64(b[AppendDataRkeyOffset-HeaderLen:])),
		}
	case rdmo.OpScatter:
		if len(b) != ScatterHeaderLen-HeaderLen {
			return false
		}
		req.Scatter.Count = le.Uint64(b[ScatterCountOffset-HeaderLen:])
	}
	return true
}

// AppendFlushRequest appends a FLUSH request header to dst. h.Op is
// replaced by rdmo.OpFlush so the op id always matches the sub-header written.
func AppendFlushRequest(dst []byte, h Header, f rdmo.FlushHeader) []byte {
	h.Op = rdmo.OpFlush
	dst = appendHeader(dst, h)
	return le.AppendUint64(dst, f.FlushID)
}

// AppendAppendRequest appends an APPEND request header to dst. h.Op is
// replaced by rdmo.OpAppend so the op id always matches the sub-header written.
func AppendAppendRequest(dst []byte, h Header, a rdmo.AppendHeader) []byte {
	h.Op = rdmo.OpAppend
	dst = appendHeader(dst, h)
	dst = le.AppendUint64(dst, a.PtrAddr)
	dst = le.AppendUint64(dst, uint64(a.PtrRkey))
	return le.AppendUint64(dst, uint64(a.DataRkey))
}

// AppendScatterRequest appends a SCATTER request header to dst. h.Op is
// replaced by rdmo.OpScatter so the op id always matches the sub-header written.
// The iovs go in the AM data, built with AppendIOV.
func AppendScatterRequest(dst []byte, h Header, s rdmo.ScatterHeader) []byte {
	h.Op = rdmo.OpScatter
	dst = appendHeader(dst, h)
	return le.AppendUint64(dst, s.Count)
}

// AppendUserRequest appends a plugin op's request header: the common header
// then sub verbatim. h.Op must be a user op and the whole header must fit
// in MaxHeaderLen, because a worker would reject anything else.
func AppendUserRequest(dst []byte, h Header, sub []byte) ([]byte, error) {
	if !rdmo.IsUserOp(h.Op) {
		return dst, wireErr(rdmo.StatusUnknownOp, "op id "+utoa(uint64(h.Op))+" is not a user op (>= 16)")
	}
	if HeaderLen+len(sub) > MaxHeaderLen {
		return dst, wireErr(rdmo.StatusHeaderTooLong,
			"user sub-header is "+itoa(len(sub))+" bytes, at most 48 allowed")
	}
	dst = appendHeader(dst, h)
	return append(dst, sub...), nil
}

func appendHeader(dst []byte, h Header) []byte {
	dst = le.AppendUint64(dst, h.ClientID)
	dst = le.AppendUint32(dst, h.Op)
	return le.AppendUint32(dst, h.Flags)
}

var iovPadding [IOVDescLen - IOVLenOffset - 2]byte

// AppendIOV appends one scatter element, the descriptor then data, to dst.
// iov.Len must equal len(data): the length is stated twice on purpose, so a
// caller whose idea of the chunk differs from the bytes it passes finds out
// here rather than at the target. Padding bytes are written as zero.
func AppendIOV(dst []byte, iov IOV, data []byte) ([]byte, error) {
	if len(data) > MaxIOVLen {
		return dst, wireErr(rdmo.StatusLengthOverflow,
			"iov data is "+itoa(len(data))+" bytes, at most 65535 allowed")
	}
	if int(iov.Len) != len(data) {
		return dst, wireErr(rdmo.StatusPayloadMismatch,
			"iov.Len is "+itoa(int(iov.Len))+" but "+itoa(len(data))+" data bytes were given")
	}
	dst = le.AppendUint64(dst, iov.Addr)
	dst = le.AppendUint64(dst, uint64(iov.Rkey))
	dst = le.AppendUint16(dst, iov.Len)
	dst = append(dst, iovPadding[:]...)
	return append(dst, data...), nil
}

// ScatterIter walks a SCATTER payload without allocating, in the manner of
// bufio.Scanner:
//
//	it := wire.NewScatterIter(payload, req.Scatter.Count)
//	for it.Next() {
//		put(it.IOV(), it.Data())
//	}
//	if err := it.Err(); err != nil { ... }
//
// Next returns false at the end or on the first malformed element; Err then
// tells which. The payload must hold exactly count elements: too few bytes,
// a truncated descriptor, a len running past the end, and bytes left over
// after the last element are all errors.
type ScatterIter struct {
	rest      []byte
	remaining uint64 // elements still to decode
	index     uint64 // index of the next element, for error details
	iov       IOV
	data      []byte
	err       error
}

// NewScatterIter returns an iterator over count iovs in payload.
func NewScatterIter(payload []byte, count uint64) ScatterIter {
	it := ScatterIter{rest: payload, remaining: count}
	// Each element needs at least a descriptor, so an impossible count is
	// refused up front instead of after walking part of the payload; this
	// also bounds the walk when count comes from an untrusted 2^64 field.
	if count > uint64(len(payload))/IOVDescLen {
		it.err = wireErr(rdmo.StatusPayloadMismatch, "count "+utoa(count)+" iovs need at least "+
			mulDesc(count)+" bytes, payload has "+itoa(len(payload)))
		it.remaining = 0
	}
	return it
}

// Next decodes the next element and reports whether there is one.
func (it *ScatterIter) Next() bool {
	it.iov, it.data = IOV{}, nil
	if it.err != nil {
		return false
	}
	if it.remaining == 0 {
		if len(it.rest) != 0 {
			it.err = wireErr(rdmo.StatusPayloadMismatch, itoa(len(it.rest))+" bytes left after the last of "+
				utoa(it.index)+" iovs")
		}
		return false
	}
	if len(it.rest) < IOVDescLen {
		detail := "payload ends after " + utoa(it.index) + " iovs, count needs " + utoa(it.index+it.remaining)
		if len(it.rest) != 0 {
			detail = "iov " + utoa(it.index) + ": descriptor truncated to " + itoa(len(it.rest)) + " of 24 bytes"
		}
		it.err = wireErr(rdmo.StatusPayloadMismatch, detail)
		return false
	}
	iov := IOV{
		Addr: le.Uint64(it.rest[IOVAddrOffset:]),
		Rkey: rdmo.RegionID(le.Uint64(it.rest[IOVRkeyOffset:])),
		Len:  le.Uint16(it.rest[IOVLenOffset:]),
	}
	body := it.rest[IOVDescLen:]
	if int(iov.Len) > len(body) {
		it.err = wireErr(rdmo.StatusLengthOverflow, "iov "+utoa(it.index)+": len "+itoa(int(iov.Len))+
			" but only "+itoa(len(body))+" bytes follow the descriptor")
		return false
	}
	it.iov = iov
	it.data = body[:iov.Len:iov.Len]
	it.rest = body[iov.Len:]
	it.remaining--
	it.index++
	return true
}

// IOV returns the descriptor of the current element.
func (it *ScatterIter) IOV() IOV { return it.iov }

// Data returns the current element's data. It aliases the payload and has
// no spare capacity, so appending to it cannot overwrite the next element.
func (it *ScatterIter) Data() []byte { return it.data }

// Err returns the error that stopped the walk, or nil after a clean end.
func (it *ScatterIter) Err() error { return it.err }

// ForEachIOV calls fn for each element of a SCATTER payload in order and
// stops at the first decoding error or the first error fn returns.
func ForEachIOV(payload []byte, count uint64, fn func(IOV, []byte) error) error {
	it := NewScatterIter(payload, count)
	for it.Next() {
		if err := fn(it.iov, it.data); err != nil {
			return err
		}
	}
	return it.Err()
}

// FlushResponse is the worker's answer to a FLUSH. The reference sends only
// rsp_id and FlushID (12 bytes); the other fields are our extension and tell
// the initiator which of its requests failed since the previous flush.
type FlushResponse struct {
	FlushID uint64
	// Failed counts this connection's requests that failed since the
	// previous flush response (saturating at 2^32-1). The First* fields
	// describe the earliest of them and are zero when Failed is zero.
	Failed      uint32
	FirstOp     uint32
	FirstStatus rdmo.Status
	FirstSeq    uint64
	// Extended reports, after parsing, whether the response carried the
	// extension; false means a reference worker sent it. Encoders ignore it.
	Extended bool
}

// Err returns nil when no request failed, otherwise a *rdmo.WireError matching
// the first failure's status, with the count, op and sequence in its detail.
func (r FlushResponse) Err() error {
	if r.Failed == 0 {
		return nil
	}
	s := r.FirstStatus
	if s == rdmo.StatusOK {
		s = rdmo.StatusInternal // a failure reported without a cause is still a failure
	}
	return wireErr(s, utoa(uint64(r.Failed))+" request(s) failed before flush "+hex64(r.FlushID)+
		"; first: "+rdmo.OpName(r.FirstOp)+" seq "+utoa(r.FirstSeq))
}

// AppendFlushResponse appends the 32-byte extended flush response. Its
// first 12 bytes are exactly the reference response, which is all a
// reference initiator reads.
func AppendFlushResponse(dst []byte, r FlushResponse) []byte {
	dst = AppendReferenceFlushResponse(dst, r.FlushID)
	dst = le.AppendUint32(dst, r.Failed)
	dst = le.AppendUint32(dst, r.FirstOp)
	dst = le.AppendUint32(dst, uint32(r.FirstStatus))
	return le.AppendUint64(dst, r.FirstSeq)
}

// AppendReferenceFlushResponse appends the 12-byte flush response of the
// reference worker, for speaking to or impersonating one in tests.
func AppendReferenceFlushResponse(dst []byte, flushID uint64) []byte {
	dst = le.AppendUint32(dst, RspFlush)
	return le.AppendUint64(dst, flushID)
}

// ParseResponseID returns the rsp_id of a response so the initiator can
// pick the decoder. Ids other than RspFlush, RspAck and RspAckGroup are
// rdmo.ErrUnknownOp.
func ParseResponseID(b []byte) (uint32, error) {
	if len(b) < 4 {
		return 0, wireErr(rdmo.StatusShortHeader, "response is "+itoa(len(b))+" bytes, at least 4 needed")
	}
	id := le.Uint32(b[ResponseIDOffset:])
	if id != RspFlush && id != RspAck && id != RspAckGroup {
		return id, wireErr(rdmo.StatusUnknownOp, "response id "+utoa(uint64(id))+" is not defined")
	}
	return id, nil
}

// ParseFlushResponse decodes a flush response of 12 bytes (reference) or at
// least 32 bytes (extended). Lengths in between are a truncated extension.
// Bytes after the 32 known ones are ignored so that a later extension can
// append fields without breaking this decoder.
func ParseFlushResponse(b []byte) (FlushResponse, error) {
	id, err := ParseResponseID(b)
	if err != nil {
		return FlushResponse{}, err
	}
	if id != RspFlush {
		return FlushResponse{}, wireErr(rdmo.StatusUnknownOp, "response id "+utoa(uint64(id))+" is not a flush response")
	}
	switch {
	case len(b) < ReferenceFlushResponseLen:
		return FlushResponse{}, wireErr(rdmo.StatusShortHeader, "flush response is "+itoa(len(b))+" bytes, at least 12 needed")
	case len(b) > ReferenceFlushResponseLen && len(b) < FlushResponseLen:
		return FlushResponse{}, wireErr(rdmo.StatusShortHeader, "flush response is "+itoa(len(b))+
			" bytes: 12 (reference) or at least 32 (extended) expected")
	}
	r := FlushResponse{FlushID: le.Uint64(b[FlushResponseFlushIDOffset:])}
	if len(b) >= FlushResponseLen {
		r.Extended = true
		r.Failed = le.Uint32(b[FlushResponseFailedOffset:])
		r.FirstOp = le.Uint32(b[FlushResponseFirstOpOffset:])
		r.FirstStatus = rdmo.Status(le.Uint32(b[FlushResponseFirstStatusOffset:]))
		r.FirstSeq = le.Uint64(b[FlushResponseFirstSeqOffset:])
	}
	return r, nil
}

// CapabilityResult is the capability string of a worker that answers acks
// with result data and failure details (the 40-byte ack, docs/PROTOCOL.md
// section 6.4). Acks go only to requests with rdmo.FlagAck, which a
// reference initiator never sets, so a reference peer never sees one; an
// initiator learns from this string whether data and details can come.
const CapabilityResult = "result-v1"

// AckResponse is the worker's answer to a request sent with rdmo.FlagAck. A
// result's data and a failure's detail (CapabilityResult) travel as AM
// data; the header says how long each is (AckResult splits them).
type AckResponse struct {
	Op     uint32 // op id of the acknowledged request
	Seq    uint64 // the request's arrival sequence number on its connection
	Status rdmo.Status
	// Value is an op-specific result: for APPEND the target address where
	// the payload starts; for plugin ops whatever the plugin returns.
	Value uint64
	// DataLen and DetailLen are the lengths of the result data and the
	// detail in the AM data; both 0 in a 32-byte ack.
	DataLen, DetailLen uint32
}

// Err returns Status.Err(), with the op and sequence in the detail.
func (a AckResponse) Err() error {
	if a.Status == rdmo.StatusOK {
		return nil
	}
	return wireErr(a.Status, rdmo.OpName(a.Op)+" seq "+utoa(a.Seq))
}

// AppendAck appends the ack response: 32 bytes, or 40 (AckResultLen) when
// DataLen or DetailLen is set. The reserved field is zero.
func AppendAck(dst []byte, a AckResponse) []byte {
	dst = le.AppendUint32(dst, RspAck)
	dst = le.AppendUint32(dst, a.Op)
	dst = le.AppendUint64(dst, a.Seq)
	dst = le.AppendUint32(dst, uint32(a.Status))
	dst = le.AppendUint32(dst, 0)
	dst = le.AppendUint64(dst, a.Value)
	if a.DataLen != 0 || a.DetailLen != 0 {
		dst = le.AppendUint32(dst, a.DataLen)
		dst = le.AppendUint32(dst, a.DetailLen)
	}
	return dst
}

// ParseAck decodes an ack response header: 32 bytes, or at least 40 with
// the result lengths. The reserved field and bytes after the known ones
// are ignored, so that later extensions can use them without breaking this
// decoder.
func ParseAck(b []byte) (AckResponse, error) {
	id, err := ParseResponseID(b)
	if err != nil {
		return AckResponse{}, err
	}
	if id != RspAck {
		return AckResponse{}, wireErr(rdmo.StatusUnknownOp, "response id "+utoa(uint64(id))+" is not an ack")
	}
	if len(b) < AckResponseLen {
		return AckResponse{}, wireErr(rdmo.StatusShortHeader, "ack is "+itoa(len(b))+" bytes, at least 32 needed")
	}
	a := AckResponse{
		Op:     le.Uint32(b[AckOpOffset:]),
		Seq:    le.Uint64(b[AckSeqOffset:]),
		Status: rdmo.Status(le.Uint32(b[AckStatusOffset:])),
		Value:  le.Uint64(b[AckValueOffset:]),
	}
	if len(b) >= AckResultLen {
		a.DataLen = le.Uint32(b[AckDataLenOffset:])
		a.DetailLen = le.Uint32(b[AckDetailLenOffset:])
	}
	return a, nil
}

// AckResult splits an ack's AM data into the result data and the detail.
// The lengths must be within rdmo.MaxResultData and rdmo.MaxResultDetail
// and add up to len(amData) (else LengthOverflow or PayloadMismatch). The
// slices point into amData.
func AckResult(a AckResponse, amData []byte) (data, detail []byte, err error) {
	if a.DataLen > rdmo.MaxResultData || a.DetailLen > rdmo.MaxResultDetail {
		return nil, nil, wireErr(rdmo.StatusLengthOverflow, "ack result of "+utoa(uint64(a.DataLen))+
			" data and "+utoa(uint64(a.DetailLen))+" detail bytes: at most "+itoa(rdmo.MaxResultData)+
			" and "+itoa(rdmo.MaxResultDetail))
	}
	if uint64(a.DataLen)+uint64(a.DetailLen) != uint64(len(amData)) {
		return nil, nil, wireErr(rdmo.StatusPayloadMismatch, "ack says "+utoa(uint64(a.DataLen))+" + "+
			utoa(uint64(a.DetailLen))+" result bytes, its data has "+itoa(len(amData)))
	}
	if a.DataLen > 0 {
		data = amData[:a.DataLen:a.DataLen]
	}
	if a.DetailLen > 0 {
		detail = amData[a.DataLen:]
	}
	return data, detail, nil
}

func wireErr(s rdmo.Status, detail string) *rdmo.WireError {
	return &rdmo.WireError{Status: s, Detail: detail}
}

func itoa(n int) string    { return strconv.Itoa(n) }
func utoa(n uint64) string { return strconv.FormatUint(n, 10) }
func hex32(n uint32) string {
	return "0x" + strconv.FormatUint(uint64(n), 16)
}
func hex64(n uint64) string { return "0x" + strconv.FormatUint(n, 16) }

// mulDesc formats count*IOVDescLen without overflowing for huge counts.
func mulDesc(count uint64) string {
	if count > ^uint64(0)/IOVDescLen {
		return "more than 2^64"
	}
	return utoa(count * IOVDescLen)
}

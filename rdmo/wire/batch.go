package wire

import "github.com/openrdmo/rdmo/rdmo"

// The BATCH container (op 3, extension): several complete requests in one
// active message, so that the per-message cost of UCX and of the worker's
// AM entry point is paid once for many small requests. docs/PROTOCOL.md
// section 11 has the layout, the sequence numbering and the failure rules.
//
// The container's AM header is the 16-byte common header (op 3, flags 0,
// the client's id) and struct rdmo_batch_hdr { uint64_t count; }. Its AM
// data is count entries, each
//
//	struct rdmo_batch_entry { uint16_t hdr_len; uint16_t flags; uint32_t payload_len; };
//
// then hdr_len bytes of the inner request's AM header, then payload_len
// bytes of its AM data, then zero padding up to the next multiple of 8
// (counted from the start of the container's data). Every entry, the last
// one too, is padded, so entries start 8-aligned and the data's length is a
// multiple of 8.

// CapabilityBatch is the capability string of a worker that unpacks BATCH
// containers (this layout). A target that knows its worker has it passes it
// to the initiator out of band (host/oob.WorkerInfo.Capabilities), and only
// then may the initiator send containers.
const CapabilityBatch = "batch-v1"

// CapabilityLargeBatch is the capability string of a worker that takes
// BATCH containers of up to MaxLargeBatch bytes and receives messages of
// that size over shared memory in one piece (its UCX shared-memory segment
// is ucp.ShmSegmentLarge, just below 64 KiB). An initiator that knows its worker
// has it may send such containers, and give its own shared-memory
// transports that segment: UCX writes a message into a descriptor of the
// receiver's as large as the sender's segment, so a worker without it must
// never receive from one (docs/PROTOCOL.md section 11.8).
const CapabilityLargeBatch = "batch-64k-v1"

// MaxLargeBatch is the size (header and data) of the containers an
// initiator sends to a worker with CapabilityLargeBatch: 60 KiB, within
// the segment with room for UCX's own headers. A worker without it
// gets containers of at most 8 KiB, one default segment.
const MaxLargeBatch = 60 << 10

// Container header (struct rdmo_batch_hdr after the common header).
const (
	BatchHeaderLen   = HeaderLen + 8 // + struct rdmo_batch_hdr
	BatchCountOffset = 16            // count u64: entries in the AM data
)

// Entry header (struct rdmo_batch_entry). Offsets are from the start of the
// entry, which is 8-aligned in the container's AM data.
const (
	BatchEntryHeaderLen        = 8 // sizeof(struct rdmo_batch_entry)
	BatchEntryHdrLenOffset     = 0 // hdr_len u16: the inner AM header's length
	BatchEntryFlagsOffset      = 2 // flags u16: none defined, must be zero
	BatchEntryPayloadLenOffset = 4 // payload_len u32: the inner AM data's length
	BatchAlign                 = 8 // every entry starts at a multiple of 8
)

const (
	_ = uint(BatchHeaderLen - (BatchCountOffset + 8))
	_ = uint(BatchEntryHeaderLen - (BatchEntryPayloadLenOffset + 4))
	_ = uint(MaxHeaderLen - BatchHeaderLen)
)

// BatchHeader is the BATCH sub-header, struct rdmo_batch_hdr.
type BatchHeader struct {
	Count uint64 // number of entries in the AM data
}

// BatchEntrySize is the number of bytes an entry with an inner header of
// hdrLen bytes and a payload of payloadLen bytes takes in a container,
// padding included.
func BatchEntrySize(hdrLen, payloadLen int) int {
	return (BatchEntryHeaderLen + hdrLen + payloadLen + BatchAlign - 1) &^ (BatchAlign - 1)
}

// AppendBatchRequest appends a BATCH container's AM header to dst. h.Op is
// replaced by rdmo.OpBatch; h.Flags is written as given, and a worker refuses a
// container with any flag set (FENCE and ACK belong on inner requests).
func AppendBatchRequest(dst []byte, h Header, b BatchHeader) []byte {
	h.Op = rdmo.OpBatch
	dst = appendHeader(dst, h)
	return le.AppendUint64(dst, b.Count)
}

var batchPadding [BatchAlign]byte

// AppendBatchEntry appends one container entry to dst: the entry header,
// the inner request's AM header hdr, its AM data payload, and zero padding
// to a multiple of 8. dst must be the container's AM data so far (its
// length a multiple of 8, as every entry leaves it). It refuses what no
// worker would accept: an inner header shorter than 16 or longer than 64
// bytes, a nested container, a payload of 2^32 bytes or more.
func AppendBatchEntry(dst, hdr, payload []byte) ([]byte, error) {
	switch {
	case len(hdr) < HeaderLen:
		return dst, wireErr(rdmo.StatusShortHeader, "inner request header is "+itoa(len(hdr))+" bytes, at least 16 needed")
	case len(hdr) > MaxHeaderLen:
		return dst, wireErr(rdmo.StatusHeaderTooLong, "inner request header is "+itoa(len(hdr))+" bytes, at most 64 allowed")
	case le.Uint32(hdr[HeaderOpOffset:]) == rdmo.OpBatch:
		return dst, errNestedBatch
	case uint64(len(payload)) > 1<<32-1:
		return dst, wireErr(rdmo.StatusLengthOverflow, "inner payload is "+itoa(len(payload))+" bytes, at most 2^32-1 allowed")
	}
	n := BatchEntryHeaderLen + len(hdr) + len(payload)
	dst = le.AppendUint16(dst, uint16(len(hdr)))
	dst = le.AppendUint16(dst, 0)
	dst = le.AppendUint32(dst, uint32(len(payload)))
	dst = append(dst, hdr...)
	dst = append(dst, payload...)
	return append(dst, batchPadding[:(BatchAlign-n%BatchAlign)%BatchAlign]...), nil
}

var errNestedBatch = wireErr(rdmo.StatusUnknownOp, "a batch container inside a batch container is refused")

// BatchIter walks the entries of a BATCH container's AM data without
// allocating, in the manner of ScatterIter:
//
//	it := wire.NewBatchIter(data, req.Batch.Count)
//	for it.Next() {
//		rh, err := it.Request() // the inner request's header, validated
//		... it.Header(), it.Payload() ...
//	}
//	if err := it.Err(); err != nil { ... }
//
// Next checks only the framing: that the entry header, the inner header and
// payload and the padding lie inside the data, and after the last entry
// that no bytes are left. An inner request that is itself malformed (too
// short or long, unknown op or flags, a nested container, non-zero entry
// flags) does not stop the walk: Request reports it for that entry alone.
// A framing error stops the walk and Err reports it (PayloadMismatch, or
// LengthOverflow when an entry's lengths run past the end).
type BatchIter struct {
	data      []byte
	off       int    // offset of the next entry in data
	remaining uint64 // entries still to decode
	index     uint64 // index of the next entry, for error details
	flags     uint16
	hdr       []byte
	payload   []byte
	poff      int // offset of payload in data
	err       error
}

// NewBatchIter returns an iterator over count entries in data. A count that
// data cannot possibly hold (each entry takes at least 8 bytes) is refused
// at once, before anything is decoded, with PayloadMismatch: this bounds
// the walk when count comes from an untrusted 2^64 field.
func NewBatchIter(data []byte, count uint64) BatchIter {
	it := BatchIter{data: data, remaining: count}
	if count > uint64(len(data))/BatchEntryHeaderLen {
		it.err = wireErr(rdmo.StatusPayloadMismatch, "count "+utoa(count)+" entries need at least "+
			mulEntry(count)+" bytes, the container has "+itoa(len(data)))
		it.remaining = 0
	}
	return it
}

// CountPlausible reports whether data can hold count entries at all: each
// entry takes at least 8 bytes (the check NewBatchIter makes up front), and
// a count of 0 comes with no data. A worker that finds it false cannot
// trust count and fails the container as one request.
func CountPlausible(data []byte, count uint64) bool {
	return count <= uint64(len(data))/BatchEntryHeaderLen && (count > 0 || len(data) == 0)
}

// Next decodes the next entry's framing and reports whether there is one.
func (it *BatchIter) Next() bool {
	it.flags, it.hdr, it.payload, it.poff = 0, nil, nil, 0
	if it.err != nil {
		return false
	}
	rest := len(it.data) - it.off
	if it.remaining == 0 {
		if rest != 0 {
			it.err = wireErr(rdmo.StatusPayloadMismatch, itoa(rest)+" bytes left after the last of "+
				utoa(it.index)+" batch entries")
		}
		return false
	}
	if rest < BatchEntryHeaderLen {
		detail := "container ends after " + utoa(it.index) + " entries, count needs " + utoa(it.index+it.remaining)
		if rest != 0 {
			detail = "batch entry " + utoa(it.index) + ": entry header truncated to " + itoa(rest) + " of 8 bytes"
		}
		it.err = wireErr(rdmo.StatusPayloadMismatch, detail)
		return false
	}
	e := it.data[it.off:]
	hlen := uint64(le.Uint16(e[BatchEntryHdrLenOffset:]))
	plen := uint64(le.Uint32(e[BatchEntryPayloadLenOffset:]))
	body := uint64(rest - BatchEntryHeaderLen)
	if hlen+plen > body { // no overflow: u16 + u32
		it.err = wireErr(rdmo.StatusLengthOverflow, "batch entry "+utoa(it.index)+": header "+utoa(hlen)+
			" + payload "+utoa(plen)+" bytes but only "+utoa(body)+" follow the entry header")
		return false
	}
	size := BatchEntrySize(int(hlen), int(plen))
	if size > rest {
		it.err = wireErr(rdmo.StatusPayloadMismatch, "batch entry "+utoa(it.index)+": padding to 8 bytes runs past the end")
		return false
	}
	it.flags = le.Uint16(e[BatchEntryFlagsOffset:])
	h0 := it.off + BatchEntryHeaderLen
	p0 := h0 + int(hlen)
	p1 := p0 + int(plen)
	it.hdr = it.data[h0:p0:p0]
	it.payload = it.data[p0:p1:p1]
	it.poff = p0
	it.off += size
	it.remaining--
	it.index++
	return true
}

// Header returns the current entry's inner AM header, as sent (possibly
// malformed: see Request). It aliases the data and has no spare capacity.
func (it *BatchIter) Header() []byte { return it.hdr }

// Payload returns the current entry's inner AM data. It aliases the data
// and has no spare capacity.
func (it *BatchIter) Payload() []byte { return it.payload }

// PayloadOffset is the offset of Payload in the container's data, so a
// caller that keeps the data (or a copy of it) can slice the payload again.
func (it *BatchIter) PayloadOffset() int { return it.poff }

// EntryFlags returns the current entry's flags field (none are defined).
func (it *BatchIter) EntryFlags() uint16 { return it.flags }

// Index is the number of entries decoded so far: after a successful Next,
// the current entry's index plus one.
func (it *BatchIter) Index() uint64 { return it.index }

// Request decodes and validates the current entry's inner request header
// with ParseBatchEntry.
func (it *BatchIter) Request() (RequestHeader, error) {
	return ParseBatchEntry(it.hdr, it.flags)
}

// RequestInto is Request decoding into *r (see ParseRequestInto).
func (it *BatchIter) RequestInto(r *RequestHeader) error {
	return ParseBatchEntryInto(r, it.hdr, it.flags)
}

// Err returns the framing error that stopped the walk, or nil after a clean
// end.
func (it *BatchIter) Err() error { return it.err }

// ParseBatchEntry decodes an inner request of a container. Checks run in
// this order: ShortHeader (< 16 bytes), entry flags other than zero
// (UnknownFlags), the checks of ParseRequest, then a nested container
// (UnknownOp). As with ParseRequest, the common
// header is returned even with an error whenever hdr has 16 bytes, so a
// worker can report the op and honour the inner request's rdmo.FlagAck.
func ParseBatchEntry(hdr []byte, entryFlags uint16) (RequestHeader, error) {
	var r RequestHeader
	err := ParseBatchEntryInto(&r, hdr, entryFlags)
	return r, err
}

// ParseBatchEntryInto is ParseBatchEntry decoding into *r (overwritten
// whole; see ParseRequestInto).
func ParseBatchEntryInto(r *RequestHeader, hdr []byte, entryFlags uint16) error {
	err := ParseRequestInto(r, hdr)
	if len(hdr) < HeaderLen {
		return err
	}
	if entryFlags != 0 {
		return wireErr(rdmo.StatusUnknownFlags, "batch entry flags "+hex32(uint32(entryFlags))+" are not defined")
	}
	if err != nil {
		return err
	}
	if r.Header.Op == rdmo.OpBatch {
		return errNestedBatch
	}
	return nil
}

// CheckBatchPayload walks a container's data and returns its framing error,
// or nil. Inner requests are not validated (see BatchIter).
func CheckBatchPayload(data []byte, count uint64) error {
	it := NewBatchIter(data, count)
	for it.Next() {
	}
	return it.Err()
}

// mulEntry formats count*BatchEntryHeaderLen without overflowing.
func mulEntry(count uint64) string {
	if count > ^uint64(0)/BatchEntryHeaderLen {
		return "more than 2^64"
	}
	return utoa(count * BatchEntryHeaderLen)
}

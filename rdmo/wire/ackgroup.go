package wire

import "github.com/openrdmo/rdmo/rdmo"

// CapabilityAckGroup is the capability string of a worker that answers the
// requests sent with rdmo.FlagAckGroup in ACK groups (docs/PROTOCOL.md
// section 14): many acks of one request queue in one message. An initiator
// sets the flag only when its target passed this capability on.
const CapabilityAckGroup = "ack-group-v1"

// RspAckGroup is the response id of an ACK group.
const RspAckGroup uint32 = 2

// ACK group layout: the AM header is AckGroupHeaderLen bytes, the AM data
// the group's entries, each starting at a multiple of AckGroupAlign.
const (
	AckGroupHeaderLen   = 16
	AckGroupCountOffset = 4 // count u32: entries in the AM data
	// [8:16] reserved: sent as zero, ignored on receipt.
	AckGroupAlign = 8

	// MaxAckGroupData bounds a group's AM data: an eager message that
	// one shared-memory segment (UCX_MM_SEG_SIZE, 8 KiB by default) or
	// one TCP send carries, with room for every entry's padding.
	MaxAckGroupData = 4096
)

const _ = uint(AckGroupHeaderLen - (AckGroupCountOffset + 4))

// AckGroupEntrySize is the bytes an ack with a result of dataLen and
// detailLen bytes takes in a group: its 40-byte form, the data and the
// detail, padded to AckGroupAlign.
func AckGroupEntrySize(dataLen, detailLen int) int {
	return (AckResultLen + dataLen + detailLen + AckGroupAlign - 1) &^ (AckGroupAlign - 1)
}

// AppendAckGroupHeader appends a group's AM header.
func AppendAckGroupHeader(dst []byte, count uint32) []byte {
	dst = le.AppendUint32(dst, RspAckGroup)
	dst = le.AppendUint32(dst, count)
	return le.AppendUint64(dst, 0)
}

// AppendAckGroupEntry appends one ack to a group's AM data: always the
// 40-byte form (the lengths delimit the entry), then data, detail and
// zero padding to AckGroupAlign. a's DataLen and DetailLen are set from
// data and detail.
func AppendAckGroupEntry(dst []byte, a AckResponse, data, detail []byte) []byte {
	a.DataLen, a.DetailLen = uint32(len(data)), uint32(len(detail))
	start := len(dst)
	dst = AppendAck(dst, a)
	if len(dst)-start == AckResponseLen {
		// AppendAck's 32-byte form: the entry still states its lengths.
		dst = le.AppendUint64(dst, 0)
	}
	dst = append(dst, data...)
	dst = append(dst, detail...)
	for (len(dst)-start)%AckGroupAlign != 0 {
		dst = append(dst, 0)
	}
	return dst
}

// ParseAckGroupHeader decodes a group's AM header and returns its count.
func ParseAckGroupHeader(b []byte) (uint32, error) {
	id, err := ParseResponseID(b)
	if err != nil {
		return 0, err
	}
	if id != RspAckGroup {
		return 0, wireErr(rdmo.StatusUnknownOp, "response id "+utoa(uint64(id))+" is not an ack group")
	}
	if len(b) < AckGroupHeaderLen {
		return 0, wireErr(rdmo.StatusShortHeader, "ack group header is "+itoa(len(b))+" bytes, "+itoa(AckGroupHeaderLen)+" needed")
	}
	return le.Uint32(b[AckGroupCountOffset:]), nil
}

// AckGroupIter walks a group's AM data. Next stops at the count, at the
// end of the data, or at the first malformed entry (Err); the entries
// before it are good. Data and Detail point into the AM data.
type AckGroupIter struct {
	data   []byte
	left   uint32
	ack    AckResponse
	result []byte
	err    error
}

// NewAckGroupIter iterates the count entries of data.
func NewAckGroupIter(data []byte, count uint32) AckGroupIter {
	return AckGroupIter{data: data, left: count}
}

// Next moves to the next entry and reports whether there is one.
func (it *AckGroupIter) Next() bool {
	if it.err != nil || it.left == 0 {
		if it.err == nil && len(it.data) != 0 {
			it.err = wireErr(rdmo.StatusPayloadMismatch, itoa(len(it.data))+" bytes after the ack group's last entry")
			it.data = nil
		}
		return false
	}
	if len(it.data) < AckResultLen {
		it.err = wireErr(rdmo.StatusPayloadMismatch, "ack group entry of "+itoa(len(it.data))+" bytes, "+
			itoa(AckResultLen)+" needed ("+utoa(uint64(it.left))+" entries left)")
		return false
	}
	a, err := ParseAck(it.data[:AckResultLen])
	if err != nil {
		it.err = err
		return false
	}
	if a.DataLen > rdmo.MaxResultData || a.DetailLen > rdmo.MaxResultDetail {
		it.err = wireErr(rdmo.StatusLengthOverflow, "ack group entry with "+utoa(uint64(a.DataLen))+
			" data and "+utoa(uint64(a.DetailLen))+" detail bytes: at most "+itoa(rdmo.MaxResultData)+
			" and "+itoa(rdmo.MaxResultDetail))
		return false
	}
	n := AckGroupEntrySize(int(a.DataLen), int(a.DetailLen))
	if n > len(it.data) {
		it.err = wireErr(rdmo.StatusPayloadMismatch, "ack group entry of "+itoa(n)+" bytes, "+
			itoa(len(it.data))+" left")
		return false
	}
	end := AckResultLen + int(a.DataLen) + int(a.DetailLen)
	it.ack, it.result = a, it.data[AckResultLen:end:end]
	it.data = it.data[n:]
	it.left--
	return true
}

// Ack is the current entry's ack; DataLen and DetailLen are set.
func (it *AckGroupIter) Ack() AckResponse { return it.ack }

// Result is the current entry's data followed by its detail, as an ack's
// AM data (AckResult splits it).
func (it *AckGroupIter) Result() []byte { return it.result }

// Err is the first malformed entry's error, or trailing bytes after the
// last entry; nil when every entry was good.
func (it *AckGroupIter) Err() error { return it.err }

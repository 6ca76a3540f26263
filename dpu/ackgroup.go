package dpu

import (
	"encoding/binary"

	"github.com/openrdmo/rdmo/rdmo/wire"
)

// ACK groups (docs/PROTOCOL.md section 14): the acks of one request queue's
// requests sent with rdmo.FlagAckGroup are gathered while a batch
// completes and leave in one message after it (Worker.completeBatch), at
// the end of the loop's round for acks made elsewhere, or earlier when the
// group is full or another answer must not overtake them. An initiator
// that keeps many calls in flight then gets a message per batch instead of
// one per call: over TCP each message is a system call on both sides.

// groupAck adds an ack to q's group.
func (w *Worker) groupAck(q *rq, a wire.AckResponse, data []byte, detail string) {
	if q.closed || q.epFailed {
		return
	}
	n := wire.AckGroupEntrySize(len(data), len(detail))
	if q.ackCount > 0 && len(q.acks)+n > wire.MaxAckGroupData {
		w.sendAckGroup(q)
	}
	if q.acks == nil {
		q.acks = w.getAckBuf()
	}
	if !q.ackDirty {
		q.ackDirty = true
		w.ackDirty = append(w.ackDirty, q)
	}
	q.acks = wire.AppendAckGroupEntry(q.acks, a, data, []byte(detail))
	q.ackCount++
}

// sendAckGroup sends q's group, if it has one; a closed queue's is dropped.
func (w *Worker) sendAckGroup(q *rq) {
	if q.ackCount == 0 {
		return
	}
	buf, count := q.acks, q.ackCount
	q.acks, q.ackCount = nil, 0
	if q.closed || q.epFailed {
		w.putAckBuf(buf)
		return
	}
	if count == 1 {
		// A group of one goes as the ack itself, as it would without
		// groups: its header alone when it carries no result.
		w.sendLoneAck(q, buf)
		return
	}
	i := w.ops.alloc()
	op := &w.ops.ops[i]
	op.kind = opReply
	op.rq = q
	op.n = uint8(len(wire.AppendAckGroupHeader(op.msg[:0], count)))
	op.acks = buf
	w.stats.ackGroups.Add(1)
	w.issue(i)
}

// sendLoneAck sends a group's only entry as a plain ack (section 6.3 or,
// with a result, 6.4) and keeps buf for reuse.
func (w *Worker) sendLoneAck(q *rq, buf []byte) {
	dataLen := int(binary.LittleEndian.Uint32(buf[wire.AckDataLenOffset:]))
	detailLen := int(binary.LittleEndian.Uint32(buf[wire.AckDetailLenOffset:]))
	i := w.ops.alloc()
	op := &w.ops.ops[i]
	op.kind = opReply
	op.rq = q
	if dataLen == 0 && detailLen == 0 {
		op.n = uint8(copy(op.msg[:], buf[:wire.AckResponseLen]))
	} else {
		rb := w.getReplyBuf()
		rb.n = copy(rb.b[:], buf[:wire.AckResultLen+dataLen+detailLen])
		op.big = rb
	}
	w.putAckBuf(buf)
	w.issue(i)
}

// sendAckGroups sends the groups filled during the round and returns how
// many it sent.
func (w *Worker) sendAckGroups() int {
	n := 0
	for i, q := range w.ackDirty {
		q.ackDirty = false
		if q.ackCount > 0 {
			w.sendAckGroup(q)
			n++
		}
		w.ackDirty[i] = nil
	}
	w.ackDirty = w.ackDirty[:0]
	return n
}

// getAckBuf returns an empty group buffer with room for a full group.
func (w *Worker) getAckBuf() []byte {
	if n := len(w.ackFree); n > 0 {
		b := w.ackFree[n-1]
		w.ackFree = w.ackFree[:n-1]
		return b[:0]
	}
	return make([]byte, 0, wire.MaxAckGroupData)
}

// putAckBuf keeps a group buffer for reuse (nil: none).
func (w *Worker) putAckBuf(b []byte) {
	if b != nil && len(w.ackFree) < maxFreeAckBufs {
		w.ackFree = append(w.ackFree, b)
	}
}

// maxFreeAckBufs bounds the group buffers kept for reuse: one per queue
// answered in a round, and those whose sends are still in flight.
const maxFreeAckBufs = 64

package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The rows' Check functions: after every round the target checks that its
// memory (or its sink) holds exactly what the initiators say they did
// (rowDef.Check). A failed check fails the row.

// checkQueueRow checks the row's queue: exactly the records sent, each
// once and intact; with ordered, each initiator's in the order sent (RDMO
// requests of one connection, or a single writer).
func checkQueueRow(ordered bool) func(t *benchTarget, req targetReq) error {
	return func(t *benchTarget, req targetReq) error {
		q := &t.queue
		if q.mem == nil {
			return errors.New("check: no queue")
		}
		mem := q.mem.Bytes()
		tail := binary.LittleEndian.Uint64(mem[q.tail:])
		start, end := q.mem.Address()+queueSlotBytes, q.mem.Address()+uint64(len(mem))
		if tail < start || tail > end {
			return fmt.Errorf("queue tail %#x outside the queue's data [%#x, %#x)", tail, start, end)
		}
		return checkQueue(mem[queueSlotBytes:], tail-start, req.Size, req.Round, req.Counts, ordered)
	}
}

// checkScatterRow checks that every chunk of the round's scatters landed
// intact at its place.
func checkScatterRow(t *benchTarget, req targetReq) error {
	if t.scat == nil {
		return errors.New("check: no scatter region")
	}
	return checkScatter(t.scat.Bytes(), req.Layout, req.Round, req.Counts)
}

// checkSinkRow checks that the sink counted every message and byte each
// initiator sent since the last check, in order and intact.
func checkSinkRow(t *benchTarget, req targetReq) error {
	st := sinkState{Errors: t.sinkErrs.Load()}
	for i := range t.sinkCount {
		st.Counts = append(st.Counts, t.sinkCount[i].Load())
		st.Bytes = append(st.Bytes, t.sinkBytes[i].Load())
	}
	prev := t.sinkSeen
	t.sinkSeen = st
	return checkSink(prev, st, req.Counts, req.Size)
}

// checkSink compares the sink's counters since prev with what the
// initiators sent (counts messages of size bytes each).
func checkSink(prev, st sinkState, counts []uint64, size int) error {
	if st.Errors != prev.Errors {
		return fmt.Errorf("the sink saw %d messages out of order, malformed or not received", st.Errors-prev.Errors)
	}
	for i, n := range counts {
		var pc, pb uint64
		if i < len(prev.Counts) {
			pc, pb = prev.Counts[i], prev.Bytes[i]
		}
		if i >= len(st.Counts) {
			return fmt.Errorf("initiator %d: the sink has no counter", i)
		}
		if got := st.Counts[i] - pc; got != n {
			return fmt.Errorf("initiator %d sent %d messages; the sink counted %d", i, n, got)
		}
		if got := st.Bytes[i] - pb; got != n*uint64(size) {
			return fmt.Errorf("initiator %d sent %d bytes; the sink counted %d", i, n*uint64(size), got)
		}
	}
	return nil
}

// checkOpsRow checks the op-pack memory: every counter moved by exactly
// the fetch-adds its initiator did (with fetchAdds; else by none), nothing
// else changed.
func checkOpsRow(fetchAdds bool) func(t *benchTarget, req targetReq) error {
	return func(t *benchTarget, req targetReq) error { return t.opsCheck(req, fetchAdds) }
}

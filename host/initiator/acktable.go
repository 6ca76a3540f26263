package initiator

// ackTable holds the outstanding acks by sequence number. The loop issues
// sequence numbers in order and most acks come back within a window of
// them, so a slot array indexed by the number's low bits finds one with no
// hashing; a number whose slot is held by an older one still outstanding
// (a slow call among many fast ones) grows the array up to
// ackTableMaxSlots, and past that waits in a map, so one straggler never
// makes the array follow the whole sequence.
type ackTable struct {
	slots []ackSlot // len a power of two; a number's slot is seq & mask
	mask  uint64
	spill map[uint64]ackRec // numbers whose slot was taken at the size limit
	n     int
}

type ackSlot struct {
	key uint64 // seq+1; 0: free
	rec ackRec
}

const (
	ackTableMinSlots = 256
	ackTableMaxSlots = 1 << 16
)

func (t *ackTable) len() int { return t.n }

// put records seq's ack, which must not be outstanding.
func (t *ackTable) put(seq uint64, rec ackRec) {
	if t.slots == nil {
		t.resize(ackTableMinSlots)
	}
	for {
		s := &t.slots[seq&t.mask]
		if s.key == 0 || s.key == seq+1 {
			if s.key == 0 {
				t.n++
			}
			*s = ackSlot{key: seq + 1, rec: rec}
			return
		}
		if len(t.slots) >= ackTableMaxSlots {
			if t.spill == nil {
				t.spill = map[uint64]ackRec{}
			}
			if _, dup := t.spill[seq]; !dup {
				t.n++
			}
			t.spill[seq] = rec
			return
		}
		t.resize(2 * len(t.slots))
	}
}

// get returns seq's ack, if it is outstanding.
func (t *ackTable) get(seq uint64) (ackRec, bool) {
	if t.n == 0 {
		return ackRec{}, false
	}
	if s := &t.slots[seq&t.mask]; s.key == seq+1 {
		return s.rec, true
	}
	rec, ok := t.spill[seq]
	return rec, ok
}

// del forgets seq's ack, if it is outstanding.
func (t *ackTable) del(seq uint64) {
	if t.n == 0 {
		return
	}
	if s := &t.slots[seq&t.mask]; s.key == seq+1 {
		*s = ackSlot{}
		t.n--
		return
	}
	if _, ok := t.spill[seq]; ok {
		delete(t.spill, seq)
		t.n--
	}
}

// each calls fn for every outstanding ack; fn may del the one it is given.
func (t *ackTable) each(fn func(seq uint64, rec ackRec)) {
	for i := range t.slots {
		if s := &t.slots[i]; s.key != 0 {
			fn(s.key-1, s.rec)
		}
	}
	for seq, rec := range t.spill {
		fn(seq, rec)
	}
}

// resize moves the slots into an array of n, a larger power of two: two
// numbers apart in the old array (different modulo its size) are apart in
// the new one too.
func (t *ackTable) resize(n int) {
	old := t.slots
	t.slots, t.mask = make([]ackSlot, n), uint64(n-1)
	for i := range old {
		if s := &old[i]; s.key != 0 {
			t.slots[(s.key-1)&t.mask] = *s
		}
	}
}

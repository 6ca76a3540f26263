package ucp

import (
	"encoding/binary"
	"testing"
)

// ClaimShmFIFOSlots claims one slot in every shared-memory receive FIFO of
// this process and never fills it: what a sender killed between claiming a
// slot and marking it ready leaves behind. No sender of this process may
// be sending meanwhile (the claim is not atomic). It returns the claimed
// slots as the waits ShmFIFOWaits should report.
func ClaimShmFIFOSlots(t testing.TB) []ShmFIFOWait {
	t.Helper()
	fifos, err := shmFIFOs()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := procMem()
	if err != nil {
		t.Fatal(err)
	}
	var claimed []ShmFIFOWait
	for _, f := range fifos {
		var b [8]byte
		if !readMem(f.base, b[:]) {
			t.Fatalf("read the head of %s", f.path)
		}
		head := binary.LittleEndian.Uint64(b[:]) &^ fifoHeadArmed
		binary.LittleEndian.PutUint64(b[:], head+1)
		if _, err := mem.WriteAt(b[:], int64(f.base)); err != nil {
			t.Fatalf("claim a slot of %s: %v", f.path, err)
		}
		claimed = append(claimed, ShmFIFOWait{Name: f.path, Slot: head, Claimed: 1, fifo: f})
	}
	return claimed
}

// ShmSelected is shmSelected, for its table test.
var ShmSelected = shmSelected

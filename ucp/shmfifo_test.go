package ucp_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// A sender that dies between claiming a slot of a shared-memory FIFO and
// marking it ready blocks the FIFO for every sender; the receiver's
// process finds the waited-on slot (ShmFIFOWaits) and fills it
// (UnblockShmFIFO), and every message behind it arrives.
func TestUnblockShmFIFO(t *testing.T) {
	ucptest.CheckLeaks(t)
	p := newPair(t, ucptest.Transports[0])
	if tls := p.ab.Transports(); !slices.Contains(tls, "sysv") && !slices.Contains(tls, "posix") {
		t.Fatalf("endpoint over %v, want a shared-memory FIFO (sysv or posix)", tls)
	}
	got := 0
	p.b.SetHandler(1, ucp.MessageHandlerFunc(func(_ *ucp.Worker, msgs []ucp.Message) { got += len(msgs) }))
	send := func() {
		t.Helper()
		done := false
		if err := p.ab.SendAM(1, []byte("hdr"), []byte("payload"), 0, ucp.CompleterFunc(func(c ucp.Completion) {
			if c.Err != nil {
				t.Errorf("send: %v", c.Err)
			}
			done = true
		}), 0); err != nil {
			t.Fatal(err)
		}
		p.progress(func() bool { return done })
	}
	send()
	p.progress(func() bool { return got == 1 })
	if waits, err := ucp.ShmFIFOWaits(); err != nil || len(waits) != 0 {
		t.Fatalf("FIFOs that deliver: waits %+v, %v; want none", waits, err)
	}

	claimed := ucp.ClaimShmFIFOSlots(t)
	if len(claimed) == 0 {
		t.Fatal("found no shared-memory receive FIFO in this process: UCX's layout changed?")
	}
	t.Logf("claimed a slot in %d FIFOs of this process", len(claimed))
	for range 3 {
		send() // UCX has the message in the FIFO: the send completes
	}
	for range 1000 {
		p.a.Progress()
		p.b.Progress()
	}
	if got != 1 {
		t.Fatalf("%d messages passed a claimed slot", got-1)
	}
	waits, err := ucp.ShmFIFOWaits()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claimed {
		if !slices.ContainsFunc(waits, c.SameSlot) {
			t.Errorf("FIFO %s: claimed slot %d not among the waits %+v", c.Name, c.Slot, waits)
		}
	}
	if len(waits) != len(claimed) {
		t.Errorf("%d FIFOs wait, %d were claimed", len(waits), len(claimed))
	}
	for _, w := range waits {
		if err := ucp.UnblockShmFIFO(w); err != nil {
			t.Fatalf("unblock %+v: %v", w, err)
		}
	}
	p.progress(func() bool { return got == 4 })
	for _, w := range waits {
		if err := ucp.UnblockShmFIFO(w); !errors.Is(err, ucp.ErrShmFIFOMoved) {
			t.Errorf("unblock %+v again: %v, want ErrShmFIFOMoved", w, err)
		}
	}
	// The FIFOs carry on.
	send()
	p.progress(func() bool { return got == 5 })
	if waits, err := ucp.ShmFIFOWaits(); err != nil || len(waits) != 0 {
		t.Fatalf("after the fill: waits %+v, %v; want none", waits, err)
	}
}

package ucp

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Message is an active message as the worker received it.
type Message struct {
	ID uint16
	// Header is the sender's header, valid until the handler returns.
	Header []byte
	// Data is the payload, valid until the handler returns (or, after
	// Keep, until Worker.Release). Payloads up to 1 KiB are copies in the
	// worker's per-round arena; larger ones are UCX's receive buffer, kept
	// zero-copy. Nil for rendezvous messages: see Receive.
	Data []byte
	// Length is the payload length (also for rendezvous messages).
	Length int
	// Rendezvous is true when the payload is still at the sender and must
	// be fetched with Receive.
	Rendezvous bool
	// Reply is the endpoint to answer on, when the sender asked for one
	// (SendReply); nil otherwise.
	Reply *Endpoint

	w    *Worker
	desc unsafe.Pointer
	kept bool
}

// Held is a message payload kept past its handler's return: zero-copy for
// eager messages (UCX's receive buffer), or a pending rendezvous.
type Held struct {
	Data       []byte
	Length     int
	Rendezvous bool
	desc       unsafe.Pointer
}

// Keep keeps the message's payload after the handler returns. The caller
// must hand the result to Worker.Release or Worker.Receive exactly once.
func (m *Message) Keep() Held {
	h := Held{Data: m.Data, Length: m.Length, Rendezvous: m.Rendezvous, desc: m.desc}
	if m.desc == nil && len(m.Data) > 0 {
		// The payload lives in the worker's per-round arena: copy it.
		h.Data = append([]byte(nil), m.Data...)
	}
	m.kept = true
	return h
}

// Receive fetches a rendezvous payload into buf (len(buf) >= Length); the
// completion's Value is the number of bytes received. buf must stay
// untouched until then.
func (m *Message) Receive(buf []byte, c Completer, tag uint64) error {
	if !m.Rendezvous {
		return fmt.Errorf("ucp: Receive on an eager message: use Data")
	}
	return m.w.Receive(m.Keep(), buf, c, tag)
}

// Release returns a kept payload to UCX (in the next Progress round).
func (w *Worker) Release(h Held) {
	if h.desc != nil && w.h.check() == nil {
		w.release = append(w.release, uintptr(h.desc))
	}
}

// Receive fetches a kept rendezvous payload into buf.
func (w *Worker) Receive(h Held, buf []byte, c Completer, tag uint64) error {
	if !h.Rendezvous || h.desc == nil {
		return fmt.Errorf("ucp: Receive of a payload that is not a pending rendezvous")
	}
	if len(buf) < h.Length {
		return fmt.Errorf("ucp: receive buffer of %d bytes for a %d-byte message", len(buf), h.Length)
	}
	tok, op, err := w.acquire(c, tag)
	if err != nil {
		return err
	}
	op.kind = C.SHIM_OP_AM_RECV
	op.desc = h.desc
	op.buffer = w.pinned(tok, buf[:h.Length])
	op.length = C.uint64_t(h.Length)
	w.slots[tok].kind = slotReceive
	w.slots[tok].n = uint64(h.Length)
	return nil
}

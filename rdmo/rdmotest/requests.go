package rdmotest

import (
	"fmt"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// Chunk is one scatter element for ScatterPayload and ScatterReq.
type Chunk struct {
	Rkey rdmo.RegionID
	Addr uint64
	Data []byte // at most 65535 bytes
}

// ScatterPayload encodes chunks as a SCATTER payload. It panics on a chunk
// longer than 65535 bytes.
func ScatterPayload(chunks ...Chunk) []byte {
	var p []byte
	for i, c := range chunks {
		var err error
		p, err = wire.AppendIOV(p, wire.IOV{Addr: c.Addr, Rkey: c.Rkey, Len: uint16(len(c.Data))}, c.Data)
		if err != nil {
			panic(fmt.Sprintf("rdmotest: chunk %d: %v", i, err))
		}
	}
	return p
}

// NextSeq returns the next arrival sequence number of this client's
// connection; the request builders take theirs from it.
func (t *Target) NextSeq() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.seq
	t.seq++
	return s
}

// ParseReq builds a request from a raw AM header and eager payload the way
// the worker does: it decodes and checks the header (wire.ParseRequest),
// that it names this Target's client, and the payload's shape
// (RequestHeader.CheckPayload). A request the worker would refuse before
// any handler sees it returns the worker's error instead (its status is
// what the initiator would get); a BATCH container is refused, as a worker
// unpacks it rather than handing it over.
func (t *Target) ParseReq(header, payload []byte) (rdmo.Request, error) {
	rh, err := t.checkHeader(header)
	if err != nil {
		return rdmo.Request{}, err
	}
	if err := rh.CheckPayload(payload); err != nil {
		return rdmo.Request{}, err
	}
	return rh.Request(t.NextSeq(), t.client, header, payload), nil
}

// RendezvousReq builds a rendezvous request from a raw AM header and the
// payload the initiator holds: the worker checks the header as ParseReq
// does (and refuses a rendezvous FLUSH) but cannot check a payload it has
// not received, so the payload may be malformed. The Target keeps it for
// Place or Fetch.
func (t *Target) RendezvousReq(header, payload []byte) (rdmo.Request, error) {
	rh, err := t.checkHeader(header)
	if err != nil {
		return rdmo.Request{}, err
	}
	if rh.Header.Op == rdmo.OpFlush {
		return rdmo.Request{}, &rdmo.WireError{Status: rdmo.StatusPayloadMismatch, Detail: "flush carries a rendezvous payload"}
	}
	r := rh.Request(t.NextSeq(), t.client, header, nil)
	t.SetRendezvousPayload(r.Seq, payload)
	r.Length, r.Rendezvous = uint64(len(payload)), true
	return r, nil
}

// checkHeader makes the worker's checks of a request header.
func (t *Target) checkHeader(header []byte) (wire.RequestHeader, error) {
	rh, err := wire.ParseRequest(header)
	switch {
	case err != nil:
		return rh, err
	case rh.Header.Op == rdmo.OpBatch:
		return rh, &rdmo.WireError{Status: rdmo.StatusUnknownOp, Detail: "rdmotest: a batch container is not a handler's request"}
	case rh.Header.ClientID != uint64(t.client):
		return rh, &rdmo.WireError{Status: rdmo.StatusClientMismatch,
			Detail: fmt.Sprintf("header names client %d, the Target is client %d", rh.Header.ClientID, t.client)}
	}
	return rh, nil
}

// Req is ParseReq for a request the test knows to be well-formed; it
// panics when the worker would refuse it.
func (t *Target) Req(header, payload []byte) rdmo.Request {
	r, err := t.ParseReq(header, payload)
	if err != nil {
		panic(fmt.Sprintf("rdmotest: the worker would refuse this request: %v", err))
	}
	return r
}

// AppendReq builds an APPEND request of this client.
func (t *Target) AppendReq(a rdmo.AppendHeader, payload []byte) rdmo.Request {
	return t.Req(wire.AppendAppendRequest(nil, wire.Header{ClientID: uint64(t.client)}, a), payload)
}

// ScatterReq builds a SCATTER request of this client with one iov per chunk.
func (t *Target) ScatterReq(chunks ...Chunk) rdmo.Request {
	h := wire.AppendScatterRequest(nil, wire.Header{ClientID: uint64(t.client)}, rdmo.ScatterHeader{Count: uint64(len(chunks))})
	return t.Req(h, ScatterPayload(chunks...))
}

// FlushReq builds a FLUSH request of this client, with FlagFence set as
// initiators send it.
func (t *Target) FlushReq(flushID uint64) rdmo.Request {
	return t.Req(wire.AppendFlushRequest(nil, wire.Header{ClientID: uint64(t.client), Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: flushID}), nil)
}

// UserReq builds a request of this client for a user op (op >= 16) from
// its sub-header, eager payload (nil: none) and flags (rdmo.FlagAck,
// rdmo.FlagFence), checked as the worker checks it: the request a handler
// of that op gets. It panics if the worker would refuse it (an op below
// 16, a sub-header over 48 bytes, unknown flags).
func (t *Target) UserReq(op uint32, sub, payload []byte, flags uint32) rdmo.Request {
	h, err := wire.AppendUserRequest(nil, wire.Header{ClientID: uint64(t.client), Op: op, Flags: flags}, sub)
	if err != nil {
		panic(fmt.Sprintf("rdmotest: the worker would refuse this request: %v", err))
	}
	return t.Req(h, payload)
}

// Rendezvous turns an eager request into a rendezvous one: its payload is
// kept by the Target for Place or Fetch and removed from the request. (The
// worker does not check a rendezvous payload before the handler runs.)
func (t *Target) Rendezvous(req rdmo.Request) rdmo.Request {
	t.SetRendezvousPayload(req.Seq, req.Payload)
	req.Length = uint64(len(req.Payload))
	req.Payload = nil
	req.Rendezvous = true
	return req
}

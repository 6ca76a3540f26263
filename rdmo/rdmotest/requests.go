package rdmotest

import (
	"fmt"

	"github.com/openrdmo/rdmo/rdmo"
)

// Chunk is one scatter element for ScatterPayload and ScatterReq.
type Chunk struct {
	Rkey, Addr uint64
	Data       []byte // at most 65535 bytes
}

// ScatterPayload encodes chunks as a SCATTER payload. It panics on a chunk
// longer than 65535 bytes.
func ScatterPayload(chunks ...Chunk) []byte {
	var p []byte
	for i, c := range chunks {
		var err error
		p, err = rdmo.AppendIOV(p, rdmo.IOV{Addr: c.Addr, Rkey: c.Rkey, Len: uint16(len(c.Data))}, c.Data)
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

// Req builds a request from a raw AM header and eager payload, as the worker
// hands it to a handler: Op and Flags come from the header when it has 16
// bytes. Use it for malformed headers.
func (t *Target) Req(header, payload []byte) rdmo.Request {
	r := rdmo.Request{Seq: t.NextSeq(), Client: t.client, Header: header, Payload: payload, Length: uint64(len(payload))}
	if len(header) >= rdmo.HeaderLen {
		h, _ := rdmo.ParseHeader(header)
		r.Op, r.Flags = h.Op, h.Flags
	}
	return r
}

// AppendReq builds an APPEND request of this client.
func (t *Target) AppendReq(a rdmo.AppendHeader, payload []byte) rdmo.Request {
	return t.Req(rdmo.AppendAppendRequest(nil, rdmo.Header{ClientID: t.client}, a), payload)
}

// ScatterReq builds a SCATTER request of this client with one iov per chunk.
func (t *Target) ScatterReq(chunks ...Chunk) rdmo.Request {
	h := rdmo.AppendScatterRequest(nil, rdmo.Header{ClientID: t.client}, rdmo.ScatterHeader{Count: uint64(len(chunks))})
	return t.Req(h, ScatterPayload(chunks...))
}

// FlushReq builds a FLUSH request of this client, with FlagFence set as
// initiators send it.
func (t *Target) FlushReq(flushID uint64) rdmo.Request {
	return t.Req(rdmo.AppendFlushRequest(nil, rdmo.Header{ClientID: t.client, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: flushID}), nil)
}

// Rendezvous turns an eager request into a rendezvous one: its payload is
// kept by the Target for Place or Fetch and removed from the request.
func (t *Target) Rendezvous(req rdmo.Request) rdmo.Request {
	t.SetRendezvousPayload(req.Seq, req.Payload)
	req.Length = uint64(len(req.Payload))
	req.Payload = nil
	req.Rendezvous = true
	return req
}

// Package flush is the RDMO FLUSH handler: it writes back every handler's cached state for the client and makes all earlier writes visible in target memory.
package flush

import (
	"github.com/openrdmo/rdmo/rdmo"
)

// Name and Version identify the handler to the worker.
const (
	Name    = "flush"
	Version = "1.0.0"
)

// New returns a FLUSH handler.
//
// For a FLUSH the handler runs Target.Fence (every handler's Fence hook:
// cached queue tails are written back) and then Target.Flush (remote
// completion of every earlier Put and Place of the client). The result is
// OK, or the status of the first failure: Flush still runs when Fence
// failed, so whatever was written becomes visible. The worker builds and
// sends the flush response itself (it owns the failure count), so the
// handler only makes state visible.
//
// A request that fails validation (bad header, a payload) does nothing and
// gets its status.
func New() rdmo.Handler { return handler{} }

type handler struct{ rdmo.BaseHandler } // no state of its own

func (handler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: Name, Version: Version, Ops: []uint32{rdmo.OpFlush}}
}

func (handler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	for i := range reqs {
		if results[i] = check(&reqs[i]); results[i].Status != rdmo.StatusOK {
			continue
		}
		results[i] = rdmo.ResultOf(t.Fence())
		if err := t.Flush(); err != nil && results[i].Status == rdmo.StatusOK {
			results[i] = rdmo.ResultOf(err)
		}
	}
}

func check(req *rdmo.Request) rdmo.Result {
	rh, err := rdmo.ParseRequest(req.Header)
	if err != nil {
		return rdmo.ResultOf(err)
	}
	if rh.Header.Op != rdmo.OpFlush {
		return rdmo.Fail(rdmo.StatusUnknownOp, "the flush handler got op %d", rh.Header.Op)
	}
	if rh.Header.ClientID != req.Client {
		return rdmo.Fail(rdmo.StatusClientMismatch, "header names client %d, connection is client %d", rh.Header.ClientID, req.Client)
	}
	if req.Rendezvous || req.Length != 0 {
		return rdmo.Fail(rdmo.StatusPayloadMismatch, "flush carries %d payload bytes, none allowed", req.Length)
	}
	if err := rh.CheckPayload(req.Payload); err != nil {
		return rdmo.ResultOf(err)
	}
	return rdmo.Result{}
}

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

// New returns a FLUSH handler. It is the only FLUSH implementation: a
// worker configured without one (dpu.Config.Handlers) serves FLUSH with it
// too, so the behaviour does not depend on who built the worker.
//
// For each FLUSH the handler runs Target.WriteBackAll (every handler's
// WriteBack: cached queue tails are written) and then Target.Flush (remote
// completion of every earlier Put and Place of the client). The result is
// OK, or the status of the first failure.
//
// Flush runs even when a write-back failed. A failed write-back of one
// handler (a region deregistered under it, a plugin that died) says
// nothing about the writes of the others or of earlier requests, and those
// are exactly what the initiator asked to see; skipping Flush would hold
// back data that is fine while the failure is reported either way (the
// flush response carries the first failed status). Flush is also what
// finds a target that became unreachable.
//
// The worker has checked the request (no payload, its client) and builds
// and sends the flush response itself (it owns the failure count), so the
// handler only makes state visible.
func New() rdmo.Handler { return handler{} }

type handler struct{ rdmo.BaseHandler } // no state of its own

// Is reports whether h is this package's handler (New). A worker may then
// answer a FLUSH that has nothing to do without running the handler: its
// HandleBatch is exactly WriteBackAll then Flush, so when no handler can
// hold state to write back and no write awaits completion the result is
// OK with no effect.
func Is(h rdmo.Handler) bool {
	_, ok := h.(handler)
	return ok
}

func (handler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: Name, Version: Version, Ops: []uint32{rdmo.OpFlush}, NoCachedState: true}
}

func (handler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	for i := range reqs {
		results[i] = rdmo.ResultOf(t.WriteBackAll())
		if err := t.Flush(); err != nil && results[i].Status == rdmo.StatusOK {
			results[i] = rdmo.ResultOf(err)
		}
	}
}

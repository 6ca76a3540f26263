package dpu

import (
	"errors"
	"math"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
)

// maxPoolsPerRQ bounds the lend pools one connection registers: each holds
// a mapping of the initiator's memory in this process until it is
// released or the connection goes.
const maxPoolsPerRQ = 16

// lendPool is an initiator's memory mapped into this process
// (docs/PROTOCOL.md section 13): the payloads of its FlagByRef requests
// are read here, in place. Loop-owned; the executor reads mapping through
// the payloads of the requests that hold a reference.
type lendPool struct {
	id      wire.PoolID
	rkey    *ucp.RemoteKey // detached from the queue's endpoint: the pool outlives it while refs > 0
	mapping []byte
	refs    int  // requests whose payload points into mapping, not yet complete
	dying   bool // released (or its queue closed): unmapped once refs is 0
}

// lendPoolRequest answers a LEND_POOL request on the loop, in arrival
// order, so a FlagByRef request behind a registration finds the pool.
func (w *Worker) lendPoolRequest(q *rq, k *reqKey, hdr []byte, a *arrival) {
	ph := a.rh.Pool
	if a.rndv {
		w.reject(q, k, hdr, rdmo.StatusRendezvousRefused, "a LEND_POOL request must be sent eager")
		return
	}
	if err := a.rh.CheckPayload(a.data); err != nil {
		w.reject(q, k, hdr, rdmo.StatusOf(err), err.Error())
		return
	}
	if ph.Len == 0 {
		p := q.pools[ph.Pool]
		if p == nil {
			w.reject(q, k, hdr, rdmo.StatusUnknownPool, "no lend pool "+utoa(uint64(ph.Pool))+" to release")
			return
		}
		delete(q.pools, ph.Pool)
		w.dropPool(p)
		w.complete(q, k, &rdmo.Result{})
		return
	}
	p, st, detail := w.mapPool(q, ph, a.data)
	if st != rdmo.StatusOK {
		w.reject(q, k, hdr, st, detail)
		return
	}
	if p == nil {
		// Not reachable in place from here: an answer, not a failure
		// (value 0); the initiator sends its payloads as bytes.
		w.log.Debug("lend pool not mappable", zap.Uint64("client", q.c.id), zap.Uint64("rq", q.id),
			zap.Uint64("pool", uint64(ph.Pool)), zap.String("why", detail))
		w.complete(q, k, &rdmo.Result{})
		return
	}
	if q.pools == nil {
		q.pools = make(map[wire.PoolID]*lendPool)
	}
	q.pools[ph.Pool] = p
	w.log.Debug("lend pool registered", zap.Uint64("client", q.c.id), zap.Uint64("rq", q.id),
		zap.Uint64("pool", uint64(ph.Pool)), zap.Uint64("len", ph.Len))
	w.complete(q, k, &rdmo.Result{Value: wire.LendPoolMapped})
}

// mapPool maps a pool the initiator registers. A nil pool with StatusOK
// means no transport maps it here (detail says so).
func (w *Worker) mapPool(q *rq, ph wire.LendPoolHeader, packed []byte) (*lendPool, rdmo.Status, string) {
	switch {
	case q.pools[ph.Pool] != nil:
		return nil, rdmo.StatusPoolRefused, "lend pool " + utoa(uint64(ph.Pool)) + " is registered already"
	case len(q.pools) >= maxPoolsPerRQ:
		return nil, rdmo.StatusPoolRefused, "limit of " + utoa(maxPoolsPerRQ) + " lend pools per connection reached"
	case ph.Len > math.MaxInt || ph.Len > math.MaxUint64-ph.VA:
		return nil, rdmo.StatusPoolRefused, "lend pool of " + utoa(ph.Len) + " bytes at " + utoa(ph.VA) + " does not fit an address space"
	case q.epFailed || q.ep == nil:
		return nil, rdmo.StatusPoolRefused, "the endpoint to the initiator failed"
	}
	rkey, err := q.ep.UnpackRkey(packed)
	if err != nil {
		return nil, rdmo.StatusPoolRefused, err.Error()
	}
	m, err := rkey.Ptr(ph.VA, int(ph.Len))
	switch {
	case errors.Is(err, ucp.ErrNotSupported):
		rkey.Close()
		return nil, rdmo.StatusOK, "no transport maps the initiator's memory into the worker (shared memory on one host does)"
	case err != nil:
		rkey.Close()
		return nil, rdmo.StatusPoolRefused, err.Error()
	case !mappingCovers(m):
		// rkey_ptr does not check the length (maps.go): a pool that
		// claims more than the initiator mapped would let a read run
		// past the segment.
		rkey.Close()
		return nil, rdmo.StatusPoolRefused, "the mapped segment is shorter than the " + utoa(ph.Len) + " bytes claimed"
	}
	if err := rkey.Detach(); err != nil {
		rkey.Close()
		return nil, rdmo.StatusInternal, err.Error()
	}
	return &lendPool{id: ph.Pool, rkey: rkey, mapping: m}, rdmo.StatusOK, ""
}

// resolveRef returns the bytes a FlagByRef request's payload names, or
// the status and detail of its failure.
func (q *rq) resolveRef(data []byte) ([]byte, *lendPool, rdmo.Status, string) {
	ref, err := wire.ParsePoolRef(data)
	if err != nil {
		return nil, nil, rdmo.StatusOf(err), err.Error()
	}
	p := q.pools[ref.Pool]
	if p == nil {
		return nil, nil, rdmo.StatusUnknownPool, "no lend pool " + utoa(uint64(ref.Pool)) + " on this connection"
	}
	n := uint64(len(p.mapping))
	if ref.Offset > n || ref.Len > n-ref.Offset {
		return nil, nil, rdmo.StatusUnknownPool, "bytes " + utoa(ref.Offset) + "+" + utoa(ref.Len) +
			" lie outside lend pool " + utoa(uint64(ref.Pool)) + " of " + utoa(n) + " bytes"
	}
	end := ref.Offset + ref.Len
	return p.mapping[ref.Offset:end:end], p, rdmo.StatusOK, ""
}

// dropPool forgets p: unmapped now, or when its last request completes.
func (w *Worker) dropPool(p *lendPool) {
	p.dying = true
	if p.refs == 0 {
		w.unmapPool(p)
	}
}

// unrefPool is a FlagByRef request's completion.
func (w *Worker) unrefPool(p *lendPool) {
	if p.refs--; p.refs == 0 && p.dying {
		w.unmapPool(p)
	}
}

func (w *Worker) unmapPool(p *lendPool) {
	p.mapping = nil
	if err := p.rkey.Close(); err != nil {
		w.log.Warn("unmapping a lend pool", zap.Uint64("pool", uint64(p.id)), zap.Error(err))
	}
}

// dropPools forgets every pool of a closing queue.
func (w *Worker) dropPools(q *rq) {
	for id, p := range q.pools {
		delete(q.pools, id)
		w.dropPool(p)
	}
}

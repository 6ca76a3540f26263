package ops

import (
	"fmt"
	"sync/atomic"

	"github.com/openrdmo/rdmo/rdmo"
)

// checkRange returns nil when [addr, addr+n) is inside the client's region
// id, else the Target's error (UnknownRegion, RegionNotOwned) or
// OutOfBounds naming what.
func checkRange(t rdmo.Target, id rdmo.RegionID, addr, n uint64, what string) error {
	reg, err := t.Region(id)
	if err != nil {
		return err
	}
	if err := reg.CheckRange(addr, n); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// syncFailed fails every request of idx with the error of a whole Sync.
func syncFailed(results []rdmo.Result, idx []int, name string, err error) {
	for _, i := range idx {
		results[i] = rdmo.ResultOf(fmt.Errorf("%s: %w", name, err))
	}
}

type getHandler struct{ rdmo.BaseHandler }

// NewGet returns the get handler: read up to rdmo.MaxResultData bytes of
// target memory through the worker; the bytes come back as result data.
// All gets of a batch share one Sync.
func NewGet() rdmo.Handler { return getHandler{} }

func (getHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: NameGet, Version: Version, Ops: []uint32{OpGet}, NoCachedState: true, Inline: true}
}

func (getHandler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	ops := make([]rdmo.RemoteOp, 0, len(reqs))
	idx := make([]int, 0, len(reqs))
	for i := range reqs {
		r, err := DecodeGet(&reqs[i])
		if err == nil {
			err = checkRange(t, r.Region, r.Addr, r.Len, "get")
		}
		if err != nil {
			results[i] = rdmo.ResultOf(err)
			continue
		}
		if r.Len == 0 {
			continue
		}
		ops = append(ops, rdmo.RemoteOp{Kind: rdmo.RemoteGet, Region: r.Region, Addr: r.Addr, Buf: t.Buffer(int(r.Len))})
		idx = append(idx, i)
	}
	if len(ops) == 0 {
		return
	}
	if err := t.Sync(ops); err != nil {
		syncFailed(results, idx, "get", err)
		return
	}
	for k, i := range idx {
		if ops[k].Status != rdmo.StatusOK {
			results[i] = rdmo.Fail(ops[k].Status, "get [%#x, +%d)", ops[k].Addr, len(ops[k].Buf))
			continue
		}
		results[i] = rdmo.Result{Value: uint64(len(ops[k].Buf)), Data: ops[k].Buf}
	}
}

// atomicHandler serves fetch-add or compare-swap.
type atomicHandler struct {
	rdmo.BaseHandler
	op   uint32
	name string
	kind rdmo.RemoteOpKind
	// busy is 1 while a batch holds scratch; a batch that finds it taken
	// makes its own. A flag and a plain pointer, not an atomic.Pointer:
	// swapping a pointer atomically costs a write barrier's call besides
	// the swap, which a module pays in full.
	busy    atomic.Uint32
	scratch *atomicScratch
}

// atomicScratch is a batch's working memory, kept for the next batch: two
// allocations per batch are a fifth of a one-request batch's cost built in,
// and more in a WebAssembly module. Batches of different clients may run at
// once, so a batch takes it (or makes its own) and gives it back.
type atomicScratch struct {
	// The next Sync's ops; per request in it, its index, its op and, for
	// a combined fetch-add, the deltas added to the word before it.
	ops []rdmo.RemoteOp
	idx []atomicSlot
	// The ops by word, once a Sync holds many.
	byWord map[[2]uint64]int
}

// maxKeptScratch bounds what a handler keeps between batches.
const maxKeptScratch = 1024

// NewFetchAdd returns the fetch-add handler: add a delta to an aligned u64
// and return the old value.
func NewFetchAdd() rdmo.Handler {
	return &atomicHandler{op: OpFetchAdd, name: NameFetchAdd, kind: rdmo.RemoteFetchAdd}
}

// NewCompareSwap returns the compare-swap handler: store the desired value
// if the aligned u64 holds the expected one, and return the old value (the
// swap happened iff it equals the expected one).
func NewCompareSwap() rdmo.Handler {
	return &atomicHandler{op: OpCompareSwap, name: NameCompareSwap, kind: rdmo.RemoteCompareSwap}
}

func (h *atomicHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: h.name, Version: Version, Ops: []uint32{h.op}, NoCachedState: true, Inline: true}
}

// HandleBatch runs the atomics of a batch in as few Syncs as keep them in
// order: a Sync never holds two atomics on the same word, since the ops of
// one Sync may complete in any order. Fetch-adds on one word are combined
// instead: one remote fetch-add of their sum, and each request's old value
// is the word's old value plus the deltas of the requests before it, as if
// they ran one after another with nothing in between (a batch of fetch-adds
// on a counter is one remote atomic, not one round trip each). A
// compare-swap on a word already in the Sync starts a new one.
func (h *atomicHandler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	var sc *atomicScratch
	held := h.busy.CompareAndSwap(0, 1)
	if held {
		sc = h.scratch
	}
	if sc == nil || cap(sc.ops) < len(reqs) {
		sc = &atomicScratch{ops: make([]rdmo.RemoteOp, 0, len(reqs)), idx: make([]atomicSlot, 0, len(reqs))}
	}
	sc.ops, sc.idx, sc.byWord = sc.ops[:0], sc.idx[:0], nil
	// The region of the previous request: a batch mostly names one, and
	// each Target.Region is an interface call (in a WebAssembly module, a
	// call into the worker). The loop calls nothing for a well-formed
	// request: a call costs a module tens of nanoseconds, so it checks
	// with atomicOK and Region.Contains (both inline), and a request that
	// fails goes to DecodeAtomic or checkRange for its error.
	var reg rdmo.Region
	var regErr error
	looked := false
	for i := range reqs {
		q := &reqs[i]
		if n := len(sc.ops); n > 0 && h.kind == rdmo.RemoteFetchAdd && q.Op == h.op && len(q.Sub) == FetchAddSubLen && !q.Rendezvous && q.Length == 0 {
			// Another fetch-add on the word of the op before it (a
			// counter's batch): the word passed every check already, so
			// it joins that op with no more branches than its compare,
			// each of which costs a module a jump through Go's dispatch
			// loop.
			sub, last := q.Sub[:FetchAddSubLen:FetchAddSubLen], &sc.ops[n-1]
			if le.Uint64(sub[8:]) == last.Addr && rdmo.RegionID(le.Uint64(sub)) == last.Region {
				sc.idx = append(sc.idx, atomicSlot{req: i, op: n - 1, before: last.Operand})
				last.Operand += le.Uint64(sub[16:])
				continue
			}
		}
		if !atomicOK(q) {
			_, err := DecodeAtomic(q)
			results[i] = rdmo.ResultOf(err)
			continue
		}
		// atomicFields written out (it does not inline).
		sub := q.Sub
		op := rdmo.RemoteOp{Kind: h.kind, Region: rdmo.RegionID(le.Uint64(sub)), Addr: le.Uint64(sub[8:])}
		if q.Op == OpCompareSwap {
			op.Compare, op.Operand = le.Uint64(sub[16:]), le.Uint64(sub[24:])
		} else {
			op.Operand = le.Uint64(sub[16:])
		}
		if !looked || reg.ID != op.Region {
			reg, regErr = t.Region(op.Region)
			reg.ID, looked = op.Region, true
		}
		if regErr != nil || !reg.Contains(op.Addr, 8) {
			results[i] = rdmo.ResultOf(checkRange(t, op.Region, op.Addr, 8, h.name))
			continue
		}
		k := sc.find(op.Region, op.Addr)
		if k >= 0 && h.kind == rdmo.RemoteFetchAdd {
			sc.idx = append(sc.idx, atomicSlot{req: i, op: k, before: sc.ops[k].Operand})
			sc.ops[k].Operand += op.Operand
			continue
		}
		if k >= 0 {
			h.run(t, sc, results)
		}
		sc.add(op, i, len(reqs))
	}
	h.run(t, sc, results)
	if held {
		if len(reqs) <= maxKeptScratch {
			h.scratch = sc
		}
		h.busy.Store(0)
	}
}

// run makes the atomics of sc one Sync and answers their requests.
func (h *atomicHandler) run(t rdmo.Target, sc *atomicScratch, results []rdmo.Result) {
	if len(sc.ops) == 0 {
		return
	}
	if err := t.Sync(sc.ops); err != nil {
		for _, s := range sc.idx {
			results[s.req] = rdmo.ResultOf(fmt.Errorf("%s: %w", h.name, err))
		}
	} else {
		for _, s := range sc.idx {
			o := &sc.ops[s.op]
			if o.Status != rdmo.StatusOK {
				results[s.req] = rdmo.Fail(o.Status, "%s at %#x", h.name, o.Addr)
				continue
			}
			// results come zeroed (rdmo.Handler): the value is all
			// there is to write, and a whole Result is three pointer
			// stores, each behind a write-barrier check in a module.
			results[s.req].Value = o.Result + s.before
		}
	}
	sc.ops, sc.idx = sc.ops[:0], sc.idx[:0]
	if sc.byWord != nil {
		clear(sc.byWord)
	}
}

// add puts op, for request i, in the next Sync.
func (sc *atomicScratch) add(op rdmo.RemoteOp, i, batch int) {
	sc.ops = append(sc.ops, op)
	sc.idx = append(sc.idx, atomicSlot{req: i, op: len(sc.ops) - 1})
	switch {
	case sc.byWord != nil:
		sc.byWord[[2]uint64{uint64(op.Region), op.Addr}] = len(sc.ops) - 1
	case len(sc.ops) > linearWords:
		sc.byWord = make(map[[2]uint64]int, batch)
		for j := range sc.ops {
			sc.byWord[[2]uint64{uint64(sc.ops[j].Region), sc.ops[j].Addr}] = j
		}
	}
}

// atomicSlot is a request of an atomic batch in a Sync: results[req] comes
// from ops[op], plus before for a combined fetch-add.
type atomicSlot struct {
	req, op int
	before  uint64
}

// linearWords is how many ops of a Sync find scans before it keeps a
// map: a batch mostly names a few words, and a map costs more to build and
// hash than a short scan (much more in a WebAssembly module).
const linearWords = 16

// find returns the index of the op on (region, addr) in the next Sync, -1
// if none.
func (sc *atomicScratch) find(region rdmo.RegionID, addr uint64) int {
	if sc.byWord != nil {
		if k, ok := sc.byWord[[2]uint64{uint64(region), addr}]; ok {
			return k
		}
		return -1
	}
	for k := len(sc.ops) - 1; k >= 0; k-- {
		if sc.ops[k].Addr == addr && sc.ops[k].Region == region {
			return k
		}
	}
	return -1
}

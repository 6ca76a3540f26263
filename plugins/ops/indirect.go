package ops

import (
	"fmt"
	"math"

	"github.com/openrdmo/rdmo/rdmo"
)

type indirectHandler struct{ rdmo.BaseHandler }

// NewIndirect returns the indirect handler (OpIndirectRead and
// OpIndirectWrite): follow up to MaxDepth pointers stored in target memory,
// each hop checked against the request's region before it is read, then
// read or write at the end. The reads of a run of indirect reads go in
// lockstep, one Sync per hop for all of them; a write is made visible
// (Target.Flush) before the handler goes on, so every later request of the
// client sees it.
func NewIndirect() rdmo.Handler { return indirectHandler{} }

func (indirectHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: NameIndirect, Version: Version,
		Ops: []uint32{OpIndirectRead, OpIndirectWrite}, NoCachedState: true, Inline: true}
}

// walk is one request's progress.
type walk struct {
	i    int // index in the batch
	r    IndirectReq
	p    uint64 // the current pointer (after hops hops)
	hops uint16
	done bool
}

func (indirectHandler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	var ws []walk
	for i := 0; i < len(reqs); i++ {
		r, err := DecodeIndirect(&reqs[i])
		if err == nil {
			_, err = t.Region(r.Region)
		}
		if err != nil {
			results[i] = rdmo.ResultOf(err)
			continue
		}
		ws = append(ws, walk{i: i, r: r, p: r.Addr})
		if reqs[i].Op == OpIndirectWrite {
			// A write ends the run: walk it alone after the reads before
			// it, then make it visible to what follows.
			last := ws[len(ws)-1]
			chase(t, reqs, results, ws[:len(ws)-1])
			one := []walk{last}
			chase(t, reqs, results, one)
			// Visible before anything else of the client reads: the rest
			// of this batch, or a batch of another handler, which may
			// start before this one completes.
			if results[i].Status == rdmo.StatusOK {
				if err := t.Flush(); err != nil {
					results[i] = rdmo.ResultOf(fmt.Errorf("indirect write: %w", err))
				}
			}
			ws = ws[:0]
		}
	}
	chase(t, reqs, results, ws)
}

// chase walks every request of ws in lockstep, one Sync per hop, then does
// their final accesses.
func chase(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result, ws []walk) {
	if len(ws) == 0 {
		return
	}
	ops := make([]rdmo.RemoteOp, 0, len(ws))
	at := make([]int, 0, len(ws))
	for {
		ops, at = ops[:0], at[:0]
		for k := range ws {
			w := &ws[k]
			if w.done || w.hops == w.r.Depth {
				continue
			}
			if w.p%8 != 0 {
				fail(results, w, rdmo.StatusOutOfBounds, fmt.Sprintf("hop %d: pointer %#x is not 8-byte aligned", w.hops, w.p))
				continue
			}
			if err := checkRange(t, w.r.Region, w.p, 8, fmt.Sprintf("hop %d", w.hops)); err != nil {
				results[w.i], w.done = rdmo.ResultOf(err), true
				continue
			}
			ops = append(ops, rdmo.RemoteOp{Kind: rdmo.RemoteGet, Region: w.r.Region, Addr: w.p, Buf: t.Buffer(8)})
			at = append(at, k)
		}
		if len(ops) == 0 {
			break
		}
		err := t.Sync(ops)
		for j, k := range at {
			w := &ws[k]
			switch {
			case err != nil:
				results[w.i], w.done = rdmo.ResultOf(fmt.Errorf("indirect hop %d: %w", w.hops, err)), true
			case ops[j].Status != rdmo.StatusOK:
				fail(results, w, ops[j].Status, fmt.Sprintf("hop %d at %#x", w.hops, w.p))
			default:
				w.p = le.Uint64(ops[j].Buf)
				w.hops++
				if w.p == 0 {
					fail(results, w, StatusNilPointer, fmt.Sprintf("hop %d read a nil pointer", w.hops))
				}
			}
		}
	}
	// The final accesses: reads in one Sync, writes as Puts.
	ops, at = ops[:0], at[:0]
	for k := range ws {
		w := &ws[k]
		if w.done {
			continue
		}
		n := uint64(w.r.Len)
		if reqs[w.i].Op == OpIndirectWrite {
			n = uint64(len(reqs[w.i].Payload))
		}
		if uint64(w.r.Off) > math.MaxUint64-w.p {
			fail(results, w, rdmo.StatusOutOfBounds, fmt.Sprintf("end %#x + offset %d wraps", w.p, w.r.Off))
			continue
		}
		addr := w.p + uint64(w.r.Off)
		if err := checkRange(t, w.r.Region, addr, n, "indirect end"); err != nil {
			results[w.i], w.done = rdmo.ResultOf(err), true
			continue
		}
		if reqs[w.i].Op == OpIndirectWrite {
			if err := t.Put(w.r.Region, addr, reqs[w.i].Payload); err != nil {
				results[w.i] = rdmo.ResultOf(fmt.Errorf("indirect write: %w", err))
			} else {
				results[w.i] = rdmo.Result{Value: addr}
			}
			continue
		}
		if n == 0 {
			results[w.i] = rdmo.Result{Value: addr}
			continue
		}
		ops = append(ops, rdmo.RemoteOp{Kind: rdmo.RemoteGet, Region: w.r.Region, Addr: addr, Buf: t.Buffer(int(n))})
		at = append(at, k)
	}
	if len(ops) == 0 {
		return
	}
	err := t.Sync(ops)
	for j, k := range at {
		w := &ws[k]
		switch {
		case err != nil:
			results[w.i] = rdmo.ResultOf(fmt.Errorf("indirect read: %w", err))
		case ops[j].Status != rdmo.StatusOK:
			results[w.i] = rdmo.Fail(ops[j].Status, "indirect read at %#x", ops[j].Addr)
		default:
			results[w.i] = rdmo.Result{Value: ops[j].Addr, Data: ops[j].Buf}
		}
	}
}

func fail(results []rdmo.Result, w *walk, st rdmo.Status, detail string) {
	results[w.i] = rdmo.Result{Status: st, Detail: detail}
	w.done = true
}

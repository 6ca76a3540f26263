package ops

import (
	"fmt"

	"github.com/openrdmo/rdmo/rdmo"
)

type allocHandler struct{ rdmo.BaseHandler }

// NewAlloc returns the alloc handler: pop a fixed-size block from a free
// list kept in target memory and return its address.
//
// Layout (docs/OPS.md): the head is an 8-byte aligned u64 holding the
// address of the first free block (0: the list is empty); the first 8 bytes
// of a free block hold the address of the next one (0 ends the list). The
// head and every block the list reaches must be inside the request's
// region. A pop reads the head, reads the block's next pointer, and swings
// the head with a compare-and-swap, so a pop is atomic with respect to
// anything else that updates the head with atomics (the target pushing a
// block back, another client); an ABA reuse between the read and the swap
// is the target's to avoid (push blocks back only when no pop is running,
// or version the pointers).
func NewAlloc() rdmo.Handler { return allocHandler{} }

func (allocHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: NameAlloc, Version: Version, Ops: []uint32{OpAlloc}, NoCachedState: true, Inline: true}
}

// HandleBatch pops one block per request, in order.
func (allocHandler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	for i := range reqs {
		results[i] = pop(t, &reqs[i])
	}
}

func pop(t rdmo.Target, req *rdmo.Request) rdmo.Result {
	r, err := DecodeAlloc(req)
	if err == nil {
		err = checkRange(t, r.Region, r.Head, 8, "free-list head")
	}
	if err != nil {
		return rdmo.ResultOf(err)
	}
	var ops [1]rdmo.RemoteOp
	word := t.Buffer(8)
	for try := 0; try < MaxAllocRetries; try++ {
		ops[0] = rdmo.RemoteOp{Kind: rdmo.RemoteGet, Region: r.Region, Addr: r.Head, Buf: word}
		if res, ok := syncOne(t, ops[:], "alloc: read the head"); !ok {
			return res
		}
		top := le.Uint64(word)
		if top == 0 {
			return rdmo.Fail(StatusExhausted, "free list at %#x is empty", r.Head)
		}
		if top%8 != 0 {
			return rdmo.Fail(rdmo.StatusOutOfBounds, "free block %#x is not 8-byte aligned", top)
		}
		if err := checkRange(t, r.Region, top, 8, "free block"); err != nil {
			return rdmo.ResultOf(err)
		}
		ops[0] = rdmo.RemoteOp{Kind: rdmo.RemoteGet, Region: r.Region, Addr: top, Buf: word}
		if res, ok := syncOne(t, ops[:], "alloc: read the next pointer"); !ok {
			return res
		}
		next := le.Uint64(word)
		ops[0] = rdmo.RemoteOp{Kind: rdmo.RemoteCompareSwap, Region: r.Region, Addr: r.Head, Compare: top, Operand: next}
		if res, ok := syncOne(t, ops[:], "alloc: swing the head"); !ok {
			return res
		}
		if ops[0].Result == top {
			return rdmo.Result{Value: top}
		}
	}
	return rdmo.Fail(StatusContended, "free list at %#x changed under %d attempts", r.Head, MaxAllocRetries)
}

// syncOne runs ops and reports a failed Result unless all succeeded.
func syncOne(t rdmo.Target, ops []rdmo.RemoteOp, what string) (rdmo.Result, bool) {
	if err := t.Sync(ops); err != nil {
		return rdmo.ResultOf(fmt.Errorf("%s: %w", what, err)), false
	}
	for i := range ops {
		if ops[i].Status != rdmo.StatusOK {
			return rdmo.Fail(ops[i].Status, "%s at %#x", what, ops[i].Addr), false
		}
	}
	return rdmo.Result{}, true
}

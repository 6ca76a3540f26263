package dpu

import (
	"errors"
	"strconv"
	"sync/atomic"
	"unsafe"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp"
)

// region is a registered region of a client's memory.
type region struct {
	id, base, length uint64
	c                *client
	// mapping is the region mapped into this process (ucp rkey_ptr, shared
	// memory), or nil; Put and Get through it are memcpy. Read by the
	// executor, set once at MR_REG.
	mapping []byte
	memh    []byte
	gone    atomic.Bool // set by the executor when MR_DEREG's write-back is done

	// Loop-owned.
	rkey            *ucp.RemoteKey
	dying           bool // MR_DEREG in progress
	inflight        int  // UCX operations using rkey
	destroyWhenIdle bool
}

func (r *region) view() rdmo.Region {
	return rdmo.Region{ID: rdmo.RegionID(r.id), Base: r.base, Len: r.length, Local: r.mapping != nil}
}

// handlerView is what a handler sees of its client's target: dpu's
// rdmo.Target, for one client on its executor goroutine (in this package
// "target" is the process whose memory the client registered). It is bound
// to the batch (or command) being run, which owns the Puts and Places
// issued and the Buffer memory.
type handlerView struct {
	c    *client
	w    *Worker
	b    *batch      // the batch running; nil in a command
	g    *opGroup    // group owning Puts and Places
	ops  *[]targetOp // ops not yet handed to the loop
	bufs *bufArena
	sync []targetOp // scratch for Sync/Flush/Fetch ops
	// inline: the loop itself runs the batch (Worker.runInline), so no
	// call may wait for the loop.
	inline bool
}

var _ rdmo.Target = (*handlerView)(nil)

func (t *handlerView) bind(b *batch, g *opGroup, ops *[]targetOp, bufs *bufArena) {
	t.b, t.g, t.ops, t.bufs = b, g, ops, bufs
}

func (t *handlerView) unbind() { t.b, t.g, t.ops, t.bufs = nil, nil, nil, nil }

var (
	errUnbound     = &rdmo.WireError{Status: rdmo.StatusInternal, Detail: "Target used outside a handler call"}
	errUnreachable = &rdmo.WireError{Status: rdmo.StatusTargetUnreachable, Detail: "the endpoint to the target failed or the client was removed"}
	// errInlineWait fails a call that would wait for the loop in a batch
	// the loop runs itself. Worker.inlineOK rules that out; this keeps a
	// mistake there from becoming a deadlock of the whole worker.
	errInlineWait = &rdmo.WireError{Status: rdmo.StatusInternal, Detail: "a Target call would wait for the worker's loop in a batch run on it"}
	// errInlineRendezvous fails Fetch and Flush of a handler that declared
	// rdmo.HandlerInfo.InlineRendezvous (it promised not to call them) in
	// a batch the loop runs.
	errInlineRendezvous = &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: "InlineRendezvous handler called Target.Fetch or Target.Flush in a batch on the worker's loop (the declaration rules both out in HandleBatch)"}
)

// inlineWait is the error of a call that would wait for the loop in a
// batch the loop runs.
func (t *handlerView) inlineWait() error {
	if t.b != nil && t.b.h.info.InlineRendezvous {
		return errInlineRendezvous
	}
	return errInlineWait
}

func wireErr(s rdmo.Status, detail string) error { return &rdmo.WireError{Status: s, Detail: detail} }

func (t *handlerView) ClientID() rdmo.ClientID { return rdmo.ClientID(t.c.id) }

// RunsInline reports whether the loop runs the batch in progress
// (Worker.runInline). A WebAssembly module's host (rdmo/plugin/wasmhost)
// bounds such a call far tighter than one on the executor, since every
// client waits for it.
func (t *handlerView) RunsInline() bool { return t.inline }

func (t *handlerView) region(rid rdmo.RegionID) (*region, error) {
	id := uint64(rid)
	if r := (*t.c.regions.Load())[id]; r != nil {
		if r.gone.Load() {
			return nil, wireErr(rdmo.StatusRegionGone, "region "+utoa(id)+" was deregistered")
		}
		return r, nil
	}
	t.w.regMu.Lock()
	r := t.w.allRegions[id]
	t.w.regMu.Unlock()
	switch {
	case r == nil:
		return nil, wireErr(rdmo.StatusUnknownRegion, "region "+utoa(id)+" is not registered")
	case r.c == t.c:
		return nil, wireErr(rdmo.StatusRegionGone, "region "+utoa(id)+" was deregistered")
	}
	return nil, wireErr(rdmo.StatusRegionNotOwned, "region "+utoa(id)+" belongs to another client")
}

func (t *handlerView) Region(id rdmo.RegionID) (rdmo.Region, error) {
	r, err := t.region(id)
	if err != nil {
		return rdmo.Region{}, err
	}
	return r.view(), nil
}

// usable is the check every operation starts with.
func (t *handlerView) usable() error {
	if t.g == nil {
		return errUnbound
	}
	if t.c.hostFailed.Load() {
		return errUnreachable
	}
	return nil
}

func (t *handlerView) Put(id rdmo.RegionID, addr uint64, data []byte) error {
	if err := t.usable(); err != nil {
		return err
	}
	r, err := t.region(id)
	if err != nil {
		return err
	}
	if err := r.view().CheckRange(addr, uint64(len(data))); err != nil {
		return err
	}
	if len(data) == 0 {
		return nil
	}
	st := &t.w.stats
	st.putBytes.Add(uint64(len(data)))
	if r.mapping != nil {
		copy(r.mapping[addr-r.base:], data)
		st.cpyPuts.Add(1)
		return nil
	}
	*t.ops = append(*t.ops, targetOp{kind: opPut, g: t.g, c: t.c, r: r, raddr: addr, buf: data})
	t.c.dirtyUCX, t.c.unfenced, t.c.lastPut = true, true, r
	st.ucxPuts.Add(1)
	return nil
}

func (t *handlerView) Buffer(n int) []byte {
	if t.bufs == nil || n <= 0 {
		return nil
	}
	return t.bufs.alloc(n)
}

func (t *handlerView) Sync(ops []rdmo.RemoteOp) error {
	if len(ops) == 0 {
		return nil
	}
	if err := t.usable(); err != nil {
		for i := range ops {
			ops[i].Status, ops[i].Result = rdmo.StatusOf(err), 0
		}
		return err
	}
	st := &t.w.stats
	st.syncs.Add(1)
	st.syncOps.Add(uint64(len(ops)))
	t.sync = t.sync[:0]
	for i := range ops {
		o := &ops[i]
		o.Status, o.Result = rdmo.StatusOK, 0
		r, err := t.region(o.Region)
		if err != nil {
			o.Status = rdmo.StatusOf(err)
			continue
		}
		switch o.Kind {
		case rdmo.RemoteGet:
			if err := r.view().CheckRange(o.Addr, uint64(len(o.Buf))); err != nil {
				o.Status = rdmo.StatusOutOfBounds
				continue
			}
			if len(o.Buf) == 0 {
				continue
			}
			if r.mapping != nil {
				copy(o.Buf, r.mapping[o.Addr-r.base:])
				continue
			}
			t.sync = append(t.sync, targetOp{kind: opGet, g: &t.c.sync, c: t.c, r: r, raddr: o.Addr, buf: o.Buf, res: o})
		case rdmo.RemoteFetchAdd, rdmo.RemoteCompareSwap, rdmo.RemoteSwap:
			if err := r.view().CheckRange(o.Addr, 8); err != nil || o.Addr%8 != 0 {
				o.Status = rdmo.StatusOutOfBounds
				continue
			}
			if r.mapping != nil && !t.w.cfg.UCXAtomics {
				if p := wordAt(r.mapping, o.Addr-r.base); p != nil {
					o.Result = cpuAtomic(o.Kind, p, o.Operand, o.Compare)
					st.cpuAtoms.Add(1)
					continue
				}
			}
			op := targetOp{kind: opAtomic, g: &t.c.sync, c: t.c, r: r, raddr: o.Addr, value: o.Operand, res: o}
			switch o.Kind {
			case rdmo.RemoteFetchAdd:
				op.amo = ucp.AtomicFetchAdd
			case rdmo.RemoteCompareSwap:
				op.amo, op.compare = ucp.AtomicCompareSwap, o.Compare
			default:
				op.amo = ucp.AtomicSwap
			}
			t.sync = append(t.sync, op)
		default:
			o.Status = rdmo.StatusInternal
		}
	}
	if len(t.sync) == 0 {
		return nil
	}
	if t.inline {
		for i := range t.sync {
			if o := t.sync[i].res; o != nil {
				o.Status = rdmo.StatusInternal
			}
		}
		clear(t.sync)
		t.sync = t.sync[:0]
		return errInlineWait
	}
	if t.c.unfenced {
		// Reads and atomics must see the UCX writes issued before them.
		t.sync = append(t.sync, targetOp{})
		copy(t.sync[1:], t.sync)
		t.sync[0] = targetOp{kind: opFence, g: &t.c.sync, c: t.c}
		t.c.unfenced = false
	}
	t.submitWait()
	return nil
}

// submitWait hands the pending ops and t.sync to the loop and waits until
// the sync group (t.sync, and in a command every op) has completed.
func (t *handlerView) submitWait() {
	g := &t.c.sync
	g.status, g.detail = rdmo.StatusOK, ""
	ops := *t.ops
	t.c.blocked.Store(true)
	t.w.push(inboxItem{kind: itemSubmit, c: t.c, ops: ops, sync: t.sync, g: g})
	<-t.c.syncCh
	t.c.blocked.Store(false)
	clear(ops)
	*t.ops = ops[:0]
	clear(t.sync)
	t.sync = t.sync[:0]
}

// pendingOf finds the worker's record of a request of the running batch.
func (t *handlerView) pendingOf(req *rdmo.Request) (*pending, error) {
	if t.b != nil {
		for i := range t.b.reqs {
			if &t.b.reqs[i] == req {
				p := t.b.ents[i]
				if p.moved {
					return nil, wireErr(rdmo.StatusInternal, "the rendezvous payload of seq "+utoa(req.Seq)+" was already moved")
				}
				return p, nil
			}
		}
	}
	return nil, wireErr(rdmo.StatusInternal, "request is not part of the running batch")
}

func (t *handlerView) Place(req *rdmo.Request, id rdmo.RegionID, addr uint64) error {
	if req == nil {
		return wireErr(rdmo.StatusInternal, "Place of a nil request")
	}
	if !req.Rendezvous {
		return t.Put(id, addr, req.Payload)
	}
	if err := t.usable(); err != nil {
		return err
	}
	p, err := t.pendingOf(req)
	if err != nil {
		return err
	}
	r, err := t.region(id)
	if err != nil {
		return err
	}
	if err := r.view().CheckRange(addr, req.Length); err != nil {
		return err
	}
	if req.Length == 0 {
		return nil
	}
	op := targetOp{g: t.g, c: t.c, r: r, raddr: addr, pend: p, rq: t.b.rq}
	if r.mapping != nil {
		op.kind = opRecv
		op.place = true
		op.buf = r.mapping[addr-r.base : addr-r.base+req.Length]
	} else {
		if req.Length > uint64(t.w.cfg.MaxRendezvousFetch) {
			return wireErr(rdmo.StatusRendezvousRefused, "rendezvous payload of "+utoa(req.Length)+
				" bytes exceeds the bounce limit of "+strconv.Itoa(t.w.cfg.MaxRendezvousFetch))
		}
		op.kind = opRecvBounce
		t.c.dirtyUCX, t.c.unfenced, t.c.lastPut = true, true, r
	}
	p.moved = true
	*t.ops = append(*t.ops, op)
	t.c.placed++
	t.w.stats.places.Add(1)
	t.w.stats.putBytes.Add(req.Length)
	return nil
}

func (t *handlerView) Fetch(req *rdmo.Request) ([]byte, error) {
	if req == nil {
		return nil, wireErr(rdmo.StatusInternal, "Fetch of a nil request")
	}
	if !req.Rendezvous {
		return req.Payload, nil
	}
	if t.g == nil {
		return nil, errUnbound
	}
	if req.Length > uint64(t.w.cfg.MaxRendezvousFetch) {
		return nil, wireErr(rdmo.StatusRendezvousRefused, "rendezvous payload of "+utoa(req.Length)+
			" bytes exceeds the fetch limit of "+strconv.Itoa(t.w.cfg.MaxRendezvousFetch))
	}
	p, err := t.pendingOf(req)
	if err != nil {
		return nil, err
	}
	if t.inline {
		return nil, t.inlineWait()
	}
	buf := t.Buffer(int(req.Length))
	p.moved = true
	t.w.stats.fetches.Add(1)
	t.sync = append(t.sync[:0], targetOp{kind: opRecv, g: &t.c.sync, c: t.c, pend: p, buf: buf, rq: t.b.rq})
	t.submitWait()
	if g := &t.c.sync; g.status != rdmo.StatusOK {
		return nil, wireErr(g.status, "fetching the rendezvous payload: "+g.detail)
	}
	return buf, nil
}

func (t *handlerView) Flush() error {
	if t.g == nil {
		return errUnbound
	}
	t.w.stats.flushes.Add(1)
	if t.c.hostFailed.Load() {
		return errUnreachable
	}
	if !t.c.dirtyUCX && t.c.placesDone.Load() == t.c.placed {
		// Nothing to make visible: every write since the last flush was
		// a copy through the mapping (visible already) and every Place
		// finished. No round trip through the loop.
		return nil
	}
	if t.inline {
		return t.inlineWait()
	}
	op := targetOp{kind: opFlush, g: &t.c.sync, c: t.c}
	if t.c.dirtyUCX {
		op.readback = t.readbackRegion()
	}
	t.sync = append(t.sync[:0], op)
	t.submitWait()
	if g := &t.c.sync; g.status != rdmo.StatusOK {
		return wireErr(g.status, "flush: "+g.detail)
	}
	t.c.dirtyUCX, t.c.unfenced = false, false
	return nil
}

// readbackRegion picks the region the visibility read goes to: where the
// last UCX write went, else any live region of the client.
func (t *handlerView) readbackRegion() *region {
	if r := t.c.lastPut; r != nil && !r.gone.Load() && (*t.c.regions.Load())[r.id] == r {
		return r
	}
	for _, r := range *t.c.regions.Load() {
		if !r.gone.Load() {
			return r
		}
	}
	return nil
}

func (t *handlerView) WriteBackAll() error {
	if t.g == nil {
		return errUnbound
	}
	t.w.stats.fences.Add(1)
	var errs []error
	for _, e := range t.w.handlers {
		if t.inline && (!e.info.Inline || e.info.NoCachedState) {
			// A FLUSH runs on the loop only when handlers that are not
			// Inline have nothing cached for the client (inlineOK), and
			// NoCachedState handlers never have.
			continue
		}
		if err := t.c.protect(e.info.Name, "WriteBack", func() error { return e.h.WriteBack(t) }); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// bufArena is Target.Buffer memory: 64 KiB chunks handed out in order and
// reused once the batch completed, plus a few reused large buffers.
type bufArena struct {
	chunks  [][]byte
	cur     int
	off     int
	big     [][]byte
	bigUsed int
}

const (
	bufChunk = 64 << 10
	maxBig   = 4
)

func (a *bufArena) alloc(n int) []byte {
	if n > bufChunk {
		for i := a.bigUsed; i < len(a.big); i++ {
			if cap(a.big[i]) >= n {
				a.big[i], a.big[a.bigUsed] = a.big[a.bigUsed], a.big[i]
				a.bigUsed++
				return a.big[a.bigUsed-1][:n:n]
			}
		}
		b := make([]byte, n)
		a.big = append(a.big, b)
		a.big[len(a.big)-1], a.big[a.bigUsed] = a.big[a.bigUsed], a.big[len(a.big)-1]
		a.bigUsed++
		return b
	}
	for {
		if a.cur == len(a.chunks) {
			a.chunks = append(a.chunks, make([]byte, bufChunk))
		}
		c := a.chunks[a.cur]
		if len(c)-a.off >= n {
			b := c[a.off : a.off+n : a.off+n]
			a.off = min(a.off+(n+7)&^7, len(c))
			return b
		}
		a.cur++
		a.off = 0
	}
}

func (a *bufArena) reset() {
	a.cur, a.off, a.bigUsed = 0, 0, 0
	if len(a.chunks) > 16 {
		clear(a.chunks[16:])
		a.chunks = a.chunks[:16]
	}
	if len(a.big) > maxBig {
		clear(a.big[maxBig:])
		a.big = a.big[:maxBig]
	}
}

// wordAt returns the u64 at offset off of a mapping of target memory, or
// nil when its address in this process is not 8-byte aligned (the target
// address is; a mapping at another alignment is served through UCX).
func wordAt(m []byte, off uint64) *uint64 {
	p := unsafe.Pointer(&m[off])
	if uintptr(p)%8 != 0 {
		return nil
	}
	return (*uint64)(p)
}

// cpuAtomic does a Sync atomic on a word of mapped target memory with the
// CPU's atomic instructions and returns the old value. This agrees with
// UCX's atomics on the same word from anyone on this host: UCX's software
// atomics (an initiator over tcp, or this worker's own endpoint) run in
// the target process's progress as CPU atomics on the same physical memory,
// and its shared-memory transports do CPU atomics in the caller's process
// on their mapping; x86 and arm64 atomics on one cache-coherent host are
// atomic with respect to each other whatever the virtual address
// (Config.UCXAtomics covers an RDMA NIC's device atomics, which are not).
// It needs no round trip to the target, and no wait for the loop.
func cpuAtomic(kind rdmo.RemoteOpKind, p *uint64, operand, compare uint64) uint64 {
	switch kind {
	case rdmo.RemoteFetchAdd:
		return atomic.AddUint64(p, operand) - operand
	case rdmo.RemoteSwap:
		return atomic.SwapUint64(p, operand)
	default: // RemoteCompareSwap
		for {
			old := atomic.LoadUint64(p)
			if old != compare {
				return old // linearised at the load: no swap
			}
			if atomic.CompareAndSwapUint64(p, compare, operand) {
				return compare
			}
		}
	}
}

// Package append is the RDMO APPEND handler: it appends payloads to queues in target memory with cached or atomically shared tails and coalesced writes.
package append

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/openrdmo/rdmo/rdmo"
)

// Name and Version identify the handler to the worker.
const (
	Name    = "append"
	Version = "1.0.0"
)

// DefaultMaxCoalesce is the default cap on the bytes staged for one Put.
const DefaultMaxCoalesce = 64 << 10

// localPutMin is the smallest eager append Put on its own, unstaged, into
// a region the worker maps (rdmo.Region.Local): below it one Put call per
// append costs more than the staging copy it saves.
const localPutMin = 1 << 10

// maxIdleQueues bounds the queue states a client keeps in Shared mode.
const maxIdleQueues = 1024

// Strategy chooses how the handler gets a queue's tail.
type Strategy uint8

const (
	// Owned reads the tail once and caches it until the client goes,
	// writing it back at WriteBack. Nothing else may move the tail.
	Owned Strategy = iota
	// Shared reserves each batch's space with one remote fetch-and-add per
	// queue, so others may append to the same queue concurrently.
	Shared
)

func (s Strategy) String() string {
	switch s {
	case Owned:
		return "owned"
	case Shared:
		return "shared"
	}
	return fmt.Sprintf("Strategy(%d)", uint8(s))
}

// Options configures the handler.
type Options struct {
	Strategy Strategy
	// MaxCoalesce caps the bytes of one coalesced Put (a single append
	// larger than that is Put on its own, straight from its payload).
	// 0 means DefaultMaxCoalesce.
	MaxCoalesce int
}

// New returns an APPEND handler.
//
// A queue is named by its tail pointer: a u64 holding an absolute target
// address, at PtrAddr in region PtrRkey. An append writes its payload at the
// tail, in region DataRkey, and advances the tail by the payload length. The
// tail word must be 8-byte aligned, and an append may not overwrite it.
//
// # Strategies
//
// Owned (the reference's way, and the default): on the first request for a
// queue the handler reads the tail once and then owns it; later appends
// need no remote access to the tail at all. WriteBack writes every changed tail
// back (one 8-byte Put per queue) and keeps it cached. Nothing else may move
// the tail while the worker owns it (until the region or the client goes).
//
// Shared: per batch, one remote fetch-and-add per queue reserves the total
// length of that batch's appends to it, so the tail may also be moved by
// others (other workers, the target). The tail word is always current in
// target memory and WriteBack has nothing to do. The tail moves before the data
// lands, so a consumer reads up to the tail only after the appends were
// acknowledged or flushed.
//
// # Batches
//
// Requests are validated first; then every tail the batch needs but does
// not hold is obtained in ONE Target.Sync (reads in Owned mode, fetch-adds
// in Shared mode), so a batch never waits on one round trip after another.
// Eager appends that land back to back in one data region become one Put
// from a staging buffer; rendezvous appends are Placed at their address and
// split a run of eager ones.
//
// # Failures
//
// Every request gets its own status; the others of the batch go on. An empty
// payload is EmptyAppend; a bad header its codec status; an unknown or
// foreign region UnknownRegion or RegionNotOwned; a tail word outside its
// region or misaligned, a tail below its data region, or an append that
// would overwrite the tail word OutOfBounds; an append that would pass the
// end of its data region (or wrap) QueueOverflow. A failed request writes
// nothing. In Owned mode its tail does not advance either. In Shared mode
// the failures found after the fetch-add (QueueOverflow, OutOfBounds) have
// already been counted in the tail: their bytes are simply left unwritten
// (a gap in the queue that the consumer must skip), because undoing an
// atomic add that others may have built on is unsafe. Once a queue
// overflows in Shared mode its tail stays past the end and every later
// append to it fails until the consumer resets the tail.
//
// Should the target itself fail a Put or Place after the checks passed,
// the requests it carried fail with that status and their space stays
// allocated (the tail has moved past them), in both modes.
func New(opt Options) rdmo.Handler {
	if opt.MaxCoalesce <= 0 {
		opt.MaxCoalesce = DefaultMaxCoalesce
	}
	if opt.Strategy != Owned && opt.Strategy != Shared {
		panic(fmt.Sprintf("append: unknown strategy %d", opt.Strategy))
	}
	return &handler{opt: opt, clients: make(map[rdmo.ClientID]*client)}
}

type handler struct {
	opt     Options
	mu      sync.Mutex // guards clients; a client's state is used by one call at a time
	clients map[rdmo.ClientID]*client
}

type queueKey struct {
	ptrRkey rdmo.RegionID
	ptrAddr uint64
}

// queue is a queue's state in one client. The fields after dataRegions are
// per batch, valid while batch equals the client's epoch.
type queue struct {
	key queueKey
	// Owned mode: the cached tail and whether target memory is behind it.
	cached, dirty bool
	tail          uint64
	// dataRegions are the data regions appends to this queue used, so that
	// RegionRemoved can drop the queue when one of them goes.
	dataRegions []rdmo.RegionID

	batch  uint64      // epoch of the batch the fields below belong to
	failed rdmo.Result // getting the tail failed in this batch
	total  uint64      // Shared: bytes reserved in this batch
	// The open run of eager appends being coalesced.
	run struct {
		open        bool
		region      rdmo.RegionID
		addr, next  uint64
		first, last int // item indices, linked through item.next
		n           int
	}
}

func (q *queue) usesData(region rdmo.RegionID) bool {
	for _, r := range q.dataRegions {
		if r == region {
			return true
		}
	}
	return false
}

// item is one request of the current batch that passed validation.
type item struct {
	q    *queue
	data rdmo.Region
	n    uint64
	off  uint64 // Shared: offset in the queue's reservation
	next int    // next item of the same run, or -1
}

type client struct {
	queues map[queueKey]*queue
	epoch  uint64

	// Scratch reused by every batch.
	last    *queue // the queue of the previous request, a lookup saved
	items   []item
	ok      []bool
	touched []*queue
	ops     []rdmo.RemoteOp
	opq     []*queue
	getBuf  []byte
	regs    []rdmo.Region
}

func (h *handler) Info() rdmo.HandlerInfo {
	// Inline: with every region mapped (what the worker checks before it
	// runs a batch on its loop), an append's records are copies and its
	// tail reads and fetch-adds the CPU's. InlineRendezvous: a rendezvous
	// record is moved with Place only, and HandleBatch never calls Fetch
	// or Flush.
	return rdmo.HandlerInfo{Name: Name, Version: Version, Ops: []uint32{rdmo.OpAppend}, Inline: true, InlineRendezvous: true}
}

func (h *handler) client(id rdmo.ClientID, create bool) *client {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.clients[id]
	if c == nil && create {
		c = &client{queues: make(map[queueKey]*queue)}
		h.clients[id] = c
	}
	return c
}

// region resolves a region id through a per-batch cache (regions cannot
// change during a batch: calls for one client never overlap).
func (c *client) region(t rdmo.Target, id rdmo.RegionID) (rdmo.Region, error) {
	for _, r := range c.regs {
		if r.ID == id {
			return r, nil
		}
	}
	r, err := t.Region(id)
	if err == nil {
		c.regs = append(c.regs, r)
	}
	return r, err
}

func (h *handler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	c := h.client(t.ClientID(), true)
	c.epoch++
	c.last = nil
	c.regs = c.regs[:0]
	c.touched = c.touched[:0]
	c.ops = c.ops[:0]
	c.opq = c.opq[:0]
	if cap(c.items) < len(reqs) {
		c.items = make([]item, len(reqs))
		c.ok = make([]bool, len(reqs))
	}
	c.items = c.items[:len(reqs)]
	c.ok = c.ok[:len(reqs)]
	shared := h.opt.Strategy == Shared

	// 1. Validate every request and find the tails the batch lacks.
	for i := range reqs {
		it := &c.items[i]
		c.ok[i] = false
		if !c.validate(t, &reqs[i], it, &results[i]) {
			continue
		}
		q := it.q
		if q.batch != c.epoch {
			q.batch = c.epoch
			q.failed = rdmo.Result{}
			q.total = 0
			q.run.open = false
			c.touched = append(c.touched, q)
			if !shared && !q.cached {
				c.opq = append(c.opq, q)
			}
		}
		if shared {
			if it.n > math.MaxUint64-q.total {
				results[i] = rdmo.Fail(rdmo.StatusQueueOverflow, "batch reserves more than 2^64 bytes")
				continue
			}
			it.off = q.total
			q.total += it.n
		}
		c.ok[i] = true
	}
	if shared {
		c.opq = append(c.opq, c.touched...)
	}

	// 2. One round trip for every tail the batch needs.
	c.syncTails(t, shared)

	// 3. Give each append its address, in arrival order.
	for i := range reqs {
		if !c.ok[i] {
			continue
		}
		it := &c.items[i]
		q := it.q
		if q.failed.Status != rdmo.StatusOK {
			results[i] = q.failed
			c.ok[i] = false
			continue
		}
		var addr uint64
		if shared {
			addr = q.tail + it.off
		} else {
			addr = q.tail
		}
		if !placementOK(addr, it.n, &it.data, q.key.ptrAddr) {
			results[i] = placement(addr, it.n, it.data, q.key.ptrAddr)
			c.ok[i] = false
			continue
		}
		if !shared {
			q.tail = addr + it.n
			q.dirty = true
		}
		results[i] = rdmo.Result{Value: addr}
	}

	// 4. Write: coalesce eager runs per queue, Place rendezvous payloads.
	for i := range reqs {
		if !c.ok[i] {
			continue
		}
		it := &c.items[i]
		q := it.q
		addr := results[i].Value
		r := &q.run
		if reqs[i].Rendezvous {
			h.closeRun(t, c, q, reqs, results)
			if err := t.Place(&reqs[i], it.data.ID, addr); err != nil {
				results[i] = rdmo.ResultOf(err)
			}
			continue
		}
		if it.data.Local && it.n >= localPutMin {
			// Staged, it would be copied twice by this thread for
			// nothing: a Put into a local region is a copy anyway.
			h.closeRun(t, c, q, reqs, results)
			if err := t.Put(it.data.ID, addr, reqs[i].Payload); err != nil {
				results[i] = rdmo.ResultOf(err)
			}
			continue
		}
		if r.open && r.region == it.data.ID && r.next == addr && r.next-r.addr+it.n <= uint64(h.opt.MaxCoalesce) {
			c.items[r.last].next = i
			r.last = i
			r.next += it.n
			r.n++
			continue
		}
		h.closeRun(t, c, q, reqs, results)
		r.open, r.region, r.addr, r.next, r.first, r.last, r.n = true, it.data.ID, addr, addr+it.n, i, i, 1
	}
	for _, q := range c.touched {
		h.closeRun(t, c, q, reqs, results)
	}
	if shared && len(c.queues) > maxIdleQueues {
		// Shared queues hold nothing between batches: forget them rather
		// than let an initiator naming ever new tail words grow the map.
		clear(c.queues)
	}
}

// validate checks one request before anything is written and fills it
// (its queue created if new), or writes the failure to res and reports
// false. It fills in place rather than return an item and a Result: two
// 56-byte values per append copied through the stack were a tenth of the
// handler's time at 64 bytes.
func (c *client) validate(t rdmo.Target, req *rdmo.Request, it *item, res *rdmo.Result) bool {
	it.q, it.off, it.next = nil, 0, -1
	it.n = uint64(len(req.Payload))
	if req.Rendezvous {
		it.n = req.Length
	}
	if it.n == 0 {
		*res = rdmo.Result{Status: rdmo.StatusEmptyAppend}
		return false
	}
	a := &req.Append
	ptr, err := c.region(t, a.PtrRkey)
	if err != nil {
		*res = rdmo.ResultOf(err)
		return false
	}
	if err := ptr.CheckRange(a.PtrAddr, 8); err != nil {
		*res = rdmo.ResultOf(err)
		return false
	}
	if a.PtrAddr%8 != 0 {
		*res = rdmo.Fail(rdmo.StatusOutOfBounds, "tail pointer %#x is not 8-byte aligned", a.PtrAddr)
		return false
	}
	if it.data, err = c.region(t, a.DataRkey); err != nil {
		*res = rdmo.ResultOf(err)
		return false
	}
	if it.n > it.data.Len {
		*res = rdmo.Fail(rdmo.StatusQueueOverflow, "%d-byte append is larger than data region %#x (%d bytes)", it.n, it.data.ID, it.data.Len)
		return false
	}
	k := queueKey{ptrRkey: a.PtrRkey, ptrAddr: a.PtrAddr}
	q := c.last
	if q == nil || q.key != k {
		if q = c.queues[k]; q == nil {
			q = &queue{key: k}
			c.queues[k] = q
		}
		c.last = q
	}
	if !q.usesData(a.DataRkey) {
		q.dataRegions = append(q.dataRegions, a.DataRkey)
	}
	it.q = q
	return true
}

// placementOK reports whether n bytes at addr fit in the data region and
// do not cover the queue's tail word; placement says why not.
func placementOK(addr, n uint64, data *rdmo.Region, ptrAddr uint64) bool {
	return addr >= data.Base && n <= math.MaxUint64-addr && data.Contains(addr, n) &&
		(addr >= ptrAddr+8 || ptrAddr >= addr+n)
}

// placement checks that n bytes at addr fit in the data region and do not
// cover the queue's tail word.
func placement(addr, n uint64, data rdmo.Region, ptrAddr uint64) rdmo.Result {
	if addr < data.Base {
		return rdmo.Fail(rdmo.StatusOutOfBounds, "tail %#x is below data region %#x at %#x", addr, data.ID, data.Base)
	}
	if n > math.MaxUint64-addr || !data.Contains(addr, n) {
		return rdmo.Fail(rdmo.StatusQueueOverflow, "%d bytes at tail %#x pass the end of data region %#x [%#x, +%d)",
			n, addr, data.ID, data.Base, data.Len)
	}
	if addr < ptrAddr+8 && ptrAddr < addr+n {
		return rdmo.Fail(rdmo.StatusOutOfBounds, "%d bytes at tail %#x would overwrite the tail pointer at %#x", n, addr, ptrAddr)
	}
	return rdmo.Result{}
}

// syncTails gets, in one Sync, the tail of every queue in c.opq: a read of
// each uncached tail (Owned) or a fetch-add of each queue's reservation
// (Shared). A queue whose op fails records the failure for its requests.
func (c *client) syncTails(t rdmo.Target, shared bool) {
	if len(c.opq) == 0 {
		return
	}
	if need := 8 * len(c.opq); cap(c.getBuf) < need {
		c.getBuf = make([]byte, need)
	}
	c.getBuf = c.getBuf[:8*len(c.opq)]
	for k, q := range c.opq {
		op := rdmo.RemoteOp{Region: q.key.ptrRkey, Addr: q.key.ptrAddr}
		if shared {
			op.Kind, op.Operand = rdmo.RemoteFetchAdd, q.total
		} else {
			op.Kind, op.Buf = rdmo.RemoteGet, c.getBuf[8*k:8*k+8:8*k+8]
		}
		c.ops = append(c.ops, op)
	}
	err := t.Sync(c.ops)
	for k, q := range c.opq {
		op := &c.ops[k]
		switch {
		case err != nil:
			q.failed = rdmo.ResultOf(err)
		case op.Status != rdmo.StatusOK:
			q.failed = rdmo.Fail(op.Status, "tail at %#x in region %#x: %v", q.key.ptrAddr, q.key.ptrRkey, op.Status)
		case shared:
			q.tail = op.Result
		default:
			q.tail = le.Uint64(op.Buf)
			q.cached, q.dirty = true, false
		}
		c.ops[k] = rdmo.RemoteOp{}
		c.opq[k] = nil
	}
	c.ops, c.opq = c.ops[:0], c.opq[:0]
}

// closeRun writes q's open run of eager appends: straight from the payload
// when it is one append, else as one Put from a staging buffer.
func (h *handler) closeRun(t rdmo.Target, c *client, q *queue, reqs []rdmo.Request, results []rdmo.Result) {
	r := &q.run
	if !r.open {
		return
	}
	r.open = false
	var data []byte
	if r.n == 1 {
		data = reqs[r.first].Payload
	} else {
		data = t.Buffer(int(r.next - r.addr))
		off := 0
		for i := r.first; i >= 0; i = c.items[i].next {
			off += copy(data[off:], reqs[i].Payload)
		}
	}
	if err := t.Put(r.region, r.addr, data); err != nil {
		res := rdmo.ResultOf(err)
		for i := r.first; i >= 0; i = c.items[i].next {
			results[i] = res
		}
	}
}

func (h *handler) WriteBack(t rdmo.Target) error {
	c := h.client(t.ClientID(), false)
	if c == nil {
		return nil
	}
	var errs []error
	for _, q := range c.queues {
		if q.dirty {
			if err := writeBack(t, q); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// writeBack puts q's cached tail into its tail word and marks it clean.
func writeBack(t rdmo.Target, q *queue) error {
	b := t.Buffer(8)
	le.PutUint64(b, q.tail)
	if err := t.Put(q.key.ptrRkey, q.key.ptrAddr, b); err != nil {
		return fmt.Errorf("append: writing back the tail at %#x in region %#x: %w", q.key.ptrAddr, q.key.ptrRkey, err)
	}
	q.dirty = false
	return nil
}

func (h *handler) RegionRemoved(t rdmo.Target, region rdmo.RegionID) error {
	c := h.client(t.ClientID(), false)
	if c == nil {
		return nil
	}
	var errs []error
	for k, q := range c.queues {
		if k.ptrRkey != region && !q.usesData(region) {
			continue
		}
		if q.dirty {
			if err := writeBack(t, q); err != nil {
				errs = append(errs, err)
			}
		}
		delete(c.queues, k)
	}
	return errors.Join(errs...)
}

func (h *handler) ClientRemoved(client rdmo.ClientID) {
	h.mu.Lock()
	delete(h.clients, client)
	h.mu.Unlock()
}

var le = binary.LittleEndian

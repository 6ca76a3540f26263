// Package rdmotest is an in-process rdmo.Target over byte slices that enforces the worker's rules, for testing operation handlers.
package rdmotest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/openrdmo/rdmo/rdmo"
)

// GuardLen is the size of the guard zone before and after every region.
const GuardLen = 64

// DefaultFetchLimit is the FetchLimit of a new Target: the largest
// rendezvous payload Fetch brings into worker memory.
const DefaultFetchLimit = 1 << 20

// Byte patterns: guard zones, and scratch from Buffer before a handler
// writes it and after the batch ends (so stale use shows up as 0xDB bytes).
const (
	GuardByte  = 0xA5
	PoisonByte = 0xDB
)

var le = binary.LittleEndian

// Stats counts the calls a handler made. PutBytes and PlaceBytes count
// payload bytes; SyncOps counts the RemoteOps of all Sync calls.
type Stats struct {
	Puts, PutBytes      uint64
	Places, PlaceBytes  uint64
	Fetches             uint64
	FetchBytes          uint64
	Syncs, SyncOps      uint64
	Flushes, WriteBacks uint64
	Buffers             uint64
	BufferBytes         uint64
}

// Faults makes calls fail on purpose. A non-nil field is returned by every
// call of that kind, which then does nothing, until the field is cleared.
type Faults struct {
	Put, Place, Fetch, Sync, Flush error
}

// AccessKind names a recorded access.
type AccessKind uint8

// Access kinds.
const (
	AccessPut AccessKind = iota + 1
	AccessPlace
	AccessGet
	AccessFetchAdd
	AccessCompareSwap
	AccessSwap
)

func (k AccessKind) String() string {
	switch k {
	case AccessPut:
		return "put"
	case AccessPlace:
		return "place"
	case AccessGet:
		return "get"
	case AccessFetchAdd:
		return "fadd"
	case AccessCompareSwap:
		return "cswap"
	case AccessSwap:
		return "swap"
	}
	return fmt.Sprintf("access(%d)", uint8(k))
}

// Access is one successful memory access, recorded when Target.Record is set.
type Access struct {
	Kind   AccessKind
	Region rdmo.RegionID
	Addr   uint64
	Len    uint64
}

func (a Access) String() string {
	return fmt.Sprintf("%s r%#x [%#x,+%d)", a.Kind, a.Region, a.Addr, a.Len)
}

// memory is the address space shared by the Targets of every client made
// with Peer, and the handlers registered on it (the worker's handler set).
type memory struct {
	mu       sync.Mutex
	regions  map[rdmo.RegionID]*region
	handlers []rdmo.Handler
}

type region struct {
	id    rdmo.RegionID
	owner rdmo.ClientID
	base  uint64
	raw   []byte // guard, data, guard
	data  []byte
}

// Target is an rdmo.Target for one client over in-process memory. Calls for
// one Target must not overlap (as the worker guarantees for one client);
// Targets of different clients (see Peer) may be used concurrently.
//
// A Target is one client's view of a small simulated address space. Regions
// are plain byte slices surrounded by guard zones; every access is checked
// exactly as the real worker checks it (unknown region, another client's
// region, out of bounds including addr+len wrapping, 8-byte alignment of
// atomics) and a refused access touches nothing. Put and Place copy at once
// unless DeferPuts is set, in which case they are applied when the batch
// ends or at Flush, which catches handlers that change data they already
// handed to Put.
//
// Typical use:
//
//	tg := rdmotest.NewTarget(7)
//	mem := tg.AddRegion(0x10, 0x7f00_0000_0000, 128<<10)
//	h := myplugin.New()
//	tg.Register(h)
//	res := tg.RunBatch(h, tg.AppendReq(hdr, payload))
//	if err := tg.CheckGuards(); err != nil { t.Fatal(err) }
type Target struct {
	mem    *memory
	client rdmo.ClientID

	// FetchLimit is the largest rendezvous payload Fetch accepts; larger
	// ones fail with ErrRendezvousRefused. NewTarget sets DefaultFetchLimit.
	FetchLimit uint64
	// DeferPuts delays the copies of Put and Place until EndBatch or Flush.
	// Put then reads its data slice late, so a handler that modifies data
	// after handing it to Put (instead of staging it in Buffer) is caught.
	// Remote reads (Sync) do not see deferred writes, as on a network.
	DeferPuts bool
	// LocalRegions makes Region report Local, as a worker that maps
	// target memory does (Put copies at once; ignored with DeferPuts,
	// whose Puts do not).
	LocalRegions bool
	// Record makes the Target log every successful access (see Accesses).
	Record bool
	// Faults injects failures.
	Faults Faults

	mu      sync.Mutex // guards the fields below against readers on other goroutines
	stats   Stats
	seq     uint64
	rv      map[uint64]*rendezvous
	pending []pendingWrite
	log     []Access
	arena   arena
}

type rendezvous struct {
	data     []byte
	consumed bool
}

type pendingWrite struct {
	reg  *region
	off  uint64
	data []byte
}

var _ rdmo.Target = (*Target)(nil)

// NewTarget returns a Target for client with an empty address space.
func NewTarget(client rdmo.ClientID) *Target {
	return newTarget(&memory{regions: make(map[rdmo.RegionID]*region)}, client)
}

func newTarget(m *memory, client rdmo.ClientID) *Target {
	return &Target{mem: m, client: client, FetchLimit: DefaultFetchLimit, rv: make(map[uint64]*rendezvous)}
}

// Peer returns a Target for another client over the same address space and
// handler set, as a worker serving several clients sees it.
func (t *Target) Peer(client rdmo.ClientID) *Target { return newTarget(t.mem, client) }

// AddRegion registers size bytes at target address base as region id of this
// client and returns its memory (zeroed), which the test may read and write
// directly. It panics if the id is taken, or the range wraps or overlaps
// another region: the simulated address space stays consistent.
func (t *Target) AddRegion(id rdmo.RegionID, base uint64, size int) []byte {
	return t.AddRegionFor(t.client, id, base, size)
}

// AddRegionFor registers a region owned by another client, so that naming it
// fails with ErrRegionNotOwned.
func (t *Target) AddRegionFor(owner rdmo.ClientID, id rdmo.RegionID, base uint64, size int) []byte {
	if size < 0 || uint64(size) > math.MaxUint64-base {
		panic(fmt.Sprintf("rdmotest: region %#x: [%#x, +%d) wraps", id, base, size))
	}
	m := t.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.regions[id]; ok {
		panic(fmt.Sprintf("rdmotest: region id %#x is already registered", id))
	}
	for _, r := range m.regions {
		if base < r.base+uint64(len(r.data)) && r.base < base+uint64(size) {
			panic(fmt.Sprintf("rdmotest: region %#x [%#x, +%d) overlaps region %#x", id, base, size, r.id))
		}
	}
	raw := make([]byte, GuardLen+size+GuardLen)
	fill(raw[:GuardLen], GuardByte)
	fill(raw[GuardLen+size:], GuardByte)
	r := &region{id: id, owner: owner, base: base, raw: raw, data: raw[GuardLen : GuardLen+size : GuardLen+size]}
	m.regions[id] = r
	return r.data
}

// Memory returns the bytes of a region (of any client), or nil.
func (t *Target) Memory(id rdmo.RegionID) []byte {
	t.mem.mu.Lock()
	defer t.mem.mu.Unlock()
	if r := t.mem.regions[id]; r != nil {
		return r.data
	}
	return nil
}

// Register adds handlers whose WriteBack hooks WriteBackAll calls and whose
// RegionRemoved and ClientRemoved hooks RemoveRegion and RemoveClient call.
// The set is shared with every Peer.
func (t *Target) Register(hs ...rdmo.Handler) {
	t.mem.mu.Lock()
	t.mem.handlers = append(t.mem.handlers, hs...)
	t.mem.mu.Unlock()
}

func (t *Target) handlers() []rdmo.Handler {
	t.mem.mu.Lock()
	defer t.mem.mu.Unlock()
	return append([]rdmo.Handler(nil), t.mem.handlers...)
}

// RemoveRegion deregisters a region of this client as the worker does on
// MR_DEREG: it calls RegionRemoved of every registered handler (which may
// still write to it), completes the writes, then drops the region. Errors of
// the hooks are returned joined; the region is removed regardless.
func (t *Target) RemoveRegion(id rdmo.RegionID) error {
	if _, err := t.Region(id); err != nil {
		return err
	}
	var errs []error
	for _, h := range t.handlers() {
		if err := h.RegionRemoved(t, id); err != nil {
			errs = append(errs, err)
		}
	}
	t.applyPending()
	t.mem.mu.Lock()
	delete(t.mem.regions, id)
	t.mem.mu.Unlock()
	return errors.Join(errs...)
}

// RemoveClient calls ClientRemoved of every registered handler and forgets
// this client's pending rendezvous payloads and deferred writes.
func (t *Target) RemoveClient() {
	for _, h := range t.handlers() {
		h.ClientRemoved(t.client)
	}
	t.mu.Lock()
	t.pending = t.pending[:0]
	clear(t.rv)
	t.mu.Unlock()
}

// ClientID implements rdmo.Target.
func (t *Target) ClientID() rdmo.ClientID { return t.client }

// Region implements rdmo.Target.
func (t *Target) Region(id rdmo.RegionID) (rdmo.Region, error) {
	t.mem.mu.Lock()
	r, err := t.lookup(id)
	t.mem.mu.Unlock()
	if err != nil {
		return rdmo.Region{}, err
	}
	return rdmo.Region{ID: r.id, Base: r.base, Len: uint64(len(r.data)), Local: t.LocalRegions && !t.DeferPuts}, nil
}

// lookup resolves a region for this client; t.mem.mu is held.
func (t *Target) lookup(id rdmo.RegionID) (*region, error) {
	r := t.mem.regions[id]
	if r == nil {
		return nil, &rdmo.WireError{Status: rdmo.StatusUnknownRegion, Detail: fmt.Sprintf("region %#x", id)}
	}
	if r.owner != t.client {
		return nil, &rdmo.WireError{Status: rdmo.StatusRegionNotOwned,
			Detail: fmt.Sprintf("region %#x belongs to client %d, not %d", id, r.owner, t.client)}
	}
	return r, nil
}

// resolve returns the region and the offset of [addr, addr+n) in it, or the
// error the worker gives; t.mem.mu is held.
func (t *Target) resolve(id rdmo.RegionID, addr, n uint64) (*region, uint64, error) {
	r, err := t.lookup(id)
	if err != nil {
		return nil, 0, err
	}
	reg := rdmo.Region{ID: r.id, Base: r.base, Len: uint64(len(r.data))}
	if err := reg.CheckRange(addr, n); err != nil {
		return nil, 0, err
	}
	return r, addr - r.base, nil
}

// Put implements rdmo.Target.
func (t *Target) Put(region rdmo.RegionID, addr uint64, data []byte) error {
	if err := t.Faults.Put; err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mem.mu.Lock()
	r, off, err := t.resolve(region, addr, uint64(len(data)))
	if err == nil && !t.DeferPuts {
		copy(r.data[off:], data)
	}
	t.mem.mu.Unlock()
	if err != nil {
		return err
	}
	if t.DeferPuts {
		t.pending = append(t.pending, pendingWrite{reg: r, off: off, data: data})
	}
	t.stats.Puts++
	t.stats.PutBytes += uint64(len(data))
	t.record(AccessPut, region, addr, uint64(len(data)))
	return nil
}

func (t *Target) record(k AccessKind, region rdmo.RegionID, addr, n uint64) {
	if t.Record {
		t.log = append(t.log, Access{Kind: k, Region: region, Addr: addr, Len: n})
	}
}

// Sync implements rdmo.Target: the ops run at once, in order.
func (t *Target) Sync(ops []rdmo.RemoteOp) error {
	if err := t.Faults.Sync; err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stats.Syncs++
	t.stats.SyncOps += uint64(len(ops))
	t.mem.mu.Lock()
	defer t.mem.mu.Unlock()
	for i := range ops {
		op := &ops[i]
		op.Result, op.Status = 0, rdmo.StatusOK
		n := uint64(8)
		kind := AccessGet
		switch op.Kind {
		case rdmo.RemoteGet:
			n = uint64(len(op.Buf))
		case rdmo.RemoteFetchAdd:
			kind = AccessFetchAdd
		case rdmo.RemoteCompareSwap:
			kind = AccessCompareSwap
		case rdmo.RemoteSwap:
			kind = AccessSwap
		default:
			op.Status = rdmo.StatusInternal
			continue
		}
		r, off, err := t.resolve(op.Region, op.Addr, n)
		if err != nil {
			op.Status = rdmo.StatusOf(err)
			continue
		}
		if op.Kind != rdmo.RemoteGet && op.Addr%8 != 0 {
			// The catalogue has no code for a misaligned atomic; the address
			// is not one the operation can use, so it is out of bounds.
			op.Status = rdmo.StatusOutOfBounds
			continue
		}
		w := r.data[off : off+n]
		switch op.Kind {
		case rdmo.RemoteGet:
			copy(op.Buf, w)
		case rdmo.RemoteFetchAdd:
			op.Result = le.Uint64(w)
			le.PutUint64(w, op.Result+op.Operand)
		case rdmo.RemoteCompareSwap:
			op.Result = le.Uint64(w)
			if op.Result == op.Compare {
				le.PutUint64(w, op.Operand)
			}
		case rdmo.RemoteSwap:
			op.Result = le.Uint64(w)
			le.PutUint64(w, op.Operand)
		}
		t.record(kind, op.Region, op.Addr, n)
	}
	return nil
}

// Buffer implements rdmo.Target. The bytes are filled with PoisonByte and
// stay valid until EndBatch, which poisons them again.
func (t *Target) Buffer(n int) []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stats.Buffers++
	t.stats.BufferBytes += uint64(n)
	return t.arena.alloc(n)
}

// SetRendezvousPayload makes data the rendezvous payload of the request with
// sequence number seq, for Place and Fetch. The data is copied.
func (t *Target) SetRendezvousPayload(seq uint64, data []byte) {
	t.mu.Lock()
	t.rv[seq] = &rendezvous{data: append([]byte(nil), data...)}
	t.mu.Unlock()
}

// takeRendezvous returns req's rendezvous payload and marks it consumed: like
// a UCX rendezvous receive, it can be moved once. t.mu is held.
func (t *Target) takeRendezvous(req *rdmo.Request) ([]byte, error) {
	if !req.Rendezvous {
		return nil, &rdmo.WireError{Status: rdmo.StatusInternal, Detail: fmt.Sprintf("request %d is not rendezvous", req.Seq)}
	}
	rv := t.rv[req.Seq]
	switch {
	case rv == nil:
		return nil, &rdmo.WireError{Status: rdmo.StatusInternal, Detail: fmt.Sprintf("no rendezvous payload for request %d", req.Seq)}
	case rv.consumed:
		return nil, &rdmo.WireError{Status: rdmo.StatusInternal, Detail: fmt.Sprintf("rendezvous payload of request %d already moved", req.Seq)}
	case uint64(len(rv.data)) != req.Length:
		return nil, &rdmo.WireError{Status: rdmo.StatusInternal,
			Detail: fmt.Sprintf("request %d: Length %d but rendezvous payload has %d bytes", req.Seq, req.Length, len(rv.data))}
	}
	rv.consumed = true
	return rv.data, nil
}

// Place implements rdmo.Target.
func (t *Target) Place(req *rdmo.Request, region rdmo.RegionID, addr uint64) error {
	if err := t.Faults.Place; err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mem.mu.Lock()
	r, off, err := t.resolve(region, addr, req.Length)
	t.mem.mu.Unlock()
	if err != nil {
		return err
	}
	data, err := t.takeRendezvous(req)
	if err != nil {
		return err
	}
	if t.DeferPuts {
		t.pending = append(t.pending, pendingWrite{reg: r, off: off, data: data})
	} else {
		t.mem.mu.Lock()
		copy(r.data[off:], data)
		t.mem.mu.Unlock()
	}
	t.stats.Places++
	t.stats.PlaceBytes += req.Length
	t.record(AccessPlace, region, addr, req.Length)
	return nil
}

// Fetch implements rdmo.Target. The payload is copied into Buffer memory.
func (t *Target) Fetch(req *rdmo.Request) ([]byte, error) {
	if err := t.Faults.Fetch; err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if req.Length > t.FetchLimit {
		return nil, &rdmo.WireError{Status: rdmo.StatusRendezvousRefused,
			Detail: fmt.Sprintf("rendezvous payload of %d bytes is over the fetch limit of %d", req.Length, t.FetchLimit)}
	}
	data, err := t.takeRendezvous(req)
	if err != nil {
		return nil, err
	}
	buf := t.arena.alloc(len(data))
	copy(buf, data)
	t.stats.Fetches++
	t.stats.FetchBytes += uint64(len(data))
	return buf, nil
}

// Flush implements rdmo.Target: deferred writes become visible.
func (t *Target) Flush() error {
	t.mu.Lock()
	t.stats.Flushes++
	t.mu.Unlock()
	if err := t.Faults.Flush; err != nil {
		return err
	}
	t.applyPending()
	return nil
}

// WriteBackAll implements rdmo.Target: it calls WriteBack of every
// registered handler and returns their errors joined.
func (t *Target) WriteBackAll() error {
	t.mu.Lock()
	t.stats.WriteBacks++
	t.mu.Unlock()
	var errs []error
	for _, h := range t.handlers() {
		if err := h.WriteBack(t); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (t *Target) applyPending() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mem.mu.Lock()
	for i, w := range t.pending {
		copy(w.reg.data[w.off:], w.data)
		t.pending[i] = pendingWrite{}
	}
	t.mem.mu.Unlock()
	t.pending = t.pending[:0]
}

// EndBatch completes the current batch as the worker does once HandleBatch
// has returned: deferred writes are applied, then every Buffer (and Fetch)
// slice handed out is poisoned and recycled.
func (t *Target) EndBatch() {
	t.applyPending()
	t.mu.Lock()
	t.arena.reset()
	t.mu.Unlock()
}

// RunBatch runs reqs through h as one batch, ends the batch and returns the
// results. Result data is copied before the batch ends, as the worker
// copies it into the ack when the request completes (it may point into
// Buffer memory, which EndBatch poisons).
func (t *Target) RunBatch(h rdmo.Handler, reqs ...rdmo.Request) []rdmo.Result {
	results := make([]rdmo.Result, len(reqs))
	h.HandleBatch(t, reqs, results)
	for i := range results {
		if results[i].Data != nil {
			results[i].Data = append([]byte(nil), results[i].Data...)
		}
	}
	t.EndBatch()
	return results
}

// Stats returns the counters.
func (t *Target) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// ResetStats zeroes the counters and the access log.
func (t *Target) ResetStats() {
	t.mu.Lock()
	t.stats = Stats{}
	t.log = t.log[:0]
	t.mu.Unlock()
}

// Accesses returns a copy of the access log (see Record).
func (t *Target) Accesses() []Access {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Access(nil), t.log...)
}

// CheckGuards reports the first guard byte that changed around any region
// of the address space.
func (t *Target) CheckGuards() error {
	t.mem.mu.Lock()
	defer t.mem.mu.Unlock()
	ids := make([]rdmo.RegionID, 0, len(t.mem.regions))
	for id := range t.mem.regions {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		r := t.mem.regions[id]
		size := len(r.data)
		for i := 0; i < GuardLen; i++ {
			if r.raw[i] != GuardByte {
				return fmt.Errorf("rdmotest: region %#x: guard byte %d before the region is %#02x", id, GuardLen-i, r.raw[i])
			}
			if b := r.raw[GuardLen+size+i]; b != GuardByte {
				return fmt.Errorf("rdmotest: region %#x: guard byte %d after the region is %#02x", id, i, b)
			}
		}
	}
	return nil
}

// arena hands out scratch that lives until reset. Blocks are reused, so a
// steady workload allocates nothing.
type arena struct {
	blocks [][]byte
	used   []int
	cur    int
}

const arenaBlock = 64 << 10

func (a *arena) alloc(n int) []byte {
	if n < 0 {
		panic("rdmotest: negative Buffer size")
	}
	for ; a.cur < len(a.blocks); a.cur++ {
		if b, u := a.blocks[a.cur], a.used[a.cur]; len(b)-u >= n {
			a.used[a.cur] = u + n
			return b[u : u+n : u+n]
		}
	}
	size := max(n, arenaBlock)
	b := make([]byte, size)
	fill(b, PoisonByte)
	a.blocks = append(a.blocks, b)
	a.used = append(a.used, n)
	a.cur = len(a.blocks) - 1
	return b[:n:n]
}

func (a *arena) reset() {
	for i, b := range a.blocks {
		fill(b[:a.used[i]], PoisonByte)
		a.used[i] = 0
	}
	a.cur = 0
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

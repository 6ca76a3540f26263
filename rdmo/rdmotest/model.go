package rdmotest

import (
	"bytes"
	"fmt"
	"sort"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// Model is a reference copy of target memory: the plain, obviously correct
// semantics a test compares a handler's effects against. It applies the
// same region rules as Target (ownership, bounds, wrap-around) for one
// client, without caching, coalescing or deferral.
type Model struct {
	client  rdmo.ClientID
	regions map[rdmo.RegionID]*modelRegion
}

type modelRegion struct {
	owner rdmo.ClientID
	base  uint64
	data  []byte
}

// NewModel snapshots every region of t's address space, seen as t's client.
func NewModel(t *Target) *Model {
	m := &Model{client: t.client, regions: make(map[rdmo.RegionID]*modelRegion)}
	t.mem.mu.Lock()
	defer t.mem.mu.Unlock()
	for id, r := range t.mem.regions {
		m.regions[id] = &modelRegion{owner: r.owner, base: r.base, data: append([]byte(nil), r.data...)}
	}
	return m
}

// Clone returns an independent copy.
func (m *Model) Clone() *Model {
	c := &Model{client: m.client, regions: make(map[rdmo.RegionID]*modelRegion, len(m.regions))}
	for id, r := range m.regions {
		c.regions[id] = &modelRegion{owner: r.owner, base: r.base, data: append([]byte(nil), r.data...)}
	}
	return c
}

// Region resolves a region with the rules of rdmo.Target.Region.
func (m *Model) Region(id rdmo.RegionID) (rdmo.Region, error) {
	r := m.regions[id]
	if r == nil {
		return rdmo.Region{}, rdmo.ErrUnknownRegion
	}
	if r.owner != m.client {
		return rdmo.Region{}, rdmo.ErrRegionNotOwned
	}
	return rdmo.Region{ID: id, Base: r.base, Len: uint64(len(r.data))}, nil
}

// Check returns the error an access to [addr, addr+n) of region id gets.
func (m *Model) Check(id rdmo.RegionID, addr, n uint64) error {
	reg, err := m.Region(id)
	if err != nil {
		return err
	}
	return reg.CheckRange(addr, n)
}

// Write stores data at addr in region id, or returns the access's error and
// changes nothing.
func (m *Model) Write(id rdmo.RegionID, addr uint64, data []byte) error {
	if err := m.Check(id, addr, uint64(len(data))); err != nil {
		return err
	}
	r := m.regions[id]
	copy(r.data[addr-r.base:], data)
	return nil
}

// Read returns a copy of n bytes at addr in region id, or nil if the access
// is refused.
func (m *Model) Read(id rdmo.RegionID, addr uint64, n int) []byte {
	if n < 0 || m.Check(id, addr, uint64(n)) != nil {
		return nil
	}
	r := m.regions[id]
	off := addr - r.base
	return append([]byte(nil), r.data[off:off+uint64(n)]...)
}

// Uint64 reads a little-endian u64; it panics if the access is refused.
func (m *Model) Uint64(id rdmo.RegionID, addr uint64) uint64 {
	b := m.Read(id, addr, 8)
	if b == nil {
		panic(fmt.Sprintf("rdmotest: model: u64 at %#x in region %#x is not accessible", addr, id))
	}
	return le.Uint64(b)
}

// PutUint64 writes a little-endian u64; it panics if the access is refused.
func (m *Model) PutUint64(id rdmo.RegionID, addr, v uint64) {
	var b [8]byte
	le.PutUint64(b[:], v)
	if err := m.Write(id, addr, b[:]); err != nil {
		panic(fmt.Sprintf("rdmotest: model: %v", err))
	}
}

// Scatter applies a SCATTER request with its (eager or fetched) payload the
// way a handler must, after the worker's checks of the header: the payload
// is checked against req.Scatter.Count and every iov resolved and
// bounds-checked before anything is written, so a failing request writes
// nothing. It returns the request's status.
func (m *Model) Scatter(req rdmo.Request, payload []byte) rdmo.Status {
	count := req.Scatter.Count
	if err := wire.ForEachIOV(payload, count, func(wire.IOV, []byte) error { return nil }); err != nil {
		return rdmo.StatusOf(err)
	}
	if err := wire.ForEachIOV(payload, count, func(v wire.IOV, _ []byte) error {
		return m.Check(v.Rkey, v.Addr, uint64(v.Len))
	}); err != nil {
		return rdmo.StatusOf(err)
	}
	_ = wire.ForEachIOV(payload, count, func(v wire.IOV, d []byte) error {
		return m.Write(v.Rkey, v.Addr, d)
	})
	return rdmo.StatusOK
}

// Diff compares the model with t's memory and describes the first
// difference (region set, then the first differing byte of each region, in
// region id order), or returns nil. It also checks t's guard zones.
func (m *Model) Diff(t *Target) error {
	if err := t.CheckGuards(); err != nil {
		return err
	}
	t.mem.mu.Lock()
	defer t.mem.mu.Unlock()
	ids := make([]rdmo.RegionID, 0, len(m.regions))
	for id := range m.regions {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	if len(ids) != len(t.mem.regions) {
		return fmt.Errorf("rdmotest: model has %d regions, target %d", len(ids), len(t.mem.regions))
	}
	for _, id := range ids {
		mr, tr := m.regions[id], t.mem.regions[id]
		if tr == nil {
			return fmt.Errorf("rdmotest: region %#x is in the model but not the target", id)
		}
		if len(mr.data) != len(tr.data) || mr.base != tr.base {
			return fmt.Errorf("rdmotest: region %#x differs in shape", id)
		}
		if bytes.Equal(mr.data, tr.data) {
			continue
		}
		for i := range mr.data {
			if mr.data[i] != tr.data[i] {
				j := i
				for j < len(mr.data) && mr.data[j] != tr.data[j] {
					j++
				}
				return fmt.Errorf("rdmotest: region %#x differs at %#x (offset %d, %d bytes): target % x, model % x",
					id, tr.base+uint64(i), i, j-i, clip(tr.data[i:j]), clip(mr.data[i:j]))
			}
		}
	}
	return nil
}

func clip(b []byte) []byte {
	if len(b) > 16 {
		return b[:16]
	}
	return b
}

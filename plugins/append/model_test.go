package append_test

import (
	"math"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
)

// appendModel is the plain semantics of APPEND over a rdmotest.Model: no
// coalescing, no batching tricks, one request after the other. Owned mode
// caches a tail at first use and writes it to the model's memory at fence;
// Shared mode reserves each batch's bytes per queue up front, like the
// fetch-add, and leaves failed requests' bytes unwritten.
type appendModel struct {
	m      *rdmotest.Model
	client rdmo.ClientID
	shared bool
	tails  map[qkey]uint64          // owned: cached tails
	used   map[qkey][]rdmo.RegionID // data regions each queue was used with
}

type qkey struct {
	rkey rdmo.RegionID
	addr uint64
}

func newAppendModel(m *rdmotest.Model, client rdmo.ClientID, shared bool) *appendModel {
	return &appendModel{m: m, client: client, shared: shared, tails: make(map[qkey]uint64), used: make(map[qkey][]rdmo.RegionID)}
}

// check validates one request as the handler must, before any tail is
// known (the worker has checked its header and client).
func (am *appendModel) check(req rdmo.Request, n uint64) (rdmo.AppendHeader, rdmo.Region, rdmo.Status) {
	a := req.Append
	if n == 0 {
		return a, rdmo.Region{}, rdmo.StatusEmptyAppend
	}
	if err := am.m.Check(a.PtrRkey, a.PtrAddr, 8); err != nil {
		return a, rdmo.Region{}, rdmo.StatusOf(err)
	}
	if a.PtrAddr%8 != 0 {
		return a, rdmo.Region{}, rdmo.StatusOutOfBounds
	}
	d, err := am.m.Region(a.DataRkey)
	if err != nil {
		return a, d, rdmo.StatusOf(err)
	}
	if n > d.Len {
		return a, d, rdmo.StatusQueueOverflow
	}
	return a, d, rdmo.StatusOK
}

// fits is the placement rule: inside the data region, clear of the tail word.
func fits(addr, n uint64, d rdmo.Region, ptrAddr uint64) rdmo.Status {
	switch {
	case addr < d.Base:
		return rdmo.StatusOutOfBounds
	case n > math.MaxUint64-addr || addr+n > d.Base+d.Len:
		return rdmo.StatusQueueOverflow
	case addr < ptrAddr+8 && ptrAddr < addr+n:
		return rdmo.StatusOutOfBounds
	}
	return rdmo.StatusOK
}

// batch applies one batch; payloads[i] is request i's payload (also for
// rendezvous requests, whose Payload is nil).
func (am *appendModel) batch(reqs []rdmo.Request, payloads [][]byte) []rdmo.Result {
	res := make([]rdmo.Result, len(reqs))
	type pending struct {
		a   rdmo.AppendHeader
		d   rdmo.Region
		off uint64
		ok  bool
	}
	ps := make([]pending, len(reqs))
	totals := map[qkey]uint64{}
	var order []qkey
	for i, r := range reqs {
		a, d, st := am.check(r, uint64(len(payloads[i])))
		if st != rdmo.StatusOK {
			res[i].Status = st
			continue
		}
		k := qkey{a.PtrRkey, a.PtrAddr}
		if !contains(am.used[k], a.DataRkey) {
			am.used[k] = append(am.used[k], a.DataRkey)
		}
		if _, seen := totals[k]; !seen {
			order = append(order, k)
		}
		ps[i] = pending{a: a, d: d, off: totals[k], ok: true}
		totals[k] += uint64(len(payloads[i]))
	}
	if am.shared {
		old := map[qkey]uint64{}
		for _, k := range order {
			old[k] = am.m.Uint64(k.rkey, k.addr)
			am.m.PutUint64(k.rkey, k.addr, old[k]+totals[k])
		}
		for i, p := range ps {
			if !p.ok {
				continue
			}
			addr := old[qkey{p.a.PtrRkey, p.a.PtrAddr}] + p.off
			am.place(i, addr, p.a, p.d, payloads[i], res)
		}
		return res
	}
	for i, p := range ps {
		if !p.ok {
			continue
		}
		k := qkey{p.a.PtrRkey, p.a.PtrAddr}
		tail, ok := am.tails[k]
		if !ok {
			tail = am.m.Uint64(k.rkey, k.addr)
			am.tails[k] = tail
		}
		if am.place(i, tail, p.a, p.d, payloads[i], res) {
			am.tails[k] = tail + uint64(len(payloads[i]))
		}
	}
	return res
}

func (am *appendModel) place(i int, addr uint64, a rdmo.AppendHeader, d rdmo.Region, payload []byte, res []rdmo.Result) bool {
	if st := fits(addr, uint64(len(payload)), d, a.PtrAddr); st != rdmo.StatusOK {
		res[i].Status = st
		return false
	}
	if err := am.m.Write(a.DataRkey, addr, payload); err != nil {
		panic(err) // fits said it fits
	}
	res[i].Value = addr
	return true
}

// fence writes every cached tail back (owned).
func (am *appendModel) fence() {
	for k, v := range am.tails {
		am.m.PutUint64(k.rkey, k.addr, v)
	}
}

// regionRemoved writes back and forgets the queues tied to region.
func (am *appendModel) regionRemoved(region rdmo.RegionID) {
	for k, used := range am.used {
		if k.rkey != region && !contains(used, region) {
			continue
		}
		if v, ok := am.tails[k]; ok {
			am.m.PutUint64(k.rkey, k.addr, v)
		}
		delete(am.tails, k)
		delete(am.used, k)
	}
}

// clientRemoved forgets every cached tail without writing it back.
func (am *appendModel) clientRemoved() {
	clear(am.tails)
	clear(am.used)
}

func contains(s []rdmo.RegionID, v rdmo.RegionID) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

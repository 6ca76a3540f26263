package ops_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/openrdmo/rdmo/plugins/ops"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// The test heap: region own of client 1 at base, and region foreign of
// client 2 at fbase. They are variables so that the same heap, model and
// generator run against a real worker, whose addresses and region ids are
// its own (useLayout).
const (
	client  = 1
	size    = 0x4000
	buckets = 64
	vsize   = 16
)

var (
	own         = rdmo.RegionID(1)
	foreign     = rdmo.RegionID(3)
	unknown     = rdmo.RegionID(9)
	base        uint64
	fbase       uint64 = 0x30000
	counters    uint64 // 32 u64 counters
	graph       uint64 // 256 u64 words of pointers
	head        uint64 // the free list's head
	blocks      uint64 // 32 blocks of 64 bytes
	table       uint64 // kv table: 64 buckets of 8+16 bytes
	withForeign = true
)

func useLayout(b uint64, region rdmo.RegionID, foreignRegion bool) {
	base, own, withForeign = b, region, foreignRegion
	unknown = region + 1000
	if !foreignRegion {
		foreign = region + 2000 // registered by nobody
	} else {
		foreign = 3
	}
	counters, graph, head, blocks, table = b, b+0x100, b+0x900, b+0x1000, b+0x2000
}

func init() { useLayout(0x10000, 1, true) }

// heap builds the target memory: pointers that form chains, cycles, nils,
// misaligned and foreign pointers; a free list; an empty kv table.
func heap(rng *rand.Rand) *rdmotest.Target {
	tg := rdmotest.NewTarget(client)
	tg.DeferPuts = true // Puts land at Flush or batch end, as on a real worker
	mem := tg.AddRegion(own, base, size)
	if withForeign {
		fm := tg.AddRegionFor(2, foreign, fbase, 256)
		for i := range fm {
			fm[i] = byte(i)
		}
	}
	le := func(addr uint64, v uint64) {
		off := addr - base
		for k := 0; k < 8; k++ {
			mem[off+uint64(k)] = byte(v >> (8 * k))
		}
	}
	for i := uint64(0); i < 32; i++ {
		le(counters+8*i, rng.Uint64N(1000))
	}
	for i := uint64(0); i < 256; i++ {
		var p uint64
		switch x := rng.IntN(20); {
		case x == 0:
			p = 0
		case x == 1:
			p = graph + 8*rng.Uint64N(256) + 4 // misaligned
		case x == 2:
			p = fbase + 8*rng.Uint64N(32) // another client's
		case x == 3:
			p = base + size - 4 // straddles the end
		case x == 4:
			p = math.MaxUint64 - 7
		default:
			p = graph + 8*rng.Uint64N(256)
		}
		le(graph+8*i, p)
	}
	le(head, blocks)
	for i := uint64(0); i < 32; i++ {
		next := uint64(0)
		if i < 31 {
			next = blocks + 64*(i+1)
		}
		le(blocks+64*i, next)
	}
	hdr, _ := ops.KVLayout(buckets, vsize)
	copy(mem[table-base:], hdr)
	return tg
}

// model is the plain semantics of the pack over a rdmotest.Model: one
// request after the other, every check before any write.
type model struct{ m *rdmotest.Model }

type outcome struct {
	st    rdmo.Status
	value uint64
	data  []byte
}

func bad(err error) outcome { return outcome{st: rdmo.StatusOf(err)} }

func (md model) run(req *rdmo.Request) outcome {
	m := md.m
	switch req.Op {
	case ops.OpGet:
		r, err := ops.DecodeGet(req)
		if err == nil {
			err = m.Check(r.Region, r.Addr, r.Len)
		}
		if err != nil {
			return bad(err)
		}
		return outcome{value: r.Len, data: m.Read(r.Region, r.Addr, int(r.Len))}
	case ops.OpFetchAdd, ops.OpCompareSwap:
		r, err := ops.DecodeAtomic(req)
		if err == nil {
			err = m.Check(r.Region, r.Addr, 8)
		}
		if err != nil {
			return bad(err)
		}
		old := m.Uint64(r.Region, r.Addr)
		switch {
		case req.Op == ops.OpFetchAdd:
			m.PutUint64(r.Region, r.Addr, old+r.Operand)
		case old == r.Compare:
			m.PutUint64(r.Region, r.Addr, r.Operand)
		}
		return outcome{value: old}
	case ops.OpIndirectRead, ops.OpIndirectWrite:
		r, err := ops.DecodeIndirect(req)
		if err == nil {
			_, err = m.Region(r.Region)
		}
		if err != nil {
			return bad(err)
		}
		p := r.Addr
		for hop := 0; hop < int(r.Depth); hop++ {
			if p%8 != 0 {
				return outcome{st: rdmo.StatusOutOfBounds}
			}
			if err := m.Check(r.Region, p, 8); err != nil {
				return bad(err)
			}
			if p = m.Uint64(r.Region, p); p == 0 {
				return outcome{st: ops.StatusNilPointer}
			}
		}
		if uint64(r.Off) > math.MaxUint64-p {
			return outcome{st: rdmo.StatusOutOfBounds}
		}
		at := p + uint64(r.Off)
		if req.Op == ops.OpIndirectWrite {
			if err := m.Write(r.Region, at, req.Payload); err != nil {
				return bad(err)
			}
			return outcome{value: at}
		}
		if err := m.Check(r.Region, at, uint64(r.Len)); err != nil {
			return bad(err)
		}
		return outcome{value: at, data: m.Read(r.Region, at, int(r.Len))}
	case ops.OpAlloc:
		r, err := ops.DecodeAlloc(req)
		if err == nil {
			err = m.Check(r.Region, r.Head, 8)
		}
		if err != nil {
			return bad(err)
		}
		top := m.Uint64(r.Region, r.Head)
		switch {
		case top == 0:
			return outcome{st: ops.StatusExhausted}
		case top%8 != 0:
			return outcome{st: rdmo.StatusOutOfBounds}
		}
		if err := m.Check(r.Region, top, 8); err != nil {
			return bad(err)
		}
		m.PutUint64(r.Region, r.Head, m.Uint64(r.Region, top))
		return outcome{value: top}
	case ops.OpKVLookup, ops.OpKVInsert:
		return md.kv(req)
	}
	return outcome{st: rdmo.StatusUnknownOp}
}

func (md model) kv(req *rdmo.Request) outcome {
	m := md.m
	r, err := ops.DecodeKV(req)
	if err == nil {
		err = m.Check(r.Region, r.Table, ops.KVHeaderLen)
	}
	if err != nil {
		return bad(err)
	}
	magic, n, vs := m.Uint64(r.Region, r.Table), m.Uint64(r.Region, r.Table+8), m.Uint64(r.Region, r.Table+16)
	if magic != ops.KVMagic || n == 0 || n > ops.KVMaxBuckets || n&(n-1) != 0 || vs == 0 || vs%8 != 0 || vs > rdmo.MaxResultData {
		return outcome{st: ops.StatusBadTable}
	}
	if err := m.Check(r.Region, r.Table, ops.KVHeaderLen+n*(8+vs)); err != nil {
		return bad(err)
	}
	insert := req.Op == ops.OpKVInsert
	if insert && uint64(len(req.Payload)) != vs {
		return outcome{st: rdmo.StatusPayloadMismatch}
	}
	bucket := func(i uint64) uint64 { return r.Table + ops.KVHeaderLen + i*(8+vs) }
	home := ops.KVHome(r.Key, n)
	for i := uint64(0); i < ops.KVProbes(n); i++ {
		b := bucket((home + i) % n)
		k := m.Uint64(r.Region, b)
		switch {
		case k == r.Key && insert:
			m.Write(r.Region, b+8, req.Payload)
			return outcome{value: 1}
		case k == r.Key:
			return outcome{value: b, data: m.Read(r.Region, b+8, int(vs))}
		case k == 0 && insert:
			m.Write(r.Region, b+8, req.Payload)
			m.PutUint64(r.Region, b, r.Key)
			return outcome{}
		case k == 0:
			return outcome{st: ops.StatusNotFound}
		}
	}
	if insert {
		return outcome{st: ops.StatusTableFull}
	}
	return outcome{st: ops.StatusNotFound}
}

// gen makes one random request for the handler h (mostly valid, some not).
type gen struct {
	rng *rand.Rand
	tg  *rdmotest.Target
}

func (g gen) region() rdmo.RegionID {
	switch g.rng.IntN(30) {
	case 0:
		return unknown
	case 1:
		return foreign
	}
	return own
}

func (g gen) addr(lo uint64, words uint64) uint64 {
	switch g.rng.IntN(30) {
	case 0:
		return lo + 8*g.rng.Uint64N(words) + 1 // misaligned
	case 1:
		return base + size - 4
	case 2:
		return math.MaxUint64 - 3
	}
	return lo + 8*g.rng.Uint64N(words)
}

func (g gen) req(op uint32, sub, payload []byte) rdmo.Request {
	if g.rng.IntN(40) == 0 && len(sub) > 0 {
		sub = sub[:len(sub)-1-g.rng.IntN(len(sub))] // a short sub-header
	}
	if g.rng.IntN(60) == 0 && op != ops.OpIndirectWrite && op != ops.OpKVInsert {
		payload = []byte("unexpected")
	}
	hdr, err := wire.AppendUserRequest(nil, wire.Header{ClientID: client, Op: op}, sub)
	if err != nil {
		panic(err)
	}
	return g.tg.Req(hdr, payload)
}

func (g gen) make(name string) rdmo.Request {
	rng := g.rng
	switch name {
	case ops.NameGet:
		r := ops.GetReq{Region: g.region(), Addr: g.addr(counters, 32+256), Len: rng.Uint64N(rdmo.MaxResultData + 1)}
		if rng.IntN(30) == 0 {
			r.Len = rdmo.MaxResultData + 1 + rng.Uint64N(100)
		}
		return g.req(ops.OpGet, r.Sub(), nil)
	case ops.NameFetchAdd:
		r := ops.AtomicReq{Region: g.region(), Addr: g.addr(counters, 8), Operand: rng.Uint64N(10)}
		return g.req(ops.OpFetchAdd, r.FetchAddSub(), nil)
	case ops.NameCompareSwap:
		r := ops.AtomicReq{Region: g.region(), Addr: g.addr(counters, 8), Compare: rng.Uint64N(1000), Operand: rng.Uint64N(1000)}
		if off := r.Addr - base; rng.IntN(2) == 0 && r.Addr >= base && off+8 <= size { // often the right guess
			mem := g.tg.Memory(own)
			r.Compare = uint64(mem[off]) | uint64(mem[off+1])<<8 | uint64(mem[off+2])<<16 | uint64(mem[off+3])<<24 |
				uint64(mem[off+4])<<32 | uint64(mem[off+5])<<40 | uint64(mem[off+6])<<48 | uint64(mem[off+7])<<56
		}
		return g.req(ops.OpCompareSwap, r.CompareSwapSub(), nil)
	case ops.NameIndirect:
		r := ops.IndirectReq{Region: g.region(), Addr: g.addr(graph, 256), Depth: uint16(rng.IntN(6)), Off: uint32(rng.IntN(16))}
		if rng.IntN(20) == 0 {
			r.Depth = uint16(ops.MaxDepth - 2 + rng.IntN(4))
		}
		if rng.IntN(3) == 0 {
			p := make([]byte, 1+rng.IntN(24))
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			if rng.IntN(30) == 0 {
				r.Len = 1
			}
			return g.req(ops.OpIndirectWrite, r.Sub(), p)
		}
		r.Len = uint16(rng.IntN(40))
		return g.req(ops.OpIndirectRead, r.Sub(), nil)
	case ops.NameAlloc:
		r := ops.AllocReq{Region: g.region(), Head: head}
		if rng.IntN(20) == 0 {
			r.Head = g.addr(counters, 8)
		}
		return g.req(ops.OpAlloc, r.Sub(), nil)
	default:
		r := ops.KVReq{Region: g.region(), Table: table, Key: 1 + rng.Uint64N(80)}
		switch rng.IntN(30) {
		case 0:
			r.Key = 0
		case 1:
			r.Table = counters // no table there
		}
		if rng.IntN(2) == 0 {
			v := make([]byte, vsize)
			for i := range v {
				v[i] = byte(rng.Uint32())
			}
			if rng.IntN(30) == 0 {
				v = v[:vsize-8]
			}
			return g.req(ops.OpKVInsert, r.Sub(), v)
		}
		return g.req(ops.OpKVLookup, r.Sub(), nil)
	}
}

// TestModel runs random batches of every op through the handlers and the
// model, and compares every result and, after every batch, all of memory.
func TestModel(t *testing.T) {
	names := []string{ops.NameGet, ops.NameFetchAdd, ops.NameCompareSwap, ops.NameIndirect, ops.NameAlloc, ops.NameKV}
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 14))
			tg := heap(rng)
			md := model{rdmotest.NewModel(tg)}
			handlers := map[string]rdmo.Handler{}
			for _, n := range names {
				handlers[n] = ops.ByName(n)
			}
			g := gen{rng: rng, tg: tg}
			statuses := map[rdmo.Status]int{}
			for batch := 0; batch < 150; batch++ {
				name := names[rng.IntN(len(names))]
				reqs := make([]rdmo.Request, 1+rng.IntN(8))
				for i := range reqs {
					reqs[i] = g.make(name)
				}
				results := tg.RunBatch(handlers[name], reqs...)
				for i := range reqs {
					want := md.run(&reqs[i])
					got := results[i]
					statuses[got.Status]++
					if got.Status != want.st || got.Value != want.value || !bytes.Equal(got.Data, want.data) {
						t.Fatalf("batch %d (%s) request %d (op %d, sub %x): got %s value %#x data %x (%s); model %s value %#x data %x",
							batch, name, i, reqs[i].Op, reqs[i].Sub, got.Status.Name(), got.Value, got.Data, got.Detail,
							want.st.Name(), want.value, want.data)
					}
					if len(got.Data) > rdmo.MaxResultData {
						t.Fatalf("result of %d bytes", len(got.Data))
					}
				}
				if err := md.m.Diff(tg); err != nil {
					t.Fatalf("after batch %d (%s): %v", batch, name, err)
				}
			}
			t.Logf("statuses: %v", statuses)
			// The run must have met the interesting cases, or it tests little.
			for _, st := range []rdmo.Status{rdmo.StatusOK, rdmo.StatusOutOfBounds, rdmo.StatusUnknownRegion,
				rdmo.StatusRegionNotOwned, ops.StatusNotFound} {
				if statuses[st] == 0 && seed == 1 {
					t.Errorf("no request ended %s", st.Name())
				}
			}
		})
	}
}

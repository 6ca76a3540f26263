package ops_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/openrdmo/rdmo/plugins/ops"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// Bad input: every row fails with its status and leaves memory as it was.
func TestBadInput(t *testing.T) {
	cycle := func(mem []byte) { // graph[0] -> graph[1] -> graph[0]
		put(mem, graph, graph+8)
		put(mem, graph+8, graph)
	}
	fullTable := func(mem []byte) {
		hdr, _ := ops.KVLayout(4, vsize)
		copy(mem[table-base:], hdr)
		for i := uint64(0); i < 4; i++ {
			put(mem, table+ops.KVHeaderLen+i*(8+vsize), 100+i)
		}
	}
	rows := []struct {
		name    string
		op      uint32
		sub     []byte
		payload []byte
		prep    func(mem []byte)
		want    rdmo.Status
	}{
		{"get out of region", ops.OpGet, ops.GetReq{Region: own, Addr: base + size - 8, Len: 16}.Sub(), nil, nil, rdmo.StatusOutOfBounds},
		{"get wraps", ops.OpGet, ops.GetReq{Region: own, Addr: ^uint64(0) - 3, Len: 8}.Sub(), nil, nil, rdmo.StatusOutOfBounds},
		{"get too long", ops.OpGet, ops.GetReq{Region: own, Addr: base, Len: rdmo.MaxResultData + 1}.Sub(), nil, nil, rdmo.StatusLengthOverflow},
		{"get foreign", ops.OpGet, ops.GetReq{Region: foreign, Addr: fbase, Len: 8}.Sub(), nil, nil, rdmo.StatusRegionNotOwned},
		{"get unknown region", ops.OpGet, ops.GetReq{Region: unknown, Addr: base, Len: 8}.Sub(), nil, nil, rdmo.StatusUnknownRegion},
		{"get short sub", ops.OpGet, ops.GetReq{Region: own, Addr: base, Len: 8}.Sub()[:16], nil, nil, rdmo.StatusShortHeader},
		{"get long sub", ops.OpGet, append(ops.GetReq{Region: own, Addr: base, Len: 8}.Sub(), 0), nil, nil, rdmo.StatusHeaderTooLong},
		{"get with payload", ops.OpGet, ops.GetReq{Region: own, Addr: base, Len: 8}.Sub(), []byte("x"), nil, rdmo.StatusPayloadMismatch},
		{"fetch-add misaligned", ops.OpFetchAdd, ops.AtomicReq{Region: own, Addr: base + 4, Operand: 1}.FetchAddSub(), nil, nil, rdmo.StatusOutOfBounds},
		{"fetch-add out of region", ops.OpFetchAdd, ops.AtomicReq{Region: own, Addr: base + size, Operand: 1}.FetchAddSub(), nil, nil, rdmo.StatusOutOfBounds},
		{"compare-swap misaligned", ops.OpCompareSwap, ops.AtomicReq{Region: own, Addr: base + 1}.CompareSwapSub(), nil, nil, rdmo.StatusOutOfBounds},
		{"compare-swap foreign", ops.OpCompareSwap, ops.AtomicReq{Region: foreign, Addr: fbase}.CompareSwapSub(), nil, nil, rdmo.StatusRegionNotOwned},
		{"indirect too deep", ops.OpIndirectRead, ops.IndirectReq{Region: own, Addr: graph, Depth: ops.MaxDepth + 1}.Sub(), nil, nil, rdmo.StatusLengthOverflow},
		{"indirect cycle ends at depth", ops.OpIndirectRead, ops.IndirectReq{Region: own, Addr: graph, Depth: ops.MaxDepth, Len: 8}.Sub(), nil, cycle, rdmo.StatusOK},
		{"indirect nil", ops.OpIndirectRead, ops.IndirectReq{Region: own, Addr: graph, Depth: 2, Len: 8}.Sub(), nil,
			func(mem []byte) { put(mem, graph, graph+8); put(mem, graph+8, 0) }, ops.StatusNilPointer},
		{"indirect misaligned hop", ops.OpIndirectRead, ops.IndirectReq{Region: own, Addr: graph, Depth: 2, Len: 8}.Sub(), nil,
			func(mem []byte) { put(mem, graph, graph+12) }, rdmo.StatusOutOfBounds},
		{"indirect hop out of region", ops.OpIndirectRead, ops.IndirectReq{Region: own, Addr: graph, Depth: 2, Len: 8}.Sub(), nil,
			func(mem []byte) { put(mem, graph, fbase) }, rdmo.StatusOutOfBounds},
		{"indirect end out of region", ops.OpIndirectWrite, ops.IndirectReq{Region: own, Addr: graph, Depth: 1}.Sub(), []byte("12345678"),
			func(mem []byte) { put(mem, graph, base+size-4) }, rdmo.StatusOutOfBounds},
		{"indirect end wraps", ops.OpIndirectRead, ops.IndirectReq{Region: own, Addr: graph, Depth: 1, Len: 1, Off: 0xffffffff}.Sub(), nil,
			func(mem []byte) { put(mem, graph, ^uint64(0)-16) }, rdmo.StatusOutOfBounds},
		{"indirect write without payload", ops.OpIndirectWrite, ops.IndirectReq{Region: own, Addr: graph}.Sub(), nil, nil, rdmo.StatusPayloadMismatch},
		{"indirect write too long", ops.OpIndirectWrite, ops.IndirectReq{Region: own, Addr: graph}.Sub(), make([]byte, ops.MaxIndirectWrite+1), nil, rdmo.StatusPayloadMismatch},
		{"indirect read too long", ops.OpIndirectRead, ops.IndirectReq{Region: own, Addr: graph, Len: rdmo.MaxResultData + 1}.Sub(), nil, nil, rdmo.StatusLengthOverflow},
		{"alloc empty", ops.OpAlloc, ops.AllocReq{Region: own, Head: head}.Sub(), nil, func(mem []byte) { put(mem, head, 0) }, ops.StatusExhausted},
		{"alloc corrupt list", ops.OpAlloc, ops.AllocReq{Region: own, Head: head}.Sub(), nil, func(mem []byte) { put(mem, head, fbase) }, rdmo.StatusOutOfBounds},
		{"alloc misaligned block", ops.OpAlloc, ops.AllocReq{Region: own, Head: head}.Sub(), nil, func(mem []byte) { put(mem, head, blocks+3) }, rdmo.StatusOutOfBounds},
		{"alloc misaligned head", ops.OpAlloc, ops.AllocReq{Region: own, Head: head + 4}.Sub(), nil, nil, rdmo.StatusOutOfBounds},
		{"kv key 0", ops.OpKVLookup, ops.KVReq{Region: own, Table: table, Key: 0}.Sub(), nil, nil, ops.StatusBadKey},
		{"kv no table", ops.OpKVLookup, ops.KVReq{Region: own, Table: counters, Key: 1}.Sub(), nil, nil, ops.StatusBadTable},
		{"kv table past region", ops.OpKVLookup, ops.KVReq{Region: own, Table: table, Key: 1}.Sub(), nil,
			func(mem []byte) { hdr, _ := ops.KVLayout(1<<20, vsize); copy(mem[table-base:], hdr) }, rdmo.StatusOutOfBounds},
		{"kv odd bucket count", ops.OpKVLookup, ops.KVReq{Region: own, Table: table, Key: 1}.Sub(), nil,
			func(mem []byte) { hdr, _ := ops.KVLayout(3, vsize); copy(mem[table-base:], hdr) }, ops.StatusBadTable},
		{"kv huge values", ops.OpKVLookup, ops.KVReq{Region: own, Table: table, Key: 1}.Sub(), nil,
			func(mem []byte) { hdr, _ := ops.KVLayout(2, 1<<40); copy(mem[table-base:], hdr) }, ops.StatusBadTable},
		{"kv insert wrong value size", ops.OpKVInsert, ops.KVReq{Region: own, Table: table, Key: 1}.Sub(), make([]byte, vsize+8), nil, rdmo.StatusPayloadMismatch},
		{"kv insert full", ops.OpKVInsert, ops.KVReq{Region: own, Table: table, Key: 1}.Sub(), make([]byte, vsize), fullTable, ops.StatusTableFull},
		{"kv lookup missing", ops.OpKVLookup, ops.KVReq{Region: own, Table: table, Key: 1}.Sub(), nil, nil, ops.StatusNotFound},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			tg := heap(rand.New(rand.NewPCG(1, 2)))
			if row.prep != nil {
				row.prep(tg.Memory(own))
			}
			md := rdmotest.NewModel(tg)
			hdr, err := wire.AppendUserRequest(nil, wire.Header{ClientID: client, Op: row.op}, row.sub)
			if err != nil {
				t.Fatal(err)
			}
			h := handlerFor(row.op)
			res := tg.RunBatch(h, tg.Req(hdr, row.payload))[0]
			if res.Status != row.want {
				t.Fatalf("status %s (%s), want %s", res.Status.Name(), res.Detail, row.want.Name())
			}
			if row.want != rdmo.StatusOK {
				if res.Detail == "" || res.Value != 0 || res.Data != nil {
					t.Errorf("failure result %+v: want a detail, no value, no data", res)
				}
				if err := md.Diff(tg); err != nil {
					t.Errorf("a failed request changed memory: %v", err)
				}
			}
		})
	}
}

func put(mem []byte, addr, v uint64) {
	for k := 0; k < 8; k++ {
		mem[addr-base+uint64(k)] = byte(v >> (8 * k))
	}
}

func handlerFor(op uint32) rdmo.Handler {
	for _, h := range ops.Handlers() {
		for _, o := range h.Info().Ops {
			if o == op {
				return h
			}
		}
	}
	return nil
}

// FuzzHandlers runs one arbitrary request of any op of the pack through
// its handler: no panic, no result over the bound, guards and the other
// client's region intact, a failed request changes nothing, and the
// outcome is the model's.
func FuzzHandlers(f *testing.F) {
	f.Add(uint8(0), ops.GetReq{Region: own, Addr: base, Len: 8}.Sub(), []byte{})
	f.Add(uint8(1), ops.AtomicReq{Region: own, Addr: counters, Operand: 5}.FetchAddSub(), []byte{})
	f.Add(uint8(2), ops.AtomicReq{Region: own, Addr: counters, Compare: 1, Operand: 5}.CompareSwapSub(), []byte{})
	f.Add(uint8(3), ops.IndirectReq{Region: own, Addr: graph, Depth: 3, Len: 8}.Sub(), []byte{})
	f.Add(uint8(4), ops.IndirectReq{Region: own, Addr: graph, Depth: 2}.Sub(), []byte("data"))
	f.Add(uint8(5), ops.AllocReq{Region: own, Head: head}.Sub(), []byte{})
	f.Add(uint8(6), ops.KVReq{Region: own, Table: table, Key: 7}.Sub(), []byte{})
	f.Add(uint8(7), ops.KVReq{Region: own, Table: table, Key: 7}.Sub(), make([]byte, vsize))
	opsList := []uint32{ops.OpGet, ops.OpFetchAdd, ops.OpCompareSwap, ops.OpIndirectRead, ops.OpIndirectWrite, ops.OpAlloc, ops.OpKVLookup, ops.OpKVInsert}
	f.Fuzz(func(t *testing.T, which uint8, sub, payload []byte) {
		if len(sub) > wire.MaxHeaderLen-wire.HeaderLen || len(payload) > 8192 {
			return
		}
		op := opsList[int(which)%len(opsList)]
		tg := heap(rand.New(rand.NewPCG(3, 4)))
		foreignMem := bytes.Clone(tg.Memory(foreign))
		md := model{rdmotest.NewModel(tg)}
		before := rdmotest.NewModel(tg)
		hdr, err := wire.AppendUserRequest(nil, wire.Header{ClientID: client, Op: op}, sub)
		if err != nil {
			return
		}
		req, err := tg.ParseReq(hdr, payload)
		if err != nil {
			return
		}
		res := tg.RunBatch(handlerFor(op), req)[0]
		want := md.run(&req)
		if res.Status != want.st || res.Value != want.value || !bytes.Equal(res.Data, want.data) {
			t.Fatalf("got %s %#x %x (%s), model %s %#x %x", res.Status.Name(), res.Value, res.Data, res.Detail, want.st.Name(), want.value, want.data)
		}
		if len(res.Data) > rdmo.MaxResultData {
			t.Fatalf("result of %d bytes", len(res.Data))
		}
		if !bytes.Equal(tg.Memory(foreign), foreignMem) {
			t.Fatal("the other client's region changed")
		}
		if err := md.m.Diff(tg); err != nil {
			t.Fatal(err)
		}
		if res.Status != rdmo.StatusOK {
			if err := before.Diff(tg); err != nil {
				t.Fatalf("failed request changed memory: %v", err)
			}
		}
	})
}

// FuzzDecoders: the decoders never panic, and what they accept re-encodes
// to the same sub-header.
func FuzzDecoders(f *testing.F) {
	f.Add(uint32(ops.OpGet), ops.GetReq{Region: 1, Addr: 8, Len: 8}.Sub(), uint64(0), false)
	f.Add(uint32(ops.OpIndirectWrite), ops.IndirectReq{Region: 1, Addr: 8, Depth: 2}.Sub(), uint64(4), false)
	f.Add(uint32(ops.OpKVInsert), ops.KVReq{Region: 1, Table: 8, Key: 2}.Sub(), uint64(16), true)
	f.Fuzz(func(t *testing.T, op uint32, sub []byte, length uint64, rv bool) {
		req := rdmo.Request{Op: op, Sub: sub, Length: length, Rendezvous: rv}
		if !rv {
			req.Payload = make([]byte, min(length, 1<<16))
			req.Length = uint64(len(req.Payload))
		}
		if r, err := ops.DecodeGet(&req); err == nil && !bytes.Equal(r.Sub(), sub) {
			t.Fatalf("get %+v re-encodes to %x, not %x", r, r.Sub(), sub)
		}
		if r, err := ops.DecodeAtomic(&req); err == nil {
			enc := r.FetchAddSub()
			if op == ops.OpCompareSwap {
				enc = r.CompareSwapSub()
			}
			if !bytes.Equal(enc, sub) {
				t.Fatalf("atomic %+v re-encodes to %x, not %x", r, enc, sub)
			}
		}
		if r, err := ops.DecodeIndirect(&req); err == nil && !bytes.Equal(r.Sub(), sub) {
			t.Fatalf("indirect %+v re-encodes to %x, not %x", r, r.Sub(), sub)
		}
		if r, err := ops.DecodeAlloc(&req); err == nil && !bytes.Equal(r.Sub(), sub) {
			t.Fatalf("alloc %+v re-encodes to %x, not %x", r, r.Sub(), sub)
		}
		if r, err := ops.DecodeKV(&req); err == nil && !bytes.Equal(r.Sub(), sub) {
			t.Fatalf("kv %+v re-encodes to %x, not %x", r, r.Sub(), sub)
		}
	})
}

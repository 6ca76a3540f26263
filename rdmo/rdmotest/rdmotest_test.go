package rdmotest_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"testing"
	"unsafe"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
)

const (
	client  = 7
	other   = 8
	regA    = 0xA
	regB    = 0xB
	regX    = 0xF0  // another client's
	regTop  = 0x70F // ends at the top of the address space
	baseA   = 0x7f00_0000_0000
	baseB   = 0x7f00_0010_0000
	baseX   = 0x7f00_0020_0000
	sizeA   = 4096
	sizeTop = 4096
	baseTop = math.MaxUint64 - sizeTop // [baseTop, 2^64-1)
)

func setup(t *testing.T) (*rdmotest.Target, []byte) {
	t.Helper()
	tg := rdmotest.NewTarget(client)
	a := tg.AddRegion(regA, baseA, sizeA)
	tg.AddRegion(regB, baseB, 64)
	tg.AddRegionFor(other, regX, baseX, 64)
	tg.AddRegion(regTop, baseTop, sizeTop)
	return tg, a
}

func wantStatus(t *testing.T, err error, want rdmo.Status) {
	t.Helper()
	if got := rdmo.StatusOf(err); err == nil && want != rdmo.StatusOK || got != want && err != nil {
		t.Fatalf("got %v (status %s), want %s", err, got.Name(), want.Name())
	}
}

func TestRegionRules(t *testing.T) {
	tg, _ := setup(t)
	if r, err := tg.Region(regA); err != nil || r != (rdmo.Region{ID: regA, Base: baseA, Len: sizeA}) {
		t.Fatalf("Region(A) = %+v, %v", r, err)
	}
	_, err := tg.Region(0x999)
	wantStatus(t, err, rdmo.StatusUnknownRegion)
	_, err = tg.Region(regX)
	wantStatus(t, err, rdmo.StatusRegionNotOwned)
	// The other client sees it as its own.
	if _, err := tg.Peer(other).Region(regX); err != nil {
		t.Fatal(err)
	}
	if tg.ClientID() != client {
		t.Fatal("ClientID")
	}
}

func TestPutBounds(t *testing.T) {
	tg, a := setup(t)
	data := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	cases := []struct {
		name   string
		region rdmo.RegionID
		addr   uint64
		n      int
		want   rdmo.Status
	}{
		{"first bytes", regA, baseA, 8, rdmo.StatusOK},
		{"last bytes", regA, baseA + sizeA - 8, 8, rdmo.StatusOK},
		{"empty at end", regA, baseA + sizeA, 0, rdmo.StatusOK},
		{"one past end", regA, baseA + sizeA - 7, 8, rdmo.StatusOutOfBounds},
		{"below base", regA, baseA - 1, 8, rdmo.StatusOutOfBounds},
		{"empty past end", regA, baseA + sizeA + 1, 0, rdmo.StatusOutOfBounds},
		{"wraps", regTop, math.MaxUint64 - 3, 8, rdmo.StatusOutOfBounds},
		{"top region last bytes", regTop, baseTop + sizeTop - 8, 8, rdmo.StatusOK},
		{"unknown", 0x999, baseA, 8, rdmo.StatusUnknownRegion},
		{"foreign", regX, baseX, 8, rdmo.StatusRegionNotOwned},
		{"other region's address", regA, baseB, 8, rdmo.StatusOutOfBounds},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := append([]byte(nil), a...)
			m := tg.Stats()
			err := tg.Put(c.region, c.addr, data[:c.n])
			wantStatus(t, err, c.want)
			if c.want != rdmo.StatusOK {
				if !bytes.Equal(before, a) || tg.Stats() != m {
					t.Fatal("a refused Put changed memory or counters")
				}
			}
			if err := tg.CheckGuards(); err != nil {
				t.Fatal(err)
			}
		})
	}
	if !bytes.Equal(a[:8], data) || !bytes.Equal(a[sizeA-8:], data) {
		t.Fatal("Put did not write")
	}
	if s := tg.Stats(); s.Puts != 4 || s.PutBytes != 24 {
		t.Fatalf("stats %+v", s)
	}
}

func TestSync(t *testing.T) {
	tg, a := setup(t)
	binary.LittleEndian.PutUint64(a[8:], 100)
	binary.LittleEndian.PutUint64(a[16:], 5)
	buf := make([]byte, 8)
	ops := []rdmo.RemoteOp{
		{Kind: rdmo.RemoteGet, Region: regA, Addr: baseA + 8, Buf: buf},
		{Kind: rdmo.RemoteFetchAdd, Region: regA, Addr: baseA + 8, Operand: 28},
		{Kind: rdmo.RemoteCompareSwap, Region: regA, Addr: baseA + 16, Compare: 5, Operand: 6},
		{Kind: rdmo.RemoteCompareSwap, Region: regA, Addr: baseA + 16, Compare: 5, Operand: 9},
		{Kind: rdmo.RemoteSwap, Region: regA, Addr: baseA + 24, Operand: 77},
		{Kind: rdmo.RemoteFetchAdd, Region: regA, Addr: baseA + 4, Operand: 1},            // misaligned
		{Kind: rdmo.RemoteFetchAdd, Region: regA, Addr: baseA + sizeA, Operand: 1},        // out of bounds
		{Kind: rdmo.RemoteGet, Region: regX, Addr: baseX, Buf: make([]byte, 8)},           // foreign
		{Kind: rdmo.RemoteGet, Region: 0x999, Addr: baseA, Buf: make([]byte, 8)},          // unknown
		{Kind: rdmo.RemoteFetchAdd, Region: regTop, Addr: math.MaxUint64 - 7, Operand: 1}, // wraps
	}
	if err := tg.Sync(ops); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		res uint64
		st  rdmo.Status
	}{{0, 0}, {100, 0}, {5, 0}, {6, 0}, {0, 0},
		{0, rdmo.StatusOutOfBounds}, {0, rdmo.StatusOutOfBounds}, {0, rdmo.StatusRegionNotOwned},
		{0, rdmo.StatusUnknownRegion}, {0, rdmo.StatusOutOfBounds}}
	for i, w := range want {
		if ops[i].Result != w.res || ops[i].Status != w.st {
			t.Errorf("op %d: result %d status %s, want %d %s", i, ops[i].Result, ops[i].Status.Name(), w.res, w.st.Name())
		}
	}
	if binary.LittleEndian.Uint64(buf) != 100 {
		t.Error("get")
	}
	le := binary.LittleEndian
	if le.Uint64(a[8:]) != 128 || le.Uint64(a[16:]) != 6 || le.Uint64(a[24:]) != 77 || le.Uint64(a[0:]) != 0 {
		t.Errorf("memory after atomics: % x", a[:32])
	}
	if s := tg.Stats(); s.Syncs != 1 || s.SyncOps != uint64(len(ops)) {
		t.Errorf("stats %+v", s)
	}
	// Helpers.
	old, err := rdmo.FetchAdd(tg, regA, baseA+8, 2)
	if err != nil || old != 128 {
		t.Fatal(old, err)
	}
	_, err = rdmo.FetchAdd(tg, regA, baseA+9, 2)
	wantStatus(t, err, rdmo.StatusOutOfBounds)
	tg.Faults.Sync = rdmo.ErrTargetUnreachable
	wantStatus(t, rdmo.Get(tg, regA, baseA, buf), rdmo.StatusTargetUnreachable)
}

func TestBufferLifetime(t *testing.T) {
	tg, _ := setup(t)
	b1 := tg.Buffer(10)
	for _, c := range b1 {
		if c != rdmotest.PoisonByte {
			t.Fatal("fresh buffer not poisoned")
		}
	}
	copy(b1, "0123456789")
	b2 := tg.Buffer(100 << 10) // larger than a block
	if len(b2) != 100<<10 || cap(b1) != 10 {
		t.Fatal("sizes")
	}
	copy(b2, "abc")
	if string(b1) != "0123456789" {
		t.Fatal("buffers overlap")
	}
	tg.EndBatch()
	if b1[0] != rdmotest.PoisonByte || b2[0] != rdmotest.PoisonByte {
		t.Fatal("EndBatch did not poison scratch")
	}
	// Steady state reuses the blocks.
	allocs := testing.AllocsPerRun(100, func() {
		tg.Buffer(4096)
		tg.Buffer(100)
		tg.EndBatch()
	})
	if allocs != 0 {
		t.Fatalf("Buffer allocates %v per batch", allocs)
	}
}

func TestDeferPuts(t *testing.T) {
	tg, a := setup(t)
	tg.DeferPuts = true
	data := []byte("abcdefgh")
	if err := tg.Put(regA, baseA, data); err != nil {
		t.Fatal(err)
	}
	copy(data, "XXXXXXXX") // a handler bug: changed after Put
	if a[0] != 0 {
		t.Fatal("deferred Put applied early")
	}
	tg.EndBatch()
	if string(a[:8]) != "XXXXXXXX" {
		t.Fatalf("deferred Put should read its data late, got %q", a[:8])
	}
	// Out of bounds is still refused at once.
	wantStatus(t, tg.Put(regA, baseA+sizeA, data), rdmo.StatusOutOfBounds)
	if err := tg.Put(regB, baseB, data); err != nil {
		t.Fatal(err)
	}
	if err := tg.Flush(); err != nil {
		t.Fatal(err)
	}
	if string(tg.Memory(regB)[:8]) != "XXXXXXXX" {
		t.Fatal("Flush did not apply deferred writes")
	}
}

func TestRendezvous(t *testing.T) {
	tg, a := setup(t)
	req := tg.Rendezvous(tg.AppendReq(rdmo.AppendHeader{PtrRkey: regA, PtrAddr: baseA, DataRkey: regA}, []byte("hello")))
	if !req.Rendezvous || req.Payload != nil || req.Length != 5 {
		t.Fatalf("%+v", req)
	}
	wantStatus(t, tg.Place(&req, regA, baseA+sizeA-4), rdmo.StatusOutOfBounds)
	if err := tg.Place(&req, regA, baseA+16); err != nil {
		t.Fatal(err)
	}
	if string(a[16:21]) != "hello" {
		t.Fatal("Place")
	}
	// Moved once only.
	wantStatus(t, tg.Place(&req, regA, baseA+32), rdmo.StatusInternal)
	_, err := tg.Fetch(&req)
	wantStatus(t, err, rdmo.StatusInternal)

	req2 := tg.Rendezvous(tg.ScatterReq(rdmotest.Chunk{Rkey: regA, Addr: baseA, Data: []byte("xy")}))
	tg.FetchLimit = req2.Length - 1
	_, err = tg.Fetch(&req2)
	wantStatus(t, err, rdmo.StatusRendezvousRefused)
	tg.FetchLimit = req2.Length
	p, err := tg.Fetch(&req2)
	if err != nil || !bytes.Equal(p, rdmotest.ScatterPayload(rdmotest.Chunk{Rkey: regA, Addr: baseA, Data: []byte("xy")})) {
		t.Fatal(p, err)
	}
	eager := tg.AppendReq(rdmo.AppendHeader{}, []byte("z"))
	wantStatus(t, tg.Place(&eager, regA, baseA), rdmo.StatusInternal)
	if s := tg.Stats(); s.Places != 1 || s.PlaceBytes != 5 || s.Fetches != 1 {
		t.Fatalf("%+v", s)
	}
}

type fenceHook struct {
	rdmo.BaseHandler
	fences  int
	removed []rdmo.RegionID
	gone    []rdmo.ClientID
	err     error
}

func (h *fenceHook) Info() rdmo.HandlerInfo                                 { return rdmo.HandlerInfo{Name: "hook"} }
func (h *fenceHook) HandleBatch(rdmo.Target, []rdmo.Request, []rdmo.Result) {}
func (h *fenceHook) WriteBack(t rdmo.Target) error                          { h.fences++; return h.err }
func (h *fenceHook) RegionRemoved(t rdmo.Target, r rdmo.RegionID) error {
	// The region is still usable during the hook.
	if err := t.Put(r, baseA, []byte{0xEE}); err != nil {
		return err
	}
	h.removed = append(h.removed, r)
	return nil
}
func (h *fenceHook) ClientRemoved(c rdmo.ClientID) { h.gone = append(h.gone, c) }

func TestHooks(t *testing.T) {
	tg, a := setup(t)
	h1, h2 := &fenceHook{}, &fenceHook{err: rdmo.ErrTargetUnreachable}
	tg.Register(h1, h2)
	err := tg.WriteBackAll()
	wantStatus(t, err, rdmo.StatusTargetUnreachable)
	if h1.fences != 1 || h2.fences != 1 || tg.Stats().WriteBacks != 1 {
		t.Fatal("WriteBackAll did not call every hook")
	}
	tg.DeferPuts = true
	if err := tg.RemoveRegion(regA); err != nil {
		t.Fatal(err)
	}
	if a[0] != 0xEE || len(h1.removed) != 1 {
		t.Fatal("RegionRemoved hook did not run or its write was lost")
	}
	if _, err := tg.Region(regA); !errors.Is(err, rdmo.ErrUnknownRegion) {
		t.Fatal("region still registered")
	}
	tg.RemoveClient()
	if len(h1.gone) != 1 || h1.gone[0] != client {
		t.Fatal("ClientRemoved")
	}
}

func TestRecordAndFaults(t *testing.T) {
	tg, _ := setup(t)
	tg.Record = true
	_ = tg.Put(regA, baseA, []byte{1})
	_ = tg.Put(regA, baseA+sizeA, []byte{1}) // refused: not recorded
	_, _ = rdmo.FetchAdd(tg, regA, baseA+8, 1)
	got := tg.Accesses()
	if len(got) != 2 || got[0].Kind != rdmotest.AccessPut || got[1].Kind != rdmotest.AccessFetchAdd || got[1].Addr != baseA+8 {
		t.Fatalf("%v", got)
	}
	tg.Faults.Put = rdmo.ErrTargetUnreachable
	wantStatus(t, tg.Put(regA, baseA, []byte{1}), rdmo.StatusTargetUnreachable)
	tg.Faults = rdmotest.Faults{Flush: rdmo.ErrTargetUnreachable}
	wantStatus(t, tg.Flush(), rdmo.StatusTargetUnreachable)
	tg.ResetStats()
	if tg.Stats() != (rdmotest.Stats{}) || len(tg.Accesses()) != 0 {
		t.Fatal("ResetStats")
	}
}

func TestGuardsCatchCorruption(t *testing.T) {
	tg, a := setup(t)
	if err := tg.CheckGuards(); err != nil {
		t.Fatal(err)
	}
	// Reach past the region's end the way a broken bounds check would.
	full := a[:sizeA:sizeA]
	if cap(full) != sizeA {
		t.Fatal("region slice must have no spare capacity")
	}
	past := unsafe.Slice(&a[0], sizeA+1)[sizeA:] // the first guard byte after the region
	past[0] ^= 1
	if err := tg.CheckGuards(); err == nil {
		t.Fatal("corrupted guard not reported")
	}
}

func TestAddRegionPanics(t *testing.T) {
	tg, _ := setup(t)
	for name, f := range map[string]func(){
		"duplicate id": func() { tg.AddRegion(regA, 0x1000, 8) },
		"overlap":      func() { tg.AddRegion(0x55, baseA+100, 8) },
		"wrap":         func() { tg.AddRegion(0x56, math.MaxUint64-3, 8) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func TestModel(t *testing.T) {
	tg, a := setup(t)
	m := rdmotest.NewModel(tg)
	if err := m.Diff(tg); err != nil {
		t.Fatal(err)
	}
	a[5] = 1
	if err := m.Diff(tg); err == nil {
		t.Fatal("difference not found")
	}
	if err := m.Write(regA, baseA+5, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := m.Diff(tg); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, m.Write(regA, baseA+sizeA, []byte{1}), rdmo.StatusOutOfBounds)
	wantStatus(t, m.Write(regX, baseX, []byte{1}), rdmo.StatusRegionNotOwned)
	m.PutUint64(regB, baseB, 42)
	if m.Uint64(regB, baseB) != 42 || m.Clone().Uint64(regB, baseB) != 42 {
		t.Fatal("u64")
	}
	// Scatter: all or nothing.
	good := tg.ScatterReq(rdmotest.Chunk{Rkey: regA, Addr: baseA, Data: []byte("ab")}, rdmotest.Chunk{Rkey: regB, Addr: baseB + 8, Data: []byte("cd")})
	bad := tg.ScatterReq(rdmotest.Chunk{Rkey: regA, Addr: baseA + 100, Data: []byte("zz")}, rdmotest.Chunk{Rkey: regB, Addr: baseB + 63, Data: []byte("cd")})
	if s := m.Scatter(good, good.Payload); s != rdmo.StatusOK {
		t.Fatal(s)
	}
	if s := m.Scatter(bad, bad.Payload); s != rdmo.StatusOutOfBounds {
		t.Fatal(s)
	}
	if string(m.Read(regA, baseA, 2)) != "ab" || string(m.Read(regA, baseA+100, 2)) != "\x00\x00" {
		t.Fatal("model scatter")
	}
}

// Targets of different clients may be used concurrently (run with -race).
func TestPeersConcurrent(t *testing.T) {
	tg := rdmotest.NewTarget(1)
	var wg sync.WaitGroup
	for c := uint64(1); c <= 4; c++ {
		p := tg
		if c != 1 {
			p = tg.Peer(rdmo.ClientID(c))
		}
		p.AddRegion(rdmo.RegionID(c), c<<20, 4096)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				b := p.Buffer(8)
				binary.LittleEndian.PutUint64(b, uint64(i))
				if err := p.Put(rdmo.RegionID(c), c<<20+uint64(i%512)*8, b); err != nil {
					t.Error(err)
				}
				if _, err := rdmo.FetchAdd(p, rdmo.RegionID(c), c<<20, 1); err != nil {
					t.Error(err)
				}
				p.EndBatch()
			}
		}()
	}
	wg.Wait()
	if err := tg.CheckGuards(); err != nil {
		t.Fatal(err)
	}
}

func TestUserReq(t *testing.T) {
	tg := rdmotest.NewTarget(7)
	sub := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	r := tg.UserReq(20, sub, []byte("pay"), rdmo.FlagAck)
	if r.Op != 20 || r.Client != 7 || r.Flags != rdmo.FlagAck || string(r.Sub) != string(sub) || string(r.Payload) != "pay" || r.Length != 3 {
		t.Fatalf("UserReq = %+v", r)
	}
	if r2 := tg.UserReq(20, nil, nil, 0); r2.Seq != r.Seq+1 || len(r2.Sub) != 0 || r2.Length != 0 {
		t.Fatalf("second UserReq = %+v", r2)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("UserReq of a reference op did not panic")
		}
	}()
	tg.UserReq(rdmo.OpAppend, nil, nil, 0)
}

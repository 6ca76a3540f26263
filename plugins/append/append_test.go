package append_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"testing"

	appendh "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

var le = binary.LittleEndian

const (
	cl    = 3
	other = 4

	regQ  = 0x100 // the demo queue: tail in its first u64, data after it
	baseQ = 0x7f00_0000_0000
	sizeQ = 128 << 10

	regP  = 0x200 // tail words of other queues
	baseP = 0x7f00_1000_0000
	sizeP = 4096

	regD  = 0x300 // a data region
	baseD = 0x7f00_2000_0000
	sizeD = 4096

	regF  = 0x400 // another client's region
	baseF = 0x7f00_3000_0000

	regT  = 0x500 // a data region at the top of the address space
	sizeT = 4096
	baseT = math.MaxUint64 - sizeT
)

var strategies = []appendh.Strategy{appendh.Owned, appendh.Shared}

type fixture struct {
	tg   *rdmotest.Target
	h    rdmo.Handler
	q, p []byte // memory of regQ and regP
	d    []byte
}

func newFixture(t testing.TB, s appendh.Strategy) *fixture {
	t.Helper()
	tg := rdmotest.NewTarget(cl)
	f := &fixture{tg: tg, h: appendh.New(appendh.Options{Strategy: s})}
	f.q = tg.AddRegion(regQ, baseQ, sizeQ)
	f.p = tg.AddRegion(regP, baseP, sizeP)
	f.d = tg.AddRegion(regD, baseD, sizeD)
	tg.AddRegionFor(other, regF, baseF, 4096)
	tg.AddRegion(regT, baseT, sizeT)
	le.PutUint64(f.q, baseQ+8)
	tg.Register(f.h)
	return f
}

// qhdr names the demo queue.
var qhdr = rdmo.AppendHeader{PtrAddr: baseQ, PtrRkey: regQ, DataRkey: regQ}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func checkGuards(t testing.TB, tg *rdmotest.Target) {
	t.Helper()
	if err := tg.CheckGuards(); err != nil {
		t.Fatal(err)
	}
}

func TestInfo(t *testing.T) {
	info := appendh.New(appendh.Options{}).Info()
	if info.Name != appendh.Name || info.Version != appendh.Version || appendh.Version != "1.0.0" ||
		len(info.Ops) != 1 || info.Ops[0] != rdmo.OpAppend {
		t.Fatalf("%+v", info)
	}
	if appendh.Owned.String() != "owned" || appendh.Shared.String() != "shared" {
		t.Fatal("String")
	}
}

// Both strategies: one batch of N appends to one queue is one Put. Owned
// reads the tail once (first batch only); Shared does one fetch-add per
// batch. Both write the same bytes and return the same addresses.
func TestCoalescing(t *testing.T) {
	const batches, n = 4, 64
	for _, s := range strategies {
		t.Run(s.String(), func(t *testing.T) {
			f := newFixture(t, s)
			var want []byte
			for b := 0; b < batches; b++ {
				reqs := make([]rdmo.Request, n)
				for i := range reqs {
					p := pattern(1+(i*13)%40, byte(b*n+i))
					want = append(want, p...)
					reqs[i] = f.tg.AppendReq(qhdr, p)
				}
				before := f.tg.Stats()
				res := f.tg.RunBatch(f.h, reqs...)
				d := f.tg.Stats()
				addr := baseQ + 8 + uint64(len(want))
				for i := n - 1; i >= 0; i-- {
					addr -= uint64(len(reqs[i].Payload))
					if !res[i].Equal(rdmo.Result{Value: addr}) {
						t.Fatalf("batch %d req %d: %+v, want value %#x", b, i, res[i], addr)
					}
				}
				puts, syncs, ops := d.Puts-before.Puts, d.Syncs-before.Syncs, d.SyncOps-before.SyncOps
				wantSyncs := uint64(1)
				if s == appendh.Owned && b > 0 {
					wantSyncs = 0
				}
				if puts != 1 || syncs != wantSyncs || ops != wantSyncs {
					t.Fatalf("batch %d: %d puts, %d syncs with %d ops; want 1 put, %d sync", b, puts, syncs, ops, wantSyncs)
				}
			}
			st := f.tg.Stats()
			t.Logf("%s: %d appends in %d batches of %d -> %d puts (%.4f puts/append), %d syncs, %d tail ops",
				s, batches*n, batches, n, st.Puts, float64(st.Puts)/float64(batches*n), st.Syncs, st.SyncOps)
			if !bytes.Equal(f.q[8:8+len(want)], want) {
				t.Fatal("queue contents differ")
			}
			if err := f.tg.WriteBackAll(); err != nil {
				t.Fatal(err)
			}
			if got := le.Uint64(f.q); got != baseQ+8+uint64(len(want)) {
				t.Fatalf("tail %#x after fence", got)
			}
			checkGuards(t, f.tg)
		})
	}
}

// Appends to several queues in one batch: every tail the batch lacks is
// obtained in a single Sync, and each queue gets its own single Put.
func TestOneSyncForAllQueues(t *testing.T) {
	for _, s := range strategies {
		t.Run(s.String(), func(t *testing.T) {
			f := newFixture(t, s)
			var hdrs []rdmo.AppendHeader
			for k := 0; k < 3; k++ {
				le.PutUint64(f.p[8*k:], baseD+uint64(k)*1024)
				hdrs = append(hdrs, rdmo.AppendHeader{PtrAddr: baseP + 8*uint64(k), PtrRkey: regP, DataRkey: regD})
			}
			hdrs = append(hdrs, qhdr)
			var reqs []rdmo.Request
			for i := 0; i < 40; i++ { // interleaved
				reqs = append(reqs, f.tg.AppendReq(hdrs[i%len(hdrs)], pattern(8, byte(i))))
			}
			f.tg.Record = true
			res := f.tg.RunBatch(f.h, reqs...)
			for i, r := range res {
				k := i % len(hdrs)
				base := baseD + uint64(k)*1024
				if k == 3 {
					base = baseQ + 8
				}
				if !r.Equal(rdmo.Result{Value: base + uint64(i/len(hdrs))*8}) {
					t.Fatalf("req %d: %+v", i, r)
				}
			}
			st := f.tg.Stats()
			if st.Syncs != 1 || st.SyncOps != 4 || st.Puts != 4 || st.PutBytes != 320 {
				t.Fatalf("%+v\n%v", st, f.tg.Accesses())
			}
			for k := 0; k < 3; k++ {
				for j := 0; j < 10; j++ {
					if got := f.d[k*1024+j*8]; got != byte(k+j*4) {
						t.Fatalf("queue %d append %d: %#x", k, j, got)
					}
				}
			}
			checkGuards(t, f.tg)
		})
	}
}

// A rendezvous append is Placed at its address (no staging), and the eager
// run around it is split in two Puts.
func TestRendezvousSplitsRun(t *testing.T) {
	for _, s := range strategies {
		t.Run(s.String(), func(t *testing.T) {
			f := newFixture(t, s)
			ps := [][]byte{pattern(10, 1), pattern(20, 2), pattern(3000, 3), pattern(5, 4), pattern(7, 5)}
			var reqs []rdmo.Request
			for i, p := range ps {
				r := f.tg.AppendReq(qhdr, p)
				if i == 2 {
					r = f.tg.Rendezvous(r)
				}
				reqs = append(reqs, r)
			}
			res := f.tg.RunBatch(f.h, reqs...)
			addr := uint64(baseQ + 8)
			for i, p := range ps {
				if !res[i].Equal(rdmo.Result{Value: addr}) {
					t.Fatalf("req %d: %+v want %#x", i, res[i], addr)
				}
				addr += uint64(len(p))
			}
			if !bytes.Equal(f.q[8:8+3042], bytes.Join(ps, nil)) {
				t.Fatal("contents")
			}
			st := f.tg.Stats()
			if st.Puts != 2 || st.Places != 1 || st.PlaceBytes != 3000 || st.PutBytes != 42 {
				t.Fatalf("%+v", st)
			}
			checkGuards(t, f.tg)
		})
	}
}

// A single append is Put straight from its payload; MaxCoalesce splits long
// runs.
func TestMaxCoalesce(t *testing.T) {
	tg := rdmotest.NewTarget(cl)
	q := tg.AddRegion(regQ, baseQ, sizeQ)
	le.PutUint64(q, baseQ+8)
	h := appendh.New(appendh.Options{MaxCoalesce: 100})
	var reqs []rdmo.Request
	for i := 0; i < 10; i++ { // 10 x 30 bytes: runs of 3, 3, 3, 1
		reqs = append(reqs, tg.AppendReq(qhdr, pattern(30, byte(i))))
	}
	reqs = append(reqs, tg.AppendReq(qhdr, pattern(500, 99))) // alone, larger than the cap
	tg.RunBatch(h, reqs...)
	if st := tg.Stats(); st.Puts != 5 || st.Buffers != 3 {
		t.Fatalf("%+v", st)
	}
	want := []byte{}
	for _, r := range reqs {
		want = append(want, r.Payload...)
	}
	if !bytes.Equal(q[8:8+len(want)], want) {
		t.Fatal("contents")
	}
}

// Owned: the tail is written back at WriteBack only, stays cached afterwards
// (no new read), and a clean cache writes nothing.
func TestOwnedWriteBack(t *testing.T) {
	f := newFixture(t, appendh.Owned)
	f.tg.RunBatch(f.h, f.tg.AppendReq(qhdr, []byte("12345678")))
	if got := le.Uint64(f.q); got != baseQ+8 {
		t.Fatalf("tail moved before the fence: %#x", got)
	}
	if err := f.tg.WriteBackAll(); err != nil {
		t.Fatal(err)
	}
	if got := le.Uint64(f.q); got != baseQ+16 {
		t.Fatalf("tail after fence %#x", got)
	}
	f.tg.ResetStats()
	if err := f.tg.WriteBackAll(); err != nil || f.tg.Stats().Puts != 0 {
		t.Fatalf("clean fence wrote: %+v %v", f.tg.Stats(), err)
	}
	res := f.tg.RunBatch(f.h, f.tg.AppendReq(qhdr, []byte("x")))
	if res[0].Value != baseQ+16 || f.tg.Stats().Syncs != 0 {
		t.Fatalf("cache not kept after fence: %+v %+v", res, f.tg.Stats())
	}
	// A write-back that fails keeps the tail dirty for the next fence.
	f.tg.Faults.Put = rdmo.ErrTargetUnreachable
	err := f.tg.WriteBackAll()
	if rdmo.StatusOf(err) != rdmo.StatusTargetUnreachable {
		t.Fatalf("fence error %v", err)
	}
	f.tg.Faults.Put = nil
	if err := f.tg.WriteBackAll(); err != nil || le.Uint64(f.q) != baseQ+17 {
		t.Fatalf("retry: %v, tail %#x", err, le.Uint64(f.q))
	}
}

// Shared: the tail in target memory is always current, and the handler
// cooperates with another appender moving it.
func TestSharedWithOtherAppender(t *testing.T) {
	f := newFixture(t, appendh.Shared)
	res := f.tg.RunBatch(f.h, f.tg.AppendReq(qhdr, []byte("aaaa")), f.tg.AppendReq(qhdr, []byte("bbbb")))
	if le.Uint64(f.q) != baseQ+16 || res[1].Value != baseQ+12 {
		t.Fatalf("tail %#x, %+v", le.Uint64(f.q), res)
	}
	// Someone else reserves 100 bytes.
	if old, err := rdmo.FetchAdd(f.tg, regQ, baseQ, 100); err != nil || old != baseQ+16 {
		t.Fatal(old, err)
	}
	res = f.tg.RunBatch(f.h, f.tg.AppendReq(qhdr, []byte("cccc")))
	if res[0].Value != baseQ+116 || le.Uint64(f.q) != baseQ+120 || string(f.q[116:120]) != "cccc" {
		t.Fatalf("%+v tail %#x", res, le.Uint64(f.q))
	}
	if err := f.tg.WriteBackAll(); err != nil || f.tg.Stats().Puts != 2 {
		t.Fatalf("shared fence must write nothing: %v %+v", err, f.tg.Stats())
	}
}

// Shared mode forgets idle queue states once a client has named many tail
// words; appends stay correct because the tail lives in target memory.
func TestSharedManyQueues(t *testing.T) {
	const n = 2000
	tg := rdmotest.NewTarget(cl)
	tails := tg.AddRegion(0x1, 0x10_0000, 8*n)
	data := tg.AddRegion(0x2, 0x20_0000, 16*n)
	h := appendh.New(appendh.Options{Strategy: appendh.Shared})
	hdr := func(k int) rdmo.AppendHeader {
		return rdmo.AppendHeader{PtrAddr: 0x10_0000 + 8*uint64(k), PtrRkey: 0x1, DataRkey: 0x2}
	}
	for k := 0; k < n; k++ {
		le.PutUint64(tails[8*k:], 0x20_0000+16*uint64(k))
	}
	for round := 0; round < 2; round++ {
		for k := 0; k < n; k += 100 {
			var reqs []rdmo.Request
			for j := k; j < k+100; j++ {
				reqs = append(reqs, tg.AppendReq(hdr(j), pattern(8, byte(j+round))))
			}
			for j, r := range tg.RunBatch(h, reqs...) {
				if want := 0x20_0000 + 16*uint64(k+j) + 8*uint64(round); !r.Equal(rdmo.Result{Value: want}) {
					t.Fatalf("round %d queue %d: %+v, want %#x", round, k+j, r, want)
				}
			}
		}
	}
	for k := 0; k < n; k++ {
		if !bytes.Equal(data[16*k:16*k+8], pattern(8, byte(k))) || !bytes.Equal(data[16*k+8:16*k+16], pattern(8, byte(k+1))) {
			t.Fatalf("queue %d data", k)
		}
	}
	checkGuards(t, tg)
}

func hdrBytes(client uint64, flags uint32, a rdmo.AppendHeader) []byte {
	return wire.AppendAppendRequest(nil, wire.Header{ClientID: client, Flags: flags}, a)
}

// Malformed APPENDs never reach the handler: the worker refuses them with
// these statuses (as rdmotest.ParseReq does), before any handler runs.
func TestRefusedByTheWorker(t *testing.T) {
	tg := rdmotest.NewTarget(cl)
	for _, c := range []struct {
		name    string
		hdr     []byte
		payload []byte
		want    rdmo.Status
	}{
		{"empty payload", hdrBytes(cl, 0, qhdr), nil, rdmo.StatusEmptyAppend},
		{"short header", hdrBytes(cl, 0, qhdr)[:39], []byte("payload!"), rdmo.StatusShortHeader},
		{"long header", append(hdrBytes(cl, 0, qhdr), 0), []byte("payload!"), rdmo.StatusHeaderTooLong},
		{"unknown flags", hdrBytes(cl, 1<<5, qhdr), []byte("payload!"), rdmo.StatusUnknownFlags},
		{"client mismatch", hdrBytes(other, 0, qhdr), []byte("payload!"), rdmo.StatusClientMismatch},
	} {
		if _, err := tg.ParseReq(c.hdr, c.payload); rdmo.StatusOf(err) != c.want {
			t.Errorf("%s: %v, want %s", c.name, err, c.want.Name())
		}
	}
}

// Every validation failure in one batch, between good appends: each gets
// its status, the good ones are unaffected and coalesced, nothing is written
// for a failure and nothing outside regions changes.
func TestErrorPaths(t *testing.T) {
	const (
		ptrBelow = baseP + 8  // tail below its data region
		ptrFull  = baseP + 16 // 10 bytes left
		ptrWrap  = baseP + 24 // tail near 2^64
		wordInD  = baseD + 64 // a tail word inside the data region
	)
	type tc struct {
		name   string
		req    func(tg *rdmotest.Target) rdmo.Request
		owned  rdmo.Status
		shared rdmo.Status
	}
	good := func(seed byte) func(*rdmotest.Target) rdmo.Request {
		return func(tg *rdmotest.Target) rdmo.Request { return tg.AppendReq(qhdr, pattern(8, seed)) }
	}
	app := func(a rdmo.AppendHeader, n int) func(*rdmotest.Target) rdmo.Request {
		return func(tg *rdmotest.Target) rdmo.Request { return tg.AppendReq(a, pattern(n, 0x77)) }
	}
	pd := func(ptr uint64) rdmo.AppendHeader {
		return rdmo.AppendHeader{PtrAddr: ptr, PtrRkey: regP, DataRkey: regD}
	}
	cases := []tc{
		{"good A", good(0xA0), 0, 0},
		{"unknown ptr region", app(rdmo.AppendHeader{PtrAddr: baseQ, PtrRkey: 0x999, DataRkey: regQ}, 8), rdmo.StatusUnknownRegion, rdmo.StatusUnknownRegion},
		{"foreign ptr region", app(rdmo.AppendHeader{PtrAddr: baseF, PtrRkey: regF, DataRkey: regQ}, 8), rdmo.StatusRegionNotOwned, rdmo.StatusRegionNotOwned},
		{"unknown data region", app(rdmo.AppendHeader{PtrAddr: baseQ, PtrRkey: regQ, DataRkey: 0x999}, 8), rdmo.StatusUnknownRegion, rdmo.StatusUnknownRegion},
		{"foreign data region", app(rdmo.AppendHeader{PtrAddr: baseQ, PtrRkey: regQ, DataRkey: regF}, 8), rdmo.StatusRegionNotOwned, rdmo.StatusRegionNotOwned},
		{"ptr out of bounds", app(pd(baseP+sizeP-4), 8), rdmo.StatusOutOfBounds, rdmo.StatusOutOfBounds},
		{"ptr wraps", app(rdmo.AppendHeader{PtrAddr: math.MaxUint64 - 3, PtrRkey: regT, DataRkey: regT}, 8), rdmo.StatusOutOfBounds, rdmo.StatusOutOfBounds},
		{"ptr misaligned", app(pd(baseP+4), 8), rdmo.StatusOutOfBounds, rdmo.StatusOutOfBounds},
		{"larger than region", app(pd(ptrFull), sizeD+1), rdmo.StatusQueueOverflow, rdmo.StatusQueueOverflow},
		{"good B", good(0xB0), 0, 0},
		{"overwrites tail word", app(rdmo.AppendHeader{PtrAddr: wordInD, PtrRkey: regD, DataRkey: regD}, 8), rdmo.StatusOutOfBounds, rdmo.StatusOutOfBounds},
		{"tail below data", app(pd(ptrBelow), 8), rdmo.StatusOutOfBounds, rdmo.StatusOutOfBounds},
		{"overflow", app(pd(ptrFull), 16), rdmo.StatusQueueOverflow, rdmo.StatusQueueOverflow},
		{"fits after overflow", app(pd(ptrFull), 4), rdmo.StatusOK, rdmo.StatusQueueOverflow},
		{"tail+len wraps", app(rdmo.AppendHeader{PtrAddr: ptrWrap, PtrRkey: regP, DataRkey: regT}, 8), rdmo.StatusQueueOverflow, rdmo.StatusQueueOverflow},
		{"good C", good(0xC0), 0, 0},
	}
	for _, s := range strategies {
		t.Run(s.String(), func(t *testing.T) {
			f := newFixture(t, s)
			le.PutUint64(f.p[ptrBelow-baseP:], baseD-100)
			le.PutUint64(f.p[ptrFull-baseP:], baseD+sizeD-10)
			le.PutUint64(f.p[ptrWrap-baseP:], math.MaxUint64-2)
			le.PutUint64(f.d[wordInD-baseD:], wordInD-4)
			model := rdmotest.NewModel(f.tg)
			am := newAppendModel(model, cl, s == appendh.Shared)

			var reqs []rdmo.Request
			var payloads [][]byte
			for _, c := range cases {
				r := c.req(f.tg)
				reqs = append(reqs, r)
				payloads = append(payloads, r.Payload)
			}
			res := f.tg.RunBatch(f.h, reqs...)
			wantRes := am.batch(reqs, payloads)
			for i, c := range cases {
				want := c.owned
				if s == appendh.Shared {
					want = c.shared
				}
				if res[i].Status != want || wantRes[i].Status != want {
					t.Errorf("%s: status %s (%s), model %s, want %s", c.name, res[i].Status.Name(), res[i].Detail, wantRes[i].Status.Name(), want.Name())
				}
				if res[i].Value != wantRes[i].Value {
					t.Errorf("%s: value %#x, model %#x", c.name, res[i].Value, wantRes[i].Value)
				}
			}
			if res[0].Value != baseQ+8 || res[9].Value != baseQ+16 || res[15].Value != baseQ+24 {
				t.Errorf("good appends at %#x %#x %#x", res[0].Value, res[9].Value, res[15].Value)
			}
			if s == appendh.Owned && res[13].Value != baseD+sizeD-10 {
				t.Errorf("fits-after-overflow at %#x", res[13].Value)
			}
			st := f.tg.Stats()
			wantPuts := uint64(1) // the three good appends to the demo queue, coalesced
			if s == appendh.Owned {
				wantPuts = 2 // and the one that fits after the overflow
			}
			if st.Puts != wantPuts || st.Syncs != 1 {
				t.Errorf("puts %d syncs %d", st.Puts, st.Syncs)
			}
			if err := model.Diff(f.tg); err != nil {
				t.Fatal(err)
			}
			if err := f.tg.WriteBackAll(); err != nil {
				t.Fatal(err)
			}
			am.fence()
			if err := model.Diff(f.tg); err != nil {
				t.Fatal(err)
			}
			if s == appendh.Shared {
				// Failures after the fetch-add leave the tail moved.
				if le.Uint64(f.p[ptrFull-baseP:]) != baseD+sizeD+10 || le.Uint64(f.p[ptrWrap-baseP:]) != 5 {
					t.Errorf("shared tails %#x %#x", le.Uint64(f.p[ptrFull-baseP:]), le.Uint64(f.p[ptrWrap-baseP:]))
				}
			} else if le.Uint64(f.p[ptrFull-baseP:]) != baseD+sizeD-6 || le.Uint64(f.p[ptrWrap-baseP:]) != math.MaxUint64-2 {
				t.Errorf("owned tails %#x %#x", le.Uint64(f.p[ptrFull-baseP:]), le.Uint64(f.p[ptrWrap-baseP:]))
			}
			checkGuards(t, f.tg)
		})
	}
}

// Failures of the target itself: a failed tail Sync fails only the
// requests of queues whose tail it was getting; a failed Put fails the
// requests of its run; a failed Place fails its request.
func TestTargetFaults(t *testing.T) {
	other := rdmo.AppendHeader{PtrAddr: baseP, PtrRkey: regP, DataRkey: regD}
	t.Run("owned sync", func(t *testing.T) {
		f := newFixture(t, appendh.Owned)
		le.PutUint64(f.p, baseD)
		f.tg.RunBatch(f.h, f.tg.AppendReq(qhdr, []byte("a"))) // cache the demo queue
		f.tg.Faults.Sync = rdmo.ErrTargetUnreachable
		res := f.tg.RunBatch(f.h, f.tg.AppendReq(other, []byte("b")), f.tg.AppendReq(qhdr, []byte("c")))
		if res[0].Status != rdmo.StatusTargetUnreachable || !res[1].Equal(rdmo.Result{Value: baseQ + 9}) {
			t.Fatalf("%+v", res)
		}
		f.tg.Faults.Sync = nil
		res = f.tg.RunBatch(f.h, f.tg.AppendReq(other, []byte("b")))
		if !res[0].Equal(rdmo.Result{Value: baseD}) || f.d[0] != 'b' {
			t.Fatalf("retry after failed read: %+v", res)
		}
	})
	for _, s := range strategies {
		t.Run(s.String()+" put", func(t *testing.T) {
			f := newFixture(t, s)
			f.tg.Faults.Put = rdmo.ErrTargetUnreachable
			res := f.tg.RunBatch(f.h, f.tg.AppendReq(qhdr, []byte("ab")), f.tg.AppendReq(qhdr, []byte("cd")))
			for _, r := range res {
				if r.Status != rdmo.StatusTargetUnreachable || r.Value != 0 {
					t.Fatalf("%+v", res)
				}
			}
			if f.q[8] != 0 {
				t.Fatal("written")
			}
			checkGuards(t, f.tg)
		})
		t.Run(s.String()+" place", func(t *testing.T) {
			f := newFixture(t, s)
			f.tg.Faults.Place = rdmo.ErrTargetUnreachable
			res := f.tg.RunBatch(f.h, f.tg.AppendReq(qhdr, []byte("ab")), f.tg.Rendezvous(f.tg.AppendReq(qhdr, []byte("cd"))), f.tg.AppendReq(qhdr, []byte("ef")))
			if res[0].Status != 0 || res[1].Status != rdmo.StatusTargetUnreachable || res[2].Status != 0 {
				t.Fatalf("%+v", res)
			}
			checkGuards(t, f.tg)
		})
	}
}

// RegionRemoved writes a dirty tail back before dropping the queue (both
// when the tail's region and when the data region goes), and the next
// append reads the tail again.
func TestRegionRemovedWritesBack(t *testing.T) {
	t.Run("tail region", func(t *testing.T) {
		f := newFixture(t, appendh.Owned)
		f.tg.RunBatch(f.h, f.tg.AppendReq(qhdr, pattern(24, 1)))
		if le.Uint64(f.q) != baseQ+8 {
			t.Fatal("written back too early")
		}
		if err := f.tg.RemoveRegion(regQ); err != nil {
			t.Fatal(err)
		}
		if got := le.Uint64(f.q); got != baseQ+32 { // f.q stays readable after removal
			t.Fatalf("tail %#x after RegionRemoved, want %#x", got, baseQ+32)
		}
		res := f.tg.RunBatch(f.h, f.tg.AppendReq(qhdr, []byte("x")))
		if res[0].Status != rdmo.StatusUnknownRegion {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("data region", func(t *testing.T) {
		f := newFixture(t, appendh.Owned)
		a := rdmo.AppendHeader{PtrAddr: baseP, PtrRkey: regP, DataRkey: regD}
		le.PutUint64(f.p, baseD)
		f.tg.RunBatch(f.h, f.tg.AppendReq(a, pattern(16, 1)), f.tg.AppendReq(qhdr, pattern(8, 2)))
		if err := f.tg.RemoveRegion(regD); err != nil {
			t.Fatal(err)
		}
		if le.Uint64(f.p) != baseD+16 {
			t.Fatalf("tail %#x", le.Uint64(f.p))
		}
		if le.Uint64(f.q) != baseQ+8 {
			t.Fatal("an unrelated queue was written back")
		}
		d := f.tg.AddRegion(regD, baseD, sizeD)
		le.PutUint64(f.p, baseD+100) // the consumer moved the tail while nobody owned it
		f.tg.ResetStats()
		res := f.tg.RunBatch(f.h, f.tg.AppendReq(a, []byte("z")), f.tg.AppendReq(qhdr, []byte("y")))
		if !res[0].Equal(rdmo.Result{Value: baseD + 100}) || d[100] != 'z' || !res[1].Equal(rdmo.Result{Value: baseQ + 16}) {
			t.Fatalf("%+v", res)
		}
		if st := f.tg.Stats(); st.Syncs != 1 || st.SyncOps != 1 {
			t.Fatalf("only the dropped queue is read again: %+v", st)
		}
	})
	t.Run("write-back fails", func(t *testing.T) {
		f := newFixture(t, appendh.Owned)
		f.tg.RunBatch(f.h, f.tg.AppendReq(qhdr, []byte("x")))
		f.tg.Faults.Put = rdmo.ErrTargetUnreachable
		if err := f.tg.RemoveRegion(regQ); rdmo.StatusOf(err) != rdmo.StatusTargetUnreachable {
			t.Fatalf("error %v", err)
		}
	})
}

// ClientRemoved drops the client's state without writing anything.
func TestClientRemoved(t *testing.T) {
	f := newFixture(t, appendh.Owned)
	f.tg.RunBatch(f.h, f.tg.AppendReq(qhdr, []byte("abc")))
	f.tg.RemoveClient()
	f.tg.ResetStats()
	if err := f.tg.WriteBackAll(); err != nil || f.tg.Stats().Puts != 0 {
		t.Fatal("state survived ClientRemoved")
	}
	res := f.tg.RunBatch(f.h, f.tg.AppendReq(qhdr, []byte("d")))
	if res[0].Value != baseQ+8 || f.tg.Stats().Syncs != 1 { // the tail was never written back
		t.Fatalf("%+v", res)
	}
}

// Clients are served concurrently by one handler (run with -race).
func TestConcurrentClients(t *testing.T) {
	for _, s := range strategies {
		t.Run(s.String(), func(t *testing.T) {
			h := appendh.New(appendh.Options{Strategy: s})
			root := rdmotest.NewTarget(1)
			root.Register(h)
			var wg sync.WaitGroup
			for c := uint64(1); c <= 4; c++ {
				tg := root
				if c > 1 {
					tg = root.Peer(rdmo.ClientID(c))
				}
				base := c << 32
				mem := tg.AddRegion(rdmo.RegionID(c), base, 64<<10)
				le.PutUint64(mem, base+8)
				wg.Add(1)
				go func() {
					defer wg.Done()
					a := rdmo.AppendHeader{PtrAddr: base, PtrRkey: rdmo.RegionID(c), DataRkey: rdmo.RegionID(c)}
					var want []byte
					for b := 0; b < 50; b++ {
						var reqs []rdmo.Request
						for i := 0; i < 10; i++ {
							p := pattern(1+i, byte(c*100)+byte(b+i))
							want = append(want, p...)
							reqs = append(reqs, tg.AppendReq(a, p))
						}
						for _, r := range tg.RunBatch(h, reqs...) {
							if r.Status != 0 {
								t.Error(r)
							}
						}
						if b%10 == 9 {
							if err := tg.WriteBackAll(); err != nil {
								t.Error(err)
							}
						}
					}
					if !bytes.Equal(mem[8:8+len(want)], want) || le.Uint64(mem) != base+8+uint64(len(want)) {
						t.Errorf("client %d: memory differs", c)
					}
					tg.RemoveClient()
				}()
			}
			wg.Wait()
			checkGuards(t, root)
		})
	}
}

func BenchmarkCoalesce64x64(b *testing.B) {
	for _, s := range strategies {
		b.Run(s.String(), func(b *testing.B) {
			tg := rdmotest.NewTarget(cl)
			const size = 4 << 20
			q := tg.AddRegion(regQ, baseQ, size)
			h := appendh.New(appendh.Options{Strategy: s})
			tg.Register(h)
			reqs := make([]rdmo.Request, 64)
			for i := range reqs {
				reqs[i] = tg.AppendReq(qhdr, pattern(64, byte(i)))
			}
			results := make([]rdmo.Result, len(reqs))
			reset := func() {
				if err := tg.RemoveRegion(regQ); err != nil {
					b.Fatal(err)
				}
				q = tg.AddRegion(regQ, baseQ, size)
				le.PutUint64(q, baseQ+8)
				h.HandleBatch(tg, reqs, results) // warm: first read of the tail
				tg.EndBatch()
			}
			// The warm batch and every timed one take 4 KiB of the queue.
			perReset := (size-8)/(64*64) - 1
			reset()
			left := perReset
			b.ReportAllocs()
			b.SetBytes(64 * 64)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if left == 0 {
					b.StopTimer()
					reset()
					left = perReset
					b.StartTimer()
				}
				left--
				h.HandleBatch(tg, reqs, results)
				tg.EndBatch()
			}
			b.StopTimer()
			if results[63].Status != 0 {
				b.Fatal(results[63])
			}
			reset()
			tg.ResetStats()
			for i := 0; i < 10; i++ {
				h.HandleBatch(tg, reqs, results)
				tg.EndBatch()
			}
			b.ReportMetric(float64(tg.Stats().Puts)/640, "puts/append")
		})
	}
}

func ExampleNew() {
	tg := rdmotest.NewTarget(0)
	q := tg.AddRegion(1, 0x1000, 128<<10)
	le.PutUint64(q, 0x1000+8) // the tail: an absolute address
	h := appendh.New(appendh.Options{Strategy: appendh.Owned})
	tg.Register(h)
	a := rdmo.AppendHeader{PtrAddr: 0x1000, PtrRkey: 1, DataRkey: 1}
	res := tg.RunBatch(h, tg.AppendReq(a, []byte("hello")), tg.AppendReq(a, []byte("world")))
	_ = tg.WriteBackAll()
	fmt.Printf("%#x %#x %q tail=%#x puts=%d\n", res[0].Value, res[1].Value, q[8:18], le.Uint64(q), tg.Stats().Puts)
	// Output: 0x1008 0x100d "helloworld" tail=0x1012 puts=2
}

// Into a region the worker maps (rdmo.Region.Local), appends of 1 KiB and
// more are Put each from its own payload, small ones still staged: a
// staged large payload would be copied twice for nothing.
func TestLocalRegionPutsLargeAppendsDirectly(t *testing.T) {
	for _, s := range strategies {
		t.Run(s.String(), func(t *testing.T) {
			f := newFixture(t, s)
			f.tg.LocalRegions = true
			sizes := []int{100, 200, 4 << 10, 300, 1 << 10, 2 << 10, 50, 60}
			reqs := make([]rdmo.Request, len(sizes))
			var want []byte
			for i, n := range sizes {
				p := pattern(n, byte(i))
				want = append(want, p...)
				reqs[i] = f.tg.AppendReq(qhdr, p)
			}
			before := f.tg.Stats()
			res := f.tg.RunBatch(f.h, reqs...)
			for i := range res {
				if res[i].Status != rdmo.StatusOK {
					t.Fatalf("req %d: %+v", i, res[i])
				}
			}
			// Runs: [100 200] put, 4K put, [300] put, 1K put, 2K put, [50 60] put.
			if puts := f.tg.Stats().Puts - before.Puts; puts != 6 {
				t.Errorf("%d puts, want 6 (three staged runs and three large appends)", puts)
			}
			if !bytes.Equal(f.q[8:8+len(want)], want) {
				t.Fatal("queue contents differ")
			}
			checkGuards(t, f.tg)
		})
	}
}

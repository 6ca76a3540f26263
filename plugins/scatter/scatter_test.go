package scatter_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/openrdmo/rdmo/plugins/scatter"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

const (
	cl    = 5
	other = 6

	regA  = 0xA
	baseA = 0x7f00_0000_0000
	sizeA = 8192
	regB  = 0xB
	baseB = baseA + sizeA // directly after A: adjacent addresses, another region
	sizeB = 4096
	regF  = 0xF // another client's
	baseF = 0x7f00_1000_0000
	regT  = 0x70 // at the top of the address space
	sizeT = 4096
	baseT = math.MaxUint64 - sizeT
)

type fixture struct {
	tg   *rdmotest.Target
	h    rdmo.Handler
	a, b []byte
	m    *rdmotest.Model
}

func newFixture(t testing.TB, opt scatter.Options) *fixture {
	t.Helper()
	tg := rdmotest.NewTarget(cl)
	f := &fixture{tg: tg, h: scatter.New(opt)}
	f.a = tg.AddRegion(regA, baseA, sizeA)
	f.b = tg.AddRegion(regB, baseB, sizeB)
	tg.AddRegionFor(other, regF, baseF, 4096)
	tg.AddRegion(regT, baseT, sizeT)
	tg.Register(f.h)
	f.m = rdmotest.NewModel(tg)
	return f
}

// run runs reqs as one batch and applies them to the model.
func (f *fixture) run(t *testing.T, reqs ...rdmo.Request) []rdmo.Result {
	t.Helper()
	res := f.tg.RunBatch(f.h, reqs...)
	for i, r := range reqs {
		if r.Rendezvous {
			continue // the tests that use rendezvous apply them to the model themselves
		}
		if want := f.m.Scatter(r, r.Payload); res[i].Status != want {
			t.Fatalf("req %d: status %s (%s), model %s", i, res[i].Status.Name(), res[i].Detail, want.Name())
		}
	}
	if err := f.m.Diff(f.tg); err != nil {
		t.Fatal(err)
	}
	return res
}

func data(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i)
	}
	return b
}

func chunk(rkey rdmo.RegionID, addr uint64, n int, seed byte) rdmotest.Chunk {
	return rdmotest.Chunk{Rkey: rkey, Addr: addr, Data: data(n, seed)}
}

func TestInfo(t *testing.T) {
	info := scatter.New(scatter.Options{}).Info()
	if info.Name != scatter.Name || info.Version != scatter.Version || scatter.Version != "1.0.0" ||
		len(info.Ops) != 1 || info.Ops[0] != rdmo.OpScatter {
		t.Fatalf("%+v", info)
	}
}

func TestMerge(t *testing.T) {
	cases := []struct {
		name          string
		chunks        []rdmotest.Chunk
		puts, buffers uint64
	}{
		{"16 adjacent", func() (c []rdmotest.Chunk) {
			for i := 0; i < 16; i++ {
				c = append(c, chunk(regA, baseA+uint64(i)*8, 8, byte(i*8)))
			}
			return
		}(), 1, 1},
		{"one chunk, no staging", []rdmotest.Chunk{chunk(regA, baseA+100, 50, 1)}, 1, 0},
		{"non-adjacent", []rdmotest.Chunk{chunk(regA, baseA, 8, 1), chunk(regA, baseA+9, 8, 2), chunk(regA, baseA+100, 8, 3)}, 3, 0},
		{"descending is not adjacent", []rdmotest.Chunk{chunk(regA, baseA+8, 8, 1), chunk(regA, baseA, 8, 2)}, 2, 0},
		{"runs", []rdmotest.Chunk{
			chunk(regA, baseA, 4, 1), chunk(regA, baseA+4, 4, 2), chunk(regA, baseA+8, 4, 3), // run
			chunk(regA, baseA+1000, 10, 4),                           // alone
			chunk(regB, baseB+50, 1, 5), chunk(regB, baseB+51, 2, 6), // run in B
		}, 3, 2},
		{"adjacent addresses across regions", []rdmotest.Chunk{chunk(regA, baseA+sizeA-8, 8, 1), chunk(regB, baseB, 8, 2)}, 2, 0},
		{"zero-length chunks are skipped", []rdmotest.Chunk{
			chunk(regA, baseA, 8, 1), chunk(regB, baseB+7, 0, 0), chunk(regA, baseA+8, 8, 2), chunk(regA, baseA+16, 0, 0),
		}, 1, 1},
		{"overlap: later wins", []rdmotest.Chunk{chunk(regA, baseA, 16, 1), chunk(regA, baseA+4, 4, 0xF0)}, 2, 0},
		{"nothing", nil, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, scatter.Options{})
			res := f.run(t, f.tg.ScatterReq(c.chunks...))
			if !res[0].Equal(rdmo.Result{}) {
				t.Fatalf("%+v", res[0])
			}
			if st := f.tg.Stats(); st.Puts != c.puts || st.Buffers != c.buffers {
				t.Fatalf("puts %d buffers %d, want %d %d", st.Puts, st.Buffers, c.puts, c.buffers)
			}
		})
	}
}

func TestMaxCoalesce(t *testing.T) {
	f := newFixture(t, scatter.Options{MaxCoalesce: 100})
	var cs []rdmotest.Chunk
	for i := 0; i < 10; i++ { // 10 x 30 adjacent: 3+3+3+1
		cs = append(cs, chunk(regA, baseA+uint64(i)*30, 30, byte(i)))
	}
	f.run(t, f.tg.ScatterReq(cs...))
	if st := f.tg.Stats(); st.Puts != 4 || st.Buffers != 3 {
		t.Fatalf("%+v", st)
	}
}

// A scatter with any bad iov writes nothing, even its good iovs before the
// bad one; the other requests of the batch are unaffected.
func TestAllOrNothing(t *testing.T) {
	good := []rdmotest.Chunk{chunk(regA, baseA, 8, 1), chunk(regA, baseA+8, 8, 2), chunk(regB, baseB+100, 8, 3)}
	bad := []struct {
		name string
		c    rdmotest.Chunk
		want rdmo.Status
	}{
		{"unknown region", chunk(0x999, baseA, 8, 9), rdmo.StatusUnknownRegion},
		{"foreign region", chunk(regF, baseF, 8, 9), rdmo.StatusRegionNotOwned},
		{"past the end", chunk(regA, baseA+sizeA-7, 8, 9), rdmo.StatusOutOfBounds},
		{"below the base", chunk(regB, baseB-8, 8, 9), rdmo.StatusOutOfBounds},
		{"other region's address", chunk(regA, baseB, 8, 9), rdmo.StatusOutOfBounds},
		{"wraps past 2^64", chunk(regT, math.MaxUint64-3, 8, 9), rdmo.StatusOutOfBounds},
		{"zero-length out of bounds", chunk(regA, baseA+sizeA+1, 0, 0), rdmo.StatusOutOfBounds},
		{"zero-length unknown region", chunk(0x999, baseA, 0, 0), rdmo.StatusUnknownRegion},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			f := newFixture(t, scatter.Options{})
			chunks := append(append([]rdmotest.Chunk{}, good...), b.c)
			reqs := []rdmo.Request{
				f.tg.ScatterReq(chunk(regA, baseA+200, 4, 7)),
				f.tg.ScatterReq(chunks...),
				f.tg.ScatterReq(chunk(regA, baseA+300, 4, 8)),
			}
			res := f.run(t, reqs...)
			if res[0].Status != 0 || res[1].Status != b.want || res[2].Status != 0 {
				t.Fatalf("%s: %+v", b.name, res)
			}
			if f.a[0] != 0 || f.b[100] != 0 {
				t.Fatal("a failed scatter wrote its good chunks")
			}
			if st := f.tg.Stats(); st.Puts != 2 {
				t.Fatalf("puts %d", st.Puts)
			}
		})
	}
}

// Malformed requests (header or payload) write nothing.
func TestMalformed(t *testing.T) {
	f := newFixture(t, scatter.Options{})
	two := rdmotest.ScatterPayload(chunk(regA, baseA, 8, 1), chunk(regA, baseA+8, 8, 2))
	hdr := func(client uint64, flags uint32, count uint64) []byte {
		return wire.AppendScatterRequest(nil, wire.Header{ClientID: client, Flags: flags}, rdmo.ScatterHeader{Count: count})
	}
	lenOver := append([]byte(nil), two...)
	lenOver[len(lenOver)-8-wire.IOVDescLen+wire.IOVLenOffset] = 9 // second iov claims 9 bytes, 8 follow
	cases := []struct {
		name    string
		header  []byte
		payload []byte
		want    rdmo.Status
	}{
		{"count too high", hdr(cl, 0, 3), two, rdmo.StatusPayloadMismatch},
		{"count too low", hdr(cl, 0, 1), two, rdmo.StatusPayloadMismatch},
		{"huge count", hdr(cl, 0, math.MaxUint64), two, rdmo.StatusPayloadMismatch},
		{"truncated descriptor", hdr(cl, 0, 2), two[:32+10], rdmo.StatusPayloadMismatch},
		{"len past payload", hdr(cl, 0, 2), lenOver, rdmo.StatusLengthOverflow},
		{"short header", hdr(cl, 0, 2)[:20], two, rdmo.StatusShortHeader},
		{"long header", append(hdr(cl, 0, 2), 0), two, rdmo.StatusHeaderTooLong},
		{"unknown flags", hdr(cl, 1<<9, 2), two, rdmo.StatusUnknownFlags},
		{"client mismatch", hdr(other, 0, 2), two, rdmo.StatusClientMismatch},
		{"count 0, payload", hdr(cl, 0, 0), two, rdmo.StatusPayloadMismatch},
		{"count 0, empty", hdr(cl, 0, 0), nil, rdmo.StatusOK},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Eager: the worker refuses it before the handler runs.
			req, err := f.tg.ParseReq(c.header, c.payload)
			if rdmo.StatusOf(err) != c.want {
				t.Fatalf("worker: %v, want %s", err, c.want.Name())
			}
			if err == nil {
				res := f.run(t, req, f.tg.ScatterReq(chunk(regB, baseB, 4, 1)))
				if res[0].Status != c.want || res[1].Status != 0 {
					t.Fatalf("%+v", res)
				}
			}
			// Rendezvous: the worker checks the header only, the handler
			// the payload it fetched.
			rv, err := f.tg.RendezvousReq(c.header, c.payload)
			if err != nil {
				if rdmo.StatusOf(err) != c.want {
					t.Fatalf("worker (rendezvous): %v, want %s", err, c.want.Name())
				}
				return
			}
			res := f.tg.RunBatch(f.h, rv, f.tg.ScatterReq(chunk(regB, baseB, 4, 1)))
			if res[0].Status != c.want || res[1].Status != 0 {
				t.Fatalf("rendezvous: %+v", res)
			}
			if f.a[0] != 0 {
				t.Fatal("written")
			}
		})
	}
}

func TestRendezvous(t *testing.T) {
	chunks := []rdmotest.Chunk{chunk(regA, baseA, 8, 1), chunk(regA, baseA+8, 8, 2)}
	t.Run("fetched", func(t *testing.T) {
		f := newFixture(t, scatter.Options{})
		r := f.tg.ScatterReq(chunks...)
		rv := f.tg.Rendezvous(r)
		res := f.tg.RunBatch(f.h, rv)
		if res[0].Status != 0 || !bytes.Equal(f.a[:16], append(chunks[0].Data, chunks[1].Data...)) {
			t.Fatalf("%+v", res)
		}
		if st := f.tg.Stats(); st.Fetches != 1 || st.Puts != 1 {
			t.Fatalf("%+v", st)
		}
	})
	t.Run("over the fetch limit", func(t *testing.T) {
		f := newFixture(t, scatter.Options{})
		f.tg.FetchLimit = 10
		res := f.tg.RunBatch(f.h, f.tg.Rendezvous(f.tg.ScatterReq(chunks...)))
		if res[0].Status != rdmo.StatusRendezvousRefused || f.a[0] != 0 {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("refused like the reference", func(t *testing.T) {
		f := newFixture(t, scatter.Options{RefuseRendezvous: true})
		res := f.tg.RunBatch(f.h, f.tg.Rendezvous(f.tg.ScatterReq(chunks...)), f.tg.ScatterReq(chunks...))
		if res[0].Status != rdmo.StatusRendezvousRefused || res[1].Status != 0 || f.tg.Stats().Fetches != 0 {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("malformed after fetch", func(t *testing.T) {
		f := newFixture(t, scatter.Options{})
		r, err := f.tg.RendezvousReq(wire.AppendScatterRequest(nil, wire.Header{ClientID: cl}, rdmo.ScatterHeader{Count: 3}), rdmotest.ScatterPayload(chunks...))
		if err != nil {
			t.Fatal(err)
		}
		res := f.tg.RunBatch(f.h, r)
		if res[0].Status != rdmo.StatusPayloadMismatch || f.a[0] != 0 {
			t.Fatalf("%+v", res)
		}
	})
}

func TestTargetFaults(t *testing.T) {
	f := newFixture(t, scatter.Options{})
	f.tg.Faults.Put = rdmo.ErrTargetUnreachable
	res := f.tg.RunBatch(f.h, f.tg.ScatterReq(chunk(regA, baseA, 8, 1)))
	if res[0].Status != rdmo.StatusTargetUnreachable {
		t.Fatalf("%+v", res)
	}
	f.tg.Faults = rdmotest.Faults{Fetch: rdmo.ErrTargetUnreachable}
	res = f.tg.RunBatch(f.h, f.tg.Rendezvous(f.tg.ScatterReq(chunk(regA, baseA, 8, 1))))
	if res[0].Status != rdmo.StatusTargetUnreachable {
		t.Fatalf("%+v", res)
	}
}

// Random scatters against the model, with deferred Puts (which catch a
// staging buffer reused while a Put still reads it).
func TestRandomAgainstModel(t *testing.T) {
	for _, deferPuts := range []bool{false, true} {
		t.Run(fmt.Sprintf("defer=%v", deferPuts), func(t *testing.T) {
			f := newFixture(t, scatter.Options{MaxCoalesce: 300})
			f.tg.DeferPuts = deferPuts
			f.tg.FetchLimit = 1500
			rng := rand.New(rand.NewPCG(42, 7))
			var puts, chunksWritten, failed uint64
			for step := 0; step < 3000; step++ {
				n := 1 + rng.IntN(4)
				reqs := make([]rdmo.Request, n)
				want := make([]rdmo.Status, n)
				for k := range reqs {
					var cs []rdmotest.Chunk
					for target := rng.IntN(20); len(cs) < target; {
						region, base, size := rdmo.RegionID(regA), uint64(baseA), sizeA
						if rng.IntN(3) == 0 {
							region, base, size = regB, baseB, sizeB
						}
						addr := base + uint64(rng.IntN(size))
						for run := 1 + rng.IntN(6); run > 0; run-- {
							l := rng.IntN(120)
							if addr+uint64(l) > base+uint64(size) {
								break
							}
							cs = append(cs, chunk(region, addr, l, byte(rng.Uint32())))
							addr += uint64(l)
						}
					}
					if len(cs) > 0 && rng.IntN(8) == 0 {
						c := &cs[rng.IntN(len(cs))]
						switch rng.IntN(3) {
						case 0:
							c.Rkey = regF
						case 1:
							c.Addr += sizeA
						case 2:
							c.Rkey = 0x999
						}
					}
					count := uint64(len(cs))
					if rng.IntN(25) == 0 {
						count++
					}
					p := rdmotest.ScatterPayload(cs...)
					h := wire.AppendScatterRequest(nil, wire.Header{ClientID: cl}, rdmo.ScatterHeader{Count: count})
					r, err := f.tg.ParseReq(h, p)
					if len(p) > 0 && rng.IntN(5) == 0 {
						r, err = f.tg.RendezvousReq(h, p)
						if err == nil && len(p) > 1500 {
							want[k] = rdmo.StatusRendezvousRefused
							reqs[k] = r
							continue
						}
					}
					if err != nil {
						// Malformed eager payload: the worker refuses it and
						// no handler runs; send a well-formed one instead.
						r = f.tg.ScatterReq(cs...)
					}
					want[k] = f.m.Scatter(r, p)
					if want[k] == 0 {
						chunksWritten += uint64(len(cs))
					}
					reqs[k] = r
				}
				before := f.tg.Stats().Puts
				res := f.tg.RunBatch(f.h, reqs...)
				puts += f.tg.Stats().Puts - before
				for k := range res {
					if res[k].Status != want[k] {
						t.Fatalf("step %d req %d: %s (%s), want %s", step, k, res[k].Status.Name(), res[k].Detail, want[k].Name())
					}
					if want[k] != 0 {
						failed++
					}
				}
				if err := f.m.Diff(f.tg); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
			t.Logf("%d chunks written with %d puts (%.3f puts/chunk), %d requests failed", chunksWritten, puts, float64(puts)/float64(chunksWritten), failed)
		})
	}
}

// Clients are served concurrently by one handler (run with -race).
func TestConcurrentClients(t *testing.T) {
	h := scatter.New(scatter.Options{})
	root := rdmotest.NewTarget(1)
	var wg sync.WaitGroup
	for c := uint64(1); c <= 4; c++ {
		tg := root
		if c > 1 {
			tg = root.Peer(rdmo.ClientID(c))
		}
		mem := tg.AddRegion(rdmo.RegionID(c), c<<32, 4096)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				off := uint64(i%32) * 64
				res := tg.RunBatch(h, tg.Req(wire.AppendScatterRequest(nil, wire.Header{ClientID: c}, rdmo.ScatterHeader{Count: 2}),
					rdmotest.ScatterPayload(chunk(rdmo.RegionID(c), c<<32+off, 32, byte(i)), chunk(rdmo.RegionID(c), c<<32+off+32, 32, byte(i+32)))))
				if res[0].Status != 0 || !bytes.Equal(mem[off:off+64], data(64, byte(i))) {
					t.Errorf("client %d step %d: %+v", c, i, res[0])
					return
				}
			}
			h.ClientRemoved(rdmo.ClientID(c))
		}()
	}
	wg.Wait()
}

func benchScatter(b *testing.B, n, size int, adjacent bool) {
	tg := rdmotest.NewTarget(cl)
	tg.AddRegion(regA, baseA, 1<<20)
	h := scatter.New(scatter.Options{})
	var cs []rdmotest.Chunk
	for i := 0; i < n; i++ {
		addr := baseA + uint64(i*size)
		if !adjacent {
			addr += uint64(i)
		}
		cs = append(cs, chunk(regA, addr, size, byte(i)))
	}
	reqs := []rdmo.Request{tg.ScatterReq(cs...)}
	results := make([]rdmo.Result, 1)
	h.HandleBatch(tg, reqs, results) // warm the per-client scratch
	tg.EndBatch()
	b.ReportAllocs()
	b.SetBytes(int64(n * size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.HandleBatch(tg, reqs, results)
		tg.EndBatch()
	}
	b.StopTimer()
	if results[0].Status != 0 {
		b.Fatal(results[0])
	}
	b.ReportMetric(float64(tg.Stats().Puts)/float64(b.N+1), "puts/op")
}

func BenchmarkMerge16x8(b *testing.B)    { benchScatter(b, 16, 8, true) }
func BenchmarkMerge64x64(b *testing.B)   { benchScatter(b, 64, 64, true) }
func BenchmarkNoMerge64x64(b *testing.B) { benchScatter(b, 64, 64, false) }

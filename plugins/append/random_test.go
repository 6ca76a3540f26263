package append_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	appendh "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/plugins/flush"
	"github.com/openrdmo/rdmo/plugins/scatter"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// The random test drives the append, scatter and flush handlers through a
// seeded sequence of batches and checks every result and every byte of
// target memory against rdmotest.Model plus appendModel after every step.

const (
	rS, rP, rD1, rD2, rX, rF, rT = 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57
	bS                           = 0x1000_0000
	bP                           = 0x2000_0000
	bD1                          = 0x3000_0000
	bD2                          = 0x4000_0000
	bX                           = 0x5000_0000
	bF                           = 0x6000_0000
	sT                           = 4096
	bT                           = math.MaxUint64 - sT
	sX                           = 8192
	simFetchLimit                = 2000
)

type simConfig struct {
	strategy  appendh.Strategy
	deferPuts bool
	local     bool // regions the worker maps (rdmo.Region.Local)
	// safe sequences never fail after a tail is reserved (no overflow, no
	// misplaced tails, nobody else moves a tail), so Owned and Shared must
	// give the same results and memory.
	safe bool
}

type queueDef struct {
	hdr  rdmo.AppendHeader
	init uint64
}

type sim struct {
	t      testing.TB
	cfg    simConfig
	rng    *rand.Rand
	tg     *rdmotest.Target
	app    rdmo.Handler
	sc, fl rdmo.Handler
	model  *rdmotest.Model
	am     *appendModel
	queues []queueDef
	sizeD2 int

	appends, appendPuts, fences uint64
	failures                    map[rdmo.Status]int
}

func newSim(t testing.TB, cfg simConfig, seed uint64) *sim {
	s := &sim{t: t, cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), failures: map[rdmo.Status]int{}}
	tg := rdmotest.NewTarget(cl)
	tg.DeferPuts = cfg.deferPuts
	tg.LocalRegions = cfg.local
	tg.FetchLimit = simFetchLimit
	s.tg = tg
	sizeS, sizeD1, sizeD2 := 48<<10, 64<<10, 4<<10
	if cfg.safe {
		sizeS, sizeD1, sizeD2 = 192<<10, 192<<10, 192<<10
	}
	s.sizeD2 = sizeD2
	tg.AddRegion(rS, bS, sizeS)
	tg.AddRegion(rP, bP, 4096)
	tg.AddRegion(rD1, bD1, sizeD1)
	tg.AddRegion(rD2, bD2, sizeD2)
	tg.AddRegion(rX, bX, sX)
	tg.AddRegionFor(other, rF, bF, 4096)
	tg.AddRegion(rT, bT, sT)
	s.queues = []queueDef{
		{rdmo.AppendHeader{PtrAddr: bS, PtrRkey: rS, DataRkey: rS}, bS + 8},
		{rdmo.AppendHeader{PtrAddr: bP, PtrRkey: rP, DataRkey: rD1}, bD1},
		{rdmo.AppendHeader{PtrAddr: bP + 8, PtrRkey: rP, DataRkey: rD2}, bD2},
	}
	if !cfg.safe {
		// Fills after a few appends; in Shared mode its tail then runs
		// past 2^64 and wraps below the region.
		s.queues = append(s.queues, queueDef{rdmo.AppendHeader{PtrAddr: bP + 16, PtrRkey: rP, DataRkey: rT}, bT + sT - 300})
	}
	for _, q := range s.queues {
		setU64(tg, q.hdr.PtrRkey, q.hdr.PtrAddr, q.init)
	}
	s.app = appendh.New(appendh.Options{Strategy: cfg.strategy, MaxCoalesce: 1024})
	s.sc = scatter.New(scatter.Options{MaxCoalesce: 512})
	s.fl = flush.New()
	tg.Register(s.app, s.sc, s.fl)
	s.model = rdmotest.NewModel(tg)
	s.am = newAppendModel(s.model, cl, cfg.strategy == appendh.Shared)
	return s
}

func setU64(tg *rdmotest.Target, region rdmo.RegionID, addr, v uint64) {
	r, err := tg.Region(region)
	if err != nil {
		panic(err)
	}
	le.PutUint64(tg.Memory(region)[addr-r.Base:], v)
}

func (s *sim) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(s.rng.Uint32())
	}
	return b
}

func (s *sim) size() int {
	limit := 3000
	if s.cfg.safe {
		limit = 200
	}
	switch r := s.rng.IntN(10); {
	case r < 7:
		return 1 + s.rng.IntN(64)
	case r < 9:
		return 1 + s.rng.IntN(min(600, limit))
	default:
		return 1 + s.rng.IntN(limit)
	}
}

// appendReq makes one APPEND request and its payload.
func (s *sim) appendReq() (rdmo.Request, []byte) {
	tg := s.tg
	q := s.queues[s.rng.IntN(len(s.queues))].hdr
	p := s.bytes(s.size())
	if s.rng.IntN(8) == 0 {
		// Bad regions and addresses only: malformed headers, empty
		// payloads and other clients' requests never reach a handler.
		switch s.rng.IntN(4) {
		case 0:
			q.PtrRkey = 0x999
		case 1:
			q.DataRkey = rF
		case 2:
			q.PtrAddr += 4
		case 3:
			q.PtrAddr = bP + 4096
		}
	}
	r := tg.AppendReq(q, p)
	if len(p) > 0 && s.rng.IntN(7) == 0 {
		r = tg.Rendezvous(r)
	}
	return r, p
}

// scatterReq makes one SCATTER request (sometimes invalid) and its payload.
func (s *sim) scatterReq() (rdmo.Request, []byte) {
	tg := s.tg
	n := s.rng.IntN(13)
	var chunks []rdmotest.Chunk
	for len(chunks) < n {
		region, base, size := rdmo.RegionID(rX), uint64(bX), uint64(sX)
		if s.rng.IntN(4) == 0 {
			region, base, size = rD1, bD1+32<<10, 16<<10 // far behind queue 1's data
		}
		addr := base + uint64(s.rng.IntN(int(size)))
		for run := 1 + s.rng.IntN(5); run > 0 && len(chunks) < n; run-- { // adjacent runs
			l := s.rng.IntN(200)
			if s.rng.IntN(10) == 0 {
				l = 0
			}
			if addr+uint64(l) > base+size {
				break
			}
			chunks = append(chunks, rdmotest.Chunk{Rkey: region, Addr: addr, Data: s.bytes(l)})
			addr += uint64(l)
		}
	}
	if len(chunks) > 0 && s.rng.IntN(10) == 0 { // one bad chunk spoils the request
		c := &chunks[s.rng.IntN(len(chunks))]
		switch s.rng.IntN(4) {
		case 0:
			c.Rkey = 0x999
		case 1:
			c.Rkey = rF
		case 2:
			c.Addr = bX + sX - uint64(len(c.Data)) + 1
			if len(c.Data) == 0 {
				c.Addr++
			}
		case 3:
			c.Rkey, c.Addr = rT, math.MaxUint64-uint64(s.rng.IntN(len(c.Data)+1))+1
			if c.Addr == 0 {
				c.Addr = math.MaxUint64
			}
		}
	}
	payload := rdmotest.ScatterPayload(chunks...)
	count := uint64(len(chunks))
	h := wire.AppendScatterRequest(nil, wire.Header{ClientID: cl}, rdmo.ScatterHeader{Count: count})
	r := tg.Req(h, payload)
	if len(payload) > 0 && s.rng.IntN(6) == 0 {
		r = tg.Rendezvous(r)
		// A malformed payload reaches the handler only by rendezvous: the
		// worker refuses an eager one before any handler runs.
		if s.rng.IntN(20) == 0 {
			switch s.rng.IntN(3) {
			case 0:
				count++
			case 1:
				if count > 0 {
					count--
				}
			case 2:
				payload = payload[:s.rng.IntN(len(payload))]
			}
			r.Scatter.Count, r.Length = count, uint64(len(payload))
			tg.SetRendezvousPayload(r.Seq, payload)
		}
	}
	return r, payload
}

func (s *sim) check(step int, what string, got, want []rdmo.Result) {
	s.t.Helper()
	for i := range got {
		if got[i].Status != want[i].Status || got[i].Value != want[i].Value {
			s.t.Fatalf("step %d (%s) req %d: got %s %#x (%s), model %s %#x", step, what, i,
				got[i].Status.Name(), got[i].Value, got[i].Detail, want[i].Status.Name(), want[i].Value)
		}
		if got[i].Status != rdmo.StatusOK {
			s.failures[got[i].Status]++
		}
	}
	if err := s.model.Diff(s.tg); err != nil {
		s.t.Fatalf("step %d (%s): %v", step, what, err)
	}
}

// step runs one random step and returns its kind and results.
func (s *sim) step(i int) (string, []rdmo.Result) {
	tg := s.tg
	switch r := s.rng.IntN(100); {
	case r < 50:
		n := 1 + s.rng.IntN(10)
		reqs := make([]rdmo.Request, n)
		payloads := make([][]byte, n)
		for k := range reqs {
			reqs[k], payloads[k] = s.appendReq()
		}
		before := tg.Stats().Puts
		got := tg.RunBatch(s.app, reqs...)
		s.appendPuts += tg.Stats().Puts - before
		for _, g := range got {
			if g.Status == rdmo.StatusOK {
				s.appends++
			}
		}
		s.check(i, "append", got, s.am.batch(reqs, payloads))
		return "append", got
	case r < 80:
		n := 1 + s.rng.IntN(4)
		reqs := make([]rdmo.Request, n)
		want := make([]rdmo.Result, n)
		for k := range reqs {
			var p []byte
			reqs[k], p = s.scatterReq()
			if reqs[k].Rendezvous && len(p) > simFetchLimit {
				want[k].Status = rdmo.StatusRendezvousRefused
				continue
			}
			want[k].Status = s.model.Scatter(reqs[k], p)
		}
		got := tg.RunBatch(s.sc, reqs...)
		s.check(i, "scatter", got, want)
		return "scatter", got
	case r < 94:
		got := tg.RunBatch(s.fl, tg.FlushReq(uint64(i)))
		if !s.am.shared {
			s.am.fence()
		}
		s.fences++
		s.check(i, "flush", got, []rdmo.Result{{}})
		return "flush", got
	case r < 96:
		// Deregister and re-register the small data region (zeroed).
		if err := tg.RemoveRegion(rD2); err != nil {
			s.t.Fatal(err)
		}
		if !s.am.shared {
			s.am.regionRemoved(rD2)
		}
		tg.AddRegion(rD2, bD2, s.sizeD2)
		if err := s.model.Write(rD2, bD2, make([]byte, s.sizeD2)); err != nil {
			s.t.Fatal(err)
		}
		s.check(i, "region removed", nil, nil)
		return "region removed", nil
	case r < 98:
		// The client goes; a new session starts with fresh tails.
		tg.RemoveClient()
		s.am.clientRemoved()
		for _, q := range s.queues {
			setU64(tg, q.hdr.PtrRkey, q.hdr.PtrAddr, q.init)
			s.model.PutUint64(q.hdr.PtrRkey, q.hdr.PtrAddr, q.init)
		}
		s.check(i, "client removed", nil, nil)
		return "client removed", nil
	default:
		// Someone else reserves space (Shared only: an owned tail is the
		// worker's alone).
		if s.am.shared && !s.cfg.safe {
			q := s.queues[s.rng.IntN(len(s.queues))].hdr
			d := uint64(1 + s.rng.IntN(100))
			if _, err := rdmo.FetchAdd(tg, q.PtrRkey, q.PtrAddr, d); err != nil {
				s.t.Fatal(err)
			}
			s.model.PutUint64(q.PtrRkey, q.PtrAddr, s.model.Uint64(q.PtrRkey, q.PtrAddr)+d)
			s.check(i, "other appender", nil, nil)
			return "other appender", nil
		}
	}
	return "nothing", nil
}

// finish flushes and checks memory one last time.
func (s *sim) finish() {
	got := s.tg.RunBatch(s.fl, s.tg.FlushReq(0))
	if !s.am.shared {
		s.am.fence()
	}
	s.check(-1, "final flush", got, []rdmo.Result{{}})
}

// simSteps is the length of a random sequence (shorter with -short).
func simSteps() int {
	if testing.Short() {
		return 500
	}
	return 3000
}

func TestRandomAgainstModel(t *testing.T) {
	for _, strat := range strategies {
		for _, mode := range []struct{ deferPuts, local bool }{{false, false}, {true, false}, {false, true}} {
			name := fmt.Sprintf("%s/defer=%v/local=%v", strat, mode.deferPuts, mode.local)
			t.Run(name, func(t *testing.T) {
				for seed := uint64(1); seed <= 2; seed++ {
					s := newSim(t, simConfig{strategy: strat, deferPuts: mode.deferPuts, local: mode.local}, seed)
					for i := 0; i < simSteps(); i++ {
						s.step(i)
					}
					s.finish()
					if seed == 1 {
						t.Logf("%s: %d appends, %d append puts (%.3f puts/append), %d flushes, failures by status: %v",
							name, s.appends, s.appendPuts, float64(s.appendPuts)/float64(s.appends), s.fences, statusNames(s.failures))
					}
				}
			})
		}
	}
}

func statusNames(m map[rdmo.Status]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k.Name()] = v
	}
	return out
}

// With nothing else moving the tails and no failure after a reservation,
// Owned and Shared give the same results and the same memory after every
// flush.
func TestOwnedSharedIdentical(t *testing.T) {
	for seed := uint64(10); seed < 12; seed++ {
		o := newSim(t, simConfig{strategy: appendh.Owned, safe: true}, seed)
		s := newSim(t, simConfig{strategy: appendh.Shared, safe: true}, seed)
		for i := 0; i < simSteps(); i++ {
			ko, ro := o.step(i)
			ks, rs := s.step(i)
			if ko != ks || len(ro) != len(rs) {
				t.Fatalf("seed %d step %d: the sequences diverged", seed, i)
			}
			for k := range ro {
				if ro[k].Status != rs[k].Status || ro[k].Value != rs[k].Value {
					t.Fatalf("seed %d step %d req %d: owned %s %#x, shared %s %#x", seed, i, k,
						ro[k].Status.Name(), ro[k].Value, rs[k].Status.Name(), rs[k].Value)
				}
			}
			if ko == "flush" {
				// After a flush the two memories must be equal.
				if err := o.model.Diff(s.tg); err != nil {
					t.Fatalf("seed %d step %d: owned and shared memory differ after a flush: %v", seed, i, err)
				}
			}
		}
		o.finish()
		s.finish()
		if err := o.model.Diff(s.tg); err != nil {
			t.Fatalf("seed %d: owned and shared memory differ: %v", seed, err)
		}
		if o.appends == 0 || o.fences == 0 {
			t.Fatal("sequence did nothing")
		}
		if seed == 10 {
			t.Logf("%d appends, owned %d puts, shared %d puts, failures %v", o.appends, o.appendPuts, s.appendPuts, statusNames(o.failures))
		}
	}
}

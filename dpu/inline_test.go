package dpu_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/openrdmo/rdmo/dpu"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/plugins/flush"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// opInline is served by inlineHandler, which declares HandlerInfo.Inline.
// Sub-header: mode, region, addr, arg.
const opInline = rdmo.OpUserBase + 41

const (
	inlineAdd   = iota // fetch-add arg at addr (Target.Sync); Value: the old value
	inlineFail         // fail with StatusTestFull and a detail naming arg
	inlinePanic        // panic
	inlineFetch        // Fetch the payload and Put it at addr; Value: its length
	inlineNull         // nothing
)

type inlineHandler struct{ rdmo.BaseHandler }

func (inlineHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: "test-inline", Version: "1", Ops: []uint32{opInline}, NoCachedState: true, Inline: true}
}

func (inlineHandler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	for i := range reqs {
		r := &reqs[i]
		region, addr, arg := regionSub(r, 1), sub(r, 2), sub(r, 3)
		switch sub(r, 0) {
		case inlineAdd:
			old, err := rdmo.FetchAdd(t, region, addr, arg)
			results[i] = rdmo.ResultOf(err)
			results[i].Value = old
		case inlineFail:
			results[i] = rdmo.Fail(statusTestFull, "inline failure %d", arg)
		case inlinePanic:
			panic(fmt.Sprintf("inline boom %d", arg))
		case inlineFetch:
			data, err := t.Fetch(r)
			if err == nil {
				err = t.Put(region, addr, data)
			}
			results[i] = rdmo.ResultOf(err)
			results[i].Value = uint64(len(data))
		case inlineNull:
		}
	}
}

func inlineReq(client uint64, flags uint32, mode uint64, region, addr, arg uint64) []byte {
	return userReq(client, opInline, flags, mode, region, addr, arg)
}

// A model of one word that an inline handler (fetch-add) and an executor
// handler (put) both change: every answer is what running the requests one
// by one in arrival order gives, with or without FENCE, whether a batch ran
// on the loop or on the executor. The loop runs the inline handler's
// batches itself only where every region of the client is mapped (shm),
// and does its atomics with the CPU there; over tcp nothing runs inline.
func TestInlineModel(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: []rdmo.Handler{inlineHandler{}, putHandler{}}})
		s := e.newSetup(1, 4096, 0, 4096)
		in := s.in
		addr := s.base + 64
		le.PutUint64(s.mem(addr, 8), 0)
		st0 := e.w.Stats()

		// Alone on an idle worker: inline where the region is mapped.
		if a := in.ack(in.send(inlineReq(1, rdmo.FlagAck, inlineAdd, s.region, addr, 5), nil, 0)); a.Status != rdmo.StatusOK || a.Value != 0 {
			t.Fatalf("first add: %+v", a)
		}
		st1 := e.w.Stats()
		mapped := tr.Name == "shm"
		wantInline := map[bool]uint64{true: 1, false: 0}[mapped]
		if got := st1.InlineBatches - st0.InlineBatches; got != wantInline {
			t.Fatalf("%s: the first add ran inline %d times, want %d", tr.Name, got, wantInline)
		}
		if got := st1.CPUAtomics - st0.CPUAtomics; got != wantInline {
			t.Fatalf("%s: %d CPU atomics for the first add, want %d", tr.Name, got, wantInline)
		}

		// Pipelined: adds and puts, some fenced, answers checked against
		// the model.
		rng := rand.New(rand.NewPCG(1, 2))
		word := uint64(5)
		type want struct {
			value uint64
			add   bool
		}
		wants := map[uint64]want{}
		rounds := 20
		if !mapped {
			rounds = 5 // each atomic a round trip to the test target's progress, which naps
		}
		for round := 0; round < rounds; round++ {
			var seqs []uint64
			for i := 0; i < 40; i++ {
				flags := uint32(rdmo.FlagAck)
				if rng.IntN(4) == 0 {
					flags |= rdmo.FlagFence
				}
				if rng.IntN(3) > 0 {
					d := uint64(rng.IntN(1000) + 1)
					seq := in.send(inlineReq(1, flags, inlineAdd, s.region, addr, d), nil, 0)
					wants[seq] = want{value: word, add: true}
					word += d
					seqs = append(seqs, seq)
					continue
				}
				v := rng.Uint64()
				seq := in.send(userReq(1, opPut, flags, s.region, addr), le.AppendUint64(nil, v), 0)
				wants[seq] = want{value: addr}
				word = v
				seqs = append(seqs, seq)
			}
			for _, seq := range seqs {
				a := in.ack(seq)
				w := wants[seq]
				if a.Status != rdmo.StatusOK || a.Value != w.value {
					t.Fatalf("round %d seq %d (add %v): %+v, want value %#x", round, seq, w.add, a, w.value)
				}
			}
		}
		if _, f := in.flush(99); f.Failed != 0 {
			t.Fatalf("flush: %+v", f)
		}
		if got := le.Uint64(s.mem(addr, 8)); got != word {
			t.Fatalf("target holds %#x, the model %#x", got, word)
		}
		st2 := e.w.Stats()
		t.Logf("%s: %d of %d batches inline, %d CPU atomics", tr.Name, st2.InlineBatches-st0.InlineBatches,
			st2.Batches-st0.Batches, st2.CPUAtomics-st0.CPUAtomics)
		if !mapped && (st2.InlineBatches != st0.InlineBatches || st2.CPUAtomics != st0.CPUAtomics) {
			t.Fatalf("%s: %d batches inline, %d CPU atomics on unmapped memory", tr.Name,
				st2.InlineBatches-st0.InlineBatches, st2.CPUAtomics-st0.CPUAtomics)
		}
	})
}

// Bad input on the loop: a failing inline handler's status and detail, and
// a panic's, reach the initiator in the ack, the worker goes on serving;
// a rendezvous payload (which Target.Fetch must wait for) is never run
// inline, and a FENCE behind a batch at the executor waits for it.
func TestInlineBadInput(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		slow := newSlow(t)
		e := newEnv(t, tr, dpu.Config{Handlers: []rdmo.Handler{inlineHandler{}, slow}})
		s := e.newSetup(1, 1<<16, 0, 1<<16)
		in := s.in
		mapped := tr.Name == "shm"
		inlined := func(what string, before dpu.Stats, want uint64) {
			t.Helper()
			if !mapped {
				want = 0
			}
			if got := e.w.Stats().InlineBatches - before.InlineBatches; got != want {
				t.Fatalf("%s: %d batches inline, want %d", what, got, want)
			}
		}

		st := e.w.Stats()
		seq := in.send(inlineReq(1, rdmo.FlagAck, inlineFail, s.region, s.base, 7), nil, 0)
		if a := in.ack(seq); a.Status != statusTestFull || in.details[seq] != "inline failure 7" {
			t.Fatalf("failure: %+v, detail %q", a, in.details[seq])
		}
		inlined("failure", st, 1)

		st = e.w.Stats()
		seq = in.send(inlineReq(1, rdmo.FlagAck, inlinePanic, s.region, s.base, 8), nil, 0)
		if a := in.ack(seq); a.Status != rdmo.StatusHandlerFailed || !strings.Contains(in.details[seq], "inline boom 8") {
			t.Fatalf("panic: %+v, detail %q", a, in.details[seq])
		}
		inlined("panic", st, 1)
		if got := e.w.Stats().HandlerPanics - st.HandlerPanics; got != 1 {
			t.Fatalf("%d panics counted", got)
		}

		// Rendezvous: to the executor, where Fetch may wait.
		st = e.w.Stats()
		big := pattern(12000, 3)
		seq = in.send(inlineReq(1, rdmo.FlagAck, inlineFetch, s.region, s.base+4096, 0), big, ucp.SendRendezvous)
		if a := in.ack(seq); a.Status != rdmo.StatusOK || a.Value != uint64(len(big)) {
			t.Fatalf("rendezvous: %+v, detail %q", a, in.details[seq])
		}
		inlined("rendezvous", st, 0)
		// An ack does not make a write visible, a flush does: over tcp the
		// put may still be on its way to the target's memory.
		if _, f := in.flush(1); f.Failed != 2 || f.FirstStatus != statusTestFull {
			t.Fatalf("flush: %+v", f)
		}
		if got := s.mem(s.base+4096, len(big)); string(got) != string(big) {
			t.Fatal("rendezvous payload not in target memory")
		}

		// A fenced inline request behind a batch held at the executor runs
		// after it, and sees its write.
		addr := s.base + 256
		le.PutUint64(s.mem(addr, 8), 0)
		slowSeq := in.send(userReq(1, opSlow, rdmo.FlagAck, s.region, addr), le.AppendUint64(nil, 100), 0)
		slow.waitStarted(in)
		st = e.w.Stats()
		seq = in.send(inlineReq(1, rdmo.FlagAck|rdmo.FlagFence, inlineAdd, s.region, addr, 1), nil, 0)
		slow.release()
		if a := in.ack(slowSeq); a.Status != rdmo.StatusOK {
			t.Fatalf("slow: %+v", a)
		}
		if a := in.ack(seq); a.Status != rdmo.StatusOK || a.Value != 100 {
			t.Fatalf("fenced add after the slow put: %+v, want old value 100", a)
		}
		if got := le.Uint64(s.mem(addr, 8)); got != 101 {
			t.Fatalf("target holds %d, want 101", got)
		}

		// Still serving, inline again once the executor is idle.
		st = e.w.Stats()
		if a := in.ack(in.send(inlineReq(1, rdmo.FlagAck, inlineAdd, s.region, addr, 1), nil, 0)); a.Status != rdmo.StatusOK || a.Value != 101 {
			t.Fatalf("add after all that: %+v", a)
		}
		inlined("last add", st, 1)
		if _, f := in.flush(2); f.Failed != 0 {
			t.Fatalf("flush: %+v", f)
		}
	})
}

// A FLUSH after owned appends writes the cached tail back on the loop
// (the append handler is Inline) where every region is mapped; after a
// batch of a handler that caches state and is not Inline it goes to the
// executor, whose WriteBackAll reaches that handler too; and once that
// state is written back, FLUSHes run on the loop again. Every FLUSH leaves
// the target holding what it must.
func TestFlushWriteBackInline(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		cache := newCache()
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(appendop.New(appendop.Options{}), flush.New(), cache, inlineHandler{})})
		const qlen = 64 << 10
		s := e.newSetup(1, qlen, 0, qlen)
		in := s.in
		q := s.base
		le.PutUint64(s.mem(q, 8), q+8)
		mapped := tr.Name == "shm"
		tail := q + 8
		var want []byte
		// flush sends n appends and a FLUSH; the FLUSH's batch ran on the
		// loop or did not, and the target holds the tail and the data.
		flush := func(id uint64, n int, inline bool) {
			t.Helper()
			for i := 0; i < n; i++ {
				p := pattern(8+i%24, byte(id+uint64(i)))
				want = append(want, p...)
				tail += uint64(len(p))
				in.send(appendReq(1, 0, q, s.region, s.region), p, 0)
			}
			if n > 0 {
				// The appends' batches complete before the count is
				// read (a fenced request of a handler without state).
				in.ack(in.send(inlineReq(1, rdmo.FlagAck|rdmo.FlagFence, inlineNull, 0, 0, 0), nil, 0))
			}
			before := e.w.Stats().InlineBatches
			if _, f := in.flush(id); f.Failed != 0 {
				t.Fatalf("flush %d: %+v", id, f)
			}
			got := e.w.Stats().InlineBatches - before
			if wantN := map[bool]uint64{false: 0, true: 1}[inline && mapped]; got != wantN {
				t.Fatalf("%s: flush %d ran on the loop %d times, want %d", tr.Name, id, got, wantN)
			}
			if got := le.Uint64(s.mem(q, 8)); got != tail {
				t.Fatalf("flush %d: target tail %#x, want %#x", id, got, tail)
			}
			if !bytes.Equal(s.mem(q+8, len(want)), want) {
				t.Fatalf("flush %d: appended data differs", id)
			}
		}
		flush(1, 40, true)
		flush(2, 3, true)
		// A non-Inline handler caches a value: the next FLUSH must reach
		// its WriteBack, on the executor.
		in.ack(in.send(userReq(1, opCache, rdmo.FlagAck, s.region, q+qlen-64, 0x5EED), nil, 0))
		flush(3, 5, false)
		if got := le.Uint64(s.mem(q+qlen-64, 8)); got != 0x5EED {
			t.Fatalf("the cached value was not written back: %#x", got)
		}
		flush(4, 7, true)
	})
}

// opRndv is served by rndvHandler, which declares Inline and
// InlineRendezvous. Sub-header: mode, region, addr.
const opRndv = rdmo.OpUserBase + 42

const (
	rndvPlace = iota // Place the payload at addr; Value: its length
	rndvFetch        // Fetch the payload (ruled out by InlineRendezvous)
)

type rndvHandler struct{ rdmo.BaseHandler }

func (rndvHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: "test-rndv", Version: "1", Ops: []uint32{opRndv}, NoCachedState: true, Inline: true, InlineRendezvous: true}
}

func (rndvHandler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	for i := range reqs {
		r := &reqs[i]
		region, addr := regionSub(r, 1), sub(r, 2)
		var err error
		switch sub(r, 0) {
		case rndvPlace:
			err = t.Place(r, region, addr)
		case rndvFetch:
			_, err = t.Fetch(r)
		}
		results[i] = rdmo.ResultOf(err)
		results[i].Value = r.Length
	}
}

// A handler that declares InlineRendezvous has its rendezvous payloads
// placed from batches the loop runs (where every region is mapped), while
// the earlier ones are still landing: every byte lands where it must. A
// Fetch there, which it promised not to make, fails its request with
// HandlerFailed instead of waiting for the loop, and the worker goes on
// serving; on the executor (tcp) the same Fetch works.
func TestInlineRendezvous(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: []rdmo.Handler{rndvHandler{}}})
		const n, size = 24, 12000
		s := e.newSetup(1, n*size, 0, n*size)
		in := s.in
		mapped := tr.Name == "shm"
		st := e.w.Stats()
		seqs := make([]uint64, n)
		for i := range seqs {
			seqs[i] = in.send(userReq(1, opRndv, rdmo.FlagAck, rndvPlace, s.region, s.base+uint64(i*size)), pattern(size, byte(i)), ucp.SendRendezvous)
		}
		for i, seq := range seqs {
			if a := in.ack(seq); a.Status != rdmo.StatusOK || a.Value != size {
				t.Fatalf("place %d: %+v, detail %q", i, a, in.details[seq])
			}
		}
		if _, f := in.flush(1); f.Failed != 0 {
			t.Fatalf("flush: %+v", f)
		}
		for i := range seqs {
			if got := s.mem(s.base+uint64(i*size), size); !bytes.Equal(got, pattern(size, byte(i))) {
				t.Fatalf("payload %d not in target memory", i)
			}
		}
		st1 := e.w.Stats()
		inline := st1.InlineBatches - st.InlineBatches
		t.Logf("%s: %d of %d batches inline", tr.Name, inline, st1.Batches-st.Batches)
		if mapped && inline == 0 || !mapped && inline != 0 {
			t.Fatalf("%s: %d rendezvous batches inline", tr.Name, inline)
		}

		seq := in.send(userReq(1, opRndv, rdmo.FlagAck, rndvFetch, s.region, s.base), pattern(size, 99), ucp.SendRendezvous)
		a := in.ack(seq)
		switch {
		case mapped && (a.Status != rdmo.StatusHandlerFailed || !strings.Contains(in.details[seq], "InlineRendezvous")):
			t.Fatalf("Fetch on the loop: %+v, detail %q; want HandlerFailed naming InlineRendezvous", a, in.details[seq])
		case !mapped && a.Status != rdmo.StatusOK:
			t.Fatalf("Fetch on the executor: %+v, detail %q", a, in.details[seq])
		}
		// Still serving.
		seq = in.send(userReq(1, opRndv, rdmo.FlagAck, rndvPlace, s.region, s.base), pattern(size, 7), ucp.SendRendezvous)
		if a := in.ack(seq); a.Status != rdmo.StatusOK {
			t.Fatalf("place after the Fetch: %+v, detail %q", a, in.details[seq])
		}
		if _, f := in.flush(2); f.Failed != boolInt(mapped) {
			t.Fatalf("flush: %+v", f)
		}
		if got := s.mem(s.base, size); !bytes.Equal(got, pattern(size, 7)) {
			t.Fatal("the last payload is not in target memory")
		}
	})
}

func boolInt(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/ucp"
)

// The pipelined rows: the rate of calls at saturation (chase/D/pipelined,
// the fetch-add rows of the handler forms, rows.go). Each
// initiator keeps pipeDepth chases in flight and starts a new one as soon
// as one ends, so a row's rate is what the processes can do, not the
// inverse of one chase's latency; its p50 is a chase's time in flight,
// queueing included.
//
//   - chase/D/pipelined: indirect reads of depth D with Driver.Start
//     inside one Drive (a ring of CallWaits, each reused once its call
//     settled: no allocation per call), answers taken oldest first
//     (Driver.Wait); the initiator packs queued calls into BATCH messages.
//   - native-chase/D/pipelined: as many chains of D dependent gets, each
//     chain's next get issued (by the command goroutine, which owns the
//     raw UCX worker) as soon as its last one completed: the best a UCX
//     program does with one-sided gets.

// opsPipeMax bounds the chases a pipelined row keeps in flight per
// initiator (its --window, at most this): enough to saturate two cores,
// well within the worker's in-flight limit per queue.
const opsPipeMax = 256

// pipeDepth is the chases a pipelined row keeps in flight per initiator.
func pipeDepth(s roundSpec) int {
	return max(1, min(s.Window, opsPipeMax))
}

// chasePipelined keeps pipeDepth(s) chases of depth d in flight inside
// one Drive and checks every answer.
func chasePipelined(d int) roundFunc { return opsPipelined(chaseCall(d)) }

// opsPipelined keeps pipeDepth(s) of an op-pack row's calls in flight
// inside one Drive and checks every answer: with the call's unordered
// check when it has one (answers that depend on the order the worker ran
// the calls in), else with its check of call n.
func opsPipelined(mk func(s roundSpec, id int) opsCall) roundFunc {
	return func(p *initProc, s roundSpec) (roundResult, error) { return p.opsPipelined(s, mk) }
}

func (p *initProc) opsPipelined(s roundSpec, mk func(s roundSpec, id int) opsCall) (roundResult, error) {
	if err := opsLayoutOK(s, p.id); err != nil {
		return roundResult{}, err
	}
	c := mk(s, p.id)
	depth := pipeDepth(s)
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	type inflight struct {
		c  initiator.CallWait
		n  int
		t0 time.Duration // since start
	}
	ring := make([]inflight, depth)
	var rr roundResult
	err := p.in.Drive(ctx, func(dr *initiator.Driver) error {
		var h Hist
		b := newBudget(s, 16)
		start := time.Now()
		issued, done := 0, 0
		// The loop runs only inside Start and Wait, so the clock is read
		// once a round: the calls started together leave in one loop
		// round after the first reading (a latency a little long, never
		// short), and the calls Ready after a Wait were answered before
		// the reading that followed it. Three readings per call cost a
		// tenth of the initiator's CPU here.
		for {
			t0 := time.Since(start)
			for issued-done < depth && !b.done(issued) {
				f := &ring[issued%depth]
				if err := dr.Start(&f.c, c.op, c.subs[issued%len(c.subs)], nil); err != nil {
					return fmt.Errorf("call %d: %w", issued, err)
				}
				f.n, f.t0 = issued, t0
				issued++
			}
			if done == issued {
				break
			}
			var t1 time.Duration
			for first := true; done < issued && (first || ring[done%depth].c.Ready()); first = false {
				f := &ring[done%depth]
				res, err := dr.Wait(&f.c)
				if first {
					t1 = time.Since(start)
				}
				h.Add(t1 - f.t0)
				if err != nil {
					return fmt.Errorf("call %d: %w", f.n, err)
				}
				if c.unordered != nil {
					err = c.unordered(issued, res)
				} else {
					err = c.check(f.n, res)
				}
				if err != nil {
					return err
				}
				done++
			}
		}
		rr = roundResult{Ops: uint64(done), Bytes: uint64(done * c.size), Elapsed: time.Since(start), Lat: h}
		return nil
	})
	return rr, err
}

// chaseLegs collects the completions of a native pipelined round's gets
// (inside Progress); the tag is the chain's index.
type chaseLegs struct {
	done []ucp.Completion
}

func (l *chaseLegs) Complete(c ucp.Completion) { l.done = append(l.done, c) }

// chaseNativePipelined keeps pipeDepth(s) chains of d dependent gets in
// flight and checks where every chain ends.
func chaseNativePipelined(d int) roundFunc {
	return func(p *initProc, s roundSpec) (roundResult, error) { return p.chaseNativePipelined(s, d) }
}

func (p *initProc) chaseNativePipelined(s roundSpec, d int) (roundResult, error) {
	if err := opsLayoutOK(s, p.id); err != nil {
		return roundResult{}, err
	}
	o := s.Ops
	rkey, err := p.rkey(o.Rkey)
	if err != nil {
		return roundResult{}, err
	}
	chain := o.Chains[p.id]
	depth := pipeDepth(s)
	type chaseState struct {
		hop int
		t0  time.Duration // since start
	}
	st := make([]chaseState, depth)
	bufs := make([]byte, 8*depth)
	legs := &chaseLegs{done: make([]ucp.Completion, 0, depth)}
	get := func(i int, at uint64) error {
		return p.ep.Get(bufs[8*i:8*i+8], at, rkey, legs, uint64(i))
	}
	var h Hist
	b := newBudget(s, 16)
	start := time.Now()
	// One clock reading per progress call that completed gets: the
	// chases that end in it end then, and those begun after it begin
	// then, as opsPipelined stamps a round's calls.
	var now time.Duration
	issued, done, active := 0, 0, 0
	begin := func(i int) error {
		st[i] = chaseState{t0: now}
		issued++
		active++
		return get(i, chain[0])
	}
	for i := 0; i < depth && !b.done(issued); i++ {
		if err := begin(i); err != nil {
			return roundResult{}, err
		}
	}
	deadline := time.Now().Add(s.Duration + flushTimeout)
	for spins := 0; active > 0; spins++ {
		if _, err := p.w.Progress(); err != nil {
			return roundResult{}, err
		}
		if spins&1023 == 1023 && time.Now().After(deadline) {
			return roundResult{}, fmt.Errorf("%d chases still in flight: %w", active, ucp.ErrTimeout)
		}
		if len(legs.done) > 0 {
			now = time.Since(start)
		}
		for _, c := range legs.done {
			i := int(c.Tag)
			if c.Err != nil {
				return roundResult{}, fmt.Errorf("chase %d hop %d: %w", i, st[i].hop, c.Err)
			}
			at := binary.LittleEndian.Uint64(bufs[8*i:])
			st[i].hop++
			if st[i].hop < d {
				if err := get(i, at); err != nil {
					return roundResult{}, err
				}
				continue
			}
			h.Add(now - st[i].t0)
			if at != chain[d] {
				return roundResult{}, fmt.Errorf("chase %d reached %#x, want %#x", done, at, chain[d])
			}
			done++
			active--
			if !b.done(issued) {
				if err := begin(i); err != nil {
					return roundResult{}, err
				}
			}
		}
		legs.done = legs.done[:0]
	}
	return roundResult{Ops: uint64(done), Bytes: uint64(done * 8), Elapsed: time.Since(start), Lat: h}, nil
}

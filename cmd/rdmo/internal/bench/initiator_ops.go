package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/plugins/ops"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp"
)

// The op-pack rows' initiator side (target_ops.go lays their memory out).
// An RDMO row makes its calls one at a time (opsCalls), its native twin
// the one-sided accesses that give the same answer (opsNative); both check
// every answer against the round's layout.

// opsCall is what one initiator calls in an op-pack row's round: the
// operation, the sub-headers it cycles through, the bytes one call counts
// for, and the check of call n's answer.
type opsCall struct {
	op    uint32
	subs  [][]byte
	size  int
	check func(n int, res initiator.Result) error
	// unordered, when set, checks the answers of a pipelined round, which
	// the worker may have run in another order than they were issued:
	// issued is the calls issued so far.
	unordered func(issued int, res initiator.Result) error
}

// opsLayoutOK fails a round whose spec lacks this initiator's layout.
func opsLayoutOK(s roundSpec, id int) error {
	o := s.Ops
	if o == nil || id >= len(o.Chains) || id >= len(o.Keys) || id >= len(o.Counters) {
		return errors.New("op-pack round without this initiator's layout")
	}
	return nil
}

// chaseCall follows a chain of depth d; the answer is the address reached.
func chaseCall(d int) func(s roundSpec, id int) opsCall {
	return func(s roundSpec, id int) opsCall {
		chain := s.Ops.Chains[id]
		return opsCall{op: ops.OpIndirectRead, size: 8,
			subs: [][]byte{ops.IndirectReq{Region: rdmo.RegionID(s.Ops.Region), Addr: chain[0], Depth: uint16(d)}.Sub()},
			check: func(n int, res initiator.Result) error {
				if res.Value != chain[d] || len(res.Data) != 0 {
					return fmt.Errorf("call %d reached %#x with %d bytes, want %#x", n, res.Value, len(res.Data), chain[d])
				}
				return nil
			}}
	}
}

// kvCall looks the initiator's keys up in turn; the answer is the key's
// value, record (id, round, key index).
func kvCall(s roundSpec, id int) opsCall {
	o, keys := s.Ops, s.Ops.Keys[id]
	c := opsCall{op: ops.OpKVLookup, size: o.ValueSize,
		check: func(n int, res initiator.Result) error {
			j := n % len(keys)
			if len(res.Data) != o.ValueSize || !recordOK(res.Data, id, s.Round, uint32(j)) {
				return fmt.Errorf("call %d: key %#x answered %d bytes that are not its value", n, keys[j], len(res.Data))
			}
			return nil
		}}
	for _, k := range keys {
		c.subs = append(c.subs, ops.KVReq{Region: rdmo.RegionID(o.Region), Table: o.Table, Key: k}.Sub())
	}
	return c
}

// fetchAddCall adds 1 to the initiator's counter; call n's answer is the
// counter's start plus n.
func fetchAddCall(s roundSpec, id int) opsCall {
	o := s.Ops
	seen := fetchAddSeen{start: o.Starts[id]}
	return opsCall{op: ops.OpFetchAdd, size: 8, unordered: seen.check,
		subs: [][]byte{ops.AtomicReq{Region: rdmo.RegionID(o.Region), Addr: o.Counters[id], Operand: 1}.FetchAddSub()},
		check: func(n int, res initiator.Result) error {
			if want := o.Starts[id] + uint64(n); res.Value != want {
				return fmt.Errorf("call %d: fetch-add returned %d, want %d", n, res.Value, want)
			}
			return nil
		}}
}

// fetchAddSeen checks pipelined fetch-adds of one counter, answered in
// any order: each answer is the start plus a number below the calls
// issued, and no number comes twice, so a round's answers are exactly the
// start plus 0..n-1 (the target checks the counter moved by n).
type fetchAddSeen struct {
	start uint64
	seen  []uint64 // bit i: start+i answered; grows by doubling
}

func (f *fetchAddSeen) check(issued int, res initiator.Result) error {
	i := res.Value - f.start
	if res.Value < f.start || i >= uint64(issued) {
		return fmt.Errorf("fetch-add returned %d, want %d up to %d", res.Value, f.start, f.start+uint64(issued)-1)
	}
	w := int(i / 64)
	if w >= len(f.seen) {
		f.seen = append(f.seen, make([]uint64, max(w+1-len(f.seen), len(f.seen)))...)
	}
	if f.seen[w]&(1<<(i%64)) != 0 {
		return fmt.Errorf("fetch-add returned %d twice", res.Value)
	}
	f.seen[w] |= 1 << (i % 64)
	return nil
}

func chaseCalls(d int, call bool) roundFunc { return rdmoRound(opsCalls(chaseCall(d), call)) }
func kvCalls(call bool) roundFunc           { return rdmoRound(opsCalls(kvCall, call)) }
func fetchAddCalls(call bool) roundFunc     { return rdmoRound(opsCalls(fetchAddCall, call)) }

// opsCalls makes the round's calls one at a time, inside one Drive (or
// with Initiator.Call when call is set), and checks every answer.
func opsCalls(mk func(s roundSpec, id int) opsCall, call bool) roundFunc {
	return func(p *initProc, s roundSpec) (roundResult, error) {
		if err := opsLayoutOK(s, p.id); err != nil {
			return roundResult{}, err
		}
		c := mk(s, p.id)
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		run := func(do func(sub []byte) (initiator.Result, error)) (roundResult, error) {
			var res initiator.Result
			return timedOps(s, c.size, func(n int) (err error) {
				if res, err = do(c.subs[n%len(c.subs)]); err != nil {
					return fmt.Errorf("call %d: %w", n, err)
				}
				return nil
			}, func(n int) error { return c.check(n, res) })
		}
		if call {
			return run(func(sub []byte) (initiator.Result, error) { return p.in.Call(ctx, c.op, sub, nil) })
		}
		var rr roundResult
		err := p.in.Drive(ctx, func(d *initiator.Driver) error {
			var err error
			rr, err = run(func(sub []byte) (initiator.Result, error) { return d.Call(c.op, sub, nil) })
			return err
		})
		return rr, err
	}
}

// opsWait is one native access's completion (inside Progress).
type opsWait struct {
	done bool
	c    ucp.Completion
}

func (w *opsWait) Complete(c ucp.Completion) { w.done, w.c = true, c }

// await busy-polls the worker until the access completes, as a
// latency-minded UCX program does.
func (p *initProc) await(w *opsWait) error {
	deadline := time.Now().Add(flushTimeout)
	for spins := 0; !w.done; spins++ {
		if _, err := p.w.Progress(); err != nil {
			return err
		}
		if spins&1023 == 1023 && time.Now().After(deadline) {
			return ucp.ErrTimeout
		}
	}
	return w.c.Err
}

func (p *initProc) get(w *opsWait, buf []byte, addr uint64, rkey *ucp.RemoteKey) error {
	*w = opsWait{}
	if err := p.ep.Get(buf, addr, rkey, w, 0); err != nil {
		return err
	}
	return p.await(w)
}

// opsNativeOp is one native operation of a round (check included) and
// the bytes it counts for.
type opsNativeOp func(p *initProc, s roundSpec, rkey *ucp.RemoteKey, w *opsWait) (one func(n int) error, size int)

// opsNative does the round's operations with one-sided accesses, one
// operation at a time, each access issued when the one it depends on
// returned, and checks every answer.
func opsNative(op opsNativeOp) roundFunc {
	return func(p *initProc, s roundSpec) (roundResult, error) {
		if err := opsLayoutOK(s, p.id); err != nil {
			return roundResult{}, err
		}
		rkey, err := p.rkey(s.Ops.Rkey)
		if err != nil {
			return roundResult{}, err
		}
		one, size := op(p, s, rkey, new(opsWait))
		return timedOps(s, size, one, nil)
	}
}

// chaseNative: the d dependent 8-byte gets of a chase.
func chaseNative(d int) opsNativeOp {
	return func(p *initProc, s roundSpec, rkey *ucp.RemoteKey, w *opsWait) (func(int) error, int) {
		chain, word := s.Ops.Chains[p.id], make([]byte, 8)
		return func(n int) error {
			at := chain[0]
			for hop := 0; hop < d; hop++ {
				if err := p.get(w, word, at, rkey); err != nil {
					return fmt.Errorf("hop %d: %w", hop, err)
				}
				at = binary.LittleEndian.Uint64(word)
			}
			if at != chain[d] {
				return fmt.Errorf("chase %d reached %#x, want %#x", n, at, chain[d])
			}
			return nil
		}, 8
	}
}

// kvNative: the key word of the key's bucket (probing on), then the value.
func kvNative(p *initProc, s roundSpec, rkey *ucp.RemoteKey, w *opsWait) (func(int) error, int) {
	o, keys := s.Ops, s.Ops.Keys[p.id]
	blen := uint64(8 + o.ValueSize)
	word, val := make([]byte, 8), make([]byte, o.ValueSize)
	return func(n int) error {
		j := n % len(keys)
		home := ops.KVHome(keys[j], o.Buckets)
		for probe := uint64(0); probe < ops.KVProbes(o.Buckets); probe++ {
			at := o.Table + ops.KVHeaderLen + (home+probe)%o.Buckets*blen
			if err := p.get(w, word, at, rkey); err != nil {
				return err
			}
			switch binary.LittleEndian.Uint64(word) {
			case keys[j]:
				if err := p.get(w, val, at+8, rkey); err != nil {
					return err
				}
				if !recordOK(val, p.id, s.Round, uint32(j)) {
					return fmt.Errorf("lookup %d: key %#x's value is not its own", n, keys[j])
				}
				return nil
			case 0:
				return fmt.Errorf("lookup %d: key %#x not found", n, keys[j])
			}
		}
		return fmt.Errorf("lookup %d: key %#x not within the probe limit", n, keys[j])
	}, o.ValueSize
}

// fetchAddNative: a UCP atomic fetch-add.
func fetchAddNative(p *initProc, s roundSpec, rkey *ucp.RemoteKey, w *opsWait) (func(int) error, int) {
	o := s.Ops
	return func(n int) error {
		*w = opsWait{}
		if err := p.ep.Atomic(ucp.AtomicFetchAdd, 1, 0, o.Counters[p.id], rkey, w, 0); err != nil {
			return err
		}
		if err := p.await(w); err != nil {
			return err
		}
		if want := o.Starts[p.id] + uint64(n); w.c.Value != want {
			return fmt.Errorf("fetch-add %d returned %d, want %d", n, w.c.Value, want)
		}
		return nil
	}, 8
}

package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"

	"github.com/openrdmo/rdmo/plugins/ops"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp"
)

// The operation-pack rows: one RDMO call of plugins/ops (docs/OPS.md)
// against the one-sided round trips a careful UCX user makes for the same
// answer over the initiator's own endpoint to the target, in the same run.
// Each initiator makes one call (or one chain of dependent accesses) at a
// time, so a row's p50 is the latency of one operation and its rate is
// that latency's inverse times the initiators.
//
// An RDMO row makes its calls inside one initiator.Drive per round, on the
// Initiator's progress loop, as the native rows progress their UCX worker
// on the caller's thread: the best way the library offers a dependent
// conversation. Its "/call" twin (chase/D/call, kv-lookup/call,
// fetch-add/call) makes the same calls with Initiator.Call from a
// goroutine of its own, the way most callers do.
//
//   - chase/D: follow D pointers in target memory and return the address
//     reached: one indirect read of depth D (ops.OpIndirectRead, 0 bytes
//     read at the end: the answer is Result.Value). native-chase/D: the D
//     dependent 8-byte gets that take without RDMO, each issued when the
//     previous one returned.
//   - kv-lookup: look a key up in an ops kv table (Result.Data is the
//     value). native-kv-lookup: read the key word of the key's home bucket,
//     then, as it matches, the value: the insert protocol (value first, then
//     the key) makes a reader read the key before the value. Every key sits
//     in its home bucket (the native client's best case: no probing), and
//     the native client knows the table's layout (read once, kept).
//   - fetch-add: add 1 to a u64 and return the old value (ops.OpFetchAdd).
//     native-fetch-add: a UCP atomic fetch-add (over tcp UCX has no network
//     atomics: the target's progress emulates it, with its CPU).
//
// Every round the target lays the memory out afresh (chains at random
// places, new keys and values, counters at random values) and hands the
// expected answers to the initiators, which check every answer; after the
// round the target checks that the read-only rows left its memory as it
// was and that every counter moved by exactly the fetch-adds done.

// kvValueSize is the kv table's value size for a row of size bytes: the
// size rounded up to 8, at most rdmo.MaxResultData (a result's bound).
func kvValueSize(size int) int {
	return min(max((size+7)&^7, 8), rdmo.MaxResultData)
}

// Target memory of the op-pack rows, one region registered with the
// worker (and its packed key for the native rows):
//
//	[0, opsCounterArea)       one u64 counter per initiator, 64 bytes apart
//	[.., +initiators×chase)   per initiator chaseSlots pointer slots, 64 bytes apart
//	then a kv table per value size of the run
const (
	opsLine        = 64
	opsCounterArea = maxInitiators * opsLine
	chaseSlots     = 256
	kvKeysPer      = 32 // keys per initiator
)

// opsLayoutReq asks the target to lay out a round of an op-pack row.
type opsLayoutReq struct {
	Strategy   string `json:"strategy,omitempty"` // the worker to register with ("": none runs)
	Round      int    `json:"round"`
	Initiators int    `json:"initiators"`
	ValueSizes []int  `json:"value_sizes"` // every kv value size of the run
	ValueSize  int    `json:"value_size"`  // this row's
}

// opsSpec is a round of an op-pack row as the initiators get it: where
// things are, and the answers to expect.
type opsSpec struct {
	Region uint64 `json:"region"` // with the worker (0: not registered)
	Rkey   []byte `json:"rkey"`
	// Chains[i][d] is the address initiator i's chain reaches after d
	// hops from Chains[i][0].
	Chains [][]uint64 `json:"chains"`
	Table  uint64     `json:"table"`
	// Buckets and ValueSize are the table's layout (a native client
	// reads the header once and keeps it).
	Buckets   uint64     `json:"buckets"`
	ValueSize int        `json:"value_size"`
	Keys      [][]uint64 `json:"keys"`     // per initiator; key j's value is record (i, round, j)
	Counters  []uint64   `json:"counters"` // per initiator
	Starts    []uint64   `json:"starts"`   // the counters' values at the round's start
}

// opsTarget is the target's op-pack memory.
type opsTarget struct {
	mem     *ucp.Memory
	rkey    []byte
	regs    map[*workerState]uint64 // the region's id with each worker it is registered with
	tables  map[int]uint64          // value size -> table offset
	buckets uint64
	chains  uint64 // offset of the chain area
	n       int    // initiators
	spec    opsSpec
	snap    []byte // the region after the last layout
}

// kvBuckets is the table size for n initiators: at most a quarter full.
func kvBuckets(n int) uint64 {
	return uint64(1) << bits.Len64(uint64(n*kvKeysPer*4-1))
}

// opsLayout (re)lays the op-pack memory out for a round.
func (t *benchTarget) opsLayout(ctx context.Context, req opsLayoutReq) (opsSpec, error) {
	o := &t.ops
	if req.Initiators < 1 || req.Initiators > maxInitiators {
		return opsSpec{}, fmt.Errorf("ops: %d initiators", req.Initiators)
	}
	if o.mem == nil {
		o.n = req.Initiators
		o.buckets = kvBuckets(o.n)
		o.chains = opsCounterArea
		size := o.chains + uint64(o.n*chaseSlots*opsLine)
		o.tables = map[int]uint64{}
		for _, vs := range req.ValueSizes {
			if _, ok := o.tables[vs]; ok {
				continue
			}
			o.tables[vs] = size
			_, n := ops.KVLayout(o.buckets, uint64(vs))
			size += (n + opsLine - 1) &^ (opsLine - 1)
		}
		m, err := t.uctx.Allocate(int(size))
		if err != nil {
			return opsSpec{}, fmt.Errorf("allocate the %d-byte op-pack region: %w", size, err)
		}
		o.mem = m
		clear(m.Bytes())
		if o.rkey, err = m.PackRkey(); err != nil {
			return opsSpec{}, err
		}
		for vs, off := range o.tables {
			hdr, _ := ops.KVLayout(o.buckets, uint64(vs))
			copy(m.Bytes()[off:], hdr)
		}
	}
	if req.Initiators != o.n {
		return opsSpec{}, fmt.Errorf("ops: laid out for %d initiators, asked for %d", o.n, req.Initiators)
	}
	tbl, ok := o.tables[req.ValueSize]
	if !ok {
		return opsSpec{}, fmt.Errorf("ops: no table for %d-byte values", req.ValueSize)
	}
	ws := t.workers[req.Strategy]
	if _, ok := o.regs[ws]; ws != nil && !ok {
		// The table headers are fixed from here on: the kv handler keeps
		// them while the region is registered (docs/OPS.md).
		reg, err := ws.tg.Register(ctx, o.mem)
		if err != nil {
			return opsSpec{}, err
		}
		if o.regs == nil {
			o.regs = map[*workerState]uint64{}
		}
		o.regs[ws] = reg.ID
	}
	mem, base := o.mem.Bytes(), o.mem.Address()
	rng := rand.New(rand.NewPCG(uint64(req.Round), 0x6f7073)) // "ops"
	sp := opsSpec{Rkey: o.rkey, Table: base + tbl, Buckets: o.buckets, ValueSize: req.ValueSize}
	if ws != nil {
		sp.Region = o.regs[ws]
	}
	// Chains: MaxDepth+1 distinct slots of each initiator's area, each
	// pointing at the next.
	clear(mem[o.chains : o.chains+uint64(o.n*chaseSlots*opsLine)])
	for i := 0; i < o.n; i++ {
		area := o.chains + uint64(i*chaseSlots*opsLine)
		perm := rng.Perm(chaseSlots)[:ops.MaxDepth+1]
		chain := make([]uint64, len(perm))
		for k, s := range perm {
			chain[k] = base + area + uint64(s*opsLine)
		}
		for k := 0; k+1 < len(chain); k++ {
			binary.LittleEndian.PutUint64(mem[chain[k]-base:], chain[k+1])
		}
		sp.Chains = append(sp.Chains, chain)
	}
	// The kv table of this value size: emptied, then kvKeysPer keys per
	// initiator, each in its home bucket.
	blen := uint64(8 + req.ValueSize)
	buckets := mem[tbl+ops.KVHeaderLen : tbl+ops.KVHeaderLen+o.buckets*blen]
	clear(buckets)
	for i := 0; i < o.n; i++ {
		var keys []uint64
		for j := 0; len(keys) < kvKeysPer; j++ {
			key := rng.Uint64() | 1
			at := ops.KVHome(key, o.buckets) * blen
			if binary.LittleEndian.Uint64(buckets[at:]) != 0 {
				continue // taken: a key elsewhere would need probing
			}
			binary.LittleEndian.PutUint64(buckets[at:], key)
			fillRecord(buckets[at+8:at+blen], i, req.Round, uint32(len(keys)))
			keys = append(keys, key)
		}
		sp.Keys = append(sp.Keys, keys)
	}
	// Counters, far from wrapping.
	for i := 0; i < o.n; i++ {
		at := uint64(i * opsLine)
		v := rng.Uint64() >> 2
		binary.LittleEndian.PutUint64(mem[at:], v)
		sp.Counters = append(sp.Counters, base+at)
		sp.Starts = append(sp.Starts, v)
	}
	o.snap = append(o.snap[:0], mem...)
	o.spec = sp
	return sp, nil
}

// opsCheck checks the op-pack memory after a round: every counter moved
// by the fetch-adds its initiator did (none for the other rows), nothing
// else changed.
func (t *benchTarget) opsCheck(req targetReq, fetchAdds bool) error {
	o := &t.ops
	if o.mem == nil {
		return errors.New("ops check: no op-pack region")
	}
	mem := o.mem.Bytes()
	for i := 0; i < o.n; i++ {
		want := o.spec.Starts[i]
		if fetchAdds && i < len(req.Counts) {
			want += req.Counts[i]
		}
		if got := binary.LittleEndian.Uint64(mem[i*opsLine:]); got != want {
			return fmt.Errorf("initiator %d's counter is %d, want %d (start %d)", i, got, want, o.spec.Starts[i])
		}
		copy(o.snap[i*opsLine:], mem[i*opsLine:(i+1)*opsLine])
	}
	if i := firstDiff(mem, o.snap); i >= 0 {
		return fmt.Errorf("%s changed target memory at offset %d of the op-pack region", req.Mode, i)
	}
	return nil
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

func (t *benchTarget) opsClose() {
	if t.ops.mem != nil {
		t.ops.mem.Close()
		t.ops.mem = nil
	}
}

// handleOps serves the target's op-pack commands; ok is false for any
// other verb.
func (t *benchTarget) handleOps(ctx context.Context, ls *lineServer, verb string, body []byte) (ok bool, err error) {
	switch verb {
	case "ops-layout":
		var req opsLayoutReq
		if err := json.Unmarshal(body, &req); err != nil {
			return true, err
		}
		sp, err := t.opsLayout(ctx, req)
		if err != nil {
			return true, err
		}
		ls.reply("OPS", sp)
	default:
		return false, nil
	}
	return true, nil
}

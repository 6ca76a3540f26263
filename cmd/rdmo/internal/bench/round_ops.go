package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
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

// The op-pack modes. chase rows are "chase/<depth>" and
// "native-chase/<depth>".
const (
	modeChasePrefix       = "chase/"
	modeNativeChasePrefix = "native-chase/"
	ModeKVLookup          = "kv-lookup"
	ModeNativeKVLookup    = "native-kv-lookup"
	ModeFetchAdd          = "fetch-add"
	ModeNativeFetchAdd    = "native-fetch-add"
	// opsCallSuffix marks an RDMO row's twin that calls with
	// Initiator.Call rather than inside a Drive.
	opsCallSuffix = "/call"
	// opsPipeSuffix marks a chase row that keeps many chases in flight
	// (chase/D/pipelined, native-chase/D/pipelined): the rate at
	// saturation, where the other rows measure one chase at a time.
	opsPipeSuffix = "/pipelined"
	// opsPipeMax bounds the chases a pipelined row keeps in flight per
	// initiator (its --window, at most this): enough to saturate two
	// cores, well within the worker's in-flight limit per queue.
	opsPipeMax = 256
	// modeGroupOps names every op-pack row; they are not in the default
	// set of rows (they compare something else than the append rows).
	modeGroupOps = "ops"
)

// DefaultChaseDepths are the chase depths `--modes ops` measures;
// DefaultPipelinedDepths those it also measures pipelined.
var (
	DefaultChaseDepths     = []int{1, 2, 4, 8}
	DefaultPipelinedDepths = []int{4}
)

// opsCallForm strips the "/call" of an RDMO row's Call twin: the row it
// is the twin of, and whether it is one.
func opsCallForm(mode string) (base string, call bool) {
	return strings.CutSuffix(mode, opsCallSuffix)
}

// opsPipeForm strips the "/pipelined" of a pipelined chase row.
func opsPipeForm(mode string) (base string, pipe bool) {
	return strings.CutSuffix(mode, opsPipeSuffix)
}

// chaseDepth parses a chase row (any form): its depth and whether it is
// the native one.
func chaseDepth(mode string) (depth int, native, ok bool) {
	mode, pipe := opsPipeForm(mode)
	mode, call := opsCallForm(mode)
	if pipe && call {
		return 0, false, false
	}
	s, found := strings.CutPrefix(mode, modeNativeChasePrefix)
	if found && call {
		return 0, true, false
	}
	if found {
		native = true
	} else if s, found = strings.CutPrefix(mode, modeChasePrefix); !found {
		return 0, false, false
	}
	d, err := strconv.Atoi(s)
	if err != nil || d < 1 || d > ops.MaxDepth {
		return 0, native, false
	}
	return d, native, true
}

func isOpsMode(mode string) bool {
	if _, _, ok := chaseDepth(mode); ok {
		return true
	}
	switch mode {
	case ModeKVLookup, ModeNativeKVLookup, ModeFetchAdd, ModeNativeFetchAdd,
		ModeKVLookup + opsCallSuffix, ModeFetchAdd + opsCallSuffix:
		return true
	}
	return false
}

// opsRDMO reports whether mode is an op-pack row that calls the worker.
func opsRDMO(mode string) bool {
	if _, native, ok := chaseDepth(mode); ok {
		return !native
	}
	mode, _ = opsCallForm(mode)
	return mode == ModeKVLookup || mode == ModeFetchAdd
}

// opsNativeOf is the native row an RDMO op-pack row is read against.
func opsNativeOf(mode string) string {
	mode, _ = opsCallForm(mode)
	if d, native, ok := chaseDepth(mode); ok && !native {
		_, pipe := opsPipeForm(mode)
		if pipe {
			return modeNativeChasePrefix + strconv.Itoa(d) + opsPipeSuffix
		}
		return modeNativeChasePrefix + strconv.Itoa(d)
	}
	switch mode {
	case ModeKVLookup:
		return ModeNativeKVLookup
	case ModeFetchAdd:
		return ModeNativeFetchAdd
	}
	return ""
}

// opsModes lists the op-pack rows in run order (each RDMO row, then its
// Call twin, before its native one; the pipelined chases after the
// others): the default chase depths and any depth a name asks for
// ("chase/3", "native-chase/16", "chase/3/call", "chase/2/pipelined").
func opsModes(names []string) ([]string, error) {
	depths := slices.Clone(DefaultChaseDepths)
	piped := slices.Clone(DefaultPipelinedDepths)
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		if !strings.HasPrefix(n, modeChasePrefix) && !strings.HasPrefix(n, modeNativeChasePrefix) {
			continue
		}
		d, _, ok := chaseDepth(n)
		if !ok {
			return nil, fmt.Errorf("mode %q: want chase/<depth from 1 to %d>[/call|/pipelined] or native-chase/<depth>[/pipelined]", n, ops.MaxDepth)
		}
		list := &depths
		if _, pipe := opsPipeForm(n); pipe {
			list = &piped
		}
		if !slices.Contains(*list, d) {
			*list = append(*list, d)
		}
	}
	slices.Sort(depths)
	slices.Sort(piped)
	var m []string
	for _, d := range depths {
		c := modeChasePrefix + strconv.Itoa(d)
		m = append(m, c, c+opsCallSuffix, modeNativeChasePrefix+strconv.Itoa(d))
	}
	m = append(m, ModeKVLookup, ModeKVLookup+opsCallSuffix, ModeNativeKVLookup,
		ModeFetchAdd, ModeFetchAdd+opsCallSuffix, ModeNativeFetchAdd)
	for _, d := range piped {
		m = append(m, modeChasePrefix+strconv.Itoa(d)+opsPipeSuffix, modeNativeChasePrefix+strconv.Itoa(d)+opsPipeSuffix)
	}
	return m, nil
}

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

// opsCheckReq asks the target to check its memory after a round.
type opsCheckReq struct {
	Mode   string   `json:"mode"`
	Counts []uint64 `json:"counts"`
}

// opsTarget is the target's op-pack memory.
type opsTarget struct {
	mem     *ucp.Memory
	rkey    []byte
	regWith *workerState
	regID   uint64
	tables  map[int]uint64 // value size -> table offset
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
	if ws := t.workers[req.Strategy]; ws != nil && o.regWith != ws {
		// The table headers are fixed from here on: the kv handler keeps
		// them while the region is registered (docs/OPS.md).
		reg, err := ws.tg.Register(ctx, o.mem)
		if err != nil {
			return opsSpec{}, err
		}
		o.regWith, o.regID = ws, reg.ID
	}
	mem, base := o.mem.Bytes(), o.mem.Address()
	rng := rand.New(rand.NewPCG(uint64(req.Round), 0x6f7073)) // "ops"
	sp := opsSpec{Rkey: o.rkey, Table: base + tbl, Buckets: o.buckets, ValueSize: req.ValueSize}
	if o.regWith != nil && o.regWith == t.workers[req.Strategy] {
		sp.Region = o.regID
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
func (t *benchTarget) opsCheck(req opsCheckReq) error {
	o := &t.ops
	if o.mem == nil {
		return errors.New("ops check: no op-pack region")
	}
	mem := o.mem.Bytes()
	fetchAdds := req.Mode == ModeFetchAdd || req.Mode == ModeFetchAdd+opsCallSuffix || req.Mode == ModeNativeFetchAdd
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
	case "ops-check":
		var req opsCheckReq
		if err := json.Unmarshal(body, &req); err != nil {
			return true, err
		}
		if err := t.opsCheck(req); err != nil {
			return true, err
		}
		ls.reply("CHECKED", struct{}{})
	default:
		return false, nil
	}
	return true, nil
}

// The driver's side.

// opsLayout has the target lay a round of an op-pack row out and puts the
// answers into the round's spec.
func (d *driver) opsLayout(spec *roundSpec) error {
	req := opsLayoutReq{Round: spec.Round, Initiators: d.o.Initiators, ValueSize: kvValueSize(spec.Size)}
	if d.workers["owned"] != nil {
		req.Strategy = "owned"
	}
	for _, s := range d.o.Sizes {
		if vs := kvValueSize(s); !slices.Contains(req.ValueSizes, vs) {
			req.ValueSizes = append(req.ValueSizes, vs)
		}
	}
	var sp opsSpec
	if err := d.target.call("ops-layout", req, "OPS", &sp, time.Minute); err != nil {
		return err
	}
	if opsRDMO(spec.Mode) && sp.Region == 0 {
		return errors.New("the op-pack region is not registered with the worker")
	}
	spec.Ops = &sp
	return nil
}

func (d *driver) opsCheck(spec roundSpec, counts []uint64) error {
	return d.target.call("ops-check", opsCheckReq{Mode: spec.Mode, Counts: counts}, "CHECKED", nil, 5*time.Minute)
}

// The initiator's side.

// opsRound runs a round of an op-pack row: calls through the RDMO worker
// on a goroutine of their own (as an application calls), native accesses
// on the command goroutine, which owns the raw UCX worker.
func (p *initProc) opsRound(s roundSpec) (roundResult, error) {
	o := s.Ops
	if o == nil || p.id >= len(o.Chains) || p.id >= len(o.Keys) || p.id >= len(o.Counters) {
		return roundResult{}, errors.New("op-pack round without this initiator's layout")
	}
	_, pipe := opsPipeForm(s.Mode)
	if opsRDMO(s.Mode) {
		if err := p.needRDMO(); err != nil {
			return roundResult{}, err
		}
		if pipe {
			return unlocked(func() (roundResult, error) { return p.opsCallsPipelined(s) })
		}
		return unlocked(func() (roundResult, error) { return p.opsCalls(s) })
	}
	if err := p.needTarget(); err != nil {
		return roundResult{}, err
	}
	if pipe {
		return p.opsNativePipelined(s)
	}
	return p.opsNative(s)
}

// opsCalls makes the round's calls one at a time, inside one Drive (or
// with Initiator.Call for a "/call" row), and checks every answer.
func (p *initProc) opsCalls(s roundSpec) (roundResult, error) {
	o := s.Ops
	region := rdmo.RegionID(o.Region)
	chain, keys := o.Chains[p.id], o.Keys[p.id]
	var op uint32
	var subs [][]byte
	var check func(n int, res initiator.Result) error
	size := 8
	switch d, _, isChase := chaseDepth(s.Mode); {
	case isChase:
		op = ops.OpIndirectRead
		subs = [][]byte{ops.IndirectReq{Region: region, Addr: chain[0], Depth: uint16(d)}.Sub()}
		check = func(n int, res initiator.Result) error {
			if res.Value != chain[d] || len(res.Data) != 0 {
				return fmt.Errorf("call %d reached %#x with %d bytes, want %#x", n, res.Value, len(res.Data), chain[d])
			}
			return nil
		}
	case strings.HasPrefix(s.Mode, ModeKVLookup):
		op, size = ops.OpKVLookup, o.ValueSize
		for _, k := range keys {
			subs = append(subs, ops.KVReq{Region: region, Table: o.Table, Key: k}.Sub())
		}
		check = func(n int, res initiator.Result) error {
			j := n % len(keys)
			if len(res.Data) != o.ValueSize || !recordOK(res.Data, p.id, s.Round, uint32(j)) {
				return fmt.Errorf("call %d: key %#x answered %d bytes that are not its value", n, keys[j], len(res.Data))
			}
			return nil
		}
	case strings.HasPrefix(s.Mode, ModeFetchAdd):
		op = ops.OpFetchAdd
		subs = [][]byte{ops.AtomicReq{Region: region, Addr: o.Counters[p.id], Operand: 1}.FetchAddSub()}
		check = func(n int, res initiator.Result) error {
			if want := o.Starts[p.id] + uint64(n); res.Value != want {
				return fmt.Errorf("call %d: fetch-add returned %d, want %d", n, res.Value, want)
			}
			return nil
		}
	default:
		return roundResult{}, fmt.Errorf("unknown op-pack mode %q", s.Mode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	run := func(call func(sub []byte) (initiator.Result, error)) (roundResult, error) {
		var res initiator.Result
		return timedOps(s, size, func(n int) (err error) {
			if res, err = call(subs[n%len(subs)]); err != nil {
				return fmt.Errorf("call %d: %w", n, err)
			}
			return nil
		}, func(n int) error { return check(n, res) })
	}
	if _, callForm := opsCallForm(s.Mode); callForm {
		return run(func(sub []byte) (initiator.Result, error) { return p.in.Call(ctx, op, sub, nil) })
	}
	var rr roundResult
	err := p.in.Drive(ctx, func(d *initiator.Driver) error {
		var err error
		rr, err = run(func(sub []byte) (initiator.Result, error) { return d.Call(op, sub, nil) })
		return err
	})
	return rr, err
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

// opsNative does the round's operations with one-sided accesses, one
// operation at a time, each access issued when the one it depends on
// returned, and checks every answer.
func (p *initProc) opsNative(s roundSpec) (roundResult, error) {
	o := s.Ops
	rkey, err := p.rkey(o.Rkey)
	if err != nil {
		return roundResult{}, err
	}
	le := binary.LittleEndian
	chain, keys := o.Chains[p.id], o.Keys[p.id]
	blen := uint64(8 + o.ValueSize)
	word, val := make([]byte, 8), make([]byte, o.ValueSize)
	w := new(opsWait)
	var one func(n int) error
	size := 8
	switch d, _, isChase := chaseDepth(s.Mode); {
	case isChase:
		one = func(n int) error {
			at := chain[0]
			for hop := 0; hop < d; hop++ {
				if err := p.get(w, word, at, rkey); err != nil {
					return fmt.Errorf("hop %d: %w", hop, err)
				}
				at = le.Uint64(word)
			}
			if at != chain[d] {
				return fmt.Errorf("chase %d reached %#x, want %#x", n, at, chain[d])
			}
			return nil
		}
	case s.Mode == ModeNativeKVLookup:
		size = o.ValueSize
		one = func(n int) error {
			j := n % len(keys)
			home := ops.KVHome(keys[j], o.Buckets)
			for probe := uint64(0); probe < ops.KVProbes(o.Buckets); probe++ {
				at := o.Table + ops.KVHeaderLen + (home+probe)%o.Buckets*blen
				if err := p.get(w, word, at, rkey); err != nil {
					return err
				}
				switch le.Uint64(word) {
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
		}
	case s.Mode == ModeNativeFetchAdd:
		one = func(n int) error {
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
		}
	default:
		return roundResult{}, fmt.Errorf("unknown op-pack mode %q", s.Mode)
	}
	return timedOps(s, size, one, nil)
}

// The report's side.

// opsRatios sets an RDMO op-pack row's ratios to its native row.
func (r *Report) opsRatios(row *Row) {
	nm := opsNativeOf(row.Mode)
	if nm == "" {
		return
	}
	nr := r.Row(nm, row.Size)
	if nr == nil {
		return
	}
	if nr.Rate > 0 {
		row.XNative = row.Rate / nr.Rate
	}
	if nr.P50 > 0 {
		row.LatXNative = float64(row.P50) / float64(nr.P50)
	}
}

// writeOpsGoals prints the op-pack goals (docs/BENCHMARKS.md) and notes.
func (r *Report) writeOpsGoals(w io.Writer) {
	if !r.hasRow(isOpsMode) {
		return
	}
	if r.Topology == TopologyDPU && r.hasRow(func(m string) bool { return m == ModeNativeFetchAdd }) {
		fmt.Fprintf(w, "note: %s over tcp is emulated by the target process's progress (UCX has no tcp atomics): its CPU, where an RDMA NIC does it in hardware.\n", ModeNativeFetchAdd)
	}
	if r.hasRow(opsRDMO) {
		fmt.Fprintf(w, "note: chase/D, %s and %s call inside initiator.Drive (the calls run on the Initiator's progress loop thread, as the native rows progress UCX on the caller's); their %s twins call with Initiator.Call from a goroutine of their own.\n", ModeKVLookup, ModeFetchAdd, opsCallSuffix)
	}
	if r.Topology == TopologySHM && r.hasRow(isOpsMode) {
		fmt.Fprintf(w, "note: on shm a native access is a memory copy by the initiator's own UCX: no round trip for an RDMO call to save.\n")
	}
	for i := range r.Rows {
		row := &r.Rows[i]
		nm := opsNativeOf(row.Mode)
		if nm == "" || row.Error != "" || row.LatXNative == 0 {
			continue
		}
		nr := r.Row(nm, row.Size)
		what := fmt.Sprintf("%d B: %s p50 / %s p50", row.Size, row.Mode, nm)
		d, _, isChase := chaseDepth(row.Mode)
		_, callForm := opsCallForm(row.Mode)
		switch {
		case callForm:
			r.goal(w, what, row.LatXNative, "", 0, "(no goal: the goals compare the Drive rows)", row, nr)
		case isChase && strings.HasSuffix(row.Mode, opsPipeSuffix):
			what = fmt.Sprintf("%d B: %s rate / %s rate", row.Size, row.Mode, nm)
			if d == 4 {
				r.goal(w, what, row.XNative, ">=", 3, "", row, nr)
			} else {
				r.goal(w, what, row.XNative, "", 0, "(no goal)", row, nr)
			}
		case isChase && d == 4:
			r.goal(w, what, row.LatXNative, "<=", 1.0/3, "", row, nr)
		case row.Mode == ModeKVLookup:
			r.goal(w, what, row.LatXNative, "<=", 0.5, "", row, nr)
		default:
			r.goal(w, what, row.LatXNative, "", 0, "(no goal)", row, nr)
		}
	}
}

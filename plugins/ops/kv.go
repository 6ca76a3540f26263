package ops

import (
	"fmt"
	"math/bits"
	"sync"

	"github.com/openrdmo/rdmo/rdmo"
)

// The kv table layout in target memory (docs/OPS.md), all little-endian,
// at an 8-byte aligned address T inside one registered region:
//
//	T+0   magic u64        KVMagic
//	T+8   buckets u64      a power of two, 1..2^24
//	T+16  value_size u64   a multiple of 8, 8..rdmo.MaxResultData
//	T+24  reserved u64     0
//	T+32  buckets × (key u64, value [value_size]byte); key 0 = empty
//
// A key's home bucket is KVHome(key, buckets); a lookup or insert probes
// linearly (wrapping) from there, at most MaxProbes buckets (or all of
// them if fewer). A target builds the table with KVLayout and zeroed
// buckets, and may change buckets itself only while no RDMO uses it.
const (
	KVMagic        = 0x31304b564f4d4452 // "RDMOKV01"
	KVHeaderLen    = 32
	KVMaxBuckets   = 1 << 24
	kvProbeWindow  = 8 // buckets read per Sync
	kvGoldenRatio  = 0x9E3779B97F4A7C15
	kvHeaderFields = 4
)

// KVLayout returns the header of a table and its total size in bytes.
func KVLayout(buckets, valueSize uint64) (header []byte, size uint64) {
	return words(KVMagic, buckets, valueSize, 0), KVHeaderLen + buckets*(8+valueSize)
}

// KVHome returns the home bucket of key in a table of buckets buckets (a
// power of two): Fibonacci hashing, the top bits of key × 2^64/φ.
func KVHome(key, buckets uint64) uint64 {
	if buckets <= 1 {
		return 0
	}
	return (key * kvGoldenRatio) >> (64 - bits.TrailingZeros64(buckets))
}

// KVProbes is the number of buckets a lookup or insert looks at.
func KVProbes(buckets uint64) uint64 { return min(buckets, MaxProbes) }

type kvTable struct {
	region    rdmo.RegionID
	base      uint64
	buckets   uint64
	valueSize uint64
}

func (tb kvTable) bucketLen() uint64      { return 8 + tb.valueSize }
func (tb kvTable) bucket(i uint64) uint64 { return tb.base + KVHeaderLen + i*tb.bucketLen() }
func (tb kvTable) size() (uint64, bool) {
	hi, lo := bits.Mul64(tb.buckets, tb.bucketLen())
	return lo + KVHeaderLen, hi == 0 && lo <= ^uint64(0)-KVHeaderLen
}

// kvHandler keeps the headers of the tables it has checked, per client,
// region and address, so a lookup costs one read of target memory (the
// probe window) instead of two. The header is fixed while the region is
// registered (the layout's rule), so the cache needs no write-back and is
// dropped with the region or the client.
type kvHandler struct {
	mu   sync.Mutex
	hdrs map[kvKey]kvTable
}

type kvKey struct {
	client rdmo.ClientID
	region rdmo.RegionID
	table  uint64
}

// maxCachedTables bounds the cache per handler; past it, it starts over.
const maxCachedTables = 4096

func (h *kvHandler) cached(k kvKey) (kvTable, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	tb, ok := h.hdrs[k]
	return tb, ok
}

func (h *kvHandler) remember(k kvKey, tb kvTable) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.hdrs) >= maxCachedTables {
		clear(h.hdrs)
	}
	h.hdrs[k] = tb
}

func (h *kvHandler) WriteBack(rdmo.Target) error { return nil }

func (h *kvHandler) RegionRemoved(t rdmo.Target, region rdmo.RegionID) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.hdrs {
		if k.client == t.ClientID() && k.region == region {
			delete(h.hdrs, k)
		}
	}
	return nil
}

func (h *kvHandler) ClientRemoved(client rdmo.ClientID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.hdrs {
		if k.client == client {
			delete(h.hdrs, k)
		}
	}
}

// NewKV returns the kv handler (OpKVLookup, OpKVInsert) on tables laid out
// as above. An insert of a present key replaces its value (Value 1), else
// it takes the first empty bucket of the probe sequence (Value 0): it
// writes the value, makes it visible, then writes the key, so a one-sided
// reader never sees a new key without its value. An insert is atomic with
// respect to every other RDMO of the same client: the worker runs one
// client's handlers one batch at a time on the client's executor, and this
// handler makes each insert visible (Target.Flush) before the next request
// reads, so no RDMO of the client observes or interleaves with a
// half-done insert. It is not atomic with respect to other clients or the
// target writing the table at the same time.
func NewKV() rdmo.Handler { return &kvHandler{hdrs: map[kvKey]kvTable{}} }

func (*kvHandler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: NameKV, Version: Version, Ops: []uint32{OpKVLookup, OpKVInsert}, NoCachedState: true, Inline: true}
}

func (h *kvHandler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	for i := range reqs {
		results[i] = h.one(t, &reqs[i])
	}
}

// readTable reads and checks the table header.
func readTable(t rdmo.Target, r KVReq) (kvTable, rdmo.Result, bool) {
	if err := checkRange(t, r.Region, r.Table, KVHeaderLen, "kv header"); err != nil {
		return kvTable{}, rdmo.ResultOf(err), false
	}
	hdr := t.Buffer(KVHeaderLen)
	ops := [1]rdmo.RemoteOp{{Kind: rdmo.RemoteGet, Region: r.Region, Addr: r.Table, Buf: hdr}}
	if res, ok := syncOne(t, ops[:], "kv: read the header"); !ok {
		return kvTable{}, res, false
	}
	tb := kvTable{region: r.Region, base: r.Table, buckets: le.Uint64(hdr[8:]), valueSize: le.Uint64(hdr[16:])}
	switch {
	case le.Uint64(hdr) != KVMagic:
		return tb, rdmo.Fail(StatusBadTable, "no kv table at %#x (magic %#x)", r.Table, le.Uint64(hdr)), false
	case tb.buckets == 0 || tb.buckets > KVMaxBuckets || tb.buckets&(tb.buckets-1) != 0:
		return tb, rdmo.Fail(StatusBadTable, "kv table at %#x: %d buckets", r.Table, tb.buckets), false
	case tb.valueSize == 0 || tb.valueSize%8 != 0 || tb.valueSize > rdmo.MaxResultData:
		return tb, rdmo.Fail(StatusBadTable, "kv table at %#x: values of %d bytes", r.Table, tb.valueSize), false
	}
	size, ok := tb.size()
	if !ok {
		return tb, rdmo.Fail(StatusBadTable, "kv table at %#x: size overflows", r.Table), false
	}
	if err := checkRange(t, r.Region, r.Table, size, "kv table"); err != nil {
		return tb, rdmo.ResultOf(err), false
	}
	return tb, rdmo.Result{}, true
}

// probe finds key: the bucket index holding it (found, with its value as
// read, in Buffer memory), or the first empty bucket of its probe sequence
// (free, when not found), or neither.
func probe(t rdmo.Target, tb kvTable, key uint64) (idx uint64, val []byte, found, free bool, res rdmo.Result, ok bool) {
	home, n := KVHome(key, tb.buckets), KVProbes(tb.buckets)
	bl := tb.bucketLen()
	for done := uint64(0); done < n; {
		first := (home + done) & (tb.buckets - 1)
		w := min(kvProbeWindow, n-done, tb.buckets-first) // no wrap inside one read
		buf := t.Buffer(int(w * bl))
		ops := [1]rdmo.RemoteOp{{Kind: rdmo.RemoteGet, Region: tb.region, Addr: tb.bucket(first), Buf: buf}}
		if res, ok := syncOne(t, ops[:], "kv: read buckets"); !ok {
			return 0, nil, false, false, res, false
		}
		for j := uint64(0); j < w; j++ {
			k := le.Uint64(buf[j*bl:])
			if k == key {
				return first + j, buf[j*bl+8 : (j+1)*bl], true, false, rdmo.Result{}, true
			}
			if k == 0 {
				return first + j, nil, false, true, rdmo.Result{}, true
			}
		}
		done += w
	}
	return 0, nil, false, false, rdmo.Result{}, true
}

func (h *kvHandler) one(t rdmo.Target, req *rdmo.Request) rdmo.Result {
	r, err := DecodeKV(req)
	if err != nil {
		return rdmo.ResultOf(err)
	}
	key := kvKey{t.ClientID(), r.Region, r.Table}
	tb, ok := h.cached(key)
	if ok {
		// Checked when it was cached; the region must still hold it.
		size, _ := tb.size()
		if err := checkRange(t, r.Region, r.Table, size, "kv table"); err != nil {
			return rdmo.ResultOf(err)
		}
	} else {
		var res rdmo.Result
		if tb, res, ok = readTable(t, r); !ok {
			return res
		}
		h.remember(key, tb)
	}
	insert := req.Op == OpKVInsert
	if insert && uint64(len(req.Payload)) != tb.valueSize {
		return rdmo.Fail(rdmo.StatusPayloadMismatch, "kv insert of a %d-byte value into a table of %d-byte values", len(req.Payload), tb.valueSize)
	}
	idx, val, found, free, res, ok := probe(t, tb, r.Key)
	if !ok {
		return res
	}
	if !insert {
		if !found {
			return rdmo.Fail(StatusNotFound, "key %#x", r.Key)
		}
		// The probe read whole buckets: the value came with its key.
		return rdmo.Result{Value: tb.bucket(idx), Data: val}
	}
	if !found && !free {
		return rdmo.Fail(StatusTableFull, "no empty bucket for key %#x within %d probes", r.Key, KVProbes(tb.buckets))
	}
	at := tb.bucket(idx)
	if err := t.Put(tb.region, at+8, req.Payload); err != nil {
		return rdmo.ResultOf(fmt.Errorf("kv insert: %w", err))
	}
	if !found {
		// The value is visible before the key that makes it reachable.
		if err := t.Flush(); err != nil {
			return rdmo.ResultOf(fmt.Errorf("kv insert: %w", err))
		}
		key := t.Buffer(8)
		le.PutUint64(key, r.Key)
		if err := t.Put(tb.region, at, key); err != nil {
			return rdmo.ResultOf(fmt.Errorf("kv insert: %w", err))
		}
	}
	// Whatever runs next (this batch's next request, or another batch of
	// the client, which may start before this one completes) reads what
	// this insert wrote.
	if err := t.Flush(); err != nil {
		return rdmo.ResultOf(fmt.Errorf("kv insert: %w", err))
	}
	if found {
		return rdmo.Result{Value: 1}
	}
	return rdmo.Result{}
}

package demo

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/openrdmo/rdmo/host/oob"
)

// WorkloadKind names the generator below and its version. Both sides derive
// the same operations from a Workload of this kind; a peer that does not know
// the kind refuses the workload. Change the name whenever the sequence of
// operations or bytes a seed produces changes.
const WorkloadKind = "mixed/1"

// DefaultFlushEvery is how many workload operations the initiator sends
// between two (pipelined) flushes.
const DefaultFlushEvery = 128

// unflushedBudget bounds the requests an initiator has sent past its last
// completed flush: the RDMO worker refuses requests beyond its per-queue
// limit of requests in flight (dpu.DefaultMaxInFlightPerRQ, 1024), and
// requests complete at the worker no later than the flush after them.
const unflushedBudget = 768

// The seed flow of the reference demo (docs/PROTOCOL.md section 12.1), in
// the seed queue region.
const (
	SeedQueueSize     = 128 << 10 // the reference demo's queue
	seedAppendLen     = 8
	seedAppendByte    = 0x33
	seedScatterChunks = 16
	seedScatterLen    = 8
	seedScatterOffset = 64 // first chunk, from the region's base
	seedScatterStride = 16 // chunk i at seedScatterOffset + i*stride
)

// Names of the regions the target registers (oob.RegionInfo.Name).
const (
	RegionSeed    = "seed"
	RegionQueue   = "queue"
	RegionScatter = "scatter"
)

// Record layout in the workload queue: u32 size (whole record), u32
// sequence number, then size-8 bytes derived from the seed and the sequence
// number. The smallest record is the 8-byte header alone.
const (
	recordHeader  = 8
	minRecord     = 8
	maxRecord     = 64 << 10
	maxScatterIOV = 8
	maxChunk      = 1024
	maxGap        = 16
	// regionSlack is room after the expected end of the queue and of the
	// scatter area, checked to stay zero (a stray write past the end).
	regionSlack = 4096
)

// wop is one operation of the workload.
type wop struct {
	scatter bool
	// append
	seq  uint32
	size int
	// scatter: chunks at offsets relative to the scatter region's base
	index  uint32
	chunks []wchunk
}

type wchunk struct {
	off uint64
	len int
}

// generator produces the workload's operations in order. The target and
// the initiator run the same generator from the same seed.
type generator struct {
	r       *rand.Rand
	seed    uint64
	seq     uint32 // next record sequence number
	scatter uint32 // next scatter index
	qoff    uint64 // bytes appended so far
	soff    uint64 // scatter cursor, from the region's base
	chunks  []wchunk
}

func newGenerator(seed uint64) *generator {
	return &generator{r: rand.New(rand.NewPCG(seed, 0x726d646f2d776c64)), seed: seed}
}

// recordSize: mostly small records, some up to 1 KiB, a few large ones
// (rendezvous-sized) up to 64 KiB.
func (g *generator) recordSize() int {
	switch x := g.r.IntN(1000); {
	case x < 750:
		return minRecord + g.r.IntN(64-minRecord+1) // 8..64
	case x < 985:
		return 65 + g.r.IntN(1024-64) // 65..1024
	case x < 998:
		return 1025 + g.r.IntN(16384-1024) // ..16 KiB
	default:
		return 16385 + g.r.IntN(maxRecord-16384) // ..64 KiB
	}
}

func (g *generator) chunkLen() int {
	switch x := g.r.IntN(10); {
	case x < 6:
		return 8
	case x < 9:
		return 1 + g.r.IntN(64)
	default:
		return 65 + g.r.IntN(maxChunk-64)
	}
}

// next returns the next operation. The chunks slice is reused by the next
// call.
func (g *generator) next() wop {
	if g.r.IntN(4) == 0 {
		n := 1 + g.r.IntN(maxScatterIOV)
		g.chunks = g.chunks[:0]
		for k := 0; k < n; k++ {
			gap := uint64(g.r.IntN(maxGap))
			l := g.chunkLen()
			g.chunks = append(g.chunks, wchunk{off: g.soff + gap, len: l})
			g.soff += gap + uint64(l)
		}
		op := wop{scatter: true, index: g.scatter, chunks: g.chunks}
		g.scatter++
		return op
	}
	op := wop{seq: g.seq, size: g.recordSize()}
	g.seq++
	g.qoff += uint64(op.size)
	return op
}

// plan is what the target derives from a workload before allocating memory.
type plan struct {
	Records     int
	RecordBytes uint64 // the queue's payload, excluding the tail word
	Scatters    int
	Chunks      int
	ChunkBytes  uint64
	ScatterSpan uint64 // chunks and the gaps between them
	QueueSize   int    // region sizes to allocate
	ScatterSize int
}

func makePlan(w oob.Workload) plan {
	g := newGenerator(w.Seed)
	var p plan
	for i := uint64(0); i < w.Ops; i++ {
		op := g.next()
		if op.scatter {
			p.Scatters++
			p.Chunks += len(op.chunks)
			for _, c := range op.chunks {
				p.ChunkBytes += uint64(c.len)
			}
		} else {
			p.Records++
		}
	}
	p.RecordBytes, p.ScatterSpan = g.qoff, g.soff
	p.QueueSize = pageRound(8 + int(p.RecordBytes) + regionSlack)
	p.ScatterSize = pageRound(int(p.ScatterSpan) + regionSlack)
	return p
}

func pageRound(n int) int { return (n + 4095) &^ 4095 }

// splitmix64 is the stream the payload bytes come from.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// fillStream writes the stream from key into b: word k (bytes 8k..8k+7,
// little-endian, the last one cut short) is splitmix64(key+8k).
func fillStream(b []byte, key uint64) { fillWords(b, key, 0) }

// fillWords is fillStream with every word ORed with mask. The demo's
// client fills every record and chunk it sends and its server every one it
// verifies, so this is a good part of both processes' time: whole words go
// straight into b, four a turn on a shrinking slice (no bounds checks, no
// copy call per word, four independent splitmix64 chains in flight), about
// 1.4 times as fast as a word at a time through a copy.
func fillWords(b []byte, key, mask uint64) {
	x := key
	for len(b) >= 32 {
		binary.LittleEndian.PutUint64(b[0:8], splitmix64(x)|mask)
		binary.LittleEndian.PutUint64(b[8:16], splitmix64(x+8)|mask)
		binary.LittleEndian.PutUint64(b[16:24], splitmix64(x+16)|mask)
		binary.LittleEndian.PutUint64(b[24:32], splitmix64(x+24)|mask)
		x += 32
		b = b[32:]
	}
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b[:8], splitmix64(x)|mask)
		x += 8
		b = b[8:]
	}
	if len(b) > 0 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], splitmix64(x)|mask)
		copy(b, w[:])
	}
}

// fillRecord writes record seq of the given size into b[:size].
func fillRecord(b []byte, seed uint64, seq uint32, size int) []byte {
	b = b[:size]
	binary.LittleEndian.PutUint32(b[0:], uint32(size))
	binary.LittleEndian.PutUint32(b[4:], seq)
	fillStream(b[recordHeader:], seed^(uint64(seq)<<32|0x5eed))
	return b
}

// fillChunk writes chunk k of scatter index into b[:n]. Every byte is odd,
// so a chunk that was never written (zeros) cannot pass for one that was.
func fillChunk(b []byte, seed uint64, index uint32, k int, n int) []byte {
	b = b[:n]
	fillWords(b, ^seed^(uint64(index)<<8|uint64(k)), 0x0101010101010101) // every byte odd
	return b
}

// verifier checks target memory against the workload.
type verifier struct {
	seed    uint64
	scratch []byte
}

func newVerifier(seed uint64) *verifier {
	return &verifier{seed: seed, scratch: make([]byte, maxRecord)}
}

// checkSeedAppend checks the first step of the seed flow: 8 bytes of 0x33
// at base+8 and the tail at base+16, after the initiator's first flush.
func checkSeedAppend(mem []byte, base uint64) error {
	if got := binary.LittleEndian.Uint64(mem); got != base+8+seedAppendLen {
		return fmt.Errorf("seed queue: tail is base%+d after the first flush, want base+16", int64(got-base))
	}
	if !bytes.Equal(mem[8:8+seedAppendLen], bytes.Repeat([]byte{seedAppendByte}, seedAppendLen)) {
		return fmt.Errorf("seed queue: appended bytes are % x, want 8 × 33", mem[8:8+seedAppendLen])
	}
	return nil
}

func seedChunk(i int) []byte { return bytes.Repeat([]byte{byte(0x40 + i)}, seedScatterLen) }

// checkSeed checks the whole seed queue region after the seed flow: the
// append, the tail, the 16 scattered chunks, and zeros everywhere else.
func checkSeed(mem []byte, base uint64) error {
	if err := checkSeedAppend(mem, base); err != nil {
		return err
	}
	want := make([]byte, len(mem))
	copy(want, mem[:8])
	copy(want[8:], bytes.Repeat([]byte{seedAppendByte}, seedAppendLen))
	for i := 0; i < seedScatterChunks; i++ {
		copy(want[seedScatterOffset+i*seedScatterStride:], seedChunk(i))
	}
	if i := firstDiff(mem, want); i >= 0 {
		if i >= seedScatterOffset && i < seedScatterOffset+seedScatterChunks*seedScatterStride {
			k := (i - seedScatterOffset) / seedScatterStride
			return fmt.Errorf("seed queue: scatter chunk %d wrong at offset %d: % x", k, i, mem[seedScatterOffset+k*seedScatterStride:][:seedScatterStride])
		}
		return fmt.Errorf("seed queue: stray byte %#02x at offset %d (should be untouched)", mem[i], i)
	}
	return nil
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	n := min(len(a), len(b))
	// Narrow down in blocks first: the regions can be large.
	const blk = 4096
	for off := 0; off < n; off += blk {
		e := min(off+blk, n)
		if !bytes.Equal(a[off:e], b[off:e]) {
			for i := off; i < e; i++ {
				if a[i] != b[i] {
					return i
				}
			}
		}
	}
	return n
}

func allZero(b []byte) int {
	for off := 0; off < len(b); off += 4096 {
		e := min(off+4096, len(b))
		for i := off; i < e; i++ {
			if b[i] != 0 {
				return i
			}
		}
	}
	return -1
}

// workloadResult is what a verification found.
type workloadResult struct {
	Records     int
	RecordBytes uint64
	Scatters    int
	Chunks      int
	ChunkBytes  uint64
}

// checkWorkload checks the queue and scatter regions after the initiator's
// final flush: the queue holds records 0..n-1 exactly once, intact and in
// order, its tail points just past the last one, and nothing was written
// past it; every scatter chunk is at its place and intact, the gaps between
// chunks and the rest of the region untouched.
func (v *verifier) checkWorkload(w oob.Workload, queue []byte, qbase uint64, scat []byte) (workloadResult, error) {
	var res workloadResult
	g := newGenerator(w.Seed)
	// First pass: the expected layout, and the queue.
	if len(queue) < 8 {
		return res, fmt.Errorf("queue region is %d bytes", len(queue))
	}
	tail := binary.LittleEndian.Uint64(queue)
	qoff := uint64(8)
	type scatOp struct {
		index  uint32
		chunks []wchunk
	}
	var scats []scatOp
	for i := uint64(0); i < w.Ops; i++ {
		op := g.next()
		if op.scatter {
			scats = append(scats, scatOp{op.index, append([]wchunk(nil), op.chunks...)})
			continue
		}
		if qoff+uint64(op.size) > uint64(len(queue)) {
			return res, fmt.Errorf("queue: record %d does not fit the region (plan mismatch)", op.seq)
		}
		got := queue[qoff : qoff+uint64(op.size)]
		want := fillRecord(v.scratch, v.seed, op.seq, op.size)
		if !bytes.Equal(got, want) {
			return res, describeRecordMismatch(queue, qoff, op, got, want, tail-qbase)
		}
		res.Records++
		res.RecordBytes += uint64(op.size)
		qoff += uint64(op.size)
	}
	if tail != qbase+qoff {
		return res, fmt.Errorf("queue: all %d records are in place but the tail is base%+d, want base%+d (records past the end, or the tail was not written back)", res.Records, int64(tail-qbase), qoff)
	}
	if i := allZero(queue[qoff:]); i >= 0 {
		return res, fmt.Errorf("queue: %d bytes after the last record, byte %#02x at offset %d should be untouched (a duplicated or extra record?)", len(queue)-int(qoff), queue[int(qoff)+i], int(qoff)+i)
	}
	// Scatter region: chunks and gaps.
	soff := uint64(0)
	for _, s := range scats {
		for k, c := range s.chunks {
			if c.off+uint64(c.len) > uint64(len(scat)) {
				return res, fmt.Errorf("scatter: chunk %d of scatter %d does not fit the region (plan mismatch)", k, s.index)
			}
			if i := allZero(scat[soff:c.off]); i >= 0 {
				return res, fmt.Errorf("scatter: stray byte %#02x at offset %d, in the gap before chunk %d of scatter %d", scat[int(soff)+i], int(soff)+i, k, s.index)
			}
			want := fillChunk(v.scratch, v.seed, s.index, k, c.len)
			got := scat[c.off : c.off+uint64(c.len)]
			if !bytes.Equal(got, want) {
				if allZero(got) < 0 {
					return res, fmt.Errorf("scatter: chunk %d of scatter %d (%d bytes at offset %d) was never written", k, s.index, c.len, c.off)
				}
				i := firstDiff(got, want)
				return res, fmt.Errorf("scatter: chunk %d of scatter %d (%d bytes at offset %d) differs at byte %d: got %#02x, want %#02x", k, s.index, c.len, c.off, i, got[i], want[i])
			}
			res.Chunks++
			res.ChunkBytes += uint64(c.len)
			soff = c.off + uint64(c.len)
		}
		res.Scatters++
	}
	if i := allZero(scat[soff:]); i >= 0 {
		return res, fmt.Errorf("scatter: stray byte %#02x at offset %d, after the last chunk", scat[int(soff)+i], int(soff)+i)
	}
	return res, nil
}

// describeRecordMismatch says what is at a queue offset where record op
// was expected: another record (lost, duplicated or reordered), a torn
// record, or nothing.
func describeRecordMismatch(queue []byte, off uint64, op wop, got, want []byte, tailOff uint64) error {
	at := fmt.Sprintf("queue offset %d", off)
	if off >= tailOff {
		return fmt.Errorf("queue: record %d (%d bytes) missing at %s: the tail ends at offset %d (lost appends)", op.seq, op.size, at, tailOff)
	}
	rest := queue[off:]
	if len(rest) >= recordHeader {
		size := binary.LittleEndian.Uint32(rest)
		seq := binary.LittleEndian.Uint32(rest[4:])
		switch {
		case allZero(got) < 0:
			return fmt.Errorf("queue: record %d (%d bytes) missing at %s: zeros there (lost appends)", op.seq, op.size, at)
		case seq > op.seq && seq < op.seq+1<<20:
			return fmt.Errorf("queue: record %d found at %s where record %d (%d bytes) was expected (lost or reordered)", seq, at, op.seq, op.size)
		case seq < op.seq:
			return fmt.Errorf("queue: record %d found again at %s where record %d was expected (duplicated or reordered)", seq, at, op.seq)
		case seq == op.seq && int(size) != op.size:
			return fmt.Errorf("queue: record %d at %s has size %d, want %d (torn record)", op.seq, at, size, op.size)
		}
	}
	i := firstDiff(got, want)
	return fmt.Errorf("queue: record %d (%d bytes) at %s corrupted at byte %d: got %#02x, want %#02x", op.seq, op.size, at, i, got[i], want[i])
}

package demo

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/openrdmo/rdmo/host/oob"
)

// memory is a simulated target: the regions as the worker would leave them
// after a correct run of the workload.
type memory struct {
	w       oob.Workload
	p       plan
	queue   []byte
	scatter []byte
	qbase   uint64
}

func simulate(w oob.Workload) *memory {
	p := makePlan(w)
	m := &memory{w: w, p: p, queue: make([]byte, p.QueueSize), scatter: make([]byte, p.ScatterSize), qbase: 0x10000}
	g := newGenerator(w.Seed)
	off := uint64(8)
	buf := make([]byte, maxRecord)
	for i := uint64(0); i < w.Ops; i++ {
		op := g.next()
		if op.scatter {
			for k, c := range op.chunks {
				copy(m.scatter[c.off:], fillChunk(buf, w.Seed, op.index, k, c.len))
			}
			continue
		}
		copy(m.queue[off:], fillRecord(buf, w.Seed, op.seq, op.size))
		off += uint64(op.size)
	}
	binary.LittleEndian.PutUint64(m.queue, m.qbase+off)
	return m
}

func (m *memory) check() (workloadResult, error) {
	return newVerifier(m.w.Seed).checkWorkload(m.w, m.queue, m.qbase, m.scatter)
}

func (m *memory) tail() uint64 { return binary.LittleEndian.Uint64(m.queue) - m.qbase }

// recordAt returns the offset and size of record seq in the queue.
func (m *memory) recordAt(seq uint32) (int, int) {
	off := 8
	for {
		size := int(binary.LittleEndian.Uint32(m.queue[off:]))
		if binary.LittleEndian.Uint32(m.queue[off+4:]) == seq {
			return off, size
		}
		off += size
	}
}

var testWorkload = oob.Workload{Kind: WorkloadKind, Ops: 5000, Seed: 0x1234abcd, FlushEvery: DefaultFlushEvery}

func TestWorkloadDeterministic(t *testing.T) {
	a, b := newGenerator(7), newGenerator(7)
	c := newGenerator(8)
	differs := false
	for i := 0; i < 2000; i++ {
		x, y, z := a.next(), b.next(), c.next()
		if x.scatter != y.scatter || x.size != y.size || x.seq != y.seq || len(x.chunks) != len(y.chunks) {
			t.Fatalf("op %d differs between two generators with one seed", i)
		}
		for k := range x.chunks {
			if x.chunks[k] != y.chunks[k] {
				t.Fatalf("op %d chunk %d differs", i, k)
			}
		}
		if x.scatter != z.scatter || x.size != z.size {
			differs = true
		}
	}
	if !differs {
		t.Error("seeds 7 and 8 give the same workload")
	}
}

func TestWorkloadShape(t *testing.T) {
	w := oob.Workload{Kind: WorkloadKind, Ops: 100000, Seed: 99, FlushEvery: DefaultFlushEvery}
	p := makePlan(w)
	if p.Records+p.Scatters != 100000 {
		t.Fatalf("plan: %+v", p)
	}
	if p.Scatters < 20000 || p.Scatters > 30000 {
		t.Errorf("%d scatters in 100000 ops, want about a quarter", p.Scatters)
	}
	// Mixed sizes, skewed small, some up to 64 KiB; memory stays modest.
	g := newGenerator(99)
	var small, large, maxSize int
	for i := 0; i < 100000; i++ {
		op := g.next()
		if op.scatter {
			for _, c := range op.chunks {
				if c.len < 1 || c.len > maxChunk {
					t.Fatalf("chunk of %d bytes", c.len)
				}
			}
			continue
		}
		if op.size < minRecord || op.size > maxRecord {
			t.Fatalf("record of %d bytes", op.size)
		}
		if op.size <= 64 {
			small++
		}
		if op.size > 16<<10 {
			large++
		}
		maxSize = max(maxSize, op.size)
	}
	if small < p.Records*7/10 || large == 0 || maxSize < 48<<10 {
		t.Errorf("size mix: %d of %d records ≤ 64 B, %d > 16 KiB, largest %d", small, p.Records, large, maxSize)
	}
	if total := p.QueueSize + p.ScatterSize; total > 64<<20 {
		t.Errorf("100000 ops need %d MiB of target memory", total>>20)
	}
	t.Logf("100000 ops: %d records (%d MiB), %d scatters (%d chunks, %d MiB)", p.Records, p.RecordBytes>>20, p.Scatters, p.Chunks, p.ChunkBytes>>20)
	if got := pendingFlushes(DefaultFlushEvery); (got+1)*DefaultFlushEvery > unflushedBudget {
		t.Errorf("%d pending flushes of %d ops exceed the budget", got, DefaultFlushEvery)
	}
}

func TestVerifyPasses(t *testing.T) {
	m := simulate(testWorkload)
	res, err := m.check()
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != m.p.Records || res.Scatters != m.p.Scatters || res.Chunks != m.p.Chunks || res.RecordBytes != m.p.RecordBytes {
		t.Errorf("result %+v, plan %+v", res, m.p)
	}
}

// Every way the worker could get it wrong is caught, and said clearly.
func TestVerifyFindsDefects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(m *memory)
		want   string
	}{
		{"lost record", func(m *memory) {
			off, size := m.recordAt(100)
			copy(m.queue[off:], m.queue[off+size:])
			binary.LittleEndian.PutUint64(m.queue, m.qbase+m.tail()-uint64(size))
		}, "record 101 found at queue offset"},
		{"duplicated record", func(m *memory) {
			off, size := m.recordAt(100)
			rest := append([]byte(nil), m.queue[off:m.tail()]...)
			copy(m.queue[off+size:], rest)
			binary.LittleEndian.PutUint64(m.queue, m.qbase+m.tail()+uint64(size))
		}, "record 100 found again"},
		{"reordered records", func(m *memory) {
			o1, s1 := m.recordAt(200)
			_, s2 := m.recordAt(201)
			r1 := append([]byte(nil), m.queue[o1:o1+s1]...)
			r2 := append([]byte(nil), m.queue[o1+s1:o1+s1+s2]...)
			copy(m.queue[o1:], r2)
			copy(m.queue[o1+s2:], r1)
		}, "record 200"},
		{"corrupted byte", func(m *memory) {
			off, size := m.recordAt(300)
			m.queue[off+size-1] ^= 0xff
		}, "record 300"},
		{"tail not written back", func(m *memory) {
			binary.LittleEndian.PutUint64(m.queue, m.qbase+8)
		}, "the tail is base+8, want base+"},
		{"extra bytes after the queue", func(m *memory) {
			m.queue[m.tail()+10] = 1
		}, "after the last record"},
		{"tail past the end", func(m *memory) {
			binary.LittleEndian.PutUint64(m.queue, m.qbase+m.tail()+16)
		}, "the tail is base+"},
		{"scatter chunk missing", func(m *memory) {
			g := newGenerator(m.w.Seed)
			for op := g.next(); ; op = g.next() {
				if op.scatter {
					c := op.chunks[0]
					clear(m.scatter[c.off : c.off+uint64(c.len)])
					return
				}
			}
		}, "chunk 0 of scatter 0 ("},
		{"scatter chunk corrupted", func(m *memory) {
			g := newGenerator(m.w.Seed)
			for op := g.next(); ; op = g.next() {
				if op.scatter && op.index == 7 {
					c := op.chunks[len(op.chunks)-1]
					m.scatter[c.off+uint64(c.len)-1] ^= 0x10
					return
				}
			}
		}, "of scatter 7"},
		{"stray write in a gap", func(m *memory) {
			g := newGenerator(m.w.Seed)
			for op := g.next(); ; op = g.next() {
				if op.scatter && op.chunks[0].off > 0 {
					m.scatter[op.chunks[0].off-1] = 0xee
					return
				}
			}
		}, "stray byte 0xee"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := simulate(testWorkload)
			tc.break_(m)
			_, err := m.check()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			t.Log(err)
		})
	}
}

func TestCheckSeed(t *testing.T) {
	const base = 0x7f0000000000
	mem := make([]byte, SeedQueueSize)
	binary.LittleEndian.PutUint64(mem, base+8)
	if err := checkSeedAppend(mem, base); err == nil || !strings.Contains(err.Error(), "tail is base+8") {
		t.Errorf("untouched queue: %v", err)
	}
	binary.LittleEndian.PutUint64(mem, base+16)
	for i := 8; i < 16; i++ {
		mem[i] = 0x33
	}
	if err := checkSeedAppend(mem, base); err != nil {
		t.Fatal(err)
	}
	if err := checkSeed(mem, base); err == nil || !strings.Contains(err.Error(), "scatter chunk 0") {
		t.Errorf("no chunks: %v", err)
	}
	for i := 0; i < seedScatterChunks; i++ {
		copy(mem[seedScatterOffset+i*seedScatterStride:], seedChunk(i))
	}
	if err := checkSeed(mem, base); err != nil {
		t.Fatal(err)
	}
	mem[SeedQueueSize-1] = 1
	if err := checkSeed(mem, base); err == nil || !strings.Contains(err.Error(), "stray byte") {
		t.Errorf("stray byte: %v", err)
	}
}

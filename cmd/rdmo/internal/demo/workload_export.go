package demo

import "github.com/openrdmo/rdmo/host/oob"

// The workload's generator and verifier as `rdmo bench --modes workload`
// runs them: the same operations, bytes and checks as `rdmo -m client`
// and `rdmo -m server`.

// Workload limits: the largest record, scatter and chunk the generator
// makes.
const (
	MaxRecord     = maxRecord
	MaxScatterIOV = maxScatterIOV
	MaxChunk      = maxChunk
)

// PendingFlushes is how many of the workload's periodic flushes the client
// keeps in flight.
func PendingFlushes(flushEvery uint64) int { return pendingFlushes(flushEvery) }

// WorkloadOp is one operation of a workload: an append of record Seq of
// Size bytes to the queue, or (Scatter) scatter Index of Chunks into the
// scatter region.
type WorkloadOp struct {
	Scatter bool
	Seq     uint32
	Size    int
	Index   uint32
	Chunks  []WorkloadChunk // reused by the next call of Next
}

// WorkloadChunk is a scatter chunk: Len bytes at Off from the scatter
// region's base.
type WorkloadChunk struct {
	Off uint64
	Len int
}

// Generator produces a workload's operations in order, as the demo's
// client and server do from the same seed.
type Generator struct {
	g      *generator
	chunks []WorkloadChunk
}

// NewGenerator starts the operations of seed.
func NewGenerator(seed uint64) *Generator { return &Generator{g: newGenerator(seed)} }

// Next returns the next operation.
func (g *Generator) Next() WorkloadOp {
	op := g.g.next()
	if !op.scatter {
		return WorkloadOp{Seq: op.seq, Size: op.size}
	}
	g.chunks = g.chunks[:0]
	for _, c := range op.chunks {
		g.chunks = append(g.chunks, WorkloadChunk{Off: c.off, Len: c.len})
	}
	return WorkloadOp{Scatter: true, Index: op.index, Chunks: g.chunks}
}

// FillWorkloadRecord writes record seq of size bytes into b[:size].
func FillWorkloadRecord(b []byte, seed uint64, seq uint32, size int) []byte {
	return fillRecord(b, seed, seq, size)
}

// FillWorkloadChunk writes chunk k (n bytes) of scatter index into b[:n].
func FillWorkloadChunk(b []byte, seed uint64, index uint32, k, n int) []byte {
	return fillChunk(b, seed, index, k, n)
}

// WorkloadRegions are the sizes of the queue region (its tail word
// included) and of the scatter region the target allocates for w.
func WorkloadRegions(w oob.Workload) (queue, scatter int) {
	p := makePlan(w)
	return p.QueueSize, p.ScatterSize
}

// WorkloadVerified is what a verification counted.
type WorkloadVerified = workloadResult

// VerifyWorkload checks the queue and scatter regions after w's final
// flush, as the demo's server does: every record once, intact and in
// order, the tail just past the last, every chunk at its place, and
// nothing else written.
func VerifyWorkload(w oob.Workload, queue []byte, qbase uint64, scatter []byte) (WorkloadVerified, error) {
	return newVerifier(w.Seed).checkWorkload(w, queue, qbase, scatter)
}

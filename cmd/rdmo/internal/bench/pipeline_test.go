package bench

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/openrdmo/rdmo/internal/cacheline"
)

// BenchmarkCopyPipeline measures the two ways an append's bytes can reach
// a queue on one machine, with no UCX and no RDMO in the way: the floor of
// the large-payload rows' ratio to native-owned.
//
//   - one-core: one thread fills a record (fillRecord) in one of eight
//     buffers of its own and copies it into the queue, as native-owned's
//     writer does (its copy is the kernel's);
//   - two-core: one thread fills records into a ring of slots and another
//     copies each into the queue once the first hands it over (one atomic
//     store each way), as an RDMO initiator lending its records and the
//     worker's append handler do. The bytes cross cores once, and the
//     filler writes lines the copier last read.
//   - two-core-evict: two-core with the copier evicting each slot from its
//     caches once copied (internal/cacheline), as the worker does with a
//     lent record before its ack frees it: the filler's next writes to
//     the slot then need no probe of the copier's core.
//
// The queue is 256 MiB, written round and round, so that it is not in the
// caches. Compare them at one size: two-core-evict / one-core is what a
// worker on another core can reach at best on this machine.
//
//	go test -run '^$' -bench CopyPipeline -benchtime 3s ./cmd/rdmo/internal/bench
func BenchmarkCopyPipeline(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		slots := max(2, min(64, (4<<20)/size)) // the rows' lend ring (lentRingBytes)
		b.Run("one-core/size="+strconv.Itoa(size), func(b *testing.B) { copyOneCore(b, size) })
		b.Run("two-core/size="+strconv.Itoa(size), func(b *testing.B) { copyTwoCore(b, size, slots, false) })
		b.Run("two-core-evict/size="+strconv.Itoa(size), func(b *testing.B) { copyTwoCore(b, size, slots, true) })
	}
}

const pipelineQueue = 256 << 20

func copyOneCore(b *testing.B, size int) {
	queue := make([]byte, pipelineQueue)
	clear(queue) // commit its pages before the timer starts
	const nbuf = 8
	bufs := make([]byte, nbuf*size)
	b.SetBytes(int64(size))
	b.ResetTimer()
	off := 0
	for i := range b.N {
		rec := bufs[(i%nbuf)*size : (i%nbuf+1)*size]
		fillRecord(rec, 1, 1, uint32(i))
		if off+size > len(queue) {
			off = 0
		}
		copy(queue[off:off+size], rec)
		off += size
	}
}

func copyTwoCore(b *testing.B, size, slots int, evict bool) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("two-core needs GOMAXPROCS >= 2")
	}
	queue := make([]byte, pipelineQueue)
	clear(queue)
	ring := make([]byte, slots*size)
	var filled, copied atomic.Int64 // records handed over, records copied
	n := b.N
	done := make(chan struct{})
	b.SetBytes(int64(size))
	b.ResetTimer()
	go func() { // the copier: the worker's append handler
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(done)
		off := 0
		for i := range n {
			for filled.Load() <= int64(i) {
			}
			k := i % slots
			if off+size > len(queue) {
				off = 0
			}
			src := ring[k*size : (k+1)*size]
			copy(queue[off:off+size], src)
			if evict {
				cacheline.Evict(src)
			}
			off += size
			copied.Store(int64(i + 1))
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for i := range n { // the filler: the initiator's application
		for int64(i)-copied.Load() >= int64(slots) {
		}
		k := i % slots
		fillRecord(ring[k*size:(k+1)*size], 1, 1, uint32(i))
		filled.Store(int64(i + 1))
	}
	<-done
}

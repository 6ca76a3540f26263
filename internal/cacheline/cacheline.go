// Package cacheline evicts memory from this CPU's caches, so that the next
// write to it by another core finds no copy here to invalidate.
package cacheline

import "unsafe"

// Size is the cache line size the eviction steps by (every amd64 CPU).
const Size = 64

// Evict writes back and evicts from every cache level the lines that hold
// b. It changes no byte of b and is only a hint: where the CPU offers no
// unordered flush instruction (CLFLUSHOPT) it does nothing.
//
// Why: when one core fills a buffer and another reads it, as an initiator
// filling a lent record and the worker copying it into target memory do,
// the reader's caches keep a shared copy of every line it read. The
// filler's next write to that line must first invalidate it there, a
// probe to the other core per line that its stores wait for. A reader
// that evicts the lines once it is done with them lets the filler's writes
// go to memory without a probe. On the 2-vCPU test machine this halved
// the time per 1 MiB record of a fill-on-one-core, copy-on-the-other
// pipeline (docs/benchmarks/large-payloads.md, "Evicting lent records").
func Evict(b []byte) {
	if len(b) == 0 || !Supported {
		return
	}
	evict(unsafe.Pointer(unsafe.SliceData(b)), len(b))
}

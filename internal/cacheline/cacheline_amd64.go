package cacheline

import "unsafe"

// Supported reports whether Evict does anything on this CPU: CLFLUSHOPT
// (CPUID leaf 7, EBX bit 23). CLFLUSH, which every amd64 CPU has, is
// ordered against every other CLFLUSH, so a buffer's lines would be
// flushed one after another; Evict would cost more than it saves.
var Supported = hasFlushOpt()

func hasFlushOpt() bool {
	maxLeaf, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, ebx := cpuid(7, 0)
	return ebx&(1<<23) != 0
}

// cpuid returns EAX and EBX of CPUID(leaf, sub).
func cpuid(leaf, sub uint32) (eax, ebx uint32)

// evict flushes every line that holds a byte of [p, p+n), n > 0.
//
//go:noescape
func evict(p unsafe.Pointer, n int)

//go:build !amd64

package cacheline

import "unsafe"

// Supported is false: Evict is amd64 only (CLFLUSHOPT).
const Supported = false

func evict(unsafe.Pointer, int) {}

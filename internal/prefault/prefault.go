// Package prefault commits the pages of a memory range in this process
// ahead of use, so that later writes into it take no page fault.
package prefault

import (
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14): fault every page
// of the range in, writable, as a write would, without writing.
const madvPopulateWrite = 23

// Method says how Populate committed a range.
type Method uint8

const (
	// Madvise: one madvise(MADV_POPULATE_WRITE) call, which the kernel
	// runs as a batch of write faults.
	Madvise Method = iota + 1
	// Touch: one atomic add of zero per page (kernels before 5.14), a
	// write that leaves every byte as it was even while others write the
	// same memory.
	Touch
)

func (m Method) String() string {
	switch m {
	case Madvise:
		return "madvise(MADV_POPULATE_WRITE)"
	case Touch:
		return "touch"
	}
	return "none"
}

// Populate makes every page of b present and writable in this process's
// page tables without changing a byte of it. It takes about as long as the
// page faults it saves (for memory not yet allocated, the allocation too),
// so call it where that time is wanted: at registration, not on a loop
// that serves requests. b must be mapped writable; it may be shared with
// processes writing it at the same time.
func Populate(b []byte) (Method, error) {
	if len(b) == 0 {
		return 0, nil
	}
	page := os.Getpagesize()
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	start := lo &^ uintptr(page-1) // madvise wants a page-aligned start
	_, _, e := syscall.Syscall(syscall.SYS_MADVISE, start, lo+uintptr(len(b))-start, madvPopulateWrite)
	switch {
	case e == 0:
		return Madvise, nil
	case e != syscall.EINVAL:
		// EFAULT or ENOMEM: part of the range is not mapped (or not
		// writable); touching it would crash the process.
		return Madvise, e
	}
	// EINVAL: the kernel does not know the advice.
	touch(b)
	return Touch, nil
}

// touch writes the first aligned word of each page of b with an atomic add
// of zero: the page is written without changing it, even against a
// concurrent writer.
func touch(b []byte) {
	page := uintptr(os.Getpagesize())
	base := unsafe.Pointer(unsafe.SliceData(b))
	lo := uintptr(base)
	off := (8 - lo%8) % 8
	for off+8 <= uintptr(len(b)) {
		atomic.AddUint64((*uint64)(unsafe.Add(base, off)), 0)
		off = (lo+off)&^(page-1) + page - lo
	}
}

// Package park lets a thread sleep on a 32-bit word until another thread
// changes it and wakes it (a Linux futex), without the Go scheduler.
//
// A goroutine locked to its OS thread that parks on a channel is woken
// through the scheduler: the waker readies it into a run queue, another
// thread must take it and hand the P to the locked thread, two thread
// switches. A futex wakes the sleeping thread itself, and only when a
// waker asks for it.
package park

import (
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Linux futex operations, private to the process (include/uapi/linux/futex.h).
const (
	futexWaitPrivate = 0 | 128
	futexWakePrivate = 1 | 128
)

// Word is a 32-bit value a thread can sleep on. The zero Word holds 0.
type Word struct {
	v atomic.Int32
}

// Load returns the value.
func (w *Word) Load() int32 { return w.v.Load() }

// Store sets the value; it wakes nobody (see Wake).
func (w *Word) Store(v int32) { w.v.Store(v) }

// CompareAndSwap sets the value to new if it is old.
func (w *Word) CompareAndSwap(old, new int32) bool { return w.v.CompareAndSwap(old, new) }

// Wait sleeps while the value is val, at most d, or until Wake (or a
// spurious wake-up, a signal): the caller checks the value again. The
// runtime does not see the system call (RawSyscall6), so the caller keeps
// its P while it sleeps, as a goroutine locked to its thread that must run
// the moment it is woken wants: a thread that gave its P up must win one
// back first, which in a process whose other goroutines keep every P busy
// waits until the scheduler preempts one of them (milliseconds). The cost
// is that P, idle for the others meanwhile: sleep briefly (d), and only on
// a thread that has the work the waker hands it.
func (w *Word) Wait(val int32, d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&w.v)), futexWaitPrivate,
		uintptr(uint32(val)), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// Wake wakes one thread waiting on the word. Change the value first.
func (w *Word) Wake() {
	syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&w.v)), futexWakePrivate, 1, 0, 0, 0)
}

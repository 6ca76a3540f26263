package ucp

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
)

// UCX runs our workers in single-thread mode (UCS_THREAD_MODE_SINGLE): one OS
// thread uses the worker, and UCX takes no locks for it. Go moves goroutines
// between OS threads at will, so "one goroutine" is not "one thread": NewWorker
// locks the calling goroutine to its thread until Close, and every call that
// reaches UCX must come from that goroutine. UCX 1.13 does not check this;
// UCX 1.18 (built with assertions, as Debian's is) aborts the process the
// first time another thread touches the worker (ucs_async_check_owner_thread
// in ucp_worker_progress, ucp_worker_arm, ucp_am_send_nbx, ...).
//
// Serialized mode (UCS_THREAD_MODE_SERIALIZED, WorkerOptions.Serialized)
// lets any thread use the worker, one at a time, the caller ordering the
// uses (a hand-over through an atomic, a mutex): UCX then checks no owner,
// and neither does the check below. It is not free everywhere: on mlx5
// devices it selects a doorbell mode with extra barriers (BF_POST_MT
// instead of BF_POST) on every post. The initiator uses it so that a caller
// waiting for an answer can run the progress loop itself (host/initiator,
// borrow.go); a locked thread alone costs the data path nothing.

// The check below makes the rule visible on every UCX version: when it is on,
// each call of a Worker (or of an Endpoint, Listener or RemoteKey made from
// it) that reaches UCX compares the calling thread with the worker's and
// fails with ErrWrongThread instead of letting UCX misbehave or abort.
// Progress, Wait and the issuing of queued operations check in C, inside the
// cgo call they make anyway (pthread_self against the creator: a few
// nanoseconds, so benchmarks may leave it on); the setup calls (Connect,
// Address, Close, ...) check in Go with gettid, a system call. Queueing an
// operation touches only Go and C memory, not UCX: it is checked when the
// queue is issued.

// EnvCheckThreads is the environment variable that turns the thread check on
// for a whole process tree (any value but "" and "0"); `make test` sets it.
const EnvCheckThreads = "RDMO_UCP_CHECK_THREADS"

var checkThreads atomic.Bool

func init() {
	if v := os.Getenv(EnvCheckThreads); v != "" && v != "0" {
		CheckThreads(true)
	}
}

// CheckThreads turns the owner-thread check on or off (see ErrWrongThread).
// Tests turn it on (ucptest does).
func CheckThreads(on bool) {
	if checkThreads.Swap(on) != on {
		v := C.int(0)
		if on {
			v = 1
		}
		C.shim_set_thread_check(v)
	}
}

// CheckingThreads reports whether the owner-thread check is on.
func CheckingThreads() bool { return checkThreads.Load() }

// ErrWrongThread reports a Worker, or an object made from it, used from an OS
// thread other than the one that created the worker, while CheckThreads is
// on. Calls that cannot return an error (Submit, Info) panic with a
// *ThreadError instead.
var ErrWrongThread = errors.New("ucp: worker used off its owner thread")

// ThreadError says which object was touched from which thread. It matches
// ErrWrongThread.
type ThreadError struct {
	Kind   string // e.g. "ucp.Worker", "ucp.Endpoint"
	Owner  int    // the thread id that created the worker
	Caller int    // the thread id of the offending call
}

func (e *ThreadError) Error() string {
	return fmt.Sprintf("ucp: %s used on thread %d, its worker belongs to thread %d "+
		"(create the worker on the goroutine that drives it; see the package comment)",
		e.Kind, e.Caller, e.Owner)
}

func (e *ThreadError) Unwrap() error { return ErrWrongThread }

// lockThread locks the calling goroutine to its OS thread and returns the
// thread's id.
func lockThread() int {
	runtime.LockOSThread()
	return syscall.Gettid()
}

// onThread is the owner-thread check: nil when the check is off, the
// worker is serialized (any thread may use it) or the caller is on the
// worker's thread.
func (w *Worker) onThread(kind string) error {
	if w.opts.Serialized {
		return nil
	}
	return w.onOwnerThread(kind)
}

// onOwnerThread is the check for what only the creating goroutine may do,
// serialized or not: Close, which unlocks that goroutine from its thread.
func (w *Worker) onOwnerThread(kind string) error {
	if !checkThreads.Load() {
		return nil
	}
	if tid := syscall.Gettid(); tid != w.tid {
		return &ThreadError{Kind: kind, Owner: w.tid, Caller: tid}
	}
	return nil
}

// mustOnThread is onThread for calls without an error result.
func (w *Worker) mustOnThread(kind string) {
	if err := w.onThread(kind); err != nil {
		panic(err)
	}
}

// offThread reports the failure the C side recorded (see
// shim_set_thread_check), and clears it.
func (w *Worker) offThread() error {
	if w.sw.wrong_tid == 0 {
		return nil
	}
	err := &ThreadError{Kind: "ucp.Worker", Owner: w.tid, Caller: int(w.sw.wrong_tid)}
	w.sw.wrong_tid = 0
	return err
}

// guard is the check of the Worker's setup calls that reach UCX: open, and
// on the owner thread.
func (w *Worker) guard() error {
	if err := w.h.check(); err != nil {
		return err
	}
	return w.onThread("ucp.Worker")
}

// OwnerThread is the OS thread id (gettid) of the thread the worker was
// created on and is bound to.
func (w *Worker) OwnerThread() int { return w.tid }

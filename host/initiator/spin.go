package initiator

import (
	"runtime"
	"syscall"
	"time"
)

// answerSpin bounds how long a caller waiting for an answer (Flush,
// Call) polls before it parks. The answer is delivered by the progress
// loop, which is locked to its own thread: a parked caller is readied into
// the loop's run queue, from which another thread, woken through a futex,
// must steal it, a hand-off that costs tens of microseconds on a loaded
// machine, comparable to the round trip itself. A caller that is still
// polling when the answer comes needs no wake-up at all. The bound keeps a
// slow answer (a flush behind a long stream of requests, a worker far
// away) from costing the caller more than this much CPU; an Initiator with
// nothing outstanding has no caller polling.
const answerSpin = 200 * time.Microsecond

// spinCheckEvery is how many polls pass between clock readings.
const spinCheckEvery = 8

// spinFor polls done and stop (nil: none) for up to answerSpin, yielding
// between polls the CPU (sched_yield: the threads that produce the answer,
// the progress loop and on a small machine the worker process, may want
// this core) and every spinCheckEvery polls the P (runtime.Gosched: a
// goroutine of this process that produces the answer, such as a worker
// running in the same process, may be waiting for one). It returns when
// either is closed or the time is up; the caller then waits as it would
// have (a select that finds a closed channel does not park). It does not
// poll with one P: the caller would then hold the P the progress loop
// needs.
func spinFor(done, stop <-chan struct{}) {
	if runtime.GOMAXPROCS(0) < 2 {
		return
	}
	var start time.Time
	for i := 0; ; i++ {
		select {
		case <-done:
			return
		case <-stop:
			return
		default:
		}
		if i%spinCheckEvery == 0 {
			if i == 0 {
				start = time.Now()
			} else if time.Since(start) >= answerSpin {
				return
			}
		}
		if i%spinCheckEvery == spinCheckEvery-1 {
			// Not every poll: a Gosched that finds an idle P wakes
			// a thread for it (a futex call), the cost this poll
			// exists to avoid.
			runtime.Gosched()
		}
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// spinWhile polls cond for up to answerSpin, yielding as spinFor does,
// and returns when it turned false or the time is up.
func spinWhile(cond func() bool) {
	if runtime.GOMAXPROCS(0) < 2 {
		return
	}
	var start time.Time
	for i := 0; cond(); i++ {
		if i%spinCheckEvery == 0 {
			if i == 0 {
				start = time.Now()
			} else if time.Since(start) >= answerSpin {
				return
			}
		}
		if i%spinCheckEvery == spinCheckEvery-1 {
			runtime.Gosched() // now and then, as spinFor does
		}
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

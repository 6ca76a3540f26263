package initiator

import (
	"context"
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

// pace paces a waiter's polls (spinFor, spinWhile, borrowWait): every
// spinCheckEvery polls it reads the clock and looks at ctx (cheap: a
// canceled context is one atomic load), and between polls it yields the
// CPU (sched_yield: the threads that produce the answer, the progress loop
// and on a small machine the worker process, may want this core) and every
// spinCheckEvery polls the P (runtime.Gosched: a goroutine of this process
// that produces the answer, such as a worker running in the same process,
// may be waiting for one; not every poll, since a Gosched that finds an
// idle P wakes a thread for it, a futex call, the cost this poll exists to
// avoid).
type pace struct {
	ctx   context.Context // nil: none
	polls int
	start time.Time
}

// more reports whether to poll once more: false once answerSpin passed
// since the first poll or ctx ended.
func (p *pace) more() bool {
	if p.polls%spinCheckEvery != 0 {
		return true
	}
	if p.polls == 0 {
		p.start = time.Now()
	} else if time.Since(p.start) >= answerSpin {
		return false
	}
	return p.ctx == nil || p.ctx.Err() == nil
}

// yield counts a poll and yields between it and the next.
func (p *pace) yield() {
	if p.polls%spinCheckEvery == spinCheckEvery-1 {
		runtime.Gosched()
	}
	syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	p.polls++
}

// spinFor polls l for up to answerSpin, or until ctx (nil: none) ends,
// pacing its polls with pace; the caller then waits as it would have. It
// does not poll with one P: the caller would then hold the P the progress
// loop needs.
func spinFor(l *latch, ctx context.Context) {
	if runtime.GOMAXPROCS(0) < 2 {
		return
	}
	p := pace{ctx: ctx}
	for !l.isSet() && p.more() {
		p.yield()
	}
}

// spinAnswer polls l as spinFor does for a FlushWait's or CallWait's Wait,
// while polling can still pay: only one such waiter polls at a time (the
// others park at once), and it stops once the loop issued two batches
// after it began, since the caller then pipelines (FlushAsync or CallAsync
// among a stream of requests) and its answer waits behind theirs. Waiters
// polling side by side on a machine with few cores take turns on the CPUs
// with each other, the stream's producer, the loop and the worker: the
// bench's workload row, a FlushAsync every 128 operations each waited on
// by a goroutine of its own, had several polling at once
// (docs/benchmarks/idle-policy.md, "One waiter polls").
func (in *Initiator) spinAnswer(l *latch, ctx context.Context) {
	if runtime.GOMAXPROCS(0) < 2 || !in.answerPoller.CompareAndSwap(false, true) {
		return
	}
	defer in.answerPoller.Store(false)
	b0 := in.stats.batches.Load()
	p := pace{ctx: ctx}
	for !l.isSet() && p.more() && in.stats.batches.Load() <= b0+1 {
		p.yield()
	}
}

// spinWhile polls cond for up to answerSpin, pacing its polls as spinFor
// does, and returns when it turned false or the time is up.
func spinWhile(cond func() bool) {
	if runtime.GOMAXPROCS(0) < 2 {
		return
	}
	var p pace
	for cond() && p.more() {
		p.yield()
	}
}

package initiator

import (
	"runtime"
	"time"
)

// A stream's producers run the progress loop's rounds themselves while the
// loop has nothing else to do, as a Driver does. On a machine with few
// cores the producer, the polling loop and the worker otherwise take turns
// on the CPUs, and every request crosses from the producer's thread to the
// loop's. When a round of the loop finds nothing to take or progress soon
// after it sent appends or scatters (quiet), with no send out and no lent
// buffer waiting for its ack, the loop frees the progress token and parks
// for up to streamPark (handOver); not again after a park in which no
// producer ran a round, until a stream outruns it (streamIdle).
// Meanwhile:
//
//   - a producer whose request leaves streamRoundEvery requests queued, or
//     whose request somebody waits for (a lent buffer, a Call, a Flush),
//     takes the free token and runs one round (streamRound), leaving the
//     token free again;
//   - a producer whose request goes into an empty queue more than
//     streamGap after the last such round resumes the loop (wakeParked):
//     it is not streaming, and its request goes at once;
//   - a producer that must wait for window space or credits runs rounds
//     until they come (awaitSpace), a Flush or Call caller until its
//     answer (borrow.go);
//   - a Drive, Close or a peer failure resume the loop at once.
//
// The loop takes the token back once streamPark passed with the token
// free: requests a stream left queued short of streamRoundEvery, with no
// Flush after them, wait that long at most.

// streamRoundEvery is how many queued requests make a producer run a
// round: as driveRoundEvery, a round per request would cost a UCX progress
// call each.
const streamRoundEvery = driveRoundEvery

// streamMinBatch is the batch of appends or scatters the loop must take
// to leave the rounds to producers again after it parked for them in vain:
// a stream that outruns the loop.
const streamMinBatch = 16

// streamPark bounds the loop's park while producers run the rounds.
const streamPark = time.Millisecond

// streamGap is how long after a stream's last round a request into the
// empty queue counts as not part of the stream.
const streamGap = 20 * time.Microsecond

// epoch is the origin of monoNow.
var epoch = time.Now()

// monoNow reads the monotonic clock in nanoseconds since epoch
// (Initiator.streamLast).
func monoNow() int64 { return int64(time.Since(epoch)) }

// streamHandOverOK reports whether the idle loop may leave the rounds to a
// stream's producers.
func (lp *loop) streamHandOverOK() bool {
	in := lp.in
	return lp.quiet < quietRounds && !lp.streamIdle && lp.sendsOut == 0 && lp.lentAcks == 0 && !lp.driving && !lp.fatal &&
		!in.opts.LoopThreadOnly && runtime.GOMAXPROCS(0) > 1 && !in.q.Queued() && !in.q.attn.Load()
}

// streamRound runs one round of the loop on a producer's goroutine if the
// token is free, and leaves it free, or hands it back to the loop when
// sends are out (only progress completes them) or the loop has a Drive,
// Close or peer failure to act on.
func (in *Initiator) streamRound() {
	if !in.tok.CompareAndSwap(tokFree, tokCaller) {
		return
	}
	in.stats.streamRounds.Add(1)
	in.streamLast.Store(monoNow())
	lp := in.lp
	lp.borrowed = true
	closing := lp.round()
	lp.borrowed = false
	if closing || lp.sendsOut > 0 || in.q.attn.Load() {
		in.tok.Store(tokLoop)
		in.tok.Wake()
		return
	}
	in.tok.Store(tokFree)
}

// streaming reports whether a stream's producer ran a round within
// streamGap.
func (in *Initiator) streaming() bool {
	return time.Duration(monoNow()-in.streamLast.Load()) < streamGap
}

package initiator

import (
	"context"
	"runtime"
	"time"
)

// A caller waiting in Flush or Call for its answer runs the progress loop's
// rounds itself while the loop is parked, so that a round trip crosses two
// threads (the caller's and the worker's), as inside a Drive, instead of
// three: on a machine with few cores, the caller, the loop and the worker
// polling at once take turns on the CPUs, and each turn costs a context
// switch. The loop owns the UCP worker only while it holds the token; the
// worker is created UCS_THREAD_MODE_SERIALIZED so that another thread may
// use it while it does not.
//
// The token (Initiator.tok) is held by the loop (tokLoop), by nobody
// (tokFree: the loop is parked and a waiting caller may take it) or by a
// caller (tokCaller). A caller counts itself in Initiator.borrowers before
// it queues its request, so that queueing it does not wake a parked loop
// (the caller will run the rounds), and in Initiator.spinning while it
// waits to take the token. The loop, at the top of a round (not inside a
// Drive, not while a stream runs, nor while a Drive, Close or a peer
// failure waits for it), sees a waiting caller, frees the token
// and parks on it, keeping its P (park.Word.Wait). The caller takes it,
// runs rounds until its answer is there (or answerSpin passed), and frees
// it again (giveBack): to another waiting caller, or, with nothing left to
// do, to nobody, the loop staying parked, so that the caller's next request
// finds the token free at once; otherwise back to the loop, woken. A
// producer that queues a request while the loop is parked and no caller is
// counted resumes it (Initiator.wake), as do Close, PeerFailed and a
// caller that must wait for window space or credits; a loop parked for
// parkLimit with no caller waiting takes the token back for its own sleep,
// which is armed for the worker's events.

// Progress token states (Initiator.tok).
const (
	tokLoop   int32 = iota // the progress loop runs rounds
	tokFree                // the loop is parked; a waiting caller may take the token
	tokCaller              // a waiting caller runs rounds
)

// quietRounds is how many rounds must pass after the loop issued an
// APPEND or a SCATTER before it hands over to a waiting caller: a stream's
// requests are the loop's to take (a caller runs rounds only until its own
// answer, and the token would go back and forth with every flush of a
// streaming initiator), and a loop parked holding its P leaves the
// stream's producer and the caller one P to share. Rounds of an idle loop
// take well under a microsecond; a stream's producer queues far more
// often.
const quietRounds = 256

// parkLimit bounds how long the loop stays parked on a free token with
// nobody waiting before it takes the token back, so that an initiator
// whose caller went quiet sleeps armed for the worker's events again.
const parkLimit = time.Millisecond

// busy reports whether a borrower leaves the loop work: requests queued,
// Close or a peer failure to act on, sends, flushes or acks outstanding.
// Called by the token's holder.
func (lp *loop) busy() bool {
	q := &lp.in.q
	return q.Queued() || q.attn.Load() || lp.sendsOut > 0 || len(lp.flushes) > 0 || lp.acks.len() > 0 || lp.fatal
}

// handOver frees the token for the callers that wait for it and parks the
// loop until the token is handed back (or is free, nobody waits and limit
// passed). With stream set it parks for a stream's producers (stream.go).
func (lp *loop) handOver(limit time.Duration, stream bool) {
	in := lp.in
	if stream {
		in.streamLast.Store(monoNow())
		in.streamParked.Store(true)
		defer in.streamParked.Store(false)
	}
	// parked first: whoever finds the token free must find the loop
	// parked, or its resumeParked would miss it for parkLimit.
	in.parked.Store(true)
	defer in.parked.Store(false)
	in.tok.Store(tokFree)
	lp.in.stats.handOvers.Add(1)
	start := time.Now()
	rounds := in.stats.streamRounds.Load()
	for {
		v := in.tok.Load()
		if v == tokLoop {
			break
		}
		in.tok.Wait(v, limit)
		if in.tok.Load() == tokFree && in.spinning.Load() == 0 && time.Since(start) >= limit &&
			in.tok.CompareAndSwap(tokFree, tokLoop) {
			break
		}
	}
	if stream && in.stats.streamRounds.Load() == rounds {
		lp.streamIdle = true
	}
}

// borrower is a caller counted in Initiator.borrowers (borrowBegin) until
// it stops waiting to take the token (end).
type borrower struct {
	in    *Initiator
	ended bool
}

// borrowBegin counts a caller that is about to queue a request and wait
// for its answer, so that the loop hands it the token and a producer's
// wake-up leaves the parked loop alone. The caller waits with wait, and
// defers end for the paths that return before.
// With Options.LoopThreadOnly it returns an ended borrower: the caller
// waits for the loop.
func (in *Initiator) borrowBegin() borrower {
	if in.opts.LoopThreadOnly {
		return borrower{ended: true}
	}
	in.borrowers.Add(1)
	return borrower{in: in}
}

// wait waits for l or ctx as borrowWait does, then ends the borrow: a
// caller that no longer waits to take the token must not be counted, or
// the loop would park for it.
func (b *borrower) wait(l *latch, ctx context.Context) {
	if b.ended {
		spinFor(l, ctx)
		return
	}
	b.end(b.in.borrowWait(l, ctx))
}

// end uncounts the caller, once. Unless the caller freed the token itself
// (held), the loop may be parked on a free token that no caller takes now:
// it is woken unless another caller is about to take the token. It is
// woken too when a request is queued.
func (b *borrower) end(held bool) {
	if b.ended {
		return
	}
	b.ended = true
	in := b.in
	in.borrowers.Add(-1)
	// A producer that queued a request while this caller was counted
	// did not wake the parked loop (wakeParked): either it sees the
	// count without this caller, or this sees its request.
	q := &in.q
	if !held && in.spinning.Load() == 0 || q.Queued() || q.attn.Load() {
		in.resumeParked()
	}
}

// wakeParked resumes a loop parked on a free token for a producer's
// request, unless a caller counted in borrowers will run the rounds, or
// the loop parked for a stream whose producers run them (stream.go) and
// no Drive waits.
func (in *Initiator) wakeParked() {
	if in.borrowers.Load() == 0 && !(in.streamParked.Load() && in.streaming() && !in.q.attn.Load()) {
		in.resumeParked()
	}
}

// resumeParked resumes a loop parked on a free token.
func (in *Initiator) resumeParked() {
	if in.parked.Load() && in.tok.CompareAndSwap(tokFree, tokLoop) {
		in.tok.Wake()
	}
}

// giveBack ends a caller's turn with the token. It goes back to the loop
// while a stream ran lately (its requests are the loop's to take), when a
// Drive waits or Close or a peer failure needs acting on, and when work is
// left (requests queued, answers outstanding) that no other
// waiting caller takes over; otherwise it is left free, for such a caller
// or, with the loop parked, for the next one. A producer that queued a
// request meanwhile saw the token held (and did not wake the loop); the
// check after the store sees its request. A caller that stops waiting
// without taking the token resumes the loop (borrower.end).
func (in *Initiator) giveBack(lp *loop, answered bool) {
	// A Drive, Close or a peer failure (attn) is the loop's to act on:
	// callers passing the token among themselves would keep it waiting.
	if answered && in.streamParked.Load() && !in.q.attn.Load() && lp.sendsOut == 0 {
		// The loop parked for a stream's producers (stream.go): they
		// run the rounds. A caller that stops polling without its
		// answer gives the token to the loop below, since nobody might
		// run them while it parks.
		in.tok.Store(tokFree)
		return
	}
	if lp.quiet < quietRounds || in.q.attn.Load() || lp.busy() && in.spinning.Load() == 0 {
		in.tok.Store(tokLoop)
		in.tok.Wake()
		return
	}
	in.tok.Store(tokFree)
	q := &in.q
	if (q.Queued() || q.attn.Load()) && in.spinning.Load() == 0 && in.tok.CompareAndSwap(tokFree, tokLoop) {
		in.tok.Wake()
	}
}

// borrowWait waits for l, or until ctx (nil: none) ends, running the
// loop's rounds on the caller's thread once the loop hands it the token,
// for up to answerSpin (it polls, paced as spinFor's polls, while the loop
// has not); the caller then parks as it would have. It reports whether
// the caller held the token (and so left it as it should be).
func (in *Initiator) borrowWait(l *latch, ctx context.Context) (held bool) {
	// spinning counts the caller while it waits to take the token, not
	// while it holds it (giveBack asks whether another caller waits).
	in.spinning.Add(1)
	counted := true
	defer func() {
		if counted {
			in.spinning.Add(-1)
		}
	}()
	lp := in.lp
	p := pace{ctx: ctx}
	for {
		if l.isSet() || !p.more() {
			return false
		}
		if in.tok.CompareAndSwap(tokFree, tokCaller) {
			in.spinning.Add(-1)
			counted = false
			in.stats.borrows.Add(1)
			lp.borrowed = true
			lp.runBorrowed(l, &p)
			lp.borrowed = false
			in.giveBack(lp, l.isSet())
			return true
		}
		// The loop frees the token at a round's top; meanwhile poll as
		// spinFor does, which with one P it does not: the caller would
		// hold the P the loop needs.
		if p.polls == 0 && runtime.GOMAXPROCS(0) < 2 {
			return false
		}
		p.yield()
	}
}

// runBorrowed runs rounds until l is set, Close was called, or p says to
// stop polling (answerSpin passed, its context ended).
func (lp *loop) runBorrowed(l *latch, p *pace) {
	for !l.isSet() {
		if lp.round() {
			return
		}
		p.polls++
		if !p.more() {
			return
		}
	}
}

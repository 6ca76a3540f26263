package initiator

import (
	"context"
	"sync"
	"sync/atomic"
)

// latch is the one-shot event of an answer (a flush's, a call's), set by
// the progress loop once the answer is written. A waiter that polls (the
// wait for an answer mostly does) reads it with one atomic load; its
// channel is made only for a waiter that parks or asks for it (Done), so
// that waiting for an answer costs no allocation and no channel locks per
// poll.
type latch struct {
	// state holds latchSet and latchChan. The loop fires a latch and
	// reuses it for every call of a pipeline, so fire and reset take the
	// mutex only when a channel was made.
	state atomic.Uint32
	mu    sync.Mutex
	ch    chan struct{} // made on demand, closed once set; under mu
}

const (
	latchSet  = 1 << iota // the event happened
	latchChan             // ch was made (under mu, before the bit is set)
)

// isSet reports whether the event happened; what was written before fire
// is then visible.
func (l *latch) isSet() bool { return l.state.Load()&latchSet != 0 }

// fire sets the latch (once: the caller makes sure of that). Of fire and
// C, whichever sets its bit second closes the channel.
func (l *latch) fire() {
	if l.state.Or(latchSet)&latchChan != 0 {
		l.mu.Lock()
		close(l.ch)
		l.mu.Unlock()
	}
}

// C returns a channel that is closed once the latch is set.
func (l *latch) C() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ch == nil {
		l.ch = make(chan struct{})
		if l.state.Or(latchChan)&latchSet != 0 {
			close(l.ch)
		}
	}
	return l.ch
}

// reset makes a latch that was set (or never used) ready for another event.
func (l *latch) reset() {
	if l.state.CompareAndSwap(latchSet, 0) || l.state.CompareAndSwap(0, 0) {
		return // no channel: C sets latchChan only under mu, after making one
	}
	l.mu.Lock()
	l.ch = nil
	l.state.Store(0)
	l.mu.Unlock()
}

// await waits for an answer's latch as Flush, Call and their Waits do: it
// fails inside a Drive's fn (waitable), runs the loop's rounds while the
// loop hands them over (br non-nil, borrow.go) or polls (spinAnswer), and
// then parks on the latch's channel and ctx's (nil: no limit). It returns
// nil once l is set, preferring the answer when ctx ended too.
func (in *Initiator) await(l *latch, ctx context.Context, br *borrower) error {
	if err := in.waitable(l); err != nil {
		return err
	}
	if br != nil {
		br.wait(l, ctx)
	} else {
		in.spinAnswer(l, ctx)
	}
	if l.isSet() {
		return nil
	}
	if ctx == nil {
		<-l.C()
		return nil
	}
	select {
	case <-l.C():
		return nil
	case <-ctx.Done():
		if l.isSet() {
			return nil
		}
		return ctx.Err()
	}
}

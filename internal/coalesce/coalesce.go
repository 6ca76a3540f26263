// Package coalesce is the queue between many producer goroutines and one
// consumer goroutine that takes everything queued in one swap.
//
// Producers add to the current batch under a mutex; the producer that makes
// an empty batch non-empty wakes the consumer (a 1-slot signal channel, or
// a wake function of the consumer's own when it sleeps elsewhere, e.g. in
// ucp.Worker.Wait); the consumer swaps the batch out for an empty one and
// works through it without the lock. A burst of N producers costs the
// consumer one lock round trip and at most one wake-up, and the consumer
// recycles the batches it swaps out, so steady traffic allocates nothing.
package coalesce

import (
	"sync"
	"sync/atomic"
)

// Batcher holds the batch B that producers fill. Queue is the common case
// (a batch is a slice of items); a Batcher of another B serves a producer
// that encodes into a batch of its own layout (arenas) and keeps more
// state under the same mutex, so that a request costs it one lock round
// trip. Call Init before use.
type Batcher[B any] struct {
	mu      sync.Mutex
	batch   B
	n       int         // items in batch, under mu
	queued  atomic.Bool // n > 0, for readers that do not take the lock
	wakeDue bool        // the batch became non-empty under this lock hold
	closed  atomic.Bool // written under mu
	sig     chan struct{}
	wake    func()
}

// Init sets the wake function: nil for the 1-slot signal that Wait (or a
// receive on Signal) blocks on, or a function the producer that makes the
// batch non-empty calls, without the lock held. A wake function that is
// costly (a system call) should check a flag that the consumer sets before
// it sleeps and reads Len after: either the consumer sees the item or the
// producer sees the flag.
func (q *Batcher[B]) Init(wake func()) {
	q.wake = wake
	if wake == nil {
		q.sig = make(chan struct{}, 1)
	}
}

// Lock takes the mutex. A producer adds to Batch, calls Added, and then
// Unlock; the owner of the Batcher may keep state of its own under the
// same mutex.
func (q *Batcher[B]) Lock() { q.mu.Lock() }

// Batch is the batch being filled; use it with the mutex held.
func (q *Batcher[B]) Batch() *B { return &q.batch }

// Added records, with the mutex held, that k items were added to the batch.
// Only the first items of a batch write the atomic flag Queued reads: an
// atomic store is a locked instruction on amd64, and a producer streaming
// small requests makes one per item otherwise.
func (q *Batcher[B]) Added(k int) {
	if q.n == 0 && k > 0 {
		q.wakeDue = true
		q.queued.Store(true)
	}
	q.n += k
}

// Unlock releases the mutex and wakes the consumer if the batch became
// non-empty while it was held.
func (q *Batcher[B]) Unlock() {
	due := q.wakeDue
	q.wakeDue = false
	q.mu.Unlock()
	if due {
		q.notify()
	}
}

func (q *Batcher[B]) notify() {
	if q.wake != nil {
		q.wake()
		return
	}
	select {
	case q.sig <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// SwapLocked, with the mutex held, installs next as the batch to fill and
// returns the batch it replaces with its item count. The consumer reuses
// the batches it gets back as next ones.
func (q *Batcher[B]) SwapLocked(next B) (B, int) {
	b, n := q.batch, q.n
	q.batch, q.n = next, 0
	q.queued.Store(false)
	q.wakeDue = false
	return b, n
}

// Swap is SwapLocked under the mutex.
func (q *Batcher[B]) Swap(next B) (B, int) {
	q.mu.Lock()
	b, n := q.SwapLocked(next)
	q.mu.Unlock()
	return b, n
}

// Queued reports, without the lock, whether items are queued: a consumer
// polls it to skip the lock when nothing is.
func (q *Batcher[B]) Queued() bool { return q.queued.Load() }

// Len is the number of items queued; it takes the lock.
func (q *Batcher[B]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// LenLocked is Len for a caller that holds the lock.
func (q *Batcher[B]) LenLocked() int { return q.n }

// Close marks the queue closed and wakes the consumer. It reports whether
// this call closed it. Items already queued stay there for the consumer.
func (q *Batcher[B]) Close() bool {
	q.mu.Lock()
	first := !q.closed.Load()
	q.closed.Store(true)
	q.mu.Unlock()
	if first {
		q.notify()
	}
	return first
}

// Closed reports whether Close was called.
func (q *Batcher[B]) Closed() bool { return q.closed.Load() }

// Signal is the 1-slot signal channel (nil with a wake function): it holds
// a value when the batch became non-empty, or the queue closed, since the
// consumer last received from it. A consumer that blocks elsewhere selects
// on it.
func (q *Batcher[B]) Signal() <-chan struct{} { return q.sig }

// Queue is a Batcher whose batch is a slice of items.
type Queue[T any] struct{ Batcher[[]T] }

// Push appends v to the batch. It reports false, and queues nothing, once
// the queue is closed.
func (q *Queue[T]) Push(v T) bool {
	q.Lock()
	if q.closed.Load() {
		q.Unlock()
		return false
	}
	b := q.Batch()
	*b = append(*b, v)
	q.Added(1)
	q.Unlock()
	return true
}

// Take swaps out everything queued, leaving spare[:0] as the slice
// producers append to next. Pass the slice a previous Take returned, with
// its items cleared, so that the two slices alternate and steady traffic
// allocates nothing.
func (q *Queue[T]) Take(spare []T) []T {
	b, _ := q.Swap(spare[:0])
	return b
}

// Wait blocks until at least one item is queued or the queue is closed,
// then takes everything as Take does (the result is empty only when the
// queue is closed). It needs the 1-slot signal (Init(nil)).
func (q *Queue[T]) Wait(spare []T) []T {
	for {
		b := q.Take(spare)
		if len(b) > 0 || q.Closed() {
			return b
		}
		spare = b // the slice just installed must not be installed twice
		<-q.sig
	}
}

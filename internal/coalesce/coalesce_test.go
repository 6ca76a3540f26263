package coalesce_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/openrdmo/rdmo/internal/coalesce"
)

// Every item of many producers arrives exactly once, in each producer's
// order, and the consumer takes them in fewer batches than items when
// producers outrun it.
func TestQueueManyProducers(t *testing.T) {
	const producers, per = 8, 2000
	var q coalesce.Queue[[2]int]
	q.Init(nil)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if !q.Push([2]int{p, i}) {
					t.Error("Push on an open queue failed")
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); q.Close() }()
	next := make([]int, producers)
	var items [][2]int
	got, batches := 0, 0
	for {
		items = q.Wait(items)
		if len(items) == 0 {
			break // closed and drained
		}
		batches++
		for i, it := range items {
			if it[1] != next[it[0]] {
				t.Fatalf("producer %d: got item %d, want %d", it[0], it[1], next[it[0]])
			}
			next[it[0]]++
			items[i] = [2]int{}
		}
		got += len(items)
	}
	if got != producers*per {
		t.Fatalf("got %d items, want %d", got, producers*per)
	}
	t.Logf("%d items in %d batches", got, batches)
}

// Items pushed while the consumer is busy coalesce into one batch, and
// Take alternates two slices: no allocation once both have grown.
func TestQueueBatchesAndRecycles(t *testing.T) {
	var q coalesce.Queue[int]
	q.Init(nil)
	for i := range 5 {
		q.Push(i)
	}
	if q.Len() != 5 || !q.Queued() {
		t.Fatalf("Len = %d (Queued %v), want 5", q.Len(), q.Queued())
	}
	a := q.Take(nil)
	if len(a) != 5 || a[4] != 4 {
		t.Fatalf("Take = %v, want [0 1 2 3 4]", a)
	}
	if q.Len() != 0 || q.Queued() {
		t.Fatalf("Len after Take = %d (Queued %v), want 0", q.Len(), q.Queued())
	}
	var spare []int
	allocs := testing.AllocsPerRun(100, func() {
		for i := range 5 {
			q.Push(i)
		}
		spare = q.Take(a[:0])
		a, spare = spare, a
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per push-and-take round, want 0", allocs)
	}
}

// The wake function runs once per batch: when an item goes into an empty
// batch, and not for the items after it until the consumer took it.
func TestWakeOnFirstItemOnly(t *testing.T) {
	var wakes atomic.Int32
	var q coalesce.Queue[int]
	q.Init(func() { wakes.Add(1) })
	q.Push(1)
	q.Push(2)
	q.Push(3)
	if n := wakes.Load(); n != 1 {
		t.Fatalf("%d wakes for three pushes into one batch, want 1", n)
	}
	if got := q.Take(nil); len(got) != 3 {
		t.Fatalf("Take = %v, want three items", got)
	}
	q.Push(4)
	if n := wakes.Load(); n != 2 {
		t.Fatalf("%d wakes after a push into the emptied batch, want 2", n)
	}
	if q.Signal() != nil {
		t.Fatal("a queue with a wake function has a signal channel")
	}
}

// Close refuses later pushes, wakes the consumer once, and leaves what was
// queued for it.
func TestClose(t *testing.T) {
	var wakes atomic.Int32
	var q coalesce.Queue[int]
	q.Init(func() { wakes.Add(1) })
	q.Push(1)
	if !q.Close() {
		t.Fatal("first Close reported false")
	}
	if q.Close() {
		t.Fatal("second Close reported true")
	}
	if !q.Closed() {
		t.Fatal("Closed is false after Close")
	}
	if q.Push(2) {
		t.Fatal("Push after Close succeeded")
	}
	if n := wakes.Load(); n != 2 {
		t.Fatalf("%d wakes (push, close), want 2", n)
	}
	if got := q.Take(nil); len(got) != 1 || got[0] != 1 {
		t.Fatalf("Take after Close = %v, want [1]", got)
	}
}

// A consumer that sleeps elsewhere (the loops sleep in ucp.Worker.Wait)
// uses a flag it sets before checking Len, and a wake function that acts
// only when the flag is set: no push is ever left behind while it sleeps.
// Here the sleep is a channel receive and the flag protocol is the one the
// dpu inbox and the initiator use.
func TestWakeFlagProtocol(t *testing.T) {
	const producers, per = 4, 5000
	var sleeping atomic.Bool
	wakeCh := make(chan struct{}, 1)
	var syscalls atomic.Int64
	var q coalesce.Queue[int]
	q.Init(func() {
		if sleeping.Swap(false) {
			syscalls.Add(1)
			select {
			case wakeCh <- struct{}{}:
			default:
			}
		}
	})
	var wg sync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				q.Push(i)
			}
		}()
	}
	go func() { wg.Wait(); q.Close() }()
	var items []int
	got := 0
	for {
		items = q.Take(items)
		got += len(items)
		if len(items) > 0 {
			continue
		}
		if q.Closed() && !q.Queued() {
			break
		}
		sleeping.Store(true)
		if !q.Queued() && !q.Closed() {
			<-wakeCh // a lost wake-up would hang here until the test's deadline
		}
		sleeping.Store(false)
	}
	if got != producers*per {
		t.Fatalf("got %d items, want %d", got, producers*per)
	}
	t.Logf("%d wake-ups for %d items", syscalls.Load(), got)
}

// A Batcher of a batch type of the caller's own: state of the caller's
// kept under the same mutex, and a swap that hands back the batch.
func TestBatcherOwnBatch(t *testing.T) {
	type batch struct{ data []byte }
	var wakes atomic.Int32
	var q coalesce.Batcher[*batch]
	q.Init(func() { wakes.Add(1) })
	q.Swap(&batch{})
	for _, s := range []string{"ab", "cd"} {
		q.Lock()
		b := *q.Batch()
		b.data = append(b.data, s...)
		q.Added(1)
		q.Unlock()
	}
	b, n := q.Swap(&batch{})
	if n != 2 || string(b.data) != "abcd" {
		t.Fatalf("Swap = %q, %d items; want \"abcd\", 2", b.data, n)
	}
	if wakes.Load() != 1 {
		t.Fatalf("%d wakes, want 1", wakes.Load())
	}
}

// BenchmarkPush is the producer's cost with a consumer draining in
// parallel: one lock round trip per item, no allocation once the two
// slices have grown.
func BenchmarkPush(b *testing.B) {
	var q coalesce.Queue[int]
	q.Init(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var items []int
		for {
			items = q.Wait(items)
			if len(items) == 0 {
				return
			}
		}
	}()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			q.Push(1)
		}
	})
	q.Close()
	<-done
}

package park

import (
	"testing"
	"time"
)

// A thread waiting on a Word wakes when another changes it and calls Wake,
// long before its bound.
func TestWaitWake(t *testing.T) {
	var w Word
	woke := make(chan int32)
	go func() {
		for w.Load() == 0 {
			w.Wait(0, time.Minute)
		}
		woke <- w.Load()
	}()
	w.Store(7)
	w.Wake()
	if v := <-woke; v != 7 {
		t.Fatalf("woke with %d, want 7", v)
	}
}

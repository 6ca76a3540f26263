package initiator

import (
	"sync"
	"testing"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestLatch(t *testing.T) {
	var l latch
	if l.isSet() {
		t.Fatal("a new latch is set")
	}
	early := l.C()
	if closed(early) {
		t.Fatal("the channel of an unset latch is closed")
	}
	l.fire()
	if !l.isSet() || !closed(early) {
		t.Fatal("fire did not set the latch and close the channel made before it")
	}
	if l.C() != early {
		t.Fatal("C made a second channel")
	}
	l.reset()
	if l.isSet() || closed(l.C()) {
		t.Fatal("a reset latch is still set")
	}
	l.reset()
	l.fire()
	if late := l.C(); !closed(late) {
		t.Fatal("the channel made after fire is open")
	}
}

// TestLatchRace fires latches while other goroutines make their channels
// and wait on them: no wait may miss the fire (run with -race).
func TestLatchRace(t *testing.T) {
	for range 2000 {
		var l latch
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-l.C()
			if !l.isSet() {
				t.Error("the channel closed before the latch was set")
			}
		}()
		go func() {
			defer wg.Done()
			l.fire()
		}()
		wg.Wait()
	}
}

// Package testutil holds the wait helpers that tests across the tree share:
// poll a condition until it holds, bounded by the test's own deadline.
package testutil

import (
	"testing"
	"time"
)

// noDeadline bounds a wait when the test binary runs without -timeout.
const noDeadline = 10 * time.Minute

// Deadline is when a wait in t gives up: a tenth of the time left before
// the test binary's deadline (go test -timeout) earlier, so that the test
// fails naming what it waited for, and its cleanups run, instead of the
// binary panicking with every goroutine's stack. A wait does not pick a
// short timeout of its own: on a loaded machine the event comes late, not
// never.
func Deadline(t testing.TB) time.Time {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			return dl.Add(-time.Until(dl) / 10)
		}
	}
	return time.Now().Add(noDeadline)
}

// Poll calls cond until it returns true, and reports true, or until
// deadline passes, and reports false. It waits between calls, from a
// millisecond up to 20 ms, so a condition that is costly to check (a scan
// of /proc, a request) does not keep a core busy.
func Poll(deadline time.Time, cond func() bool) bool {
	wait := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
		wait = min(2*wait, 20*time.Millisecond)
	}
	return true
}

// WaitFor polls cond until it holds; when the test's deadline (Deadline)
// comes first, it fails the test with "timed out waiting for " + what.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !Poll(Deadline(t), cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

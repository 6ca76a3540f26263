package ucp

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// Every live UCX object embeds a handle: it closes once, reports use after
// close, and, while tracking is on, remembers where it was created so tests
// can report leaks with the stack that made them (as cilium/ebpf does for
// file descriptors). A finalizer reports objects that were garbage collected
// without Close; it cannot close them, because UCX objects may only be
// destroyed on the goroutine that owns their worker.

var (
	trackLeaks atomic.Bool
	liveMu     sync.Mutex
	live       = map[*handle]struct{}{}
	leakHook   atomic.Pointer[func(kind, stack string)]
)

type handle struct {
	kind   string
	closed atomic.Bool
	stack  []uintptr
	// keep holds what must outlive a leaked object: memory UCX or a peer
	// may still write to, and the runtime.Pinners that pin it (a collected
	// Pinner that still pins panics the program).
	keep any
}

// TrackLeaks turns creation-stack tracking of live objects on or off. Tests
// turn it on; it costs a stack capture per object.
func TrackLeaks(on bool) { trackLeaks.Store(on) }

// OnLeak sets a function called when an object is garbage collected without
// being closed. The default prints to standard error.
func OnLeak(fn func(kind, stack string)) { leakHook.Store(&fn) }

// newHandle makes the handle of obj. The handle is a separate allocation so
// that the leak cleanup attached to obj does not keep obj alive.
func newHandle[T any](obj *T, kind string) *handle {
	h := &handle{kind: kind}
	if trackLeaks.Load() {
		pcs := make([]uintptr, 32)
		h.stack = pcs[:runtime.Callers(3, pcs)]
		liveMu.Lock()
		live[h] = struct{}{}
		liveMu.Unlock()
	}
	runtime.AddCleanup(obj, reportLeak, h)
	return h
}

// markClosed returns false if the object was already closed.
func (h *handle) markClosed() bool {
	if !h.closed.CompareAndSwap(false, true) {
		return false
	}
	if h.stack != nil {
		liveMu.Lock()
		delete(live, h)
		liveMu.Unlock()
	}
	return true
}

func (h *handle) check() error {
	if h.closed.Load() {
		return fmt.Errorf("%s: %w", h.kind, ErrClosed)
	}
	return nil
}

func formatStack(pcs []uintptr) string {
	var b strings.Builder
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		fmt.Fprintf(&b, "\t%s\n\t\t%s:%d\n", f.Function, f.File, f.Line)
		if !more {
			break
		}
	}
	return b.String()
}

// LiveObjects describes every tracked object that has not been closed, with
// the stack that created it. Empty when tracking is off.
func LiveObjects() []string {
	liveMu.Lock()
	defer liveMu.Unlock()
	out := make([]string, 0, len(live))
	for h := range live {
		out = append(out, fmt.Sprintf("%s created at:\n%s", h.kind, formatStack(h.stack)))
	}
	sort.Strings(out)
	return out
}

func reportLeak(h *handle) {
	if h.closed.Load() {
		return
	}
	msg := "\t(call ucp.TrackLeaks(true) for the creation stack)\n"
	if h.stack != nil {
		msg = formatStack(h.stack)
	}
	if fn := leakHook.Load(); fn != nil {
		(*fn)(h.kind, msg)
		return
	}
	fmt.Fprintf(os.Stderr, "ucp: %s leaked (garbage collected without Close), created at:\n%s", h.kind, msg)
}

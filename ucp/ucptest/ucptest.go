// Package ucptest holds test helpers for code built on package ucp: the
// transports every test runs over, leak checks for UCX handles, goroutines
// and processes, and contexts configured for one transport.
package ucptest

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/ucp"
)

// Transport is a UCX transport selection that tests run over.
type Transport struct {
	Name string // "shm" or "tcp"
	TLS  string // the UCX_TLS value
}

// Transports are the selections every transport test runs twice over: forced
// shared memory and forced TCP on loopback.
var Transports = []Transport{
	{Name: "shm", TLS: "shm,self"},
	{Name: "tcp", TLS: "tcp,self"},
}

// Env returns the environment entries that force the transport in a child
// process.
func (tr Transport) Env() []string {
	env := []string{"UCX_TLS=" + tr.TLS, "UCX_WARN_UNUSED_ENV_VARS=n"}
	if tr.Name == "tcp" {
		env = append(env, "UCX_NET_DEVICES=lo")
	}
	return env
}

// Config returns the context configuration that forces the transport.
func (tr Transport) Config() map[string]string {
	cfg := map[string]string{"TLS": tr.TLS}
	if tr.Name == "tcp" {
		cfg["NET_DEVICES"] = "lo"
	}
	return cfg
}

// PeerFailureDetection reports whether endpoints over tr to another process
// detect that process's death: always over TCP; over shared memory unless
// the environment turned UCX's error handling there off
// (ucp.ShmPeerFailureDetection).
func (tr Transport) PeerFailureDetection() bool {
	return tr.Name == "tcp" || ucp.ShmPeerFailureDetection()
}

// UnsetShmSegmentEnv removes the variables that set UCX's shared-memory
// segment (UCX_MM_SEG_SIZE and the per-transport ones) for the test,
// restoring them after it, so that a test of ucp.ContextOptions.LargeShmSegments
// sees what the environment of a default deployment gives.
func UnsetShmSegmentEnv(t *testing.T) {
	for _, k := range []string{"UCX_MM_SEG_SIZE", "UCX_POSIX_SEG_SIZE", "UCX_SYSV_SEG_SIZE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
}

// InCI reports whether the tests run in CI, where nothing may be skipped for
// want of UCX or root.
func InCI() bool { return os.Getenv("CI") == "true" }

// SkipOrFail skips the test outside CI and fails it in CI.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("required in CI: "+format, args...)
	}
	t.Skipf(format, args...)
}

// NewContext makes a context for the transport, closed when the test ends.
// Without a working libucp it fails in CI and skips elsewhere.
func NewContext(t testing.TB, tr Transport) *ucp.Context {
	t.Helper()
	return NewContextWith(t, tr, ucp.ContextOptions{})
}

// NewContextWith is NewContext with opts (its Config replaced by the
// transport's).
func NewContextWith(t testing.TB, tr Transport, opts ucp.ContextOptions) *ucp.Context {
	t.Helper()
	ucp.CheckThreads(true)
	opts.Config = tr.Config()
	ctx, err := ucp.NewContext(opts)
	if err != nil {
		SkipOrFail(t, "UCX unavailable: %v", err)
	}
	t.Cleanup(func() {
		if err := ctx.Close(); err != nil {
			t.Errorf("context close: %v", err)
		}
	})
	return ctx
}

// CheckLeaks turns on handle tracking and the owner-thread check
// (ucp.CheckThreads) and, when the test ends, fails it if any UCX object
// created during the test is still open (printing where it was created) or if
// goroutines started during the test are still running.
// Call it first in a test so its cleanup runs last.
func CheckLeaks(t testing.TB) {
	t.Helper()
	ucp.TrackLeaks(true)
	ucp.CheckThreads(true)
	before := ucp.LiveObjects()
	baseG := goroutines()
	t.Cleanup(func() {
		after := ucp.LiveObjects()
		if len(after) > len(before) {
			old := map[string]bool{}
			for _, s := range before {
				old[s] = true
			}
			for _, s := range after {
				if !old[s] {
					t.Errorf("leaked %s", s)
				}
			}
		}
		CheckGoroutines(t, baseG)
	})
}

func goroutines() map[string]bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	out := map[string]bool{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if id, _, ok := strings.Cut(g, " ["); ok {
			out[id] = true
		}
	}
	return out
}

// CheckGoroutines fails the test if goroutines not in base are still running
// after a grace period. Goroutines of the testing and runtime machinery are
// ignored.
func CheckGoroutines(t testing.TB, base map[string]bool) {
	t.Helper()
	var leaked []string
	for deadline := time.Now().Add(3 * time.Second); ; {
		leaked = leaked[:0]
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			id, _, ok := strings.Cut(g, " [")
			if !ok || base[id] || ignorableGoroutine(g) {
				continue
			}
			leaked = append(leaked, g)
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, g := range leaked {
		t.Errorf("leaked goroutine:\n%s", g)
	}
}

func ignorableGoroutine(g string) bool {
	for _, s := range []string{
		"testing.(*T).Run", "testing.tRunner", "testing.(*M).", "runtime.goexit0",
		"created by runtime.gc", "runtime.ensureSigM", "os/signal.signal_recv",
		"created by testing.(*T).Run", "ucptest.goroutines", "ucptest.CheckGoroutines",
		"runtime.ReadTrace", "runtime/trace",
	} {
		if strings.Contains(g, s) && !strings.Contains(g, "openrdmo/rdmo/") {
			return true
		}
	}
	return strings.Contains(g, "ucptest.CheckGoroutines")
}

// NewChildWorker makes the context (from the UCX_* environment the parent
// chose) and worker of a child process in a test role; the child prints
// "ERR" and exits when it fails. The worker is bound to the calling
// goroutine (see ucp.NewWorker), and the owner-thread check is on.
func NewChildWorker() (*ucp.Context, *ucp.Worker, error) {
	ucp.CheckThreads(true)
	ctx, err := ucp.NewContext(ucp.ContextOptions{})
	if err != nil {
		return nil, nil, err
	}
	w, err := ctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		ctx.Close()
		return nil, nil, err
	}
	return ctx, w, nil
}

// ForEachTransport runs fn as a subtest per transport (Transports), each
// checked for leaks (CheckLeaks) when it ends.
func ForEachTransport(t *testing.T, fn func(t *testing.T, tr Transport)) {
	for _, tr := range Transports {
		t.Run(tr.Name, func(t *testing.T) {
			CheckLeaks(t)
			fn(t, tr)
		})
	}
}

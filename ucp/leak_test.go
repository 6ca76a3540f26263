package ucp_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// An object that is not closed is listed with the stack that created it.
func TestLiveObjectsReportCreationStack(t *testing.T) {
	ucptest.CheckLeaks(t)
	ctx := ucptest.NewContext(t, ucptest.Transports[0])
	mem, err := ctx.Allocate(128)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range ucp.LiveObjects() {
		if strings.HasPrefix(s, "ucp.Memory") && strings.Contains(s, "TestLiveObjectsReportCreationStack") {
			found = true
		}
	}
	if !found {
		t.Fatalf("open Memory not reported with its creation stack: %q", ucp.LiveObjects())
	}
	mem.Close()
	for _, s := range ucp.LiveObjects() {
		if strings.Contains(s, "TestLiveObjectsReportCreationStack") && strings.HasPrefix(s, "ucp.Memory") {
			t.Fatalf("closed Memory still reported: %s", s)
		}
	}
}

// An object garbage collected without Close is reported through OnLeak.
// The test leaks on purpose: its context stays open (a context with a
// leaked worker cannot close) and is kept reachable so it is not reported
// (every run's: go test -count=3 runs it three times).
func TestGarbageCollectedLeakIsReported(t *testing.T) {
	ucp.TrackLeaks(true)
	ctx, err := ucp.NewContext(ucp.ContextOptions{Config: ucptest.Transports[0].Config()})
	if err != nil {
		ucptest.SkipOrFail(t, "UCX unavailable: %v", err)
	}
	leakedContextsForTest = append(leakedContextsForTest, ctx)
	leaks := make(chan string, 4)
	ucp.OnLeak(func(kind, stack string) { leaks <- kind + "\n" + stack })
	defer ucp.OnLeak(nil)
	func() {
		w, err := ctx.NewWorker(ucp.WorkerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		addr, _ := w.Address()
		ep, err := w.Connect(addr, ucp.EndpointOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ep.CloseForce()
		w.Close()
		// A worker that is closed must not be reported; a second, leaked
		// one must.
		w2, err := ctx.NewWorker(ucp.WorkerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		leakedWorkerForTest = w2
	}()
	w2 := leakedWorkerForTest
	leakedWorkerForTest = nil
	_ = w2.Info()
	w2 = nil
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		runtime.GC()
		select {
		case l := <-leaks:
			if !strings.HasPrefix(l, "ucp.Worker") || !strings.Contains(l, "TestGarbageCollectedLeakIsReported") {
				t.Fatalf("unexpected leak report: %s", l)
			}
			return
		default:
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Fatal("leaked worker was never reported")
}

var (
	leakedWorkerForTest   *ucp.Worker
	leakedContextsForTest []*ucp.Context
)

package ucp_test

import (
	"errors"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// onOtherThread runs fn on a goroutine locked to a thread of its own, which
// therefore is not the test goroutine's (locked by NewWorker), and waits.
func onOtherThread(fn func(tid int)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		fn(syscall.Gettid())
	}()
	<-done
}

// A worker stays on the thread that created it, however the goroutine
// yields, and its calls from that thread pass the check.
func TestWorkerStaysOnItsThread(t *testing.T) {
	ucptest.CheckLeaks(t)
	ctx := ucptest.NewContext(t, ucptest.Transports[0])
	w, err := ctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := 0; i < 100; i++ {
		runtime.Gosched()
		if i%10 == 0 {
			runtime.GC()
		}
		if got := syscall.Gettid(); got != w.OwnerThread() {
			t.Fatalf("round %d: goroutine moved to thread %d, worker created on %d", i, got, w.OwnerThread())
		}
		if _, err := w.Progress(); err != nil {
			t.Fatal(err)
		}
	}
}

// Every kind of call that reaches UCX fails with ErrWrongThread from another
// thread while the check is on (as UCX 1.18 would abort), and leaves the
// worker intact for its own thread: what was queued from the wrong thread
// is issued by the next Progress on the right one.
func TestThreadCheckCatchesWorkerUsedOffItsThread(t *testing.T) {
	ucptest.CheckLeaks(t)
	if !ucp.CheckingThreads() {
		t.Fatal("ucptest.CheckLeaks did not turn the thread check on")
	}
	for _, tr := range ucptest.Transports {
		t.Run(tr.Name, func(t *testing.T) {
			p := newPair(t, tr)
			mem, err := p.ctx.Allocate(4096)
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			packed, err := mem.PackRkey()
			if err != nil {
				t.Fatal(err)
			}
			rkey, err := p.ab.UnpackRkey(packed)
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			p.b.SetHandler(7, ucp.MessageHandlerFunc(func(_ *ucp.Worker, msgs []ucp.Message) {
				for _, m := range msgs {
					got = append(got, m.Data...)
				}
			}))
			addr, err := p.b.Address()
			if err != nil {
				t.Fatal(err)
			}

			type call struct {
				name string
				fn   func() error
			}
			var sendErr error
			onOtherThread(func(tid int) {
				if tid == p.a.OwnerThread() {
					t.Errorf("other goroutine on the worker's thread %d", tid)
					return
				}
				calls := []call{
					{"Progress", func() error { _, err := p.a.Progress(); return err }},
					{"Wait", func() error { _, err := p.a.Wait(0); return err }},
					{"Address", func() error { _, err := p.a.Address(); return err }},
					{"Fence", p.a.Fence},
					{"SetHandler", func() error { return p.a.SetHandler(3, nil) }},
					{"Connect", func() error { _, err := p.a.Connect(addr, ucp.EndpointOptions{}); return err }},
					{"Dial", func() error { _, err := p.a.Dial("127.0.0.1:1", ucp.EndpointOptions{}); return err }},
					{"Listen", func() error {
						_, err := p.a.Listen("127.0.0.1:0", func(*ucp.ConnRequest) {})
						return err
					}},
					{"UnpackRkey", func() error { _, err := p.ab.UnpackRkey(packed); return err }},
					{"RemoteKey.Ptr", func() error { _, err := rkey.Ptr(mem.Address(), 8); return err }},
					{"RemoteKey.Close", rkey.Close},
					{"Endpoint.Close", p.ab.Close},
					{"Worker.Close", p.a.Close},
					{"FlushSync", func() error { return p.a.FlushSync(time.Second) }},
				}
				for _, c := range calls {
					err := c.fn()
					var te *ucp.ThreadError
					if !errors.Is(err, ucp.ErrWrongThread) || !errors.As(err, &te) {
						t.Errorf("%s from thread %d: got %v, want ErrWrongThread", c.name, tid, err)
						continue
					}
					if te.Owner != p.a.OwnerThread() || te.Caller != tid {
						t.Errorf("%s: error names threads %d (owner) and %d (caller), want %d and %d",
							c.name, te.Owner, te.Caller, p.a.OwnerThread(), tid)
					}
				}
				// Submit has no error result: it panics.
				func() {
					defer func() {
						if r := recover(); r == nil {
							t.Error("Submit from another thread did not panic")
						} else if err, ok := r.(error); !ok || !errors.Is(err, ucp.ErrWrongThread) {
							t.Errorf("Submit panicked with %v, want ErrWrongThread", r)
						}
					}()
					sendErr = p.ab.SendAM(7, nil, []byte("queued"), 0, nil, 0)
					p.a.Submit()
				}()
			})
			if sendErr != nil {
				t.Fatalf("SendAM (queue only) from another thread: %v", sendErr)
			}
			// Back on the owner thread the worker works, and the message
			// queued over there goes out.
			p.progress(func() bool { return string(got) == "queued" })
			if _, err := rkey.Ptr(mem.Address(), 8); err != nil && !errors.Is(err, ucp.ErrNotSupported) {
				t.Fatalf("RemoteKey.Ptr on the owner thread: %v", err)
			}
		})
	}
}

// A serialized worker (WorkerOptions.Serialized) is used from another
// thread with the check on: it connects, sends and progresses there, and
// the message arrives; only Close stays with the goroutine that created it
// (NewWorker locked that goroutine to its thread).
func TestSerializedWorkerUsedFromAnotherThread(t *testing.T) {
	ucptest.CheckLeaks(t)
	for _, tr := range ucptest.Transports {
		t.Run(tr.Name, func(t *testing.T) {
			ctx := ucptest.NewContext(t, tr)
			a, err := ctx.NewWorker(ucp.WorkerOptions{Serialized: true})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := ctx.NewWorker(ucp.WorkerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			var got []byte
			if err := b.SetHandler(7, ucp.MessageHandlerFunc(func(_ *ucp.Worker, msgs []ucp.Message) {
				for _, m := range msgs {
					got = append(got, m.Data...)
				}
			})); err != nil {
				t.Fatal(err)
			}
			addr, err := b.Address()
			if err != nil {
				t.Fatal(err)
			}
			var ep *ucp.Endpoint
			onOtherThread(func(tid int) {
				if tid == a.OwnerThread() {
					t.Errorf("other goroutine on the worker's thread %d", tid)
					return
				}
				if ep, err = a.Connect(addr, ucp.EndpointOptions{Name: "serialized"}); err != nil {
					t.Errorf("Connect from thread %d: %v", tid, err)
					return
				}
				if err := ep.SendAM(7, nil, []byte("from another thread"), 0, nil, 0); err != nil {
					t.Errorf("SendAM: %v", err)
				}
				if _, err := a.Progress(); err != nil {
					t.Errorf("Progress from thread %d: %v", tid, err)
				}
				if err := a.Close(); !errors.Is(err, ucp.ErrWrongThread) {
					t.Errorf("Close from thread %d: %v, want ErrWrongThread", tid, err)
				}
			})
			if t.Failed() {
				return
			}
			deadline := time.Now().Add(20 * time.Second)
			for string(got) != "from another thread" {
				if _, err := a.Progress(); err != nil {
					t.Fatal(err)
				}
				if _, err := b.Progress(); err != nil {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("the message sent from another thread did not arrive: got %q", got)
				}
			}
			if err := ep.CloseForce(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

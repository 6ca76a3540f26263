package ucp_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func TestContextResources(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		ctx := ucptest.NewContext(t, tr)
		res := ctx.Resources()
		if len(res) == 0 {
			t.Fatalf("no resources reported; info:\n%s", ctx.Info())
		}
		want := map[string][]string{"shm": {"posix", "sysv"}, "tcp": {"tcp"}}[tr.Name]
		found := false
		for _, r := range res {
			for _, w := range want {
				if r.Transport == w {
					found = true
				}
			}
			if tr.Name == "tcp" && r.Transport != "tcp" && r.Transport != "self" {
				t.Errorf("UCX_TLS=%s selected %s", tr.TLS, r)
			}
		}
		if !found {
			t.Errorf("want one of %v among %v", want, res)
		}
	})
}

func TestAMWithReply(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		p := newPair(t, tr)
		// b echoes every message back on its reply endpoint with AM id 2;
		// a checks the echo.
		var echoErrs []error
		p.b.SetHandler(1, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) {
			for i := range msgs {
				m := &msgs[i]
				if m.Reply == nil {
					echoErrs = append(echoErrs, fmt.Errorf("no reply endpoint"))
					continue
				}
				if m.Rendezvous {
					buf := make([]byte, m.Length)
					hdr := append([]byte(nil), m.Header...)
					reply := m.Reply
					if err := m.Receive(buf, ucp.CompleterFunc(func(c ucp.Completion) {
						if c.Err != nil || int(c.Value) != len(buf) {
							echoErrs = append(echoErrs, fmt.Errorf("receive: %v, %d bytes", c.Err, c.Value))
							return
						}
						if err := reply.SendAM(2, hdr, buf, 0, nil, 0); err != nil {
							echoErrs = append(echoErrs, err)
						}
					}), 0); err != nil {
						echoErrs = append(echoErrs, err)
					}
					continue
				}
				// Eager data is valid until the handler returns, and the
				// send keeps a pointer until it completes: keep it.
				held := m.Keep()
				if err := m.Reply.SendAM(2, m.Header, held.Data, 0, ucp.CompleterFunc(func(ucp.Completion) {
					w.Release(held)
				}), 0); err != nil {
					echoErrs = append(echoErrs, err)
				}
			}
		}))
		var got [][]byte
		var gotHdr [][]byte
		p.a.SetHandler(2, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) {
			for _, m := range msgs {
				if m.Rendezvous {
					t.Errorf("echo arrived as rendezvous")
					continue
				}
				got = append(got, append([]byte(nil), m.Data...))
				gotHdr = append(gotHdr, append([]byte(nil), m.Header...))
			}
		}))
		sizes := []int{8, 64, 8 << 10, 1 << 20}
		var sent done
		for i, n := range sizes {
			flags := ucp.SendReply
			if n == 1<<20 {
				flags |= ucp.SendRendezvous
			}
			hdr := []byte(fmt.Sprintf("hdr-%d", i))
			if err := p.ab.SendAM(1, hdr, pattern(n, byte(i)), flags, &sent, uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
		// The 1 MiB echo from b to a goes rendezvous, so a's handler sees
		// it as such: accept both by receiving on a too.
		p.a.SetHandler(2, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) {
			for i := range msgs {
				m := &msgs[i]
				hdr := append([]byte(nil), m.Header...)
				if !m.Rendezvous {
					got = append(got, append([]byte(nil), m.Data...))
					gotHdr = append(gotHdr, hdr)
					continue
				}
				buf := make([]byte, m.Length)
				m.Receive(buf, ucp.CompleterFunc(func(c ucp.Completion) {
					got = append(got, buf)
					gotHdr = append(gotHdr, hdr)
				}), 0)
			}
		}))
		p.progress(func() bool { return len(got) == len(sizes) && sent.n == len(sizes) || len(echoErrs) > 0 })
		if len(echoErrs) > 0 {
			t.Fatal(echoErrs)
		}
		if len(sent.errs) > 0 {
			t.Fatal(sent.errs)
		}
		seen := map[string]bool{}
		for i := range got {
			var idx int
			fmt.Sscanf(string(gotHdr[i]), "hdr-%d", &idx)
			if !bytes.Equal(got[i], pattern(sizes[idx], byte(idx))) {
				t.Errorf("echo %d (%d bytes) corrupted", idx, sizes[idx])
			}
			seen[string(gotHdr[i])] = true
		}
		if len(seen) != len(sizes) {
			t.Errorf("got echoes %v", seen)
		}
	})
}

func TestPutGetAllocatedAndMapped(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		p := newPair(t, tr)
		alloc, err := p.ctx.Allocate(64 << 10)
		if err != nil {
			t.Fatal(err)
		}
		defer alloc.Close()
		user := make([]byte, 64<<10)
		mapped, err := p.ctx.Map(user)
		if err != nil {
			t.Fatal(err)
		}
		defer mapped.Close()
		for _, mem := range []*ucp.Memory{alloc, mapped} {
			packed, err := mem.PackRkey()
			if err != nil {
				t.Fatal(err)
			}
			rkey, err := p.ab.UnpackRkey(packed)
			if err != nil {
				t.Fatal(err)
			}
			data := pattern(5000, 3)
			var d done
			p.ab.Put(data, mem.Address()+100, rkey, &d, 1)
			p.ab.Flush(&d, 2)
			p.progress(func() bool { return d.n == 2 })
			if len(d.errs) > 0 {
				t.Fatal(d.errs)
			}
			if !bytes.Equal(mem.Bytes()[100:5100], data) {
				t.Fatalf("put did not land")
			}
			back := make([]byte, 5000)
			p.ab.Get(back, mem.Address()+100, rkey, &d, 3)
			p.progress(func() bool { return d.n == 3 })
			if !bytes.Equal(back, data) {
				t.Fatalf("get returned wrong data")
			}
			rkey.Close()
		}
	})
}

func TestAtomics(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		p := newPair(t, tr)
		mem, err := p.ctx.Allocate(64)
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		packed, _ := mem.PackRkey()
		rkey, err := p.ab.UnpackRkey(packed)
		if err != nil {
			t.Fatal(err)
		}
		word := mem.Address() + 8
		binary.LittleEndian.PutUint64(mem.Bytes()[8:], 100)
		var d done
		p.ab.Atomic(ucp.AtomicFetchAdd, 5, 0, word, rkey, &d, 1)
		p.ab.Atomic(ucp.AtomicAdd, 10, 0, word, rkey, &d, 2)
		p.ab.Atomic(ucp.AtomicCompareSwap, 999, 115, word, rkey, &d, 3) // matches
		p.ab.Atomic(ucp.AtomicCompareSwap, 1, 115, word, rkey, &d, 4)   // does not
		p.ab.Atomic(ucp.AtomicSwap, 7, 0, word, rkey, &d, 5)
		p.ab.Flush(&d, 6)
		p.progress(func() bool { return d.n == 6 })
		if len(d.errs) > 0 {
			t.Fatal(d.errs)
		}
		want := map[uint64]uint64{1: 100, 3: 115, 4: 999, 5: 999}
		for tag, v := range want {
			if d.vals[tag] != v {
				t.Errorf("op %d fetched %d, want %d", tag, d.vals[tag], v)
			}
		}
		if got := binary.LittleEndian.Uint64(mem.Bytes()[8:]); got != 7 {
			t.Errorf("final value %d, want 7", got)
		}
		if err := p.ab.Atomic(ucp.AtomicAdd, 1, 0, word+1, rkey, &d, 7); err == nil {
			t.Errorf("unaligned atomic accepted")
		}
	})
}

func TestRkeyPtr(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		p := newPair(t, tr)
		mem, err := p.ctx.Allocate(4096)
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		packed, _ := mem.PackRkey()
		rkey, err := p.ab.UnpackRkey(packed)
		if err != nil {
			t.Fatal(err)
		}
		view, err := rkey.Ptr(mem.Address()+16, 32)
		switch tr.Name {
		case "shm":
			if err != nil {
				t.Fatalf("rkey_ptr on shared memory: %v", err)
			}
			copy(view, "direct")
			if string(mem.Bytes()[16:22]) != "direct" {
				t.Fatalf("write through rkey_ptr not visible")
			}
		case "tcp":
			if !errors.Is(err, ucp.ErrNotSupported) {
				t.Fatalf("rkey_ptr over tcp: %v, want ErrNotSupported", err)
			}
		}
	})
}

func TestExportedMemoryHandle(t *testing.T) {
	ucptest.CheckLeaks(t)
	ctx := ucptest.NewContext(t, ucptest.Transports[0])
	mem, err := ctx.Allocate(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	_, err = mem.PackExported()
	if !ucp.HaveExportedMemoryHandles() {
		if !errors.Is(err, ucp.ErrNotSupported) {
			t.Fatalf("PackExported without header support: %v, want ErrNotSupported", err)
		}
		return
	}
	if err != nil && !errors.Is(err, ucp.ErrNotSupported) {
		t.Fatal(err)
	}
}

// Client-server connections need a transport that detects peer failure,
// which in UCX 1.13 means TCP: this test runs over TCP only.
func TestListenerConnect(t *testing.T) {
	ucptest.CheckLeaks(t)
	{
		p := newPair(t, ucptest.Transports[1])
		var accepted *ucp.Endpoint
		var acceptErr error
		l, err := p.b.Listen("127.0.0.1:0", func(r *ucp.ConnRequest) {
			accepted, acceptErr = r.Accept(ucp.EndpointOptions{Name: "server"})
		})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if l.Port() == 0 {
			t.Fatal("listener reports port 0")
		}
		ep, err := p.a.Dial(fmt.Sprintf("127.0.0.1:%d", l.Port()), ucp.EndpointOptions{Name: "client"})
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		var got []string
		p.b.SetHandler(3, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) {
			for _, m := range msgs {
				got = append(got, string(m.Data))
			}
		}))
		var d done
		if err := ep.SendAM(3, nil, []byte("hello"), 0, &d, 0); err != nil {
			t.Fatal(err)
		}
		p.progress(func() bool { return len(got) == 1 && accepted != nil })
		if acceptErr != nil {
			t.Fatal(acceptErr)
		}
		if got[0] != "hello" {
			t.Fatalf("got %q", got)
		}
		// And back over the accepted endpoint.
		var back []string
		p.a.SetHandler(4, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) {
			for _, m := range msgs {
				back = append(back, string(m.Data))
			}
		}))
		accepted.SendAM(4, nil, []byte("world"), 0, nil, 0)
		p.progress(func() bool { return len(back) == 1 })
		if back[0] != "world" {
			t.Fatalf("got %q", back)
		}
		// Close the accepted endpoint while driving both sides.
		accepted.CloseForce()
	}
}

func TestUseAfterClose(t *testing.T) {
	ucptest.CheckLeaks(t)
	ctx := ucptest.NewContext(t, ucptest.Transports[0])
	w, err := ctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := w.Address()
	ep, err := w.Connect(addr, ucp.EndpointOptions{Name: "self"})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := ctx.Allocate(64)
	if err != nil {
		t.Fatal(err)
	}
	packed, _ := mem.PackRkey()
	rkey, err := ep.UnpackRkey(packed)
	if err != nil {
		t.Fatal(err)
	}
	if err := ep.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ep.Put([]byte{1}, mem.Address(), rkey, nil, 0); !errors.Is(err, ucp.ErrClosed) {
		t.Errorf("put on closed endpoint: %v", err)
	}
	if _, err := rkey.Ptr(mem.Address(), 1); !errors.Is(err, ucp.ErrClosed) {
		t.Errorf("rkey closed with its endpoint: %v", err)
	}
	if err := ep.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	mem.Close()
	if mem.Bytes() != nil {
		t.Errorf("closed memory still has bytes")
	}
	if _, err := mem.PackRkey(); !errors.Is(err, ucp.ErrClosed) {
		t.Errorf("pack on closed memory: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Progress(); !errors.Is(err, ucp.ErrClosed) {
		t.Errorf("progress on closed worker: %v", err)
	}
	if _, err := w.Address(); !errors.Is(err, ucp.ErrClosed) {
		t.Errorf("address on closed worker: %v", err)
	}
	if err := w.Wake(); !errors.Is(err, ucp.ErrClosed) {
		t.Errorf("wake on closed worker: %v", err)
	}
}

func TestCloseWithOutstandingOps(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		p := newPair(t, tr)
		mem, err := p.ctx.Allocate(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		packed, _ := mem.PackRkey()
		rkey, _ := p.ab.UnpackRkey(packed)
		var d done
		data := pattern(64<<10, 1)
		for i := 0; i < 64; i++ {
			if err := p.ab.Put(data, mem.Address()+uint64(i%16)*(64<<10), rkey, &d, uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
		// Close the worker with everything queued or in flight: every
		// operation must complete (successfully or with an error), none hang.
		if err := p.a.Close(); err != nil {
			t.Fatal(err)
		}
		if d.n != 64 {
			t.Fatalf("%d of 64 operations completed at close", d.n)
		}
		if p.a.Outstanding() != 0 {
			t.Fatalf("%d outstanding after close", p.a.Outstanding())
		}
	})
}

func TestReentrantBlockingCallRefused(t *testing.T) {
	ucptest.CheckLeaks(t)
	p := newPair(t, ucptest.Transports[0])
	var inner error
	got := false
	p.b.SetHandler(5, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) {
		got = true
		inner = w.FlushSync(time.Second)
	}))
	p.ab.SendAM(5, nil, []byte("x"), 0, nil, 0)
	p.progress(func() bool { return got })
	if !errors.Is(inner, ucp.ErrReentrant) {
		t.Fatalf("blocking call inside a handler: %v, want ErrReentrant", inner)
	}
}

func TestWaitAndWake(t *testing.T) {
	ucptest.CheckLeaks(t)
	ctx := ucptest.NewContext(t, ucptest.Transports[0])
	w, err := ctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := 0; i < 100; i++ { // drain start-up events
		w.Progress()
	}
	start := time.Now()
	if _, err := w.Wait(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	woke := make(chan error, 1)
	go func() {
		time.Sleep(20 * time.Millisecond)
		woke <- w.Wake()
	}()
	ok, err := w.Wait(-1)
	if err != nil || !ok {
		t.Fatalf("wait after wake: %v %v", ok, err)
	}
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 20*time.Second {
		t.Fatal("wait never returned")
	}
}

// TestSendAMCopiesHeader checks SendAM's contract for headers: a header
// that fits the slot's inline bytes is copied at once, whatever the
// payload's size, so the caller may reuse the header's buffer as soon as
// SendAM returns, before the send is issued (the next Progress). The
// payloads here are too large to be copied with it, eager and rendezvous.
func TestSendAMCopiesHeader(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		p := newPair(t, tr)
		type got struct {
			hdr, data []byte
		}
		var recv []got
		p.b.SetHandler(1, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) {
			for i := range msgs {
				m := &msgs[i]
				hdr := append([]byte(nil), m.Header...)
				if !m.Rendezvous {
					recv = append(recv, got{hdr, append([]byte(nil), m.Data...)})
					continue
				}
				buf := make([]byte, m.Length)
				if err := m.Receive(buf, ucp.CompleterFunc(func(c ucp.Completion) {
					if c.Err != nil {
						t.Errorf("receive: %v", c.Err)
					}
					recv = append(recv, got{hdr, buf})
				}), 0); err != nil {
					t.Error(err)
				}
			}
		}))
		sends := []struct {
			size  int
			flags ucp.SendFlags
		}{{4 << 10, ucp.SendEager}, {64 << 10, ucp.SendRendezvous}}
		hdr := make([]byte, 48)
		var sent done
		for i, s := range sends {
			want := pattern(len(hdr), byte(0x40+i))
			copy(hdr, want)
			if err := p.ab.SendAM(1, hdr, pattern(s.size, byte(i)), s.flags, &sent, uint64(i)); err != nil {
				t.Fatal(err)
			}
			// The send is only queued; overwrite the header's buffer
			// before anything is issued.
			for k := range hdr {
				hdr[k] = 0xEE
			}
		}
		p.progress(func() bool { return len(recv) == len(sends) && sent.n == len(sends) })
		if len(sent.errs) > 0 {
			t.Fatal(sent.errs)
		}
		for _, r := range recv {
			i := -1
			for k := range sends {
				if bytes.Equal(r.hdr, pattern(len(hdr), byte(0x40+k))) {
					i = k
				}
			}
			if i < 0 {
				t.Fatalf("header arrived as %x, not as sent", r.hdr)
			}
			if !bytes.Equal(r.data, pattern(sends[i].size, byte(i))) {
				t.Errorf("payload %d (%d bytes) corrupted", i, sends[i].size)
			}
		}
	})
}

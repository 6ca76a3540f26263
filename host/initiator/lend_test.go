package initiator_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// A lent buffer is the caller's again once its Lend returned it: writing
// it afterwards changes nothing that arrives, eager or rendezvous.
func TestAppendLentBufferFreeAfterReturn(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := start(t, tr, standInConfig{}, initiator.Options{})
		ctx := timeout(t, 60*time.Second)
		sizes := []int{100, 4 << 10, initiator.DefaultRendezvousThreshold + 1, 64 << 10, 1 << 20}
		var l initiator.Lend
		for i, n := range sizes {
			data := pattern(n, byte(i))
			if err := in.AppendLent(uint64(i), 1, 1, data, &l); err != nil {
				t.Fatal(err)
			}
			if err := l.Wait(ctx); err != nil {
				t.Fatalf("%d bytes: %v", n, err)
			}
			if l.Busy() {
				t.Fatal("Wait returned with the buffer still lent")
			}
			for k := range data {
				data[k] = 0xEE // the caller's again
			}
		}
		if _, err := in.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got := s.arrivals()
		if len(got) != len(sizes)+1 {
			t.Fatalf("stand-in got %d requests, want %d", len(got), len(sizes)+1)
		}
		for i, n := range sizes {
			if !bytes.Equal(got[i].Payload, pattern(n, byte(i))) {
				t.Errorf("%d-byte lent append arrived changed", n)
			}
		}
		if st := in.Stats(); st.Rendezvous != 3 {
			t.Errorf("%d rendezvous sends, want 3", st.Rendezvous)
		}
	})
}

// A Lend whose buffer is still lent cannot be lent again: inside a
// Drive's fn the loop sends nothing, so the first append's buffer is
// certainly still the initiator's when the second one names the Lend.
func TestAppendLentNotReusedBeforeReturn(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := start(t, tr, standInConfig{}, initiator.Options{})
		ctx := timeout(t, 60*time.Second)
		first, second := pattern(64<<10, 1), pattern(64<<10, 2)
		var l, other initiator.Lend
		err := in.Drive(ctx, func(d *initiator.Driver) error {
			if err := in.AppendLent(8, 1, 1, first, &l); err != nil {
				return err
			}
			if !l.Busy() {
				t.Error("a queued append's Lend is not busy")
			}
			select {
			case <-l.Done():
				t.Error("Done closed before the send")
			default:
			}
			if err := in.AppendLent(8, 1, 1, second, &l); !errors.Is(err, initiator.ErrLendOutstanding) {
				t.Errorf("second loan on a busy Lend: %v, want ErrLendOutstanding", err)
			}
			return in.AppendLent(16, 1, 1, second, &other)
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range []*initiator.Lend{&l, &other} {
			if err := x.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		<-l.Done() // made after the return: closed at once
		if _, err := in.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got := s.arrivals()
		if len(got) != 3 || !bytes.Equal(got[0].Payload, first) || !bytes.Equal(got[1].Payload, second) {
			t.Fatalf("stand-in got %d requests (want the two loans and the flush)", len(got))
		}
		// The refused loan did not disturb the Lend: it lends again.
		if err := in.AppendLent(8, 1, 1, first, &l); err != nil {
			t.Fatal(err)
		}
		if err := l.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A loan the initiator refuses (closed) is returned at once with the
// refusal; one refused before it was taken leaves the Lend free.
func TestAppendLentRefused(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		_, in := start(t, tr, standInConfig{}, initiator.Options{})
		var l initiator.Lend
		if err := in.AppendLent(8, 1, 1, nil, &l); err == nil || l.Busy() {
			t.Errorf("empty loan: %v, busy %v", err, l.Busy())
		}
		if err := closeBounded(t, in); err != nil {
			t.Fatal(err)
		}
		err := in.AppendLent(8, 1, 1, pattern(10<<10, 1), &l)
		if !errors.Is(err, initiator.ErrClosed) || l.Busy() || !errors.Is(l.Err(), initiator.ErrClosed) {
			t.Errorf("loan after Close: %v, busy %v, Err %v", err, l.Busy(), l.Err())
		}
	})
}

// Appends made with Driver.Append inside a Drive, far more than the
// window holds, all arrive in order with the bytes they had at the call
// (the payload is copied: the caller rewrites its buffer at once), and
// the stream needs no other goroutine.
func TestDriverAppendStream(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := start(t, tr, standInConfig{}, initiator.Options{Window: 64, Aggregate: true})
		ctx := timeout(t, 60*time.Second)
		const n = 3000
		buf := make([]byte, 200)
		err := in.Drive(ctx, func(d *initiator.Driver) error {
			for i := 0; i < n; i++ {
				b := buf[:1+i%len(buf)]
				copy(b, pattern(len(b), byte(i)))
				if err := d.Append(uint64(8*i), 1, 2, b); err != nil {
					return err
				}
				clear(b) // the caller's again at once
			}
			_, err := d.Flush()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		var got []arrival // the appends (flow control adds FLUSHes of its own)
		for _, a := range s.arrivals() {
			if a.Req.Header.Op == rdmo.OpAppend {
				got = append(got, a)
			}
		}
		if len(got) != n {
			t.Fatalf("stand-in got %d appends, want %d", len(got), n)
		}
		for i := 0; i < n; i++ {
			a := got[i]
			if a.Req.Append.PtrAddr != uint64(8*i) || !bytes.Equal(a.Payload, pattern(1+i%len(buf), byte(i))) {
				t.Fatalf("append %d arrived as %+v", i, a.Req.Append)
			}
		}
		if st := in.Stats(); st.Drives != 1 {
			t.Errorf("%d drives, want 1", st.Drives)
		}
	})
}

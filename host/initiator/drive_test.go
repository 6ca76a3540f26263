package initiator_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// The stand-in's plugin ops in these tests (see testResult).
const (
	opReverse = rdmo.OpUserBase + 1 // data: the payload reversed; value: its length
	opStep    = rdmo.OpUserBase + 2 // data and value: step(the payload's u64)
	opRefuse  = rdmo.OpUserBase + 3 // fails OutOfBounds, detail names the payload
)

// step is the model of opStep: a conversation's next value.
func step(x uint64) uint64 { return x*6364136223846793005 + 1442695040888963407 }

func testFailOn(r wire.RequestHeader, _ []byte) rdmo.Status {
	if r.Header.Op == opRefuse {
		return rdmo.StatusOutOfBounds
	}
	return rdmo.StatusOK
}

func testResult(r wire.RequestHeader, payload []byte, st rdmo.Status) (uint64, []byte, string) {
	switch {
	case st != rdmo.StatusOK:
		return 0, nil, fmt.Sprintf("refused %q (sub %x)", payload, r.User)
	case r.Header.Op == opReverse:
		out := slices.Clone(payload)
		slices.Reverse(out)
		return uint64(len(payload)), out, ""
	case r.Header.Op == opStep && len(payload) == 8:
		v := step(binary.LittleEndian.Uint64(payload))
		return v, binary.LittleEndian.AppendUint64(nil, v), ""
	}
	return 0, nil, ""
}

func startResults(t *testing.T, tr ucptest.Transport, opts initiator.Options) (*standIn, *initiator.Initiator) {
	return start(t, tr, standInConfig{failOn: testFailOn, result: testResult}, opts)
}

type testCall struct {
	op           uint32
	flags        uint32
	sub, payload []byte
}

func testCalls() []testCall {
	var cs []testCall
	for i := 0; i < 12; i++ {
		c := testCall{op: opReverse, sub: []byte{byte(i)}, payload: pattern(1+i*17%rdmo.MaxResultData, byte(i))}
		switch i % 4 {
		case 1:
			c.op, c.payload = opStep, binary.LittleEndian.AppendUint64(nil, uint64(i))
		case 2:
			c.op, c.payload = opRefuse, []byte(fmt.Sprint("bad ", i))
		case 3:
			c.flags = rdmo.FlagFence
		}
		cs = append(cs, c)
	}
	return cs
}

// sameAnswer compares two answers to the same request (their sequence
// numbers differ).
func sameAnswer(a, b initiator.Result, aerr, berr error) error {
	a.Seq, b.Seq = 0, 0
	if a.Op != b.Op || a.Status != b.Status || a.Value != b.Value || !bytes.Equal(a.Data, b.Data) || a.Detail != b.Detail {
		return fmt.Errorf("results differ: %+v and %+v", a, b)
	}
	var ae, be *initiator.RequestError
	switch {
	case (aerr == nil) != (berr == nil):
		return fmt.Errorf("errors differ: %v and %v", aerr, berr)
	case aerr == nil:
	case !errors.As(aerr, &ae) || !errors.As(berr, &be) || ae.Status != be.Status || ae.Detail != be.Detail || ae.Op != be.Op:
		return fmt.Errorf("errors differ: %v and %v", aerr, berr)
	}
	return nil
}

// A Driver's calls send what Call sends and return what Call returns,
// one at a time and pipelined, failures and fenced calls included.
func TestDriveMatchesCall(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := startResults(t, tr, initiator.Options{})
		ctx := timeout(t, time.Minute)
		calls := testCalls()
		type answer struct {
			res initiator.Result
			err error
		}
		var byCall, byDrive, byDriveAsync, byStart []answer
		for _, c := range calls {
			res, err := in.With(ctx, c.flags).Call(c.op, c.sub, c.payload)
			byCall = append(byCall, answer{res, err})
		}
		err := in.Drive(ctx, func(d *initiator.Driver) error {
			for _, c := range calls {
				res, err := d.With(c.flags).Call(c.op, c.sub, c.payload)
				byDrive = append(byDrive, answer{res, err})
			}
			var waits []*initiator.CallWait
			for _, c := range calls {
				w, err := d.With(c.flags).CallAsync(c.op, c.sub, c.payload)
				if err != nil {
					return err
				}
				waits = append(waits, w)
			}
			for _, w := range waits {
				res, err := d.Wait(w)
				byDriveAsync = append(byDriveAsync, answer{res, err})
			}
			// Start: two CallWaits of the caller's, each reused as soon
			// as its call settled.
			var ring [2]initiator.CallWait
			for i, c := range calls {
				w := &ring[i%len(ring)]
				if i >= len(ring) {
					res, err := d.Wait(w)
					byStart = append(byStart, answer{res, err})
				}
				if err := d.With(c.flags).Start(w, c.op, c.sub, c.payload); err != nil {
					return err
				}
			}
			for i := len(calls); i < len(calls)+len(ring); i++ {
				res, err := d.Wait(&ring[i%len(ring)])
				byStart = append(byStart, answer{res, err})
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Drive: %v", err)
		}
		got := s.arrivals()
		for i, c := range calls {
			a := byCall[i]
			if c.op == opRefuse {
				if !errors.Is(a.err, rdmo.ErrOutOfBounds) || a.res.Detail == "" {
					t.Errorf("call %d: %v (%+v), want OutOfBounds with a detail", i, a.err, a.res)
				}
			} else if a.err != nil || len(a.res.Data) == 0 {
				t.Errorf("call %d: %v (%+v)", i, a.err, a.res)
			}
			for form, b := range map[string]answer{"Driver.Call": byDrive[i], "Driver.CallAsync": byDriveAsync[i], "Driver.Start": byStart[i]} {
				if err := sameAnswer(a.res, b.res, a.err, b.err); err != nil {
					t.Errorf("call %d, Call and %s: %v", i, form, err)
				}
			}
			// Each answer is its own request's, and the three forms sent
			// the same bytes.
			var hdr []byte
			for _, b := range []answer{a, byDrive[i], byDriveAsync[i], byStart[i]} {
				if b.res.Seq >= uint64(len(got)) {
					t.Fatalf("call %d answered with seq %d, %d arrived", i, b.res.Seq, len(got))
				}
				arr := got[b.res.Seq]
				if hdr == nil {
					hdr = arr.Hdr
				}
				if !bytes.Equal(arr.Hdr, hdr) || !bytes.Equal(arr.Payload, c.payload) || arr.Req.Header.Flags != c.flags|rdmo.FlagAck {
					t.Errorf("call %d: seq %d carried %x %q, want the same request each time", i, b.res.Seq, arr.Hdr, arr.Payload)
				}
			}
		}
		if st := in.Stats(); st.Drives != 1 || st.UnknownResponses != 0 {
			t.Errorf("stats: %d drives, %d unknown responses; want 1, 0", st.Drives, st.UnknownResponses)
		}
	})
}

// TestDriveStartReuse: a CallWait given to Driver.Start is refused while
// its call is outstanding, is Ready once its Wait returned, works with
// Done and CallWait.Wait after the Drive, and is ready for another call
// once settled.
func TestDriveStartReuse(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		_, in := startResults(t, tr, initiator.Options{})
		ctx := timeout(t, time.Minute)
		var w initiator.CallWait
		payload := []byte("abc")
		err := in.Drive(ctx, func(d *initiator.Driver) error {
			if err := d.Start(&w, opReverse, nil, payload); err != nil {
				return err
			}
			if err := d.Start(&w, opReverse, nil, payload); !errors.Is(err, initiator.ErrCallOutstanding) {
				return fmt.Errorf("Start on an outstanding CallWait: %v, want ErrCallOutstanding", err)
			}
			if err := d.Start(nil, opReverse, nil, payload); err == nil {
				return errors.New("Start with a nil CallWait succeeded")
			}
			var none initiator.CallWait
			if none.Ready() {
				return errors.New("a zero CallWait is Ready")
			}
			if _, err := d.Wait(&none); !errors.Is(err, initiator.ErrNoCall) {
				return fmt.Errorf("Driver.Wait for a zero CallWait: %v, want ErrNoCall", err)
			}
			for i := 0; i < 3; i++ {
				res, err := d.Wait(&w)
				if err != nil || string(res.Data) != "cba" || !w.Ready() {
					return fmt.Errorf("call %d: %q %v, Ready %v", i, res.Data, err, w.Ready())
				}
				if err := d.Start(&w, opRefuse, nil, payload); err != nil {
					return err
				}
				if _, err := d.Wait(&w); !errors.Is(err, rdmo.ErrOutOfBounds) || !w.Ready() {
					return fmt.Errorf("refused call %d: %v, want OutOfBounds; Ready %v", i, err, w.Ready())
				}
				if err := d.Start(&w, opReverse, nil, payload); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Drive: %v", err)
		}
		// The last call is still the caller's to wait for, from here.
		res, err := w.Wait(ctx)
		if err != nil || string(res.Data) != "cba" {
			t.Fatalf("Wait after the Drive: %q %v", res.Data, err)
		}
		select {
		case <-w.Done():
		default:
			t.Fatal("Done of a settled call is not closed")
		}
		var none initiator.CallWait
		if _, err := none.Wait(ctx); !errors.Is(err, initiator.ErrNoCall) {
			t.Fatalf("CallWait.Wait for a zero CallWait: %v, want ErrNoCall", err)
		}
	})
}

// converse runs a conversation of dependent calls, each sending the last
// answer, until n calls were made and more is closed (nil: n calls), and
// checks every answer against the model.
func converse(d *initiator.Driver, x uint64, n int, more <-chan struct{}) (int, error) {
	for i := 0; ; i++ {
		if i >= n {
			select {
			case <-more:
				return i, nil
			default:
				if more == nil {
					return i, nil
				}
			}
		}
		res, err := d.Call(opStep, nil, binary.LittleEndian.AppendUint64(nil, x))
		if err != nil {
			return i, fmt.Errorf("step %d: %w", i, err)
		}
		want := step(x)
		if res.Value != want || len(res.Data) != 8 || binary.LittleEndian.Uint64(res.Data) != want {
			return i, fmt.Errorf("step %d from %#x: %#x %x, want %#x", i, x, res.Value, res.Data, want)
		}
		x = want
	}
}

// A conversation runs on the loop while other goroutines' appends,
// flushes and calls on the same Initiator, and a second Drive, are
// served: fn keeps conversing until they are all done, which they can be
// only if the Driver's waits do the loop's work for them.
func TestDriveConversationServesOthers(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := startResults(t, tr, initiator.Options{Window: 64})
		ctx := timeout(t, 2*time.Minute)
		started := make(chan struct{})
		othersDone := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		conversation := func(seed uint64, more <-chan struct{}) error {
			return in.Drive(ctx, func(d *initiator.Driver) error {
				if more != nil {
					close(started)
				}
				n, err := converse(d, seed, 100, more)
				if err != nil {
					return err
				}
				if _, err := d.Flush(); err != nil {
					return fmt.Errorf("flush after %d steps: %w", n, err)
				}
				return nil
			})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- conversation(1, othersDone)
		}()
		<-started
		// Others start while the first Drive's fn runs: an appender with
		// a flush and a caller, which fn waits for, and a second Drive,
		// which runs once the first returned.
		var two sync.WaitGroup
		const appends = 500
		two.Add(2)
		go func() {
			defer two.Done()
			for i := 0; i < appends; i++ {
				if err := in.Append(8, 1, 1, []byte{byte(i)}); err != nil {
					errs <- err
					return
				}
			}
			if _, err := in.Flush(ctx); err != nil {
				errs <- fmt.Errorf("flush of the appends: %w", err)
			}
		}()
		go func() {
			defer two.Done()
			for i := 0; i < 50; i++ {
				res, err := in.Call(ctx, opReverse, nil, []byte{byte(i), 2, 3})
				if err != nil || !bytes.Equal(res.Data, []byte{3, 2, byte(i)}) {
					errs <- fmt.Errorf("call %d from another goroutine: %v %x", i, err, res.Data)
					return
				}
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := conversation(2, nil); err != nil {
				errs <- fmt.Errorf("second Drive: %w", err)
			}
		}()
		two.Wait()
		close(othersDone)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		if got := s.arrived.Load(); got < appends+50+200 {
			t.Errorf("the stand-in saw %d requests, want at least %d", got, appends+50+200)
		}
		if st := in.Stats(); st.Drives != 2 {
			t.Errorf("%d drives ran, want 2", st.Drives)
		}
	})
}

// Every way a Drive or a Driver call ends other than with an answer.
func TestDriveErrors(t *testing.T) {
	tr := ucptest.Transports[0]
	t.Run("panic", func(t *testing.T) {
		ucptest.CheckLeaks(t)
		_, in := startResults(t, tr, initiator.Options{})
		ctx := timeout(t, time.Minute)
		err := in.Drive(ctx, func(d *initiator.Driver) error {
			if _, err := d.Call(opStep, nil, make([]byte, 8)); err != nil {
				return err
			}
			panic("boom")
		})
		if !errors.Is(err, initiator.ErrDrivePanicked) {
			t.Fatalf("Drive whose fn panicked: %v", err)
		}
		// The loop carries on, for Calls and Drives.
		if res, err := in.Call(ctx, opStep, nil, make([]byte, 8)); err != nil || res.Value != step(0) {
			t.Errorf("Call after the panic: %v %+v", err, res)
		}
		if err := in.Drive(ctx, func(d *initiator.Driver) error { _, err := converse(d, 7, 3, nil); return err }); err != nil {
			t.Errorf("Drive after the panic: %v", err)
		}
	})
	t.Run("inside", func(t *testing.T) {
		ucptest.CheckLeaks(t)
		_, in := startResults(t, tr, initiator.Options{Window: 4, Credits: -1})
		ctx := timeout(t, time.Minute)
		var kept *initiator.Driver
		err := in.Drive(ctx, func(d *initiator.Driver) error {
			kept = d
			if err := in.Drive(ctx, func(*initiator.Driver) error { return nil }); !errors.Is(err, initiator.ErrInsideDrive) {
				t.Errorf("Drive inside fn: %v", err)
			}
			if _, err := in.Flush(ctx); !errors.Is(err, initiator.ErrInsideDrive) {
				t.Errorf("Flush inside fn: %v", err)
			}
			// Nothing runs the loop between Driver calls: no answer yet.
			var waits []*initiator.CallWait
			for i := 0; i < 3; i++ {
				w, err := d.CallAsync(opStep, nil, make([]byte, 8))
				if err != nil {
					return err
				}
				waits = append(waits, w)
			}
			if _, err := waits[0].Wait(ctx); !errors.Is(err, initiator.ErrInsideDrive) {
				t.Errorf("CallWait.Wait inside fn: %v", err)
			}
			// Three calls and the FLUSH above fill the window of four.
			if err := in.Append(8, 1, 1, []byte("x")); !errors.Is(err, initiator.ErrInsideDrive) {
				t.Errorf("Append into a full window inside fn: %v", err)
			}
			for _, w := range waits {
				if res, err := d.Wait(w); err != nil || res.Value != step(0) {
					t.Errorf("Driver.Wait: %v %+v", err, res)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kept.Call(opStep, nil, make([]byte, 8)); !errors.Is(err, initiator.ErrDriverDone) {
			t.Errorf("Driver used after its Drive: %v", err)
		}
		// Outside fn everything works again.
		if _, err := in.Flush(ctx); err != nil {
			t.Errorf("Flush after the Drive: %v", err)
		}
	})
	t.Run("close-during", func(t *testing.T) {
		ucptest.CheckLeaks(t)
		_, in := startResults(t, tr, initiator.Options{})
		ctx := timeout(t, time.Minute)
		closed := make(chan error, 1)
		err := in.Drive(ctx, func(d *initiator.Driver) error {
			go func() { closed <- in.Close() }()
			// Calls go on until the loop sees Close.
			for i := 0; ; i++ {
				if _, err := d.Call(opStep, nil, make([]byte, 8)); err != nil {
					return fmt.Errorf("call %d: %w", i, err)
				}
			}
		})
		if !errors.Is(err, initiator.ErrClosed) {
			t.Errorf("Drive during Close: %v", err)
		}
		if err := <-closed; err != nil {
			t.Errorf("Close during the Drive: %v", err)
		}
		if err := in.Drive(ctx, func(*initiator.Driver) error { return nil }); !errors.Is(err, initiator.ErrClosed) {
			t.Errorf("Drive after Close: %v", err)
		}
	})
	t.Run("close-inside", func(t *testing.T) {
		ucptest.CheckLeaks(t)
		_, in := startResults(t, tr, initiator.Options{})
		ctx := timeout(t, time.Minute)
		err := in.Drive(ctx, func(d *initiator.Driver) error {
			if _, err := d.Call(opStep, nil, make([]byte, 8)); err != nil {
				return err
			}
			if err := in.Close(); err != nil {
				t.Errorf("Close inside fn: %v", err)
			}
			_, err := d.Call(opStep, nil, make([]byte, 8))
			return err
		})
		if !errors.Is(err, initiator.ErrClosed) {
			t.Errorf("call after Close inside fn: %v", err)
		}
		if err := in.Close(); err != nil {
			t.Errorf("Close after the Drive: %v", err)
		}
	})
	t.Run("peer-failed", func(t *testing.T) {
		ucptest.CheckLeaks(t)
		s, in := startResults(t, tr, initiator.Options{})
		ctx := timeout(t, time.Minute)
		cause := errors.New("control connection closed")
		err := in.Drive(ctx, func(d *initiator.Driver) error {
			s.hold.Store(true) // no answer comes
			w, err := d.CallAsync(opStep, nil, make([]byte, 8))
			if err != nil {
				return err
			}
			in.PeerFailed(cause)
			if _, err := d.Wait(w); !errors.Is(err, ucp.ErrPeerFailed) || !errors.Is(err, cause) {
				t.Errorf("outstanding call after PeerFailed: %v", err)
			}
			_, err = d.Call(opStep, nil, make([]byte, 8))
			return err
		})
		var pe *initiator.PeerFailedError
		if !errors.As(err, &pe) || !errors.Is(err, cause) {
			t.Errorf("call after PeerFailed: %v", err)
		}
		if err := in.Drive(ctx, func(*initiator.Driver) error { return nil }); !errors.Is(err, ucp.ErrPeerFailed) {
			t.Errorf("Drive after PeerFailed: %v", err)
		}
	})
	t.Run("context", func(t *testing.T) {
		ucptest.CheckLeaks(t)
		s, in := startResults(t, tr, initiator.Options{})
		ctx := timeout(t, time.Minute)
		dctx, cancel := context.WithCancel(ctx)
		var w *initiator.CallWait
		err := in.Drive(dctx, func(d *initiator.Driver) error {
			s.hold.Store(true)
			var err error
			if w, err = d.CallAsync(opStep, nil, make([]byte, 8)); err != nil {
				return err
			}
			cancel()
			if _, err := d.Wait(w); !errors.Is(err, context.Canceled) {
				t.Errorf("Wait after the Drive's context ended: %v", err)
			}
			_, err = d.Call(opStep, nil, make([]byte, 8))
			return err
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Call after the Drive's context ended: %v", err)
		}
		// The call stays outstanding and gets its answer.
		s.hold.Store(false)
		s.w.Wake()
		if res, err := w.Wait(ctx); err != nil || res.Value != step(0) {
			t.Errorf("the call cut short, waited for afterwards: %v %+v", err, res)
		}
		// A Drive whose context ends while it waits for the loop is
		// withdrawn; the next one runs.
		running, release := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			first <- in.Drive(ctx, func(*initiator.Driver) error {
				close(running)
				<-release // holds the loop: only a test does this
				return nil
			})
		}()
		<-running
		ended, cancel2 := context.WithCancel(ctx)
		cancel2()
		if err := in.Drive(ended, func(*initiator.Driver) error { return errors.New("ran") }); !errors.Is(err, context.Canceled) {
			t.Errorf("Drive whose context ended while waiting for the loop: %v", err)
		}
		close(release)
		if err := <-first; err != nil {
			t.Error(err)
		}
		if err := in.Drive(ctx, func(d *initiator.Driver) error { _, err := converse(d, 3, 2, nil); return err }); err != nil {
			t.Errorf("Drive after the withdrawn one: %v", err)
		}
		if st := in.Stats(); st.Drives != 3 {
			t.Errorf("%d drives ran, want 3", st.Drives)
		}
	})
}

// A full window and missing credits inside fn run the loop rather than
// wait for it: many pipelined calls through a window of 8 and 4 credits.
func TestDriveWindowAndCredits(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		_, in := startResults(t, tr, initiator.Options{Window: 8, Credits: 4})
		ctx := timeout(t, time.Minute)
		const n = 200
		err := in.Drive(ctx, func(d *initiator.Driver) error {
			waits := make([]*initiator.CallWait, n)
			for i := range waits {
				var err error
				if waits[i], err = d.CallAsync(opStep, nil, binary.LittleEndian.AppendUint64(nil, uint64(i))); err != nil {
					return fmt.Errorf("call %d: %w", i, err)
				}
			}
			for i, w := range waits {
				if res, err := d.Wait(w); err != nil || res.Value != step(uint64(i)) {
					return fmt.Errorf("call %d: %v %+v", i, err, res)
				}
			}
			_, err := d.Flush()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if st := in.Stats(); st.CreditWaits == 0 || st.CreditFlushes == 0 {
			t.Errorf("no credit waits (%d) or credit flushes (%d) with 4 credits", st.CreditWaits, st.CreditFlushes)
		}
	})
}

package initiator_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/internal/testutil"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// A caller waiting in Flush or Call runs the progress loop's rounds itself
// once the loop hands it over (the loop then parks), and a producer's
// request that follows still goes out without a Flush: the parked loop
// resumes for it.
func TestWaitingCallerRunsTheLoop(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := startResults(t, tr, initiator.Options{})
		ctx := timeout(t, time.Minute)
		deadline := testutil.Deadline(t)
		for i := 0; ; i++ {
			res, err := in.Call(ctx, opReverse, nil, []byte{byte(i), 7})
			if err != nil || !bytes.Equal(res.Data, []byte{7, byte(i)}) {
				t.Fatalf("call %d: %v %x", i, err, res.Data)
			}
			if rsp, err := in.Flush(ctx); err != nil || rsp.Failed != 0 {
				t.Fatalf("flush %d: %+v %v", i, rsp, err)
			}
			if st := in.Stats(); st.Borrows >= 2 && st.HandOvers >= 1 {
				t.Logf("%d borrows, %d hand-overs in %d calls and flushes", st.Borrows, st.HandOvers, 2*(i+1))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no caller ran the loop in %d calls and flushes: %+v", 2*(i+1), in.Stats())
			}
		}
		before := s.arrived.Load()
		for i := 0; i < 10; i++ {
			if err := in.Append(8, 1, 1, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		testutil.WaitFor(t, "the appends after the borrowed calls to arrive", func() bool { return s.arrived.Load() >= before+10 })
	})
}

// Callers waiting at once, a producer streaming appends and a Drive share
// the loop: every answer is right, every append arrives in order, and
// Close ends them all (ErrClosed) without a hang.
func TestBorrowersShareTheLoop(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := startResults(t, tr, initiator.Options{Window: 64})
		ctx := timeout(t, 2*time.Minute)
		const callers, calls, appends = 3, 300, 3000
		var wg sync.WaitGroup
		errs := make(chan error, callers+3)
		for c := 0; c < callers; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < calls; i++ {
					want := uint64(c<<16 | i)
					res, err := in.Call(ctx, opStep, nil, binary.LittleEndian.AppendUint64(nil, want))
					if err != nil || res.Value != step(want) {
						errs <- fmt.Errorf("caller %d, call %d: %v, value %x want %x", c, i, err, res.Value, step(want))
						return
					}
					if i%10 == 0 {
						if rsp, err := in.Flush(ctx); err != nil || rsp.Failed != 0 {
							errs <- fmt.Errorf("caller %d, flush %d: %+v %v", c, i, rsp, err)
							return
						}
					}
				}
			}()
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; i < appends; i++ {
				if err := in.Append(8, 1, 1, binary.LittleEndian.AppendUint64(nil, uint64(i))); err != nil {
					errs <- fmt.Errorf("append %d: %w", i, err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			errs <- in.Drive(ctx, func(d *initiator.Driver) error {
				for i := 0; i < 20; i++ {
					if _, err := d.Flush(); err != nil {
						return fmt.Errorf("driver flush %d: %w", i, err)
					}
				}
				return nil
			})
		}()
		wg.Wait()
		if rsp, err := in.Flush(ctx); err != nil || rsp.Failed != 0 {
			t.Fatalf("last flush: %+v %v", rsp, err)
		}
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		var next uint64
		for _, a := range s.arrivals() {
			if a.Req.Header.Op != rdmo.OpAppend {
				continue
			}
			if n := binary.LittleEndian.Uint64(a.Payload); n != next {
				t.Fatalf("append %d arrived when %d was expected", n, next)
			}
			next++
		}
		if next != appends {
			t.Fatalf("%d appends arrived, want %d", next, appends)
		}
		t.Logf("stats: %d borrows, %d hand-overs", in.Stats().Borrows, in.Stats().HandOvers)

		// Close while callers wait (some of them running the loop).
		ended := make(chan error, callers)
		for c := 0; c < callers; c++ {
			go func() {
				for i := 0; ; i++ {
					if _, err := in.Call(ctx, opReverse, nil, []byte{byte(i)}); err != nil {
						ended <- err
						return
					}
				}
			}()
		}
		testutil.WaitFor(t, "the callers to run", func() bool { return s.arrived.Load() > uint64(appends+callers*calls+50) })
		if err := closeBounded(t, in); err != nil {
			t.Fatal(err)
		}
		for c := 0; c < callers; c++ {
			select {
			case err := <-ended:
				if !errors.Is(err, initiator.ErrClosed) {
					t.Errorf("a caller at Close: %v, want ErrClosed", err)
				}
			case <-ctx.Done():
				t.Fatal("a caller still waits after Close")
			}
		}
	})
}

// With LoopThreadOnly no caller runs the loop (the UCP worker is
// single-threaded; under `make test` the owner-thread check would fail a
// caller that did), and calls and flushes still get their answers.
func TestLoopThreadOnly(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		_, in := startResults(t, tr, initiator.Options{LoopThreadOnly: true})
		ctx := timeout(t, time.Minute)
		for i := 0; i < 200; i++ {
			res, err := in.Call(ctx, opReverse, nil, []byte{byte(i), 7})
			if err != nil || !bytes.Equal(res.Data, []byte{7, byte(i)}) {
				t.Fatalf("call %d: %v %x", i, err, res.Data)
			}
			if rsp, err := in.Flush(ctx); err != nil || rsp.Failed != 0 {
				t.Fatalf("flush %d: %+v %v", i, rsp, err)
			}
		}
		if st := in.Stats(); st.Borrows != 0 || st.HandOvers != 0 {
			t.Fatalf("%d borrows, %d hand-overs with LoopThreadOnly", st.Borrows, st.HandOvers)
		}
	})
}

// A Drive made while callers keep calling runs: the callers, passing the
// token among themselves, leave it to the loop once the Drive waits.
func TestDriveAmongCallers(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		_, in := startResults(t, tr, initiator.Options{})
		ctx := timeout(t, 2*time.Minute)
		const callers = 3
		stop := make(chan struct{})
		errs := make(chan error, callers)
		var wg sync.WaitGroup
		for c := 0; c < callers; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						errs <- nil
						return
					default:
					}
					res, err := in.Call(ctx, opReverse, nil, []byte{byte(c), byte(i)})
					if err != nil || !bytes.Equal(res.Data, []byte{byte(i), byte(c)}) {
						errs <- fmt.Errorf("caller %d, call %d: %v %x", c, i, err, res.Data)
						return
					}
				}
			}()
		}
		testutil.WaitFor(t, "the callers to run the loop", func() bool { return in.Stats().Borrows >= 100 })
		for d := 0; d < 5; d++ {
			if err := in.Drive(ctx, func(dr *initiator.Driver) error {
				_, err := dr.Flush()
				return err
			}); err != nil {
				t.Fatalf("drive %d among callers: %v", d, err)
			}
		}
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	})
}

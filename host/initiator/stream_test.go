package initiator_test

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/internal/testutil"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// Producers streaming plain appends run the progress loop's rounds while
// it parks for them (stream.go), and wait for flow control's credits by
// running rounds too. However the rounds fall between them and the loop:
// every append arrives once and in its producer's order; a stream that
// stops short of a round's worth, with no Flush after it, still goes out;
// an append made now and then afterwards goes out on its own; and the
// Flush at the end answers for all of them.
func TestStreamProducersRunTheLoop(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		// Few credits, so that the producers wait for them often.
		s, in := start(t, tr, standInConfig{}, initiator.Options{Credits: 256})
		ctx := timeout(t, 2*time.Minute)
		const producers, appends = 3, 20000
		var wg sync.WaitGroup
		errs := make(chan error, producers)
		for p := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec := make([]byte, 16)
				for i := range appends + p { // different tails: none a round's multiple
					binary.LittleEndian.PutUint64(rec, uint64(p))
					binary.LittleEndian.PutUint64(rec[8:], uint64(i))
					if err := in.Append(8, 1, 1, rec); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		const total = producers*appends + producers*(producers-1)/2
		appended := func() uint64 { return s.arrived.Load() - in.Stats().CreditFlushes }
		// Arrived, and completed by the stand-in (which records their
		// payloads then): it answers in its own time, later under load.
		testutil.WaitFor(t, "every append of the stream to arrive without a Flush", func() bool {
			return appended() >= total && s.completed.Load() >= s.arrived.Load()
		})

		next := make([]uint64, producers)
		n := 0
		for _, a := range s.arrivals() {
			if a.Req.Header.Op != rdmo.OpAppend {
				continue
			}
			n++
			p, i := binary.LittleEndian.Uint64(a.Payload), binary.LittleEndian.Uint64(a.Payload[8:])
			if p >= producers || i != next[p] {
				t.Fatalf("append %d: producer %d's record %d, want its record %d", n, p, i, next[min(p, producers-1)])
			}
			next[p]++
		}
		if n != total {
			t.Fatalf("%d appends arrived, %d were made", n, total)
		}

		for i := range 10 {
			before := appended()
			if err := in.Append(8, 1, 1, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, "an append after the stream to arrive without a Flush", func() bool { return appended() > before })
		}
		if rsp, err := in.Flush(ctx); err != nil || rsp.Failed != 0 {
			t.Fatalf("flush: %+v %v", rsp, err)
		}
		st := in.Stats()
		t.Logf("%d stream rounds run by the producers, %d hand-overs, %d credit waits, %d borrows", st.StreamRounds, st.HandOvers, st.CreditWaits, st.Borrows)
	})
}

package initiator_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/internal/testutil"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

func TestAggregateSupported(t *testing.T) {
	if initiator.AggregateSupported(nil) || initiator.AggregateSupported([]string{"append", "batch"}) {
		t.Error("supported without the capability")
	}
	if !initiator.AggregateSupported([]string{"append", wire.CapabilityBatch}) {
		t.Error("not supported with the capability")
	}
}

// stall blocks the initiator's progress loop inside OnAck (a test-only
// abuse of the callback) so that requests pile up in its queue, and the
// next take gets them all at once: the deterministic form of "requests
// queued while the previous send is still in flight".
type stall struct {
	once    sync.Once
	arm     chan struct{} // closed by the test: stall at the next ack
	entered chan struct{} // closed when the progress loop is stalled
	release chan struct{} // closed by the test to let it go
}

func newStall() *stall {
	return &stall{arm: make(chan struct{}), entered: make(chan struct{}), release: make(chan struct{})}
}

// stallOnFirstAck sends an acked append and returns once the progress loop
// is stalled in its ack (onAck): requests queued from then on pile up
// until release is closed.
func (s *stall) stallOnFirstAck(t *testing.T, ctx context.Context, in *initiator.Initiator) {
	t.Helper()
	close(s.arm)
	if _, err := in.With(ctx, rdmo.FlagAck).Append(8, 1, 1, []byte("first")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.entered:
	case <-ctx.Done():
		t.Fatal("no ack")
	}
}

func (s *stall) onAck(wire.AckResponse, []byte) {
	select {
	case <-s.arm:
	default:
		return
	}
	s.once.Do(func() {
		close(s.entered)
		<-s.release
	})
}

// A request queued while nothing is in flight goes out alone, as a plain
// reference request: no added latency when idle.
func TestAggregateIdleSendsPlainRequests(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := start(t, tr, standInConfig{}, initiator.Options{Aggregate: true})
		ctx := timeout(t, 20*time.Second)
		for i := 0; i < 20; i++ {
			seq, err := in.With(ctx, rdmo.FlagAck).Append(8, 1, 1, []byte{byte(i)})
			if err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, "the ack", func() bool { return in.Stats().Acks == seq+1 })
		}
		if _, err := in.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for _, a := range s.arrivals() {
			if a.Container != 0 {
				t.Fatalf("seq %d arrived in a container on an idle connection", a.Seq)
			}
		}
		if n := s.containers.Load(); n != 0 {
			t.Errorf("%d containers on an idle connection", n)
		}
		if st := in.Stats(); st.Messages != 21 || st.Containers != 0 {
			t.Errorf("stats: %d messages, %d containers; want 21, 0", st.Messages, st.Containers)
		}
	})
}

// With LargeBatches, requests that pile up go in containers of up to
// wire.MaxLargeBatch (a worker with large shared-memory segments takes each
// in one piece) and arrive intact, in order; when the environment gives the
// initiator's UCX context 8 KiB segments the containers stay at 8 KiB.
func TestLargeBatches(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		for _, env := range []string{"", "8256"} {
			t.Run("UCX_MM_SEG_SIZE="+env, func(t *testing.T) {
				ucptest.UnsetShmSegmentEnv(t)
				limit := wire.MaxLargeBatch
				if env != "" {
					t.Setenv("UCX_MM_SEG_SIZE", env)
					limit = initiator.DefaultMaxAggregate
				}
				st := newStall()
				s, in := start(t, tr, standInConfig{largeShm: true}, initiator.Options{Aggregate: true, LargeBatches: true, OnAck: st.onAck})
				ctx := timeout(t, 20*time.Second)
				st.stallOnFirstAck(t, ctx, in)
				// 400 appends of 1 to 4 KiB pile up behind the stalled loop:
				// about 1 MiB, many containers' worth either way.
				var want [][]byte
				for i := range 400 {
					p := pattern(1024+(i*997)%3072, byte(i))
					if err := in.Append(uint64(i), 1, 2, p); err != nil {
						t.Fatal(err)
					}
					want = append(want, p)
				}
				close(st.release)
				if _, err := in.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				got := s.arrivals()
				if len(got) != len(want)+2 {
					t.Fatalf("stand-in got %d requests, want %d", len(got), len(want)+2)
				}
				for i, w := range want {
					a := got[i+1]
					if a.Seq != uint64(i+1) || a.Status != rdmo.StatusOK || !bytes.Equal(a.Payload, w) {
						t.Fatalf("append %d: seq %d status %v, payload as sent %v", i, a.Seq, a.Status, bytes.Equal(a.Payload, w))
					}
				}
				max := s.maxContainer.Load()
				if max > int64(limit) {
					t.Errorf("a container of %d bytes, the limit is %d", max, limit)
				}
				if max <= int64(limit-wire.BatchEntrySize(wire.AppendHeaderLen, 4096)) {
					t.Errorf("the largest container is %d bytes: containers did not fill up to %d", max, limit)
				}
				t.Logf("%d appends in %d messages, the largest container %d bytes", len(want), in.Stats().Messages, max)
			})
		}
	})
}

// Requests that pile up go in containers: every kind of request (FENCE,
// ACK, FLUSH, SCATTER, user ops) inside, big ones and rendezvous ones
// alone, containers no larger than MaxAggregate; the worker numbers the
// inner requests exactly as the initiator counted them.
func TestAggregatePacksQueuedRequests(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		st := newStall()
		const maxAgg = 1024
		s, in := start(t, tr, standInConfig{}, initiator.Options{Aggregate: true, MaxAggregate: maxAgg, OnAck: st.onAck})
		ctx := timeout(t, 20*time.Second)

		st.stallOnFirstAck(t, ctx, in)

		type sent struct {
			seq     uint64
			op      uint32
			flags   uint32
			payload []byte
			alone   bool // must not be in a container
		}
		var want []sent
		add := func(seq uint64, err error, op, flags uint32, payload []byte, alone bool) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, sent{seq, op, flags, payload, alone})
		}
		for i := 0; i < 40; i++ {
			p := pattern(8+i, byte(i))
			switch i % 8 {
			case 0, 1, 2:
				seq, err := in.With(ctx, 0).Append(uint64(i), 1, 2, p)
				add(seq, err, rdmo.OpAppend, 0, p, false)
			case 3:
				seq, err := in.With(ctx, rdmo.FlagFence|rdmo.FlagAck).Append(uint64(i), 1, 2, p)
				add(seq, err, rdmo.OpAppend, rdmo.FlagFence|rdmo.FlagAck, p, false)
			case 4:
				iovs := []wire.IOV{{Addr: uint64(i), Rkey: 3, Len: 3}, {Addr: 7, Rkey: 3, Len: uint16(len(p))}}
				seq, err := in.With(ctx, 0).Scatter(iovs, [][]byte{[]byte("abc"), p})
				add(seq, err, rdmo.OpScatter, 0, nil, false)
			case 5:
				seq, err := in.With(ctx, rdmo.FlagAck).User(rdmo.OpUserBase+2, []byte("odd"), p)
				add(seq, err, rdmo.OpUserBase+2, rdmo.FlagAck, p, false)
			case 6:
				// Too big for a 1 KiB container: alone, but eager.
				big := pattern(1500, byte(i))
				seq, err := in.With(ctx, 0).Append(uint64(i), 1, 2, big)
				add(seq, err, rdmo.OpAppend, 0, big, true)
			case 7:
				fw, err := in.FlushAsync(ctx)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, sent{op: rdmo.OpFlush, flags: rdmo.FlagFence, seq: want[len(want)-1].seq + 1})
				defer func() {
					if _, err := fw.Wait(ctx); err != nil {
						t.Errorf("flush: %v", err)
					}
				}()
			}
		}
		// A rendezvous append goes alone too.
		rndv := pattern(initiator.DefaultRendezvousThreshold+1, 1)
		seq, err := in.With(ctx, 0).Append(1, 1, 2, rndv)
		add(seq, err, rdmo.OpAppend, 0, rndv, true)
		close(st.release)
		if _, err := in.Flush(ctx); err != nil {
			t.Fatal(err)
		}

		got := s.arrivals()
		if len(got) != len(want)+2 {
			t.Fatalf("stand-in got %d requests, want %d", len(got), len(want)+2)
		}
		if got[0].Container != 0 {
			t.Errorf("the first request, sent on an idle connection, arrived in a container")
		}
		got = got[1 : len(got)-1]
		for i, w := range want {
			a := got[i]
			if a.Seq != w.seq || a.Req.Header.Op != w.op || a.Req.Header.Flags != w.flags {
				t.Fatalf("request %d: seq %d op %d flags %#x, want seq %d op %d flags %#x",
					i, a.Seq, a.Req.Header.Op, a.Req.Header.Flags, w.seq, w.op, w.flags)
			}
			if a.Status != rdmo.StatusOK || a.ParseErr != nil {
				t.Fatalf("request %d: status %v, %v", i, a.Status, a.ParseErr)
			}
			if w.payload != nil && !bytes.Equal(a.Payload, w.payload) {
				t.Fatalf("request %d: payload differs", i)
			}
			if w.alone && a.Container != 0 {
				t.Errorf("request %d (%d bytes) arrived in a container", i, len(w.payload))
			}
			if a.Req.Header.ClientID != testClient {
				t.Fatalf("request %d: client %#x", i, a.Req.Header.ClientID)
			}
		}
		stats := in.Stats()
		if s.containers.Load() == 0 || stats.Containers != s.containers.Load() {
			t.Fatalf("%d containers arrived, the initiator counts %d", s.containers.Load(), stats.Containers)
		}
		if stats.UnknownResponses != 0 || stats.SendErrors != 0 {
			t.Errorf("stats %+v", stats)
		}
		if stats.Messages != s.messages.Load() || stats.Messages >= uint64(len(want)) {
			t.Errorf("%d messages for %d requests (stand-in saw %d)", stats.Messages, len(want)+2, s.messages.Load())
		}
		if max := s.maxContainer.Load(); max > maxAgg {
			t.Errorf("a container of %d bytes, MaxAggregate is %d", max, maxAgg)
		}
		t.Logf("%d requests in %d messages (%d containers carrying %d)", len(want)+2, stats.Messages, stats.Containers, stats.Aggregated)
	})
}

// Without Options.Aggregate nothing is ever packed, however much piles up.
func TestAggregateOffSendsPlainRequests(t *testing.T) {
	ucptest.CheckLeaks(t)
	st := newStall()
	s, in := start(t, ucptest.Transports[0], standInConfig{}, initiator.Options{OnAck: st.onAck})
	ctx := timeout(t, 20*time.Second)
	st.stallOnFirstAck(t, ctx, in)
	for i := 0; i < 100; i++ {
		if err := in.Append(8, 1, 1, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	close(st.release)
	if _, err := in.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.containers.Load(); n != 0 {
		t.Errorf("%d containers without Options.Aggregate", n)
	}
	if st := in.Stats(); st.Messages != 102 || st.Containers != 0 {
		t.Errorf("%d messages, %d containers", st.Messages, st.Containers)
	}
}

// Pipelined appends from several goroutines with acks: every request
// arrives once, in each producer's order, every ack matches a request the
// initiator counted, and under load most requests share a message.
func TestAggregateUnderLoad(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		var acked sync.Map
		onAck := func(a wire.AckResponse, _ []byte) {
			if _, dup := acked.LoadOrStore(a.Seq, a.Op); dup {
				t.Errorf("second ack for seq %d", a.Seq)
			}
		}
		s, in := start(t, tr, standInConfig{}, initiator.Options{Aggregate: true, Ack: true, Window: 256, OnAck: onAck})
		const producers, each = 4, 2500
		if err := appendFromProducers(in, producers, each); err != nil {
			t.Error(err)
		}
		ctx := timeout(t, 30*time.Second)
		if _, err := in.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "every ack", func() bool { return in.Stats().Acks == producers*each })
		got := withoutCreditFlushes(t, s.arrivals(), in)
		if len(got) != producers*each+1 {
			t.Fatalf("stand-in got %d requests, want %d", len(got), producers*each+1)
		}
		next := make([]uint64, producers)
		for i, a := range got[:producers*each] {
			if a.Req.Header.Op != rdmo.OpAppend || a.Status != rdmo.StatusOK || i > 0 && a.Seq <= got[i-1].Seq {
				t.Fatalf("request %d: seq %d op %d status %v", i, a.Seq, a.Req.Header.Op, a.Status)
			}
			g := binary.LittleEndian.Uint64(a.Payload)
			if n := binary.LittleEndian.Uint64(a.Payload[8:]); g >= producers || n != next[g] {
				t.Fatalf("request %d: producer %d append %d, expected %d", i, g, n, next[g])
			}
			next[g]++
			if op, ok := acked.Load(a.Seq); !ok || op.(uint32) != rdmo.OpAppend {
				t.Fatalf("seq %d: ack %v", a.Seq, op)
			}
		}
		st := in.Stats()
		if st.UnknownResponses != 0 || st.AckFailures != 0 {
			t.Errorf("%d unknown responses, %d failed acks", st.UnknownResponses, st.AckFailures)
		}
		if st.Containers == 0 {
			t.Errorf("no container under load")
		}
		t.Logf("%d requests in %d messages: %.1f requests/message; %d containers carrying %d",
			st.Appends+st.Flushes, st.Messages, float64(st.Appends+st.Flushes)/float64(st.Messages), st.Containers, st.Aggregated)
	})
}

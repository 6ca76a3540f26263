package initiator_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/internal/testutil"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

const testClient = 0x1122334455667788

// start makes a stand-in worker and an Initiator connected to it; both
// are closed when the test ends (the Initiator first).
func start(t testing.TB, tr ucptest.Transport, cfg standInConfig, opts initiator.Options) (*standIn, *initiator.Initiator) {
	t.Helper()
	s := newStandIn(t, tr, cfg)
	opts.WorkerAddress = s.addr
	if opts.ClientID == 0 {
		opts.ClientID = testClient
	}
	if opts.Context == nil && opts.UCX == nil {
		opts.UCX = tr.Config()
	}
	in, err := initiator.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := in.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s, in
}

func timeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// Reference layout, written out by hand (not with the rdmo encoders):
// struct urom_rdmo_hdr {u64 id; u32 op_id; u32 flags} then the sub-header.
func refHeader(op, flags uint32, sub ...uint64) []byte {
	b := binary.LittleEndian.AppendUint64(nil, testClient)
	b = binary.LittleEndian.AppendUint32(b, op)
	b = binary.LittleEndian.AppendUint32(b, flags)
	for _, v := range sub {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

// struct urom_rdmo_scatter_iov {u64 addr; u64 rkey; u16 len} (24 bytes with
// padding), then len data bytes.
func refIOV(addr, rkey uint64, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, addr)
	b = binary.LittleEndian.AppendUint64(b, rkey)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(data)))
	b = append(b, make([]byte, 6)...)
	return append(b, data...)
}

func TestWireLayout(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := start(t, tr, standInConfig{}, initiator.Options{})
		ctx := timeout(t, 20*time.Second)

		appendData := []byte("eight by")
		if err := in.Append(0xA0A0A0A0A0A0A0A8, 0x1234, 0x5678, appendData); err != nil {
			t.Fatal(err)
		}
		chunks := [][]byte{[]byte("abc"), {}, pattern(300, 1)}
		iovs := []wire.IOV{
			{Addr: 0x1000, Rkey: 7, Len: 3},
			{Addr: 0x2000, Rkey: 8, Len: 0},
			{Addr: 0xFFFF_0000_0000_0000, Rkey: 9, Len: 300},
		}
		if err := in.Scatter(iovs, chunks); err != nil {
			t.Fatal(err)
		}
		sub := []byte("user-sub")
		if err := in.User(42, sub, []byte("payload")); err != nil {
			t.Fatal(err)
		}
		seq, err := in.With(ctx, rdmo.FlagAck|rdmo.FlagFence).Append(1, 2, 3, []byte{0x33})
		if err != nil {
			t.Fatal(err)
		}
		if seq != 3 {
			t.Errorf("fourth request got seq %d, want 3", seq)
		}
		// The caller may reuse its buffers at once.
		copy(appendData, "XXXXXXXX")
		chunks[0][0] = 'X'

		fw, err := in.FlushAsync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rsp, err := fw.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rsp.FlushID != fw.ID() || !rsp.Extended || rsp.Failed != 0 {
			t.Errorf("flush response %+v, want id %#x", rsp, fw.ID())
		}

		var scatterPayload []byte
		for i := range iovs {
			data := []byte("abc")
			if i > 0 {
				data = [][]byte{nil, {}, pattern(300, 1)}[i]
			}
			scatterPayload = append(scatterPayload, refIOV(iovs[i].Addr, uint64(iovs[i].Rkey), data)...)
		}
		want := []struct {
			hdr, payload []byte
		}{
			{refHeader(rdmo.OpAppend, 0, 0xA0A0A0A0A0A0A0A8, 0x1234, 0x5678), []byte("eight by")},
			{refHeader(rdmo.OpScatter, 0, 3), scatterPayload},
			{append(refHeader(42, 0), sub...), []byte("payload")},
			{refHeader(rdmo.OpAppend, rdmo.FlagAck|rdmo.FlagFence, 1, 2, 3), []byte{0x33}},
			{refHeader(rdmo.OpFlush, rdmo.FlagFence, fw.ID()), nil},
		}
		got := s.arrivals()
		if len(got) != len(want) {
			t.Fatalf("stand-in got %d requests, want %d", len(got), len(want))
		}
		for i, w := range want {
			g := got[i]
			if g.Seq != uint64(i) {
				t.Errorf("request %d arrived with seq %d", i, g.Seq)
			}
			if !bytes.Equal(g.Hdr, w.hdr) {
				t.Errorf("request %d header\n got % x\nwant % x", i, g.Hdr, w.hdr)
			}
			if !bytes.Equal(g.Payload, w.payload) {
				t.Errorf("request %d payload\n got % x\nwant % x", i, g.Payload, w.payload)
			}
			if g.ParseErr != nil || g.Status != rdmo.StatusOK {
				t.Errorf("request %d: parse %v, status %v", i, g.ParseErr, g.Status)
			}
			if g.Rendezvous {
				t.Errorf("request %d arrived by rendezvous", i)
			}
			if g.Req.Header.ClientID != testClient {
				t.Errorf("request %d client %#x", i, g.Req.Header.ClientID)
			}
		}
		// Field by field, through the decoder.
		if a := got[0].Req; a.Header.Op != rdmo.OpAppend || a.Header.Flags != 0 ||
			a.Append != (rdmo.AppendHeader{PtrAddr: 0xA0A0A0A0A0A0A0A8, PtrRkey: 0x1234, DataRkey: 0x5678}) {
			t.Errorf("append decoded as %+v", a)
		}
		if sc := got[1].Req; sc.Header.Op != rdmo.OpScatter || sc.Scatter.Count != 3 {
			t.Errorf("scatter decoded as %+v", sc)
		}
		var gotIOVs []wire.IOV
		var gotChunks [][]byte
		if err := wire.ForEachIOV(got[1].Payload, 3, func(v wire.IOV, d []byte) error {
			gotIOVs = append(gotIOVs, v)
			gotChunks = append(gotChunks, d)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for i := range iovs {
			if gotIOVs[i] != iovs[i] {
				t.Errorf("iov %d decoded as %+v, want %+v", i, gotIOVs[i], iovs[i])
			}
		}
		if string(gotChunks[0]) != "abc" || !bytes.Equal(gotChunks[2], pattern(300, 1)) {
			t.Errorf("scatter chunks altered")
		}
		if u := got[2].Req; u.Header.Op != 42 || string(u.User) != "user-sub" {
			t.Errorf("user op decoded as op %d sub %q", u.Header.Op, u.User)
		}
		if f := got[4].Req; f.Header.Op != rdmo.OpFlush || !f.Header.Fenced() || f.Flush.FlushID != fw.ID() {
			t.Errorf("flush decoded as %+v", f)
		}
		testutil.WaitFor(t, "the ack", func() bool { return in.Stats().Acks == 1 })
		st := in.Stats()
		if st.Appends != 2 || st.Scatters != 1 || st.UserOps != 1 || st.Flushes != 1 || st.FlushesDone != 1 {
			t.Errorf("stats %+v", st)
		}
		wantPayload := uint64(8 + len(scatterPayload) + 7 + 1)
		if st.PayloadBytes != wantPayload || st.HeaderBytes != 40+24+24+40+24 {
			t.Errorf("stats bytes: payload %d (want %d), header %d", st.PayloadBytes, wantPayload, st.HeaderBytes)
		}
	})
}

// appendFromProducers appends each 16-byte records from each of producers
// goroutines at once: record i of producer g carries g and i, and goes to
// pointer address g. It returns the first error.
func appendFromProducers(in *initiator.Initiator, producers, each int) error {
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for g := 0; g < producers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 16)
			for i := 0; i < each; i++ {
				binary.LittleEndian.PutUint64(buf, uint64(g))
				binary.LittleEndian.PutUint64(buf[8:], uint64(i))
				if err := in.Append(uint64(g), 1, 2, buf); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func TestPipelinedAppendsFromGoroutines(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := start(t, tr, standInConfig{}, initiator.Options{Window: 256})
		const producers, each = 4, 2500
		if err := appendFromProducers(in, producers, each); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Flush(timeout(t, 20*time.Second)); err != nil {
			t.Fatal(err)
		}
		got := withoutCreditFlushes(t, s.arrivals(), in)
		if len(got) != producers*each+1 {
			t.Fatalf("stand-in got %d requests, want %d", len(got), producers*each+1)
		}
		next := make([]uint64, producers)
		for i, a := range got[:producers*each] {
			if a.Req.Header.Op != rdmo.OpAppend || len(a.Payload) != 16 {
				t.Fatalf("request %d: op %d, %d bytes", i, a.Req.Header.Op, len(a.Payload))
			}
			g := binary.LittleEndian.Uint64(a.Payload)
			n := binary.LittleEndian.Uint64(a.Payload[8:])
			if g >= producers || a.Req.Append.PtrAddr != g {
				t.Fatalf("request %d from producer %d, ptr %d", i, g, a.Req.Append.PtrAddr)
			}
			if n != next[g] {
				t.Fatalf("producer %d: append %d arrived when %d was expected", g, n, next[g])
			}
			next[g]++
		}
		if got[len(got)-1].Req.Header.Op != rdmo.OpFlush {
			t.Errorf("last request is not the flush")
		}
		st := in.Stats()
		if st.Appends != producers*each {
			t.Errorf("stats count %d appends", st.Appends)
		}
		t.Logf("%d requests in %d batches, %d wakes, %d window waits", st.Appends+st.Flushes, st.Batches, st.Wakes, st.WindowWaits)
	})
}

func TestFlushMatchesID(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := start(t, tr, standInConfig{noise: true}, initiator.Options{})
		ctx := timeout(t, 20*time.Second)
		if err := in.Append(8, 1, 1, []byte("x")); err != nil {
			t.Fatal(err)
		}
		rsp, err := in.Flush(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.flushesAnswered() != 1 {
			t.Fatalf("Flush returned before the stand-in answered it")
		}
		if got := s.arrivals(); rsp.FlushID != got[1].Req.Flush.FlushID {
			t.Fatalf("response id %#x, flush sent %#x", rsp.FlushID, got[1].Req.Flush.FlushID)
		}
		// Pipelined flushes each get their own answer.
		var fws []*initiator.FlushWait
		for i := 0; i < 8; i++ {
			if err := in.Append(8, 1, 1, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
			fw, err := in.FlushAsync(ctx)
			if err != nil {
				t.Fatal(err)
			}
			fws = append(fws, fw)
		}
		ids := map[uint64]bool{}
		for _, fw := range fws {
			rsp, err := fw.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rsp.FlushID != fw.ID() || ids[fw.ID()] {
				t.Fatalf("flush %#x answered with %#x", fw.ID(), rsp.FlushID)
			}
			ids[fw.ID()] = true
		}
		// 9 flushes, each preceded by 3 unmatched and 3 malformed responses.
		st := in.Stats()
		if st.FlushesDone != 9 || st.UnknownResponses != 27 || st.MalformedResponses != 27 {
			t.Errorf("flushes done %d, unknown %d, malformed %d; want 9, 27, 27",
				st.FlushesDone, st.UnknownResponses, st.MalformedResponses)
		}
	})
}

// A flush answered only by stale, foreign and malformed messages never
// completes.
func TestFlushIgnoresOtherResponses(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := start(t, tr, standInConfig{noise: true}, initiator.Options{})
		s.dropFlush.Store(true)
		ctx := timeout(t, 20*time.Second)
		fw, err := in.FlushAsync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "the noise", func() bool {
			st := in.Stats()
			return st.UnknownResponses == 3 && st.MalformedResponses == 3
		})
		select {
		case <-fw.Done():
			_, err := fw.Wait(nil)
			t.Fatalf("flush completed by a message that is not its response: %v", err)
		default:
		}
		if _, err := fw.Wait(timeout(t, 20*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("unanswered flush: %v, want DeadlineExceeded", err)
		}
		// The next flush is answered; the dropped one stays outstanding.
		s.dropFlush.Store(false)
		rsp, err := in.Flush(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rsp.FlushID == fw.ID() {
			t.Fatalf("second flush answered with the first one's id")
		}
		select {
		case <-fw.Done():
			t.Fatalf("dropped flush completed")
		default:
		}
	})
}

func TestReferenceFlushResponse(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		_, in := start(t, tr, standInConfig{reference: true}, initiator.Options{})
		if err := in.Append(8, 1, 1, []byte("x")); err != nil {
			t.Fatal(err)
		}
		rsp, err := in.Flush(timeout(t, 20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if rsp.Extended {
			t.Errorf("12-byte reference response decoded as extended")
		}
	})
}

func TestFlushReportsFailures(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		failOn := func(r wire.RequestHeader, _ []byte) rdmo.Status {
			if r.Header.Op == rdmo.OpAppend && r.Append.DataRkey == 666 {
				return rdmo.StatusUnknownRegion
			}
			return rdmo.StatusOK
		}
		_, in := start(t, tr, standInConfig{failOn: failOn}, initiator.Options{})
		ctx := timeout(t, 20*time.Second)
		for i, rkey := range []uint64{1, 666, 1, 2, 666} {
			if err := in.Append(8, 1, rkey, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		rsp, err := in.Flush(ctx)
		if err == nil {
			t.Fatal("flush after failed appends reported no error")
		}
		if !errors.Is(err, rdmo.ErrUnknownRegion) || !errors.Is(err, rdmo.StatusUnknownRegion) {
			t.Errorf("flush error %v does not match the first failure's status", err)
		}
		var fe *initiator.FlushError
		if !errors.As(err, &fe) {
			t.Fatalf("flush error %T is not a *FlushError", err)
		}
		want := wire.FlushResponse{FlushID: rsp.FlushID, Failed: 2, FirstOp: rdmo.OpAppend,
			FirstStatus: rdmo.StatusUnknownRegion, FirstSeq: 1, Extended: true}
		if fe.Response != want || rsp != want {
			t.Errorf("flush response %+v, want %+v", fe.Response, want)
		}
		// Failures are reported once: the next flush is clean.
		if _, err := in.Flush(ctx); err != nil {
			t.Errorf("second flush: %v", err)
		}
		if st := in.Stats(); st.FailuresReported != 2 {
			t.Errorf("stats report %d failures", st.FailuresReported)
		}
	})
}

func TestAcks(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		failOn := func(r wire.RequestHeader, _ []byte) rdmo.Status {
			if r.Header.Op == rdmo.OpAppend && r.Append.DataRkey == 666 {
				return rdmo.StatusOutOfBounds
			}
			return rdmo.StatusOK
		}
		var mu sync.Mutex
		values := map[uint64]uint64{}
		onAck := func(a wire.AckResponse, _ []byte) {
			mu.Lock()
			values[a.Seq] = a.Value
			mu.Unlock()
		}
		_, in := start(t, tr, standInConfig{failOn: failOn}, initiator.Options{Ack: true, OnAck: onAck})
		ctx := timeout(t, 20*time.Second)
		// Options.Ack: every request is acked.
		for i := 0; i < 10; i++ {
			if err := in.Append(8, 1, 1, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		// Per call: the ack of a failed request names its seq and status.
		badSeq, err := in.With(ctx, rdmo.FlagAck).Append(8, 1, 666, []byte("bad"))
		if err != nil {
			t.Fatal(err)
		}
		if badSeq != 10 {
			t.Errorf("11th request got seq %d", badSeq)
		}
		select {
		case err := <-in.Errors():
			var re *initiator.RequestError
			if !errors.As(err, &re) || re.Seq != badSeq || re.Op != rdmo.OpAppend || !errors.Is(err, rdmo.ErrOutOfBounds) {
				t.Errorf("ack failure %v (%+v), want seq %d OutOfBounds", err, re, badSeq)
			}
		case <-ctx.Done():
			t.Fatal("no ack failure delivered")
		}
		// Without FlagAck no ack comes.
		if _, err := in.With(ctx, 0).Append(8, 1, 1, []byte("quiet")); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Flush(ctx); !errors.Is(err, rdmo.ErrOutOfBounds) {
			t.Errorf("flush after the failed request: %v", err)
		}
		st := in.Stats()
		if st.Acks != 11 || st.AckFailures != 1 || st.UnknownResponses != 0 {
			t.Errorf("stats: %d acks, %d failed, %d unknown; want 11, 1, 0", st.Acks, st.AckFailures, st.UnknownResponses)
		}
		mu.Lock()
		defer mu.Unlock()
		for seq := uint64(0); seq < 11; seq++ {
			if values[seq] != 0x1000+seq {
				t.Errorf("ack of seq %d carried value %#x", seq, values[seq])
			}
		}
	})
}

// Ack failures that do not fit in Errors() are counted, not blocking.
func TestErrorsOverflowIsCounted(t *testing.T) {
	ucptest.CheckLeaks(t)
	failAll := func(wire.RequestHeader, []byte) rdmo.Status { return rdmo.StatusRegionGone }
	_, in := start(t, ucptest.Transports[0], standInConfig{failOn: failAll},
		initiator.Options{Ack: true, ErrorBuffer: 1})
	for i := 0; i < 3; i++ {
		if err := in.Append(8, 1, 1, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "three acks", func() bool { return in.Stats().Acks == 3 })
	if st := in.Stats(); st.AckFailures != 3 || st.ErrorsDropped != 2 {
		t.Errorf("%d ack failures, %d dropped; want 3, 2", st.AckFailures, st.ErrorsDropped)
	}
	if err := <-in.Errors(); !errors.Is(err, rdmo.ErrRegionGone) {
		t.Errorf("delivered failure %v", err)
	}
}

func TestWindowFullBlocksAndUnblocks(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := start(t, tr, standInConfig{}, initiator.Options{Window: 4})
		ctx := timeout(t, 20*time.Second)
		s.hold.Store(true)
		var fws []*initiator.FlushWait
		for i := 0; i < 4; i++ {
			fw, err := in.FlushAsync(ctx)
			if err != nil {
				t.Fatal(err)
			}
			fws = append(fws, fw)
		}
		blocked := make(chan error, 1)
		go func() { blocked <- in.Append(8, 1, 1, []byte("waits")) }()
		testutil.WaitFor(t, "the append to wait", func() bool { return in.Stats().WindowWaits == 1 })
		select {
		case err := <-blocked:
			t.Fatalf("append returned (%v) with the window full", err)
		default:
		}
		// A caller with a context gives up.
		short := timeout(t, 20*time.Millisecond)
		if _, err := in.With(short, 0).Append(8, 1, 1, []byte("x")); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("append with an expiring context: %v", err)
		}
		if _, err := in.FlushAsync(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("flush with an expiring context: %v", err)
		}
		s.hold.Store(false)
		s.w.Wake()
		select {
		case err := <-blocked:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("append still blocked after the window drained")
		}
		for _, fw := range fws {
			if _, err := fw.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := in.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := len(s.arrivals()); got != 6 {
			t.Errorf("stand-in got %d requests, want 6", got)
		}
	})
}

// Acked requests hold window space until their ack; WindowBytes bounds the
// bytes they hold.
func TestWindowBytes(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := start(t, tr, standInConfig{}, initiator.Options{WindowBytes: 1000, Ack: true})
		ctx := timeout(t, 20*time.Second)
		// One request larger than the window goes when nothing else is in
		// flight.
		if err := in.Append(8, 1, 1, pattern(2000, 1)); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "the big append's ack", func() bool { return in.Stats().Acks == 1 })
		s.hold.Store(true)
		if err := in.Append(8, 1, 1, pattern(600, 2)); err != nil {
			t.Fatal(err)
		}
		blocked := make(chan error, 1)
		go func() { blocked <- in.Append(8, 1, 1, pattern(600, 3)) }()
		testutil.WaitFor(t, "the append to wait", func() bool { return in.Stats().WindowWaits == 1 })
		select {
		case err := <-blocked:
			t.Fatalf("append returned (%v) with the window's bytes used", err)
		default:
		}
		s.hold.Store(false)
		s.w.Wake()
		if err := <-blocked; err != nil {
			t.Fatal(err)
		}
		if _, err := in.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got := s.arrivals()
		if len(got) != 4 || !bytes.Equal(got[2].Payload, pattern(600, 3)) {
			t.Errorf("stand-in got %d requests", len(got))
		}
	})
}

func TestRendezvousPayloads(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := start(t, tr, standInConfig{}, initiator.Options{})
		ctx := timeout(t, 30*time.Second)
		sizes := []int{initiator.DefaultRendezvousThreshold + 1, 64 << 10, 1 << 20, 5 << 20}
		for i, n := range sizes {
			data := pattern(n, byte(i))
			if err := in.Append(uint64(i), 1, 1, data); err != nil {
				t.Fatal(err)
			}
			clear(data) // the caller's buffer is free at once
		}
		if err := in.User(rdmo.OpUserBase, []byte("big"), pattern(100<<10, 9)); err != nil {
			t.Fatal(err)
		}
		// Scatter is always eager, even when large.
		chunks := [][]byte{pattern(60000, 4), pattern(60000, 5), pattern(17, 6)}
		iovs := []wire.IOV{{Addr: 1, Rkey: 1, Len: 60000}, {Addr: 2, Rkey: 1, Len: 60000}, {Addr: 3, Rkey: 1, Len: 17}}
		if err := in.Scatter(iovs, chunks); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got := s.arrivals()
		if len(got) != len(sizes)+3 {
			t.Fatalf("stand-in got %d requests", len(got))
		}
		for i, n := range sizes {
			if !got[i].Rendezvous {
				t.Errorf("%d-byte append arrived eager", n)
			}
			if !bytes.Equal(got[i].Payload, pattern(n, byte(i))) {
				t.Errorf("%d-byte append arrived corrupted (%d bytes)", n, len(got[i].Payload))
			}
		}
		u := got[len(sizes)]
		if !u.Rendezvous || !bytes.Equal(u.Payload, pattern(100<<10, 9)) || string(u.Req.User) != "big" {
			t.Errorf("rendezvous user op arrived wrong (rndv %v, %d bytes)", u.Rendezvous, len(u.Payload))
		}
		sc := got[len(sizes)+1]
		if sc.Rendezvous || sc.Status != rdmo.StatusOK {
			t.Errorf("scatter: rendezvous %v, status %v", sc.Rendezvous, sc.Status)
		}
		i := 0
		wire.ForEachIOV(sc.Payload, 3, func(v wire.IOV, d []byte) error {
			if v != iovs[i] || !bytes.Equal(d, chunks[i]) {
				t.Errorf("scatter chunk %d arrived wrong", i)
			}
			i++
			return nil
		})
		if st := in.Stats(); st.Rendezvous != uint64(len(sizes)+1) {
			t.Errorf("stats count %d rendezvous sends", st.Rendezvous)
		}
	})
}

// With LargeEager, appends up to wire.MaxLargeEager go eager where TCP is
// the endpoint's only transport, and by rendezvous above the default
// threshold everywhere else; a threshold the caller set wins.
func TestLargeEager(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := start(t, tr, standInConfig{}, initiator.Options{LargeEager: true})
		eager := tr.Name == "tcp"
		want := initiator.DefaultRendezvousThreshold
		if eager {
			want = wire.MaxLargeEager
		}
		if got := in.RendezvousThreshold(); got != want {
			t.Fatalf("over %s the threshold is %d, want %d", tr.Name, got, want)
		}
		ctx := timeout(t, 30*time.Second)
		sizes := []int{initiator.DefaultRendezvousThreshold + 1, 64 << 10, wire.MaxLargeEager, wire.MaxLargeEager + 1, 1 << 20}
		for i, n := range sizes {
			if err := in.Append(uint64(i), 1, 1, pattern(n, byte(i))); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := in.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got := s.arrivals()
		if len(got) != len(sizes)+1 {
			t.Fatalf("stand-in got %d requests", len(got))
		}
		for i, n := range sizes {
			if rndv := !eager || n > wire.MaxLargeEager; got[i].Rendezvous != rndv {
				t.Errorf("over %s a %d-byte append arrived with rendezvous %v, want %v", tr.Name, n, got[i].Rendezvous, rndv)
			}
			if !bytes.Equal(got[i].Payload, pattern(n, byte(i))) {
				t.Errorf("%d-byte append arrived corrupted (%d bytes)", n, len(got[i].Payload))
			}
		}

		_, set := start(t, tr, standInConfig{}, initiator.Options{LargeEager: true, RendezvousThreshold: 4 << 10})
		if got := set.RendezvousThreshold(); got != 4<<10 {
			t.Errorf("over %s a threshold of 4 KiB set by the caller became %d", tr.Name, got)
		}
		_, off := start(t, tr, standInConfig{}, initiator.Options{})
		if got := off.RendezvousThreshold(); got != initiator.DefaultRendezvousThreshold {
			t.Errorf("over %s without LargeEager the threshold is %d", tr.Name, got)
		}
	})
}

// The worker dies with a flush outstanding and appends streaming: the flush
// and the stream end with a peer-failure error in bounded time.
func TestPeerKilledMidStream(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		// No flow control: with the stand-in holding, the stream would use
		// up the credits (nothing confirms them) and the FlushAsync below
		// would wait for one forever if the stream got there first.
		s, in := start(t, tr, standInConfig{}, initiator.Options{Window: 64, Credits: -1, CloseTimeout: time.Second, Logger: zaptest.NewLogger(t)})
		streamErr := make(chan error, 1)
		go func() {
			for {
				if err := in.Append(8, 1, 1, []byte("stream")); err != nil {
					streamErr <- err
					return
				}
			}
		}()
		testutil.WaitFor(t, "the stream to flow", func() bool { return s.arrived.Load() > 1000 })
		s.hold.Store(true)
		ctx := timeout(t, 30*time.Second)
		fw, err := in.FlushAsync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.kill()
		killed := time.Now()
		// The stand-in dies inside this process: over shared memory UCX
		// watches the peer's process, which lives on, so only TCP (its
		// socket closes) tells. Otherwise a deadline bounds the wait, and
		// the layer above reports the failure.
		if !in.PeerFailureDetection() || tr.Name != "tcp" {
			if _, err := fw.Wait(timeout(t, 50*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("flush to a dead worker without detection: %v", err)
			}
			in.PeerFailed(errors.New("control connection closed"))
		}
		_, err = fw.Wait(ctx)
		if !errors.Is(err, ucp.ErrPeerFailed) {
			t.Fatalf("pending flush after the worker died: %v, want ErrPeerFailed", err)
		}
		var pe *initiator.PeerFailedError
		if !errors.As(err, &pe) {
			t.Errorf("error %T is not a *PeerFailedError", err)
		}
		t.Logf("flush failed %v after the kill: %v", time.Since(killed), err)
		select {
		case err := <-streamErr:
			if !errors.Is(err, ucp.ErrPeerFailed) {
				t.Errorf("stream ended with %v", err)
			}
		case <-ctx.Done():
			t.Fatal("stream still running after the peer failed")
		}
		if err := in.Append(8, 1, 1, []byte("x")); !errors.Is(err, ucp.ErrPeerFailed) {
			t.Errorf("append after the failure: %v", err)
		}
		if _, err := in.Flush(ctx); !errors.Is(err, ucp.ErrPeerFailed) {
			t.Errorf("flush after the failure: %v", err)
		}
		if err := closeBounded(t, in); err != nil {
			t.Errorf("close after the failure: %v", err)
		}
	})
}

// The worker dies and nobody tells the Initiator (shared memory cannot
// detect it): Close still ends in bounded time and fails what waits.
func TestCloseAfterUndetectedPeerDeath(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		// No flow control, as in TestPeerKilledMidStream: the FlushAsync
		// after hold must not wait for credits the held stand-in never returns.
		s, in := start(t, tr, standInConfig{}, initiator.Options{Window: 64, Credits: -1, CloseTimeout: 200 * time.Millisecond})
		streamErr := make(chan error, 1)
		go func() {
			for {
				if err := in.Append(8, 1, 1, []byte("stream")); err != nil {
					streamErr <- err
					return
				}
			}
		}()
		testutil.WaitFor(t, "the stream to flow", func() bool { return s.arrived.Load() > 500 })
		s.hold.Store(true)
		ctx := timeout(t, 30*time.Second)
		fw, err := in.FlushAsync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.kill()
		if err := closeBounded(t, in); err != nil {
			t.Errorf("close: %v", err)
		}
		if _, err := fw.Wait(ctx); !errors.Is(err, initiator.ErrClosed) && !errors.Is(err, ucp.ErrPeerFailed) {
			t.Errorf("pending flush: %v, want ErrClosed or ErrPeerFailed", err)
		}
		select {
		case err := <-streamErr:
			if !errors.Is(err, initiator.ErrClosed) && !errors.Is(err, ucp.ErrPeerFailed) {
				t.Errorf("stream ended with %v", err)
			}
		case <-ctx.Done():
			t.Fatal("stream still running after Close")
		}
	})
}

func TestCloseSendsWhatWasQueued(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		// More appends than credits would make Append wait for flushes.
		s, in := start(t, tr, standInConfig{}, initiator.Options{Window: 4096, Credits: -1})
		const n = 3000
		for i := 0; i < n; i++ {
			if err := in.Append(8, 1, 1, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := in.Close(); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "every queued append to arrive", func() bool { return s.arrived.Load() == n })
	})
}

func TestCloseWithPendingFlushAndBlockedCaller(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := start(t, tr, standInConfig{}, initiator.Options{Window: 2})
		s.hold.Store(true)
		ctx := timeout(t, 20*time.Second)
		pending := make(chan error, 1)
		go func() {
			_, err := in.Flush(ctx)
			pending <- err
		}()
		testutil.WaitFor(t, "the first flush to arrive", func() bool { return s.arrived.Load() == 1 })
		fw, err := in.FlushAsync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		blocked := make(chan error, 1)
		go func() { blocked <- in.Append(8, 1, 1, []byte("blocked")) }()
		testutil.WaitFor(t, "the append to wait", func() bool { return in.Stats().WindowWaits >= 1 })
		if err := closeBounded(t, in); err != nil {
			t.Fatal(err)
		}
		for name, ch := range map[string]chan error{"flush": pending, "blocked append": blocked} {
			select {
			case err := <-ch:
				if !errors.Is(err, initiator.ErrClosed) {
					t.Errorf("%s at close: %v, want ErrClosed", name, err)
				}
			case <-ctx.Done():
				t.Fatalf("%s still waiting after Close", name)
			}
		}
		if _, err := fw.Wait(ctx); !errors.Is(err, initiator.ErrClosed) {
			t.Errorf("async flush at close: %v", err)
		}
	})
}

func TestUseAfterClose(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		_, in := start(t, tr, standInConfig{}, initiator.Options{})
		if err := in.Close(); err != nil {
			t.Fatal(err)
		}
		ctx := timeout(t, time.Second)
		checks := map[string]error{
			"append":  in.Append(8, 1, 1, []byte("x")),
			"scatter": in.Scatter(nil, nil),
			"user":    in.User(rdmo.OpUserBase, nil, nil),
		}
		_, checks["flush"] = in.Flush(ctx)
		_, checks["flush async"] = in.FlushAsync(ctx)
		_, checks["sender"] = in.With(ctx, rdmo.FlagAck).Append(8, 1, 1, []byte("x"))
		for name, err := range checks {
			if !errors.Is(err, initiator.ErrClosed) {
				t.Errorf("%s after close: %v, want ErrClosed", name, err)
			}
		}
		if err := in.Close(); err != nil {
			t.Errorf("second close: %v", err)
		}
		if _, ok := <-in.Errors(); ok {
			t.Errorf("Errors() not closed")
		}
		in.PeerFailed(errors.New("after close")) // no effect, no panic
	})
}

func TestInvalidCalls(t *testing.T) {
	ucptest.CheckLeaks(t)
	tr := ucptest.Transports[0]
	_, in := start(t, tr, standInConfig{}, initiator.Options{})
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"empty append", in.Append(8, 1, 1, nil), rdmo.ErrEmptyAppend},
		{"scatter count mismatch", in.Scatter([]wire.IOV{{Len: 1}}, nil), rdmo.ErrPayloadMismatch},
		{"scatter len mismatch", in.Scatter([]wire.IOV{{Len: 2}}, [][]byte{{1}}), rdmo.ErrPayloadMismatch},
		{"scatter chunk too long", in.Scatter([]wire.IOV{{Len: 0}}, [][]byte{make([]byte, 65536)}), rdmo.ErrLengthOverflow},
		{"reference op as user op", in.User(rdmo.OpAppend, nil, nil), rdmo.ErrUnknownOp},
		{"reserved op", in.User(5, nil, nil), rdmo.ErrUnknownOp},
		{"sub-header too long", in.User(rdmo.OpUserBase, make([]byte, 49), nil), rdmo.ErrHeaderTooLong},
	}
	_, err := in.With(nil, 1<<5).Append(8, 1, 1, []byte("x"))
	cases = append(cases, struct {
		name string
		err  error
		want error
	}{"unknown flag", err, rdmo.ErrUnknownFlags})
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	// A 48-byte sub-header is the longest allowed; nothing invalid was sent.
	if err := in.User(rdmo.OpUserBase, make([]byte, 48), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Flush(timeout(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if st := in.Stats(); st.UserOps != 1 || st.Appends != 0 || st.Scatters != 0 {
		t.Errorf("invalid calls were sent: %+v", st)
	}
}

func TestNewErrors(t *testing.T) {
	ucptest.CheckLeaks(t)
	if _, err := initiator.New(initiator.Options{}); err == nil {
		t.Error("New without a worker address succeeded")
	}
	// A truncated address fails Connect, after the context and worker were
	// made: they must be closed (CheckLeaks). (A garbage address of full
	// length is not tested: UCX 1.13 aborts the process unpacking it.)
	if _, err := initiator.New(initiator.Options{
		WorkerAddress: []byte{1},
		UCX:           ucptest.Transports[0].Config(),
	}); err == nil {
		t.Error("New with a truncated worker address succeeded")
	}
	if _, err := initiator.New(initiator.Options{
		WorkerAddress: []byte{1},
		UCX:           map[string]string{"RNDV_THRESH": "banana"},
	}); err == nil {
		t.Error("New with a bad UCX configuration value succeeded")
	}
}

// An Initiator given a Context uses it and leaves it open.
func TestSharedContext(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		ctx := ucptest.NewContext(t, tr)
		s, in := start(t, tr, standInConfig{}, initiator.Options{Context: ctx})
		if err := in.Append(8, 1, 1, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Flush(timeout(t, 20*time.Second)); err != nil {
			t.Fatal(err)
		}
		if len(in.Address()) == 0 {
			t.Error("no initiator address")
		}
		if err := in.Close(); err != nil {
			t.Fatal(err)
		}
		w, err := ctx.NewWorker(ucp.WorkerOptions{})
		if err != nil {
			t.Fatalf("context unusable after the Initiator closed: %v", err)
		}
		w.Close()
		if len(s.arrivals()) != 2 {
			t.Errorf("stand-in got %d requests", len(s.arrivals()))
		}
	})
}

func ExampleInitiator() {
	var workerAddr []byte // from the target, out of band
	in, err := initiator.New(initiator.Options{WorkerAddress: workerAddr, ClientID: 0})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer in.Close()
	// Append 8 bytes of 0x33 to the queue whose tail is at tailAddr in
	// region 1, then make it visible.
	const tailAddr = 0x7f0000001000
	in.Append(tailAddr, 1, 1, bytes.Repeat([]byte{0x33}, 8))
	if _, err := in.Flush(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output: initiator: Options.WorkerAddress is empty
}

// An idle initiator sleeps: the loop polls while a flush waits for its
// answer, but once nothing is outstanding it sleeps in ucp.Worker.Wait. A
// producer wakes it (Stats.Wakes) only when it finds the loop asleep, so an
// append that wakes it proves the loop had gone to sleep; a loop that kept
// polling fails at the hang guard.
func TestIdleInitiatorSleeps(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		_, in := start(t, tr, standInConfig{}, initiator.Options{})
		ctx := timeout(t, 60*time.Second)
		for i := 0; i < 100; i++ { // a conversation of idle flushes
			if err := in.Append(8, 1, 1, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
			if rsp, err := in.Flush(ctx); err != nil || rsp.Failed != 0 {
				t.Fatalf("flush %d: %+v %v", i, rsp, err)
			}
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
			w0 := in.Stats().Wakes
			if err := in.Append(8, 1, 1, []byte("z")); err != nil {
				t.Fatal(err)
			}
			if in.Stats().Wakes > w0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the initiator's loop never slept in 30 s of idleness")
			}
		}
		if rsp, err := in.Flush(ctx); err != nil || rsp.Failed != 0 {
			t.Fatalf("flush after the sleep: %+v %v", rsp, err)
		}
	})
}

// closeBounded closes in and fails the test if Close hangs: a minute is a
// hang; anything shorter is the machine's load, only logged.
func closeBounded(t *testing.T, in *initiator.Initiator) error {
	t.Helper()
	start := time.Now()
	errc := make(chan error, 1)
	go func() { errc <- in.Close() }()
	select {
	case err := <-errc:
		t.Logf("close took %v", time.Since(start).Round(time.Millisecond))
		return err
	case <-time.After(time.Minute):
		t.Fatal("Close did not return within a minute")
		return nil
	}
}

// A flush that has no answer within Options.FlushTimeout (the worker holds
// everything, as a stopped one would) fails the Initiator at once: every
// outstanding flush, a caller waiting for window space, and every later
// call, each with the overdue flush as the cause.
func TestFlushTimeoutFailsQueue(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		s, in := start(t, tr, standInConfig{}, initiator.Options{Window: 4, FlushTimeout: 100 * time.Millisecond})
		ctx := timeout(t, 30*time.Second) // hang guard
		s.hold.Store(true)
		var fws []*initiator.FlushWait
		for i := 0; i < 4; i++ {
			fw, err := in.FlushAsync(ctx)
			if err != nil {
				t.Fatal(err)
			}
			fws = append(fws, fw)
		}
		blocked := make(chan error, 1)
		go func() { _, err := in.With(ctx, 0).Append(8, 1, 1, []byte("waits")); blocked <- err }()
		check := func(what string, err error) {
			t.Helper()
			var te *initiator.FlushTimeoutError
			if !errors.Is(err, initiator.ErrFlushTimeout) || !errors.As(err, &te) {
				t.Errorf("%s: %v, want the flush timeout", what, err)
				return
			}
			if te.ID != fws[0].ID() || te.Limit != 100*time.Millisecond {
				t.Errorf("%s: cause %+v, want the first flush (id %d)", what, te, fws[0].ID())
			}
		}
		for i, fw := range fws {
			_, err := fw.Wait(ctx)
			check(fmt.Sprintf("flush %d", i), err)
		}
		select {
		case err := <-blocked:
			check("the append waiting for window space", err)
		case <-ctx.Done():
			t.Fatal("the append still waits")
		}
		_, err := in.With(ctx, 0).Append(8, 1, 1, []byte("later"))
		check("a later append", err)
		_, err = in.Flush(ctx)
		check("a later flush", err)
	})
}

package dpu_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// entry is one inner request of a container.
type entry struct{ hdr, payload []byte }

// rawEntry encodes an entry by hand, so a test can set its flags or lie
// about nested containers (AppendBatchEntry refuses both).
func rawEntry(hdr []byte, flags uint16, payload []byte) []byte {
	b := le.AppendUint16(nil, uint16(len(hdr)))
	b = le.AppendUint16(b, flags)
	b = le.AppendUint32(b, uint32(len(payload)))
	b = append(b, hdr...)
	b = append(b, payload...)
	for len(b)%wire.BatchAlign != 0 {
		b = append(b, 0)
	}
	return b
}

// batchData encodes a container's data from entries.
func batchData(t testing.TB, ents ...entry) []byte {
	t.Helper()
	var data []byte
	for _, e := range ents {
		var err error
		if data, err = wire.AppendBatchEntry(data, e.hdr, e.payload); err != nil {
			t.Fatal(err)
		}
	}
	return data
}

// sendBatch sends a well-formed container of ents (eager) and returns the
// sequence numbers the worker gives its inner requests.
func (in *initiator) sendBatch(ents ...entry) []uint64 {
	in.t.Helper()
	hdr := wire.AppendBatchRequest(nil, wire.Header{ClientID: in.client}, wire.BatchHeader{Count: uint64(len(ents))})
	return in.sendContainer(hdr, batchData(in.t, ents...), ucp.SendEager, len(ents))
}

// sendContainer sends a container AM as given and returns the next seqs
// sequence numbers, the ones the worker should take for it.
func (in *initiator) sendContainer(hdr, data []byte, flags ucp.SendFlags, seqs int) []uint64 {
	in.t.Helper()
	if err := in.ep.SendAM(0, bytes.Clone(hdr), bytes.Clone(data), ucp.SendReply|flags, sendDone{in}, 0); err != nil {
		in.t.Fatalf("send: %v", err)
	}
	var out []uint64
	for range seqs {
		out = append(out, in.seq)
		in.seq++
	}
	return out
}

func TestCapabilities(t *testing.T) {
	if !slices.Contains(dpu.Capabilities(), wire.CapabilityBatch) {
		t.Fatalf("capabilities %v lack %q", dpu.Capabilities(), wire.CapabilityBatch)
	}
	dpu.Capabilities()[0] = "changed"
	if !slices.Contains(dpu.Capabilities(), wire.CapabilityBatch) {
		t.Fatal("Capabilities returns shared memory")
	}
}

// A worker says it takes large containers only when its shared-memory
// segments are large and its eager limit admits them: an initiator that
// believed it otherwise would write past the worker's UCX descriptors.
func TestCapabilityLargeBatch(t *testing.T) {
	ucptest.UnsetShmSegmentEnv(t)
	has := func(cfg dpu.Config) bool { return slices.Contains(dpu.CapabilitiesFor(cfg), wire.CapabilityLargeBatch) }
	if !has(dpu.Config{}) || !slices.Contains(dpu.Capabilities(), wire.CapabilityLargeBatch) {
		t.Errorf("a worker with the defaults does not say it takes large containers")
	}
	if has(dpu.Config{MaxEagerPayload: 32 << 10}) {
		t.Errorf("a worker with a 32 KiB eager limit says it takes 60 KiB containers")
	}
	if has(dpu.Config{UCXConfig: map[string]string{"MM_SEG_SIZE": "16k"}}) {
		t.Errorf("a worker configured with 16 KiB segments says it takes large containers")
	}
	t.Setenv("UCX_MM_SEG_SIZE", "8256")
	if has(dpu.Config{}) {
		t.Errorf("a worker whose environment sets 8 KiB segments says it takes large containers")
	}
}

// A worker says it takes 512 KiB eager payloads only when its eager limit
// admits them: an initiator that believed it otherwise would have every
// such request fail with LengthOverflow.
func TestCapabilityLargeEager(t *testing.T) {
	has := func(cfg dpu.Config) bool { return slices.Contains(dpu.CapabilitiesFor(cfg), wire.CapabilityLargeEager) }
	if !has(dpu.Config{}) || !slices.Contains(dpu.Capabilities(), wire.CapabilityLargeEager) {
		t.Errorf("a worker with the defaults does not say it takes 512 KiB eager payloads")
	}
	if !has(dpu.Config{MaxEagerPayload: wire.MaxLargeEager}) {
		t.Errorf("a worker whose eager limit is exactly %d bytes does not say it takes them", wire.MaxLargeEager)
	}
	if has(dpu.Config{MaxEagerPayload: wire.MaxLargeEager - 1}) {
		t.Errorf("a worker with an eager limit below %d bytes says it takes them", wire.MaxLargeEager)
	}
}

// A container's inner requests run exactly as if they had arrived one
// after another: each takes its own sequence number (acks and flush
// reports use them), FENCE and FLUSH inside behave as usual, small and
// large payloads reach target memory.
func TestBatchMixedOps(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers()})
		s := e.newSetup(1, 64<<10, 0, 64<<10)
		in := s.in
		first := in.send(userReq(1, opPut, rdmo.FlagAck, s.region, s.base+60000), pattern(8, 1), 0)
		small, big1, big2 := pattern(8, 2), pattern(2000, 3), pattern(1500, 4)
		fencedData := pattern(16, 5)
		seqs := in.sendBatch(
			entry{userReq(1, opPut, rdmo.FlagAck, s.region, s.base), small},
			entry{userReq(1, opPut, 0, s.region, s.base+8), big1},
			entry{userReq(1, opPut, rdmo.FlagAck|rdmo.FlagFence, s.region, s.base+4096), fencedData},
			entry{wire.AppendFlushRequest(nil, wire.Header{ClientID: 1, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: 0xF1}), nil},
			entry{userReq(1, opPut, rdmo.FlagAck, s.region, s.base+5000), big2},
			entry{userReq(1, opNull, rdmo.FlagAck), nil},
		)
		last := in.send(userReq(1, opPut, rdmo.FlagAck, s.region, s.base+60008), pattern(8, 6), 0)
		if first != 0 || !slices.Equal(seqs, []uint64{1, 2, 3, 4, 5, 6}) || last != 7 {
			t.Fatalf("test bug: seqs %d %v %d", first, seqs, last)
		}
		for seq, want := range map[uint64]struct {
			op    uint32
			value uint64
		}{
			first:   {opPut, s.base + 60000},
			seqs[0]: {opPut, s.base},
			seqs[2]: {opPut, s.base + 4096},
			seqs[4]: {opPut, s.base + 5000},
			seqs[5]: {opNull, 0},
			last:    {opPut, s.base + 60008},
		} {
			a := in.ack(seq)
			if a.Status != rdmo.StatusOK || a.Op != want.op || a.Value != want.value {
				t.Errorf("seq %d: ack %+v, want op %d value %#x", seq, a, want.op, want.value)
			}
		}
		if f := in.waitFlush(0xF1); f.Failed != 0 {
			t.Errorf("flush inside the container: %+v", f)
		}
		if _, ok := in.acks[seqs[1]]; ok {
			t.Errorf("a request without FlagAck was acked")
		}
		if _, ok := in.acks[seqs[3]]; ok {
			t.Errorf("the FLUSH was acked")
		}
		// The flush came after everything before it in the container.
		pos := func(s string) int { return slices.Index(in.order, s) }
		if f := pos("flush:241"); f < pos("ack:1") || f < pos("ack:3") {
			t.Errorf("flush answered before earlier requests: %v", in.order)
		}
		_, f := in.flush(9)
		if f.Failed != 0 {
			t.Fatalf("flush %+v", f)
		}
		for _, c := range []struct {
			off  uint64
			want []byte
		}{{0, small}, {8, big1}, {4096, fencedData}, {5000, big2}, {60000, pattern(8, 1)}, {60008, pattern(8, 6)}} {
			if !bytes.Equal(s.mem(s.base+c.off, len(c.want)), c.want) {
				t.Errorf("%d bytes at offset %d not in target memory", len(c.want), c.off)
			}
		}
		st := e.w.Stats()
		if st.Requests[rdmo.OpBatch] != 1 || st.Requests[opPut] != 6 || st.Requests[opNull] != 1 || st.Requests[rdmo.OpFlush] != 2 {
			t.Errorf("requests by op %v", st.Requests)
		}
		if len(st.Failures) != 0 || st.InFlight[s.rq] != 0 {
			t.Errorf("failures %v, in flight %d", st.Failures, st.InFlight[s.rq])
		}
	})
}

// A FENCE on an inner request waits for every earlier request, also the
// ones in the same container.
func TestBatchFenceInside(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		slow := newSlow(t)
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(slow)})
		s := e.newSetup(1, 4096, 0, 4096)
		in := s.in
		marker := pattern(16, 7)
		seqs := in.sendBatch(
			entry{userReq(1, opSlow, rdmo.FlagAck, s.region, s.base+64), marker},
			entry{userReq(1, opPut, rdmo.FlagAck|rdmo.FlagFence, s.region, s.base+128), pattern(8, 1)},
			entry{userReq(1, opPut, rdmo.FlagAck, s.region, s.base+136), pattern(8, 2)},
		)
		slow.waitStarted(in)
		in.progressFor(100 * time.Millisecond)
		if len(in.acks) != 0 {
			t.Fatalf("answers before the slow request completed: %v", in.order)
		}
		slow.release()
		for _, seq := range seqs {
			if a := in.ack(seq); a.Status != rdmo.StatusOK {
				t.Errorf("seq %d: %+v", seq, a)
			}
		}
		if in.order[0] != "ack:0" || in.order[1] != "ack:1" {
			t.Errorf("answers in order %v: the fenced request did not wait", in.order)
		}
	})
}

// The in-flight limit applies to each inner request.
func TestBatchInFlightLimit(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		slow := newSlow(t)
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(slow), MaxInFlightPerRQ: 2})
		s := e.newSetup(1, 4096, 0, 4096)
		in := s.in
		seqs := in.sendBatch(
			entry{userReq(1, opSlow, rdmo.FlagAck, s.region, s.base), pattern(8, 1)},
			entry{userReq(1, opSlow, rdmo.FlagAck, s.region, s.base+8), pattern(8, 2)},
			entry{userReq(1, opPut, rdmo.FlagAck, s.region, s.base+16), pattern(8, 3)},
		)
		if a := in.ack(seqs[2]); a.Status != rdmo.StatusTooManyInFlight {
			t.Fatalf("third request: %+v, want TooManyInFlight", a)
		}
		slow.release()
		in.ack(seqs[0])
		in.ack(seqs[1])
		_, f := in.flush(3)
		if f.Failed != 1 || f.FirstSeq != seqs[2] || f.FirstStatus != rdmo.StatusTooManyInFlight || f.FirstOp != opPut {
			t.Errorf("flush %+v", f)
		}
	})
}

// Payloads that point into a container's data stay valid until their
// requests completed, however long that takes and whatever arrives
// meanwhile.
func TestBatchPayloadsOutliveTheContainer(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		slow := newSlow(t)
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(slow)})
		s := e.newSetup(1, 256<<10, 0, 256<<10)
		in := s.in
		var heldSeqs []uint64
		// The slow request's big payload is used only once the gate
		// opens; the puts after it (with big and small payloads, in more
		// containers) wait behind it in the same queue.
		for c := 0; c < 8; c++ {
			var ents []entry
			for k := 0; k < 4; k++ {
				i := c*4 + k
				op := opPut
				if i == 0 {
					op = opSlow
				}
				n := 1100 + 97*i
				if k == 3 {
					n = 40
				}
				ents = append(ents, entry{userReq(1, op, rdmo.FlagAck, s.region, s.base+uint64(i)*4096), pattern(n, byte(i))})
			}
			heldSeqs = append(heldSeqs, in.sendBatch(ents...)...)
			if c == 0 {
				slow.waitStarted(in)
			}
		}
		in.progressUntil("every container to arrive", func() bool { return e.w.Stats().Requests[rdmo.OpBatch] == 8 })
		// Meanwhile plain traffic with big payloads goes through UCX's
		// receive buffers.
		for i := 0; i < 16; i++ {
			in.send(userReq(1, opNull, 0), pattern(3000, byte(100+i)), ucp.SendEager)
		}
		in.progressFor(50 * time.Millisecond)
		slow.release()
		for i, seq := range heldSeqs {
			if a := in.ack(seq); a.Status != rdmo.StatusOK {
				t.Fatalf("request %d: %+v", i, a)
			}
		}
		_, f := in.flush(1)
		if f.Failed != 0 {
			t.Fatalf("flush %+v", f)
		}
		for i := range heldSeqs {
			n := 1100 + 97*i
			if i%4 == 3 {
				n = 40
			}
			if !bytes.Equal(s.mem(s.base+uint64(i)*4096, n), pattern(n, byte(i))) {
				t.Errorf("request %d: payload corrupted in target memory", i)
			}
		}
		if st := e.w.Stats(); st.InFlight[s.rq] != 0 {
			t.Errorf("%d requests still in flight", st.InFlight[s.rq])
		}
	})
}

// Malformed containers: the rule of docs/PROTOCOL.md section 11.4. A
// container that cannot be unpacked is one failed request (one sequence
// number); broken framing fails every inner request and runs none; a
// malformed inner request fails alone. Nothing is written for what failed,
// and the connection keeps working.
func TestBatchMalformed(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers()})
		s := e.newSetup(1, 8192, 0, 4096)
		in := s.in
		put := func(flags uint32, off uint64, seed byte) entry {
			return entry{userReq(1, opPut, flags, s.region, s.base+off), pattern(8, seed)}
		}
		hdr := func(client uint64, flags uint32, count uint64) []byte {
			return wire.AppendBatchRequest(nil, wire.Header{ClientID: client, Flags: flags}, wire.BatchHeader{Count: count})
		}
		one := batchData(t, put(rdmo.FlagAck, 0, 1))

		// Whole-container failures: one sequence number each.
		shortHdr := in.sendContainer(hdr(1, rdmo.FlagAck, 1)[:16], one, ucp.SendEager, 1)[0]
		fenced := in.sendContainer(hdr(1, rdmo.FlagFence|rdmo.FlagAck, 1), one, ucp.SendEager, 1)[0]
		foreign := in.sendContainer(hdr(2, 0, 1), one, ucp.SendEager, 1)[0]
		huge := in.sendContainer(hdr(1, 0, 1000), one, ucp.SendEager, 1)[0]
		zero := in.sendContainer(hdr(1, 0, 0), one, ucp.SendEager, 1)[0]
		rndv := in.sendContainer(hdr(1, 0, 1), one, ucp.SendRendezvous, 1)[0]
		// Broken framing: three inner requests that all fail, none runs.
		broken := append(batchData(t, put(rdmo.FlagAck, 16, 2), put(rdmo.FlagAck, 24, 3)), 1, 2, 3)
		brokenSeqs := in.sendContainer(hdr(1, 0, 3), broken, ucp.SendEager, 3)
		// Malformed inner requests among good ones.
		var data []byte
		add := func(b []byte) { data = append(data, b...) }
		good1 := put(rdmo.FlagAck, 100, 4)
		add(rawEntry(good1.hdr, 0, good1.payload))
		add(rawEntry(hdr(1, 0, 0), 0, nil))                                                                                  // nested container
		add(rawEntry(put(rdmo.FlagAck, 108, 5).hdr, 1, pattern(8, 5)))                                                       // entry flags
		add(rawEntry(userReq(2, opPut, rdmo.FlagAck, s.region, s.base+116), 0, pattern(8, 6)))                               // other client
		add(rawEntry(userReq(1, 40, rdmo.FlagAck), 0, nil))                                                                  // unknown op
		add(rawEntry(userReq(1, opPut, rdmo.FlagAck, s.region, s.base+5000), 0, pattern(8, 7)))                              // out of bounds
		add(rawEntry([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 0, nil))                                                                // short header
		add(rawEntry(wire.AppendFlushRequest(nil, wire.Header{ClientID: 1}, rdmo.FlushHeader{FlushID: 0x77}), 0, []byte{1})) // flush with payload
		good2 := put(rdmo.FlagAck, 124, 8)
		add(rawEntry(good2.hdr, 0, good2.payload))
		inner := in.sendContainer(hdr(1, 0, 9), data, ucp.SendEager, 9)
		// The connection still works, and its numbering agrees.
		after := in.send(userReq(1, opPut, rdmo.FlagAck, s.region, s.base+200), pattern(8, 9), 0)

		wantAcks := map[uint64]struct {
			op uint32
			st rdmo.Status
		}{
			shortHdr: {rdmo.OpBatch, rdmo.StatusShortHeader},
			fenced:   {rdmo.OpBatch, rdmo.StatusUnknownFlags},
			inner[0]: {opPut, rdmo.StatusOK},
			inner[2]: {opPut, rdmo.StatusUnknownFlags},
			inner[3]: {opPut, rdmo.StatusClientMismatch},
			inner[4]: {40, rdmo.StatusUnknownOp},
			inner[5]: {opPut, rdmo.StatusOutOfBounds},
			inner[8]: {opPut, rdmo.StatusOK},
			after:    {opPut, rdmo.StatusOK},
		}
		for seq, w := range wantAcks {
			if a := in.ack(seq); a.Op != w.op || a.Status != w.st {
				t.Errorf("seq %d: ack op %d %s, want op %d %s", seq, a.Op, a.Status.Name(), w.op, w.st.Name())
			}
		}
		f77 := in.waitFlush(0x77)
		_, fin := in.flush(5)
		if total := f77.Failed + fin.Failed; total != 16 {
			t.Errorf("%d failures reported (%+v, %+v), want 16", total, f77, fin)
		}
		if f77.FirstSeq != shortHdr || f77.FirstOp != rdmo.OpBatch || f77.FirstStatus != rdmo.StatusShortHeader {
			t.Errorf("first failure %+v, want the short container header, seq %d", f77, shortHdr)
		}
		for seq := range in.acks {
			if _, ok := wantAcks[seq]; !ok {
				t.Errorf("unexpected ack of seq %d (%+v)", seq, in.acks[seq])
			}
		}
		_ = foreign
		_ = huge
		_ = zero
		_ = rndv
		_ = brokenSeqs
		// Nothing of the failed containers or entries was written.
		if !bytes.Equal(s.mem(s.base, 32), bytes.Repeat([]byte{guard}, 32)) {
			t.Errorf("a failed container wrote: % x", s.mem(s.base, 32))
		}
		if !bytes.Equal(s.mem(s.base+108, 16), bytes.Repeat([]byte{guard}, 16)) {
			t.Errorf("a failed entry wrote")
		}
		for _, c := range []struct {
			off  uint64
			seed byte
		}{{100, 4}, {124, 8}, {200, 9}} {
			if !bytes.Equal(s.mem(s.base+c.off, 8), pattern(8, c.seed)) {
				t.Errorf("good request at offset %d did not run", c.off)
			}
		}
		st := e.w.Stats()
		if st.Failures[rdmo.StatusPayloadMismatch] != 1+1+3+1 || st.Failures[rdmo.StatusRendezvousRefused] != 1 ||
			st.Failures[rdmo.StatusClientMismatch] != 2 || st.Failures[rdmo.StatusUnknownOp] != 2 {
			t.Errorf("failures %v", st.Failures)
		}
		if st.Requests[rdmo.OpBatch] != 8 {
			t.Errorf("%d containers counted, want 8", st.Requests[rdmo.OpBatch])
		}
	})
}

package dpu_test

import (
	"bytes"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

func TestEagerPayloadLimitConfig(t *testing.T) {
	if _, err := dpu.New(dpu.Config{MaxEagerPayload: -1}); err == nil {
		t.Error("New accepted a negative MaxEagerPayload")
	}
	if dpu.DefaultMaxEagerPayload < wire.MaxIOVLen+wire.IOVDescLen {
		t.Errorf("DefaultMaxEagerPayload %d cannot hold a scatter of one full chunk", dpu.DefaultMaxEagerPayload)
	}
}

// TestEagerPayloadLimit: an eager payload over MaxEagerPayload, of a plain
// request or of a BATCH container as a whole, fails at once with
// LengthOverflow: acked if it asked, reported at the next flush, logged,
// nothing written, nothing kept in flight; payloads at the limit, and
// larger ones by rendezvous, still run, and the queue keeps serving.
func TestEagerPayloadLimit(t *testing.T) {
	const limit = 4096
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		core, logs := observer.New(zapcore.WarnLevel)
		log := zaptest.NewLogger(t).WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, core) }))
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(), MaxEagerPayload: limit, Logger: log})
		s := e.newSetup(1, 64<<10, 0, 64<<10)
		in := s.in
		untouched := func(what string, addr uint64, n int) {
			t.Helper()
			if !bytes.Equal(s.mem(addr, n), bytes.Repeat([]byte{guard}, n)) {
				t.Errorf("%s wrote target memory", what)
			}
		}

		atLimit := in.send(userReq(1, opPut, rdmo.FlagAck, s.region, s.base), pattern(limit, 1), ucp.SendEager)
		over := in.send(userReq(1, opPut, rdmo.FlagAck, s.region, s.base+8<<10), pattern(limit+1, 2), ucp.SendEager)
		// A flush carrying an oversized payload is answered (it fails).
		in.send(wire.AppendFlushRequest(nil, wire.Header{ClientID: 1, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: 0xBAD}),
			pattern(limit+8, 3), ucp.SendEager)
		f := in.waitFlush(0xBAD)
		if a := in.ack(atLimit); a.Status != rdmo.StatusOK {
			t.Errorf("payload of exactly the limit: %+v", a)
		}
		if a := in.ack(over); a.Status != rdmo.StatusLengthOverflow || a.Op != opPut {
			t.Errorf("payload over the limit: %+v, want LengthOverflow", a)
		}
		if f.Failed != 2 || f.FirstSeq != over || f.FirstStatus != rdmo.StatusLengthOverflow || f.FirstOp != opPut {
			t.Errorf("oversized flush answered %+v, want 2 failures, the first seq %d LengthOverflow", f, over)
		}

		// A container over the limit as a whole, though each entry would
		// fit: one failed request (op 3, no ack), none of its entries runs.
		big := in.sendContainer(wire.AppendBatchRequest(nil, wire.Header{ClientID: 1}, wire.BatchHeader{Count: 2}),
			batchData(t,
				entry{userReq(1, opPut, rdmo.FlagAck, s.region, s.base+16<<10), pattern(limit/2, 4)},
				entry{userReq(1, opPut, rdmo.FlagAck, s.region, s.base+24<<10), pattern(limit/2, 5)}),
			ucp.SendEager, 1)[0]
		// By rendezvous the eager limit does not apply.
		rndv := in.send(userReq(1, opPut, rdmo.FlagAck, s.region, s.base+32<<10), pattern(2*limit, 6), ucp.SendRendezvous)
		// Nor to a good container and a good request after the refusals.
		small := in.sendBatch(entry{userReq(1, opPut, rdmo.FlagAck, s.region, s.base+48<<10), pattern(64, 7)})[0]
		good := in.send(userReq(1, opPut, rdmo.FlagAck, s.region, s.base+56<<10), pattern(limit, 8), ucp.SendEager)
		_, fl := in.flush(2)
		if fl.Failed != 1 || fl.FirstSeq != big || fl.FirstStatus != rdmo.StatusLengthOverflow || fl.FirstOp != rdmo.OpBatch {
			t.Errorf("flush after the oversized container: %+v, want 1 failure, seq %d LengthOverflow op 3", fl, big)
		}
		for _, seq := range []uint64{rndv, small, good} {
			if a := in.ack(seq); a.Status != rdmo.StatusOK {
				t.Errorf("seq %d after the refusals: %+v", seq, a)
			}
		}
		if len(in.acks) != 5 {
			t.Errorf("acks %v: want one each for seqs %d, %d, %d, %d, %d (none for the container's entries)",
				in.acks, atLimit, over, rndv, small, good)
		}
		if !bytes.Equal(s.mem(s.base, limit), pattern(limit, 1)) || !bytes.Equal(s.mem(s.base+32<<10, 2*limit), pattern(2*limit, 6)) ||
			!bytes.Equal(s.mem(s.base+48<<10, 64), pattern(64, 7)) || !bytes.Equal(s.mem(s.base+56<<10, limit), pattern(limit, 8)) {
			t.Error("accepted requests did not run")
		}
		untouched("the oversized request", s.base+8<<10, limit+1)
		untouched("the oversized container's first entry", s.base+16<<10, limit/2)
		untouched("the oversized container's second entry", s.base+24<<10, limit/2)

		st := e.w.Stats()
		if st.Failures[rdmo.StatusLengthOverflow] != 3 || st.InFlight[s.rq] != 0 {
			t.Errorf("stats: failures %v, in flight %d; want 3 LengthOverflow, none in flight", st.Failures, st.InFlight[s.rq])
		}
		logged := 0
		for _, l := range logs.FilterMessage("rdmo request failed").All() {
			if l.ContextMap()["status"] == "LengthOverflow" {
				logged++
			}
		}
		if logged != 3 {
			t.Errorf("%d LengthOverflow failures logged, want 3", logged)
		}
	})
}

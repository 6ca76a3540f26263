package dpu_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"reflect"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

func allHandlers(extra ...rdmo.Handler) []rdmo.Handler {
	return append([]rdmo.Handler{putHandler{}, syncHandler{}, fetchHandler{}, panicHandler{}, nullHandler{}}, extra...)
}

func wantCmdErr(t *testing.T, n dpu.Notification, err error, kind error, st rdmo.Status) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("error %v, want %v", err, kind)
	}
	if !errors.Is(err, st.Err()) {
		t.Errorf("error %v does not match status %s", err, st.Name())
	}
	if n.Status != st || n.Detail == "" {
		t.Errorf("notification %+v, want status %s with a detail", n, st.Name())
	}
	if n.Err() == nil {
		t.Errorf("notification.Err() is nil for a failure")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]dpu.Config{
		"collision": {Handlers: []rdmo.Handler{putHandler{}, putHandler{}}},
		"reserved":  {Handlers: []rdmo.Handler{badOps{ops: []uint32{5}}}},
		"no ops":    {Handlers: []rdmo.Handler{badOps{}}},
		"negative":  {MaxClients: -1},
	} {
		if _, err := dpu.New(cfg); err == nil {
			t.Errorf("%s: New accepted the config", name)
		}
	}
}

type badOps struct {
	nullHandler
	ops []uint32
}

func (b badOps) Info() rdmo.HandlerInfo { return rdmo.HandlerInfo{Name: "bad", Ops: b.ops} }

func TestCommands(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(), MaxClients: 2, MaxRQsPerClient: 1, MaxRegionsPerClient: 2})
		tgt := e.newTarget(8192)
		tgt2 := e.newTarget(8192)

		// CLIENT_INIT answers with the worker's address; a duplicate
		// answers with an error (reference defect 4: it never answered).
		n := e.do(dpu.ClientInit{ID: 7, Addr: tgt.addr})
		if !bytes.Equal(n.Addr, e.w.Address()) || n.Type != dpu.CmdClientInit || n.Client != 7 {
			t.Fatalf("CLIENT_INIT answered %+v", n)
		}
		n, err := e.try(&dpu.ClientInit{ID: 7, Addr: tgt.addr})
		wantCmdErr(t, n, err, dpu.ErrClientExists, rdmo.StatusClientMismatch)
		n, err = e.try(dpu.ClientInit{ID: 8})
		wantCmdErr(t, n, err, dpu.ErrInvalidCommand, rdmo.StatusPayloadMismatch)
		e.do(dpu.ClientInit{ID: 8, Addr: tgt2.addr})
		n, err = e.try(dpu.ClientInit{ID: 9, Addr: tgt2.addr})
		wantCmdErr(t, n, err, dpu.ErrTooManyClients, rdmo.StatusTooManyInFlight)

		// RQ_CREATE.
		in := e.newInitiator(7)
		in2 := e.newInitiator(7)
		n, err = e.try(dpu.RQCreate{Client: 99, Addr: in.addr})
		wantCmdErr(t, n, err, dpu.ErrUnknownClient, rdmo.StatusClientMismatch)
		rq := e.do(dpu.RQCreate{Client: 7, Addr: in.addr}).RQ
		if rq == 0 {
			t.Fatalf("rq id 0")
		}
		n, err = e.try(dpu.RQCreate{Client: 7, Addr: in2.addr})
		wantCmdErr(t, n, err, dpu.ErrTooManyRQs, rdmo.StatusTooManyInFlight)
		n, err = e.try(dpu.RQCreate{Client: 8, Addr: in.addr})
		wantCmdErr(t, n, err, dpu.ErrRQExists, rdmo.StatusClientMismatch)
		rq8 := e.do(dpu.RQCreate{Client: 8, Addr: in2.addr}).RQ
		if rq8 <= rq {
			t.Errorf("rq ids %d then %d: not increasing", rq, rq8)
		}

		// MR_REG.
		rk := tgt.packedRkey(t)
		base := tgt.mem.Address()
		n, err = e.try(dpu.MRReg{Client: 99, VA: base, Len: 64, PackedRkey: rk})
		wantCmdErr(t, n, err, dpu.ErrUnknownClient, rdmo.StatusClientMismatch)
		n, err = e.try(dpu.MRReg{Client: 7, VA: base, Len: 0, PackedRkey: rk})
		wantCmdErr(t, n, err, dpu.ErrInvalidCommand, rdmo.StatusPayloadMismatch)
		n, err = e.try(dpu.MRReg{Client: 7, VA: math.MaxUint64 - 10, Len: 64, PackedRkey: rk})
		wantCmdErr(t, n, err, dpu.ErrInvalidCommand, rdmo.StatusOutOfBounds)
		n, err = e.try(dpu.MRReg{Client: 7, VA: base, Len: 64})
		wantCmdErr(t, n, err, dpu.ErrInvalidCommand, rdmo.StatusPayloadMismatch)
		r1 := e.do(dpu.MRReg{Client: 7, VA: base, Len: 64, PackedRkey: rk}).Region
		r2 := e.do(dpu.MRReg{Client: 7, VA: base + 64, Len: 64, PackedRkey: rk, PackedMemh: []byte("memh")}).Region
		if r1 == 0 || r2 <= r1 {
			t.Errorf("region ids %d, %d: want increasing from 1", r1, r2)
		}
		n, err = e.try(dpu.MRReg{Client: 7, VA: base, Len: 64, PackedRkey: rk})
		wantCmdErr(t, n, err, dpu.ErrTooManyRegions, rdmo.StatusTooManyInFlight)

		// MR_DEREG.
		n, err = e.try(dpu.MRDereg{Client: 7, Region: 999})
		wantCmdErr(t, n, err, dpu.ErrUnknownRegion, rdmo.StatusUnknownRegion)
		n, err = e.try(dpu.MRDereg{Client: 8, Region: r1})
		wantCmdErr(t, n, err, dpu.ErrRegionNotOwned, rdmo.StatusRegionNotOwned)
		n, err = e.try(dpu.MRDereg{Client: 99, Region: r1})
		wantCmdErr(t, n, err, dpu.ErrUnknownClient, rdmo.StatusClientMismatch)
		if got := e.do(dpu.MRDereg{Client: 7, Region: r1}).Region; got != r1 {
			t.Errorf("MR_DEREG answered region %d, want %d", got, r1)
		}
		n, err = e.try(dpu.MRDereg{Client: 7, Region: r1})
		wantCmdErr(t, n, err, dpu.ErrUnknownRegion, rdmo.StatusUnknownRegion)
		// Ids are never reused.
		r3 := e.do(dpu.MRReg{Client: 7, VA: base, Len: 64, PackedRkey: rk}).Region
		if r3 <= r2 {
			t.Errorf("region id %d after %d: reused", r3, r2)
		}

		// RQ_DESTROY.
		n, err = e.try(dpu.RQDestroy{Client: 7, RQ: 999})
		wantCmdErr(t, n, err, dpu.ErrUnknownRQ, rdmo.StatusInternal)
		n, err = e.try(dpu.RQDestroy{Client: 8, RQ: rq})
		wantCmdErr(t, n, err, dpu.ErrUnknownRQ, rdmo.StatusClientMismatch)
		if got := e.do(dpu.RQDestroy{Client: 7, RQ: rq}, in).RQ; got != rq {
			t.Errorf("RQ_DESTROY answered rq %d, want %d", got, rq)
		}
		n, err = e.try(dpu.RQDestroy{Client: 7, RQ: rq})
		wantCmdErr(t, n, err, dpu.ErrUnknownRQ, rdmo.StatusInternal)
		// The address is free again.
		e.do(dpu.RQCreate{Client: 7, Addr: in.addr})

		st := e.w.Stats()
		if st.Clients != 2 || st.RQs != 2 || st.Regions != 2 {
			t.Errorf("stats: %d clients, %d rqs, %d regions; want 2, 2, 2", st.Clients, st.RQs, st.Regions)
		}

		// RemoveClient frees the id.
		if err := e.w.RemoveClient(8); err != nil {
			t.Fatal(err)
		}
		if err := e.w.RemoveClient(8); !errors.Is(err, dpu.ErrUnknownClient) {
			t.Errorf("second RemoveClient: %v", err)
		}
		e.do(dpu.ClientInit{ID: 8, Addr: tgt2.addr})
	})
}

func TestPutFlushAck(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers()})
		s := e.newSetup(1, 8192, 1024, 4096)
		in := s.in
		data := pattern(100, 1)
		seq := in.send(userReq(1, opPut, rdmo.FlagAck, s.region, s.base+16), data, 0)
		a := in.ack(seq)
		if a.Status != rdmo.StatusOK || a.Op != opPut || a.Value != s.base+16 {
			t.Fatalf("ack %+v", a)
		}
		// Many puts without ack, then a flush: all visible, nothing failed.
		for i := 0; i < 50; i++ {
			in.send(userReq(1, opPut, 0, s.region, s.base+200+uint64(i)*8), pattern(8, byte(i)), 0)
		}
		// A large eager payload (kept zero-copy, not copied).
		big := pattern(1500, 9)
		in.send(userReq(1, opPut, 0, s.region, s.base+600), big, ucp.SendEager)
		_, f := in.flush(0xBEEF)
		if f.Failed != 0 || f.Err() != nil {
			t.Fatalf("flush reported failures: %+v", f)
		}
		if !bytes.Equal(s.mem(s.base+16, 100), data) {
			t.Errorf("acked put not in target memory")
		}
		for i := 0; i < 50; i++ {
			if !bytes.Equal(s.mem(s.base+200+uint64(i)*8, 8), pattern(8, byte(i))) {
				t.Fatalf("put %d not in target memory", i)
			}
		}
		if !bytes.Equal(s.mem(s.base+600, 1500), big) {
			t.Errorf("large eager put not in target memory")
		}
		st := e.w.Stats()
		if st.Requests[opPut] != 52 || st.Requests[rdmo.OpFlush] != 1 || st.FlushResponses != 1 || st.Acks != 1 {
			t.Errorf("stats %+v", st)
		}
		if st.Batches == 0 || st.BatchedRequests != 53 {
			t.Errorf("batches %d carrying %d requests, want 53", st.Batches, st.BatchedRequests)
		}
		switch tr.Name {
		case "shm":
			if st.MemcpyPuts == 0 || st.TargetPuts != 0 {
				t.Errorf("shm: %d memcpy puts, %d UCX puts: want all memcpy", st.MemcpyPuts, st.TargetPuts)
			}
		case "tcp":
			if st.TargetPuts == 0 || st.MemcpyPuts != 0 || st.Readbacks == 0 {
				t.Errorf("tcp: %d UCX puts, %d memcpy puts, %d readbacks", st.TargetPuts, st.MemcpyPuts, st.Readbacks)
			}
		}
		t.Logf("%s: %d batches for %d requests, sizes %v", tr.Name, st.Batches, st.BatchedRequests, st.BatchSizes)
	})
}

// Out-of-bounds and wrap-around puts are rejected, write nothing, do not
// hang the following flush, and are reported in its response.
func TestRejectedRequestsReportedAtFlush(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers()})
		s := e.newSetup(1, 4096, 1024, 2048)
		in := s.in
		before := append([]byte(nil), s.tgt.mem.Bytes()...)
		end := s.base + s.size
		first := in.send(userReq(1, opPut, rdmo.FlagAck, s.region, s.base-1), pattern(8, 1), 0)
		in.send(userReq(1, opPut, 0, s.region, end-4), pattern(8, 2), 0)
		in.send(userReq(1, opPut, 0, s.region, math.MaxUint64-3), pattern(8, 3), 0)
		in.send(userReq(1, opPut, 0, s.region, end), pattern(1, 4), 0)
		in.send(userReq(1, opPut, rdmo.FlagAck, 999, s.base), pattern(8, 5), 0)
		ok := in.send(userReq(1, opPut, rdmo.FlagAck, s.region, s.base+8), pattern(8, 6), 0)
		_, f := in.flush(1)
		if f.Failed != 5 || f.FirstOp != opPut || f.FirstStatus != rdmo.StatusOutOfBounds || f.FirstSeq != first {
			t.Fatalf("flush response %+v: want 5 failed, first put seq %d OutOfBounds", f, first)
		}
		if !errors.Is(f.Err(), rdmo.ErrOutOfBounds) {
			t.Errorf("FlushResponse.Err() = %v", f.Err())
		}
		if a := in.ack(first); a.Status != rdmo.StatusOutOfBounds || a.Value != 0 {
			t.Errorf("ack %+v", a)
		}
		if a := in.ack(first + 4); a.Status != rdmo.StatusUnknownRegion {
			t.Errorf("ack %+v, want UnknownRegion", a)
		}
		if a := in.ack(ok); a.Status != rdmo.StatusOK {
			t.Errorf("ack %+v", a)
		}
		after := s.tgt.mem.Bytes()
		copy(before[1024+8:], pattern(8, 6))
		if !bytes.Equal(before, after) {
			for i := range before {
				if before[i] != after[i] {
					t.Fatalf("byte %d of the target memory changed: %#x -> %#x (guard bytes around the region must stay)", i, before[i], after[i])
				}
			}
		}
		// The counters were reset by the response.
		_, f = in.flush(2)
		if f.Failed != 0 || f.FirstSeq != 0 || f.FirstStatus != 0 {
			t.Errorf("second flush %+v", f)
		}
		if n := e.w.Stats().Failures[rdmo.StatusOutOfBounds]; n != 4 {
			t.Errorf("%d OutOfBounds failures counted, want 4", n)
		}
	})
}

func TestValidation(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		// Reference ops need a handler before their payload is checked.
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(badOps{ops: []uint32{rdmo.OpAppend, rdmo.OpScatter}})})
		s := e.newSetup(1, 4096, 0, 4096)
		in := s.in
		op5 := make([]byte, 16)
		wire.Header{ClientID: 1, Op: 5, Flags: rdmo.FlagAck}.Put(op5)
		short := in.send([]byte{1, 2, 3, 4, 5, 6, 7, 8}, nil, 0)
		mismatch := in.send(userReq(2, opPut, rdmo.FlagAck, s.region, s.base), pattern(8, 1), 0)
		unknown := in.send(userReq(1, 40, rdmo.FlagAck), nil, 0)
		shortFlush := in.send(wire.AppendFlushRequest(nil, wire.Header{ClientID: 1, Flags: rdmo.FlagAck}, rdmo.FlushHeader{})[:16], nil, 0)
		reserved := in.send(op5, nil, 0)
		flags := in.send(userReq(1, opPut, rdmo.FlagAck|1<<5, s.region, s.base), pattern(8, 1), 0)
		emptyAppend := in.send(wire.AppendAppendRequest(nil, wire.Header{ClientID: 1, Flags: rdmo.FlagAck}, rdmo.AppendHeader{}), nil, 0)
		panics := in.send(userReq(1, opPanic, rdmo.FlagAck), nil, 0)
		// A scatter whose payload does not match its count.
		badScatter := in.send(wire.AppendScatterRequest(nil, wire.Header{ClientID: 1, Flags: rdmo.FlagAck}, rdmo.ScatterHeader{Count: 2}), make([]byte, 30), 0)
		in.send(wire.AppendFlushRequest(nil, wire.Header{ClientID: 1}, rdmo.FlushHeader{FlushID: 77}), []byte{1}, 0)
		want := map[uint64]rdmo.Status{
			mismatch:    rdmo.StatusClientMismatch,
			unknown:     rdmo.StatusUnknownOp,
			reserved:    rdmo.StatusUnknownOp,
			flags:       rdmo.StatusUnknownFlags,
			emptyAppend: rdmo.StatusEmptyAppend,
			panics:      rdmo.StatusHandlerFailed,
			badScatter:  rdmo.StatusPayloadMismatch,
		}
		for seq, st := range want {
			if a := in.ack(seq); a.Status != st || a.Value != 0 {
				t.Errorf("seq %d: ack %s, want %s", seq, a.Status.Name(), st.Name())
			}
		}
		// A FLUSH too short for its op is still answered, with a flush
		// response (id 0) that counts its own failure; no ack.
		f := in.waitFlush(0)
		if f.Failed != 4 || f.FirstSeq != short || f.FirstOp != 0 || f.FirstStatus != rdmo.StatusShortHeader {
			t.Errorf("first flush response %+v: want 4 failures, the first the short header seq %d", f, short)
		}
		if _, ok := in.acks[shortFlush]; ok {
			t.Errorf("a FLUSH was acked")
		}
		f = in.waitFlush(77)
		if f.Failed == 0 || f.FirstSeq != reserved {
			t.Errorf("flush with a payload answered %+v", f)
		}
		_, f = in.flush(5)
		total := uint32(0)
		for _, g := range in.flushes {
			total += g.Failed
		}
		if total != 10 {
			t.Errorf("%d failures reported over the flushes %+v, want 10", total, in.flushes)
		}
		if st := e.w.Stats(); st.HandlerPanics != 1 {
			t.Errorf("%d handler panics counted", st.HandlerPanics)
		}
	})
}

// A FENCEd request (every FLUSH) starts only after every earlier request of
// its queue completed; a slow request delays it.
func TestFenceWaitsForEarlierRequests(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		slow := newSlow(t)
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(slow)})
		s := e.newSetup(1, 4096, 0, 4096)
		in := s.in
		marker := pattern(16, 7)
		slowSeq := in.send(userReq(1, opSlow, rdmo.FlagAck, s.region, s.base+64), marker, 0)
		in.send(wire.AppendFlushRequest(nil, wire.Header{ClientID: 1, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: 42}), nil, 0)
		// A later put with FENCE waits too; one without may run.
		fenced := in.send(userReq(1, opPut, rdmo.FlagAck|rdmo.FlagFence, s.region, s.base+128), pattern(8, 1), 0)
		slow.waitStarted(in)
		in.progressUntil("the flush to arrive", func() bool { return e.w.Stats().Requests[rdmo.OpFlush] == 1 })
		in.progressFor(100 * time.Millisecond)
		if len(in.flushes) != 0 || len(in.acks) != 0 {
			t.Fatalf("answers before the slow request completed: %v", in.order)
		}
		slow.release()
		f := in.waitFlush(42)
		if f.Failed != 0 {
			t.Errorf("flush %+v", f)
		}
		in.ack(fenced)
		if !bytes.Equal(s.mem(s.base+64, 16), marker) {
			t.Errorf("the slow request's write is not visible at its flush")
		}
		want := []string{"ack:0", "flush:42", "ack:2"}
		if len(in.order) != 3 || in.order[0] != want[0] || in.order[1] != want[1] || in.order[2] != want[2] {
			t.Errorf("answers in order %v, want %v", in.order, want)
		}
		_ = slowSeq
	})
}

func TestInFlightLimit(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		slow := newSlow(t)
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(slow), MaxInFlightPerRQ: 2})
		s := e.newSetup(1, 4096, 0, 4096)
		in := s.in
		s1 := in.send(userReq(1, opSlow, rdmo.FlagAck, s.region, s.base), pattern(8, 1), 0)
		s2 := in.send(userReq(1, opSlow, rdmo.FlagAck, s.region, s.base+8), pattern(8, 2), 0)
		over := in.send(userReq(1, opPut, rdmo.FlagAck, s.region, s.base+16), pattern(8, 3), 0)
		if a := in.ack(over); a.Status != rdmo.StatusTooManyInFlight {
			t.Fatalf("third request: %+v, want TooManyInFlight", a)
		}
		if got := e.w.Stats().InFlight[s.rq]; got != 2 {
			t.Errorf("in flight %d, want 2", got)
		}
		slow.release()
		// A flush sent now could itself exceed the limit: wait for the
		// slow ones first.
		in.ack(s1)
		in.ack(s2)
		_, f := in.flush(3)
		if f.Failed != 1 || f.FirstSeq != over || f.FirstStatus != rdmo.StatusTooManyInFlight || f.FirstOp != opPut {
			t.Errorf("flush %+v", f)
		}
		if !bytes.Equal(s.mem(s.base, 16), append(pattern(8, 1), pattern(8, 2)...)) {
			t.Errorf("accepted requests did not run")
		}
	})
}

func TestSyncAndRendezvous(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(), MaxRendezvousFetch: 128 << 10})
		s := e.newSetup(1, 512<<10, 0, 512<<10)
		in := s.in
		le.PutUint64(s.mem(s.base+8, 8), 0x1122334455667788)
		le.PutUint64(s.mem(s.base, 8), 0)
		a0 := in.send(userReq(1, opSync, rdmo.FlagAck, s.region, s.base), nil, 0)
		a1 := in.send(userReq(1, opSync, rdmo.FlagAck, s.region, s.base), nil, 0)
		bad := in.send(userReq(1, opSync, rdmo.FlagAck, s.region, s.base+4), nil, 0)
		if a, b := in.ack(a0), in.ack(a1); a.Status != 0 || b.Status != 0 || a.Value+b.Value != 1 {
			t.Errorf("fetch-adds returned %+v and %+v, want old values 0 and 1", a, b)
		}
		if a := in.ack(bad); a.Status != rdmo.StatusOutOfBounds {
			t.Errorf("unaligned atomic: %+v", a)
		}

		// Place: straight into target memory (mapped on shm, bounce on tcp).
		placed := pattern(96<<10, 3)
		p := in.send(userReq(1, opPut, rdmo.FlagAck, s.region, s.base+4096), placed, ucp.SendRendezvous)
		// Fetch within and over the limit.
		fetched := pattern(64<<10, 4)
		f1 := in.send(userReq(1, opFetch, rdmo.FlagAck, s.region, s.base+200<<10), fetched, ucp.SendRendezvous)
		f2 := in.send(userReq(1, opFetch, rdmo.FlagAck, s.region, s.base+300<<10), pattern(200<<10, 5), ucp.SendRendezvous)
		// A rendezvous Place larger than the bounce limit is refused where
		// target memory is not mapped into the worker.
		p2 := in.send(userReq(1, opPut, rdmo.FlagAck, s.region, s.base+300<<10), pattern(150<<10, 6), ucp.SendRendezvous)
		_, fl := in.flush(9)
		if a := in.ack(p); a.Status != 0 {
			t.Errorf("place: %+v", a)
		}
		if a := in.ack(f1); a.Status != 0 {
			t.Errorf("fetch: %+v", a)
		}
		if a := in.ack(f2); a.Status != rdmo.StatusRendezvousRefused {
			t.Errorf("fetch over the limit: %+v", a)
		}
		st := e.w.Stats()
		mapped := st.MemcpyPuts > 0
		if a := in.ack(p2); mapped && a.Status != 0 || !mapped && a.Status != rdmo.StatusRendezvousRefused {
			t.Errorf("large place (mapped=%v): %+v", mapped, a)
		}
		if fl.Failed == 0 {
			t.Errorf("flush %+v does not report the refused fetch", fl)
		}
		if !bytes.Equal(s.mem(s.base+4096, len(placed)), placed) {
			t.Errorf("placed payload not in target memory")
		}
		if !bytes.Equal(s.mem(s.base+200<<10, len(fetched)), fetched) {
			t.Errorf("fetched payload not in target memory")
		}
		if got := le.Uint64(s.mem(s.base, 8)); got != 2 {
			t.Errorf("counter %d after two fetch-adds", got)
		}
		if st.Places < 1 || st.Fetches < 1 || st.Syncs < 3 {
			t.Errorf("stats %+v", st)
		}
	})
}

// MR_DEREG calls RegionRemoved, whose write-back is visible when the
// command answers; later requests naming the region fail.
func TestDeregWritesBack(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		cache := newCache()
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(cache)})
		s := e.newSetup(1, 4096, 0, 4096)
		in := s.in
		other := e.do(dpu.MRReg{Client: 1, VA: s.base + 2048, Len: 1024, PackedRkey: s.tgt.packedRkey(t)}).Region
		a := in.send(userReq(1, opCache, rdmo.FlagAck, s.region, s.base+64, 0xABCD), nil, 0)
		b := in.send(userReq(1, opCache, rdmo.FlagAck, other, s.base+2048, 0x1234), nil, 0)
		in.ack(a)
		in.ack(b)
		if got := le.Uint64(s.mem(s.base+64, 8)); got == 0xABCD {
			t.Fatalf("cached value already written")
		}
		e.do(dpu.MRDereg{Client: 1, Region: s.region}, in)
		if got := le.Uint64(s.mem(s.base+64, 8)); got != 0xABCD {
			t.Errorf("after MR_DEREG the target holds %#x, want the written-back 0xABCD", got)
		}
		cache.mu.Lock()
		removed := append([]uint64(nil), cache.removed...)
		cache.mu.Unlock()
		if len(removed) != 1 || removed[0] != s.region {
			t.Errorf("RegionRemoved calls %v, want [%d]", removed, s.region)
		}
		if got := le.Uint64(s.mem(s.base+2048, 8)); got == 0x1234 {
			t.Errorf("the other region's cached value was written at MR_DEREG")
		}
		gone := in.send(userReq(1, opPut, rdmo.FlagAck, s.region, s.base), pattern(8, 1), 0)
		if a := in.ack(gone); a.Status != rdmo.StatusUnknownRegion && a.Status != rdmo.StatusRegionGone {
			t.Errorf("put to a deregistered region: %+v", a)
		}
		// The other region is still fine, and its value is written at flush.
		_, f := in.flush(1)
		if f.Failed != 1 {
			t.Errorf("flush %+v", f)
		}
		if got := le.Uint64(s.mem(s.base+2048, 8)); got != 0x1234 {
			t.Errorf("flush did not write back the cached value: %#x", got)
		}
	})
}

// A target whose endpoint fails makes its client's requests fail with
// TargetUnreachable; other clients are unaffected. Over shared memory UCX
// 1.13 cannot detect a dead peer, so there the control layer's
// RemoveClient is what the test exercises.
func TestTargetFailure(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		cache := newCache()
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(cache)})
		a := e.newSetup(1, 4096, 0, 4096)
		b := e.newSetup(2, 4096, 0, 4096)
		if _, f := a.in.flush(1); f.Failed != 0 {
			t.Fatalf("flush %+v", f)
		}
		detect := tr.Name == "tcp"
		a.tgt.kill()
		if detect {
			// Keep asking until the failure is noticed.
			deadline := time.Now().Add(waitLimit)
			for {
				seq := a.in.send(userReq(1, opPut, rdmo.FlagAck, a.region, a.base), pattern(8, 1), 0)
				ack := a.in.ack(seq)
				if ack.Status == rdmo.StatusTargetUnreachable {
					break
				}
				if ack.Status != rdmo.StatusOK || time.Now().After(deadline) {
					t.Fatalf("put to a dead target: %+v", ack)
				}
			}
			_, f := a.in.flush(2)
			if f.Failed == 0 || f.FirstStatus != rdmo.StatusTargetUnreachable {
				t.Errorf("flush after target failure: %+v", f)
			}
		}
		// The other client is unaffected.
		seq := b.in.send(userReq(2, opPut, rdmo.FlagAck, b.region, b.base+8), pattern(8, 2), 0)
		if ack := b.in.ack(seq); ack.Status != 0 {
			t.Errorf("other client: %+v", ack)
		}
		if _, f := b.in.flush(3); f.Failed != 0 {
			t.Errorf("other client's flush %+v", f)
		}
		// The control layer removes the dead client: handlers forget it,
		// its queue closes, later requests on it are dropped.
		if err := e.w.RemoveClient(1); err != nil {
			t.Fatal(err)
		}
		cache.mu.Lock()
		gone := append([]uint64(nil), cache.gone...)
		cache.mu.Unlock()
		if len(gone) != 1 || gone[0] != 1 {
			t.Errorf("ClientRemoved calls %v", gone)
		}
		st := e.w.Stats()
		if st.Clients != 1 || st.RQs != 1 || st.Regions != 1 {
			t.Errorf("after removal: %+v", st)
		}
		if _, err := e.try(dpu.MRReg{Client: 1, VA: a.base, Len: 8, PackedRkey: []byte{1}}); !errors.Is(err, dpu.ErrUnknownClient) {
			t.Errorf("command for the removed client: %v", err)
		}
		seq = b.in.send(userReq(2, opPut, rdmo.FlagAck, b.region, b.base+16), pattern(8, 3), 0)
		if ack := b.in.ack(seq); ack.Status != 0 {
			t.Errorf("other client after removal: %+v", ack)
		}
	})
}

// An initiator that goes away frees its request queue (where UCX detects
// it; shared memory in UCX 1.13 cannot, and RQ_DESTROY is the way there).
func TestInitiatorGone(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers()})
		s := e.newSetup(1, 4096, 0, 4096)
		if _, f := s.in.flush(1); f.Failed != 0 {
			t.Fatalf("flush %+v", f)
		}
		s.in.close()
		if tr.Name != "tcp" {
			e.do(dpu.RQDestroy{Client: 1, RQ: s.rq})
		} else {
			deadline := time.Now().Add(waitLimit)
			for e.w.Stats().RQs != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("request queue not freed after its initiator died")
				}
				time.Sleep(5 * time.Millisecond) // polling the worker's gauge, not synchronising
			}
			if _, err := e.try(dpu.RQDestroy{Client: 1, RQ: s.rq}); !errors.Is(err, dpu.ErrUnknownRQ) {
				t.Errorf("RQ_DESTROY of a freed queue: %v", err)
			}
		}
		// A new initiator at a new queue works.
		in := e.newInitiator(1)
		e.do(dpu.RQCreate{Client: 1, Addr: in.addr})
		in.connect(s.waddr)
		if _, f := in.flush(2); f.Failed != 0 {
			t.Errorf("flush on the new queue %+v", f)
		}
	})
}

// RQ_DESTROY lets in-flight requests finish before it answers.
func TestRQDestroyDrains(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		slow := newSlow(t)
		log, logs := observedLogger(t)
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers(slow), Logger: log})
		s := e.newSetup(1, 4096, 0, 4096)
		in := s.in
		seq := in.send(userReq(1, opSlow, rdmo.FlagAck, s.region, s.base), pattern(8, 9), 0)
		slow.waitStarted(in)
		var answered atomic.Bool
		go func() {
			// Release the handler once RQ_DESTROY is waiting for it: the
			// queue is closing (the worker logs it).
			for deadline := time.Now().Add(waitLimit); logs.FilterMessage("request queue closing").Len() == 0; {
				if time.Now().After(deadline) {
					t.Errorf("RQ_DESTROY never started closing the queue")
					break
				}
				time.Sleep(time.Millisecond) // polling the log, not synchronising
			}
			if answered.Load() {
				t.Errorf("RQ_DESTROY answered while a request was in flight")
			}
			slow.release()
		}()
		e.do(dpu.RQDestroy{Client: 1, RQ: s.rq}, in)
		answered.Store(true)
		// The request completed (its put is locally complete) before the
		// answer; over TCP its bytes land when the target's worker, which
		// progresses on its own, takes them: no FLUSH ordered visibility.
		for deadline := time.Now().Add(20 * time.Second); !bytes.Equal(s.mem(s.base, 8), pattern(8, 9)); {
			if time.Now().After(deadline) {
				t.Fatalf("the in-flight request's write never reached target memory")
			}
			runtime.Gosched()
		}
		in.ack(seq)
		if st := e.w.Stats(); st.RQs != 0 {
			t.Errorf("%d request queues after RQ_DESTROY", st.RQs)
		}
	})
}

// Close with clients, queues, regions, held payloads and a running
// handler leaks nothing (CheckLeaks) once the handler returns.
func TestCloseWithEverythingOpen(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		slow := newSlow(t)
		cache := newCache()
		ctx := ucptest.NewContext(t, tr)
		log, logs := observedLogger(t)
		w, err := dpu.New(dpu.Config{Handlers: allHandlers(slow, cache), UCXConfig: tr.Config(), Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		e := &env{t: t, tr: tr, ctx: ctx, w: w}
		a := e.newSetup(1, 8192, 0, 8192)
		b := e.newSetup(2, 8192, 0, 8192)
		b.in.send(userReq(2, opCache, rdmo.FlagAck, b.region, b.base+8, 77), nil, 0)
		b.in.ack(0)
		a.in.send(userReq(1, opSlow, 0, a.region, a.base), pattern(8, 1), 0)
		slow.waitStarted(a.in)
		a.in.send(wire.AppendFlushRequest(nil, wire.Header{ClientID: 1, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: 1}), nil, 0)
		a.in.send(userReq(1, opPut, 0, a.region, a.base+64), pattern(2000, 2), 0) // held zero-copy
		a.in.send(userReq(1, opPut, 0, a.region, a.base+4096), pattern(64<<10, 3), ucp.SendRendezvous)
		a.in.progressUntil("queued requests to arrive", func() bool { return w.Stats().InFlight[a.rq] == 4 })
		closed := make(chan error, 1)
		go func() { closed <- w.Close() }()
		// Close starts while the handler runs.
		a.in.progressUntil("Close to start", func() bool {
			b.in.w.Progress()
			return logs.FilterMessage("dpu worker closing").Len() > 0
		})
		slow.release()
		// The initiators keep progressing: Close flushes the answers to
		// them before closing their queues.
		var closeErr error
		a.in.progressUntil("Close to return", func() bool {
			b.in.w.Progress()
			select {
			case closeErr = <-closed:
				return true
			default:
				return false
			}
		})
		if closeErr != nil {
			t.Fatal(closeErr)
		}
		// Queued requests failed at Close, with their answers.
		f := a.in.waitFlush(1)
		if f.Failed == 0 {
			t.Errorf("flush queued at Close answered %+v", f)
		}
		if got := le.Uint64(b.mem(b.base+8, 8)); got != 77 {
			t.Errorf("Close did not write back cached state: %d", got)
		}
		if _, err := w.Do(t.Context(), dpu.ClientInit{ID: 3, Addr: []byte{1}}); !errors.Is(err, dpu.ErrClosed) {
			t.Errorf("Do after Close: %v", err)
		}
		if err := w.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

// Requests from several clients and queues run concurrently and correctly.
func TestManyClientsAndQueues(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers()})
		var sets []*setup
		for id := uint64(1); id <= 3; id++ {
			sets = append(sets, e.newSetup(id, 64<<10, 0, 64<<10))
		}
		// A second queue for client 1.
		in2 := e.newInitiator(1)
		e.do(dpu.RQCreate{Client: 1, Addr: in2.addr})
		in2.connect(sets[0].waddr)
		const n = 300
		for i := 0; i < n; i++ {
			for k, s := range sets {
				s.in.send(userReq(s.client, opPut, 0, s.region, s.base+uint64(i)*64), pattern(64, byte(i+k)), 0)
			}
			in2.send(userReq(1, opPut, 0, sets[0].region, sets[0].base+uint64(i)*64+32), pattern(32, byte(i+100)), 0)
		}
		for _, s := range sets {
			if _, f := s.in.flush(11); f.Failed != 0 {
				t.Fatalf("client %d: %+v", s.client, f)
			}
		}
		if _, f := in2.flush(12); f.Failed != 0 {
			t.Fatalf("second queue: %+v", f)
		}
		for i := 0; i < n; i++ {
			for k, s := range sets {
				want := pattern(64, byte(i+k))
				if k == 0 {
					copy(want[32:], pattern(32, byte(i+100)))
				}
				if got := s.mem(s.base+uint64(i)*64, 64); !bytes.Equal(got, want) {
					t.Fatalf("client %d slot %d wrong", s.client, i)
				}
			}
		}
		st := e.w.Stats()
		t.Logf("%s: %d requests in %d batches (sizes %v)", tr.Name, st.BatchedRequests, st.Batches, st.BatchSizes)
	})
}

// Commands, notifications and stats cross the msgpack command channel.
func TestMsgpackRoundTrip(t *testing.T) {
	for _, v := range []any{
		&dpu.ClientInit{ID: 1, Addr: []byte{1, 2}},
		&dpu.RQCreate{Client: 1, Addr: []byte{3}},
		&dpu.RQDestroy{Client: 1, RQ: 2},
		&dpu.MRReg{Client: 1, VA: 0x1000, Len: 64, PackedRkey: []byte{4}, PackedMemh: []byte{5}},
		&dpu.MRDereg{Client: 1, Region: 3},
		&dpu.Notification{Type: dpu.CmdMRReg, Status: rdmo.StatusUnknownRegion, Detail: "x", Client: 1, Region: 3},
		&dpu.Stats{Requests: map[uint32]uint64{1: 2}, Failures: map[rdmo.Status]uint64{rdmo.StatusOutOfBounds: 1},
			InFlight: map[uint64]int64{1: 3}, BatchSizes: [dpu.BatchSizeBuckets]uint64{4}},
	} {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		back := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		if err := msgpack.Unmarshal(b, back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(v, back) {
			t.Errorf("%T: %+v became %+v", v, v, back)
		}
	}
	// Field names on the wire are the tags.
	b, _ := msgpack.Marshal(dpu.MRReg{PackedRkey: []byte{1}})
	var m map[string]any
	msgpack.Unmarshal(b, &m)
	for _, k := range []string{"client", "va", "len", "packed_rkey", "packed_memh"} {
		if _, ok := m[k]; !ok {
			t.Errorf("MR_REG has no %q field on the wire: %v", k, m)
		}
	}
}

func TestDoEdgeCases(t *testing.T) {
	ucptest.CheckLeaks(t)
	e := newEnv(t, ucptest.Transports[0], dpu.Config{Handlers: allHandlers()})
	var nilInit *dpu.ClientInit
	if _, err := e.w.Do(t.Context(), nilInit); !errors.Is(err, dpu.ErrInvalidCommand) {
		t.Errorf("nil command pointer: %v", err)
	}
	if _, err := e.w.Do(t.Context(), nil); !errors.Is(err, dpu.ErrInvalidCommand) {
		t.Errorf("nil command: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	tgt := e.newTarget(64)
	if _, err := e.w.Do(ctx, dpu.ClientInit{ID: 1, Addr: tgt.addr}); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: %v", err)
	}
	// The command still ran (or runs): the id is taken.
	deadline := time.Now().Add(waitLimit)
	for {
		_, err := e.w.Do(t.Context(), dpu.ClientInit{ID: 1, Addr: tgt.addr})
		if errors.Is(err, dpu.ErrClientExists) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CLIENT_INIT after a canceled one: %v", err)
		}
	}
}

package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// rawInitiator sends hand-made requests, so tests can send what a correct
// initiator never would. It runs on the test goroutine.
type rawInitiator struct {
	t     *testing.T
	w     *ucp.Worker
	ep    *ucp.Endpoint
	rq    uint64
	resps [][]byte
}

func (tg *target) raw(t *testing.T, tr ucptest.Transport) *rawInitiator {
	ctx := ucptest.NewContext(t, tr)
	w, err := ctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := &rawInitiator{t: t, w: w}
	t.Cleanup(func() {
		r.ep.CloseForce()
		w.Close()
	})
	if r.ep, err = w.Connect(tg.wAddr, ucp.EndpointOptions{Name: "raw"}); err != nil {
		t.Fatal(err)
	}
	w.SetHandler(0, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) {
		for _, m := range msgs {
			r.resps = append(r.resps, append([]byte(nil), m.Header...))
		}
	}))
	addr, _ := w.Address()
	r.rq = tg.do(dpu.RQCreate{Client: tg.client, Addr: addr}).RQ
	return r
}

func (r *rawInitiator) send(header, payload []byte) {
	r.t.Helper()
	if err := r.ep.SendAM(0, header, payload, ucp.SendReply, nil, 0); err != nil {
		r.t.Fatal(err)
	}
}

// flush sends a FLUSH and returns its response.
func (r *rawInitiator) flush(id uint64) wire.FlushResponse {
	r.t.Helper()
	r.send(wire.AppendFlushRequest(nil, wire.Header{ClientID: 1, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: id}), nil)
	for {
		b := r.next()
		if id, _ := wire.ParseResponseID(b); id != wire.RspFlush {
			continue
		}
		rsp, err := wire.ParseFlushResponse(b)
		if err != nil {
			r.t.Fatal(err)
		}
		if rsp.FlushID != id {
			r.t.Fatalf("flush response for %#x, want %#x", rsp.FlushID, id)
		}
		return rsp
	}
}

// next waits for the next response. A FENCE that never completes fails
// here instead of hanging the test.
func (r *rawInitiator) next() []byte {
	r.t.Helper()
	if err := r.w.ProgressUntil(func() bool { return len(r.resps) > 0 }, 20*time.Second); err != nil {
		r.t.Fatalf("no response: %v", err)
	}
	b := r.resps[0]
	r.resps = r.resps[1:]
	return b
}

// guarded registers the middle of three pages and fills the outer ones
// with a pattern, so writes outside the region show.
func (tg *target) guarded() (region, func() error) {
	mem, err := tg.ctx.Allocate(3 * 4096)
	if err != nil {
		tg.t.Fatal(err)
	}
	tg.mems = append(tg.mems, mem)
	b := mem.Bytes()
	for i := range b {
		b[i] = 0xA5
	}
	for i := 4096; i < 8192; i++ {
		b[i] = 0
	}
	packed, _ := mem.PackRkey()
	n := tg.do(dpu.MRReg{Client: tg.client, VA: mem.Address() + 4096, Len: 4096, PackedRkey: packed})
	check := func() error {
		guard := bytes.Repeat([]byte{0xA5}, 4096)
		if !bytes.Equal(b[:4096], guard) || !bytes.Equal(b[8192:], guard) {
			return errors.New("bytes outside the registered region changed")
		}
		return nil
	}
	return region{id: n.Region, mem: mem}, check
}

func appendReq(client, ptr, ptrRkey, dataRkey uint64, flags uint32) []byte {
	return wire.AppendAppendRequest(nil, wire.Header{ClientID: client, Flags: flags}, rdmo.AppendHeader{PtrAddr: ptr, PtrRkey: rdmo.RegionID(ptrRkey), DataRkey: rdmo.RegionID(dataRkey)})
}

// Reference defect 1 (docs/SECURITY.md section 6): unknown region ids and out-of-bounds requests were
// dropped silently and hung every later FENCE. Here each one is reported
// (ack, flush response), writes nothing, and the FENCE completes.
func TestDefect1RejectedRequestsAreReportedAndFenceCompletes(t *testing.T) {
	forEachMode(t, func(t *testing.T, tr ucptest.Transport, s appendop.Strategy, mode workerMode) {
		tg := newTargetMode(t, tr, s, mode)
		r, guardsOK := tg.guarded()
		ptr := r.base() + 4096
		copy(r.bytes()[4096:], le64(ptr+8))
		raw := tg.raw(t, tr)
		raw.send(appendReq(1, ptr, 9999, 9999, 0), []byte("unknown region"))      // seq 0
		raw.send(appendReq(1, ptr, r.id, r.id, rdmo.FlagAck), []byte("good one")) // seq 1
		var iov []byte
		iov, _ = wire.AppendIOV(iov, wire.IOV{Addr: ptr + 4090, Rkey: rdmo.RegionID(r.id), Len: 8}, []byte("overflow"))            // crosses the end
		raw.send(wire.AppendScatterRequest(nil, wire.Header{ClientID: 1, Flags: rdmo.FlagAck}, rdmo.ScatterHeader{Count: 1}), iov) // seq 2
		acks := map[uint64]wire.AckResponse{}
		for len(acks) < 2 {
			b := raw.next()
			a, err := wire.ParseAck(b)
			if err != nil {
				t.Fatal(err)
			}
			acks[a.Seq] = a
		}
		if acks[1].Status != rdmo.StatusOK || acks[1].Value != ptr+8 {
			t.Errorf("ack of the good append: %+v (want OK at %#x)", acks[1], ptr+8)
		}
		if acks[2].Status != rdmo.StatusOutOfBounds {
			t.Errorf("ack of the overflowing scatter: %+v", acks[2])
		}
		rsp := raw.flush(0xBEEF)
		if rsp.Failed != 2 || rsp.FirstStatus != rdmo.StatusUnknownRegion || rsp.FirstOp != rdmo.OpAppend || rsp.FirstSeq != 0 {
			t.Fatalf("flush response %+v, want 2 failures, first: append seq 0 unknown region", rsp)
		}
		if rsp := raw.flush(0xBEF0); rsp.Failed != 0 {
			t.Fatalf("failures counted twice: %+v", rsp)
		}
		if got := string(r.bytes()[4096+8 : 4096+16]); got != "good one" {
			t.Fatalf("good append: %q", got)
		}
		if err := guardsOK(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.bytes()[8192-6:8192], make([]byte, 6)) {
			t.Fatal("a rejected scatter wrote its first bytes")
		}
	})
}

// Reference defect 2 (docs/SECURITY.md section 6): the client id was never checked against the connection.
func TestDefect2ClientIDMustMatchTheConnection(t *testing.T) {
	tr := ucptest.Transports[0]
	ucptest.CheckLeaks(t)
	tg := newTarget(t, tr, appendop.Owned)
	q := tg.queue(4096)
	raw := tg.raw(t, tr)
	raw.send(appendReq(77, q.base(), q.id, q.id, 0), []byte("intruder"))
	rsp := raw.flush(1)
	if rsp.Failed != 1 || rsp.FirstStatus != rdmo.StatusClientMismatch {
		t.Fatalf("flush response %+v, want one ClientMismatch", rsp)
	}
	if tail(q) != q.base()+8 || !bytes.Equal(q.bytes()[8:16], make([]byte, 8)) {
		t.Fatal("a request with another client's id was executed")
	}
}

// Reference defect 3 (docs/SECURITY.md section 6): MR_DEREG threw cached tails away.
func TestDefect3DeregWritesBackCachedTails(t *testing.T) {
	tr := ucptest.Transports[0]
	ucptest.CheckLeaks(t)
	tg := newTarget(t, tr, appendop.Owned)
	q := tg.queue(4096)
	raw := tg.raw(t, tr)
	raw.send(appendReq(1, q.base(), q.id, q.id, rdmo.FlagAck), []byte("0123456789"))
	if a, _ := wire.ParseAck(raw.next()); a.Status != rdmo.StatusOK {
		t.Fatalf("append: %+v", a)
	}
	// No flush: the owned tail is only in the worker's cache.
	tg.do(dpu.MRDereg{Client: tg.client, Region: q.id})
	if got, want := tail(q), q.base()+8+10; got != want {
		t.Fatalf("tail after MR_DEREG %#x, want %#x (written back)", got, want)
	}
	raw.send(appendReq(1, q.base(), q.id, q.id, 0), []byte("late"))
	if rsp := raw.flush(2); rsp.Failed != 1 || (rsp.FirstStatus != rdmo.StatusRegionGone && rsp.FirstStatus != rdmo.StatusUnknownRegion) {
		t.Fatalf("append to a deregistered region: %+v", rsp)
	}
}

// Reference defect 4 (docs/SECURITY.md section 6): a duplicate CLIENT_INIT never answered.
func TestDefect4DuplicateClientInitAnswers(t *testing.T) {
	tr := ucptest.Transports[0]
	ucptest.CheckLeaks(t)
	tg := newTarget(t, tr, appendop.Owned)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := tg.worker.Do(ctx, dpu.ClientInit{ID: tg.client, Addr: tg.addr})
	if !errors.Is(err, dpu.ErrClientExists) {
		t.Fatalf("duplicate CLIENT_INIT: %v, want ErrClientExists", err)
	}
}

// Reference defect 8 (docs/SECURITY.md section 6): scatter never checked its payload against count.
func TestDefect8ScatterCountMustMatchPayload(t *testing.T) {
	tr := ucptest.Transports[0]
	ucptest.CheckLeaks(t)
	tg := newTarget(t, tr, appendop.Owned)
	r, guardsOK := tg.guarded()
	raw := tg.raw(t, tr)
	var two []byte
	two, _ = wire.AppendIOV(two, wire.IOV{Addr: r.base() + 4096, Rkey: rdmo.RegionID(r.id), Len: 4}, []byte("aaaa"))
	two, _ = wire.AppendIOV(two, wire.IOV{Addr: r.base() + 4200, Rkey: rdmo.RegionID(r.id), Len: 4}, []byte("bbbb"))
	raw.send(wire.AppendScatterRequest(nil, wire.Header{ClientID: 1}, rdmo.ScatterHeader{Count: 3}), two)      // too few
	raw.send(wire.AppendScatterRequest(nil, wire.Header{ClientID: 1}, rdmo.ScatterHeader{Count: 1}), two)      // too many
	raw.send(wire.AppendScatterRequest(nil, wire.Header{ClientID: 1}, rdmo.ScatterHeader{Count: 2}), two[:30]) // truncated
	rsp := raw.flush(3)
	if rsp.Failed != 3 || rsp.FirstStatus != rdmo.StatusPayloadMismatch {
		t.Fatalf("flush response %+v, want 3 failures, first PayloadMismatch", rsp)
	}
	if !bytes.Equal(r.bytes()[4096:8192], make([]byte, 4096)) {
		t.Fatal("a malformed scatter wrote into the region")
	}
	if err := guardsOK(); err != nil {
		t.Fatal(err)
	}
}

// Reference defect 9 (docs/SECURITY.md section 6): resources leaked on teardown. RQ_DESTROY frees the
// queue; CheckLeaks (in every test) checks UCX handles and goroutines.
func TestDefect9TeardownFreesEverything(t *testing.T) {
	tr := ucptest.Transports[0]
	ucptest.CheckLeaks(t)
	tg := newTarget(t, tr, appendop.Owned)
	q := tg.queue(4096)
	raw := tg.raw(t, tr)
	raw.send(appendReq(1, q.base(), q.id, q.id, 0), []byte("x"))
	raw.flush(4)
	before := tg.worker.Stats()
	tg.do(dpu.RQDestroy{Client: tg.client, RQ: raw.rq})
	tg.do(dpu.MRDereg{Client: tg.client, Region: q.id})
	after := tg.worker.Stats()
	if after.RQs != before.RQs-1 || after.Regions != before.Regions-1 {
		t.Fatalf("RQs %d -> %d, regions %d -> %d", before.RQs, after.RQs, before.Regions, after.Regions)
	}
}

func le64(v uint64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return b
}

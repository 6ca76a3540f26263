package e2e_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/internal/testproc"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/plugins/flush"
	"github.com/openrdmo/rdmo/plugins/scatter"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/rdmoworker"
	"github.com/openrdmo/rdmo/urom/service"
	"github.com/openrdmo/rdmo/urom/uromtest"
)

// ---- helpers shared by the reliability tests (badinput, isolation,
// faults, soak) ----

// guardLen is the guard zone on each side of a fenced region.
const guardLen = 4096

const guardByte = 0xA5

// fenced is a registered region of target memory with a guard zone on
// each side that nobody may write: all is guard, region, guard.
type fenced struct {
	id   uint64
	mem  *ucp.Memory
	all  []byte
	base uint64 // the registered address (all[guardLen])
	size int
}

func (f fenced) data() []byte { return f.all[guardLen : guardLen+f.size] }

// tail is a queue region's tail word (the region's first u64).
func (f fenced) tail() uint64 { return binary.LittleEndian.Uint64(f.data()) }

// guardsOK reports a changed guard byte.
func (f fenced) guardsOK() error {
	for i := 0; i < guardLen; i++ {
		if f.all[i] != guardByte {
			return fmt.Errorf("region %d: guard byte %d before the region changed to %#02x", f.id, guardLen-i, f.all[i])
		}
		if b := f.all[guardLen+f.size+i]; b != guardByte {
			return fmt.Errorf("region %d: guard byte %d after the region changed to %#02x", f.id, i, b)
		}
	}
	return nil
}

// unchanged compares the region and its guards with a snapshot.
func (f fenced) unchanged(snap []byte) error {
	if i := firstDiff(snap, f.all); i >= 0 {
		where := "inside the region"
		switch {
		case i < guardLen:
			where = "in the guard before the region"
		case i >= guardLen+f.size:
			where = "in the guard after the region"
		}
		return fmt.Errorf("region %d: byte %d %s changed from %#02x to %#02x", f.id, i-guardLen, where, snap[i], f.all[i])
	}
	return nil
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// fenced allocates size bytes of target memory between two guard zones and
// registers the middle. fill sets the region's initial contents.
func (tg *target) fenced(size int, fill byte) fenced {
	tg.t.Helper()
	mem, err := tg.ctx.Allocate(guardLen + size + guardLen)
	if err != nil {
		tg.t.Fatal(err)
	}
	tg.mems = append(tg.mems, mem)
	all := mem.Bytes()
	for i := range all {
		all[i] = guardByte
	}
	for i := guardLen; i < guardLen+size; i++ {
		all[i] = fill
	}
	packed, err := mem.PackRkey()
	if err != nil {
		tg.t.Fatal(err)
	}
	base := mem.Address() + guardLen
	n := tg.do(dpu.MRReg{Client: tg.client, VA: base, Len: uint64(size), PackedRkey: packed})
	return fenced{id: n.Region, mem: mem, all: all, base: base, size: size}
}

// fencedQueue is a fenced region whose first word is its tail, set to
// base+tailOff.
func (tg *target) fencedQueue(size int, tailOff uint64) fenced {
	f := tg.fenced(size, 0)
	binary.LittleEndian.PutUint64(f.data(), f.base+tailOff)
	return f
}

// newTargets prepares one target per client id, then starts the worker
// (so the worker is closed before the targets go) and registers them all
// with it.
func newTargets(t testing.TB, tr ucptest.Transport, start func() rdmoWorker, ids ...uint64) []*target {
	t.Helper()
	var tgs []*target
	for _, id := range ids {
		ctx := ucptest.NewContext(t, tr)
		tg := &target{t: t, ctx: ctx, stop: make(chan struct{}), done: make(chan struct{}), client: id}
		ready := make(chan error, 1)
		go tg.progress(ready)
		if err := <-ready; err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tg.close)
		tgs = append(tgs, tg)
	}
	w := start()
	for _, tg := range tgs {
		tg.worker = w
		tg.wAddr = tg.do(dpu.ClientInit{ID: tg.client, Addr: tg.addr}).Addr
	}
	return tgs
}

// inProc returns a start function for an in-process worker with cfg (the
// transport's UCX configuration is filled in).
func inProc(t testing.TB, tr ucptest.Transport, cfg dpu.Config) func() rdmoWorker {
	return func() rdmoWorker {
		cfg.UCXConfig = tr.Config()
		w, err := dpu.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := closeWithin(w, 60*time.Second); err != nil {
				t.Errorf("worker close: %v", err)
			}
		})
		return inProcess{w}
	}
}

// closeWithin closes an in-process worker and fails if that takes longer
// than d: a close that waits on a dead peer forever is a bug.
func closeWithin(w *dpu.Worker, d time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- w.Close() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(d):
		return fmt.Errorf("dpu.Worker.Close did not return within %v", d)
	}
}

// appender keeps an initiator process appending batches of records to a
// queue (batch k as initiator id k, so checkQueue can tell them apart)
// until stop; at least one batch runs.
type appender struct {
	stopc chan struct{}
	done  chan struct{}
	want  map[int]int
	err   error
}

func startAppender(p *initiatorProc, q fenced, perBatch, maxBatches int) *appender {
	a := &appender{stopc: make(chan struct{}), done: make(chan struct{}), want: map[int]int{}}
	go func() {
		defer close(a.done)
		for id := 0; id < maxBatches; id++ {
			if id > 0 {
				select {
				case <-a.stopc:
					return
				default:
				}
			}
			p.Send(fmt.Sprintf("records %d %d %d %d %d %d", id, perBatch, q.base, q.id, 97, 42))
			if _, err := p.Await("DONE", 5*time.Minute); err != nil {
				a.err = fmt.Errorf("batch %d: %w", id, err)
				return
			}
			a.want[id] = perBatch
		}
	}()
	return a
}

// stop waits for the batch in progress and checks that the queue holds
// every record of every batch exactly once.
func (a *appender) stop(q fenced) error {
	close(a.stopc)
	<-a.done
	if a.err != nil {
		return a.err
	}
	if err := q.guardsOK(); err != nil {
		return err
	}
	end := q.tail()
	if end < q.base+8 || end > q.base+uint64(q.size) {
		return fmt.Errorf("tail %#x outside the queue [%#x, +%d)", end, q.base, q.size)
	}
	return checkQueue(q.data()[8:end-q.base], a.want)
}

func (a *appender) records() int {
	n := 0
	for _, k := range a.want {
		n += k
	}
	return n
}

// ---- raw requests ----

func commonHeader(client uint64, op, flags uint32) []byte {
	b := binary.LittleEndian.AppendUint64(nil, client)
	b = binary.LittleEndian.AppendUint32(b, op)
	return binary.LittleEndian.AppendUint32(b, flags)
}

func scatterReq(client uint64, flags uint32, count uint64) []byte {
	return wire.AppendScatterRequest(nil, wire.Header{ClientID: client, Flags: flags}, rdmo.ScatterHeader{Count: count})
}

// iovs encodes scatter elements: each (addr, rkey, data).
func iovs(t testing.TB, elems ...any) []byte {
	var p []byte
	for i := 0; i+2 < len(elems); i += 3 {
		data := elems[i+2].([]byte)
		var err error
		p, err = wire.AppendIOV(p, wire.IOV{Addr: elems[i].(uint64), Rkey: rdmo.RegionID(elems[i+1].(uint64)), Len: uint16(len(data))}, data)
		if err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func batchReq(client uint64, flags uint32, count uint64) []byte {
	return wire.AppendBatchRequest(nil, wire.Header{ClientID: client, Flags: flags}, wire.BatchHeader{Count: count})
}

func batchEntry(t testing.TB, dst, hdr, payload []byte) []byte {
	b, err := wire.AppendBatchEntry(dst, hdr, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sendRaw sends one hand-made request; flags add to SendReply.
func sendRaw(r *rawInitiator, hdr, payload []byte, flags ucp.SendFlags) error {
	return r.ep.SendAM(0, hdr, payload, ucp.SendReply|flags, nil, 0)
}

// mustSend sends one hand-made request (UCX picks the protocol) and fails
// the test if it cannot be queued.
func mustSend(t testing.TB, r *rawInitiator, hdr, payload []byte) {
	t.Helper()
	if err := sendRaw(r, hdr, payload, 0); err != nil {
		t.Fatal(err)
	}
}

// recvRaw waits for the next response.
func recvRaw(r *rawInitiator, timeout time.Duration) ([]byte, error) {
	if err := r.w.ProgressUntil(func() bool { return len(r.resps) > 0 }, timeout); err != nil {
		return nil, fmt.Errorf("no response within %v: %w", timeout, err)
	}
	b := r.resps[0]
	r.resps = r.resps[1:]
	return b, nil
}

// flushRaw sends a FLUSH as client and returns the acks that arrived
// before its response (at least minAcks of them) and the response.
func flushRaw(r *rawInitiator, client, id uint64, minAcks int) ([]wire.AckResponse, wire.FlushResponse, error) {
	hdr := wire.AppendFlushRequest(nil, wire.Header{ClientID: client, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: id})
	if err := sendRaw(r, hdr, nil, 0); err != nil {
		return nil, wire.FlushResponse{}, err
	}
	return awaitFlushRaw(r, id, minAcks)
}

// awaitFlushRaw collects acks until the flush response with id (and at
// least minAcks acks) arrived.
func awaitFlushRaw(r *rawInitiator, id uint64, minAcks int) ([]wire.AckResponse, wire.FlushResponse, error) {
	var acks []wire.AckResponse
	var rsp wire.FlushResponse
	got := false
	for !got || len(acks) < minAcks {
		b, err := recvRaw(r, 20*time.Second)
		if err != nil {
			return acks, rsp, err
		}
		switch rid, err := wire.ParseResponseID(b); {
		case err != nil:
			return acks, rsp, err
		case rid == wire.RspAck:
			a, err := wire.ParseAck(b)
			if err != nil {
				return acks, rsp, err
			}
			acks = append(acks, a)
		default:
			f, err := wire.ParseFlushResponse(b)
			if err != nil {
				return acks, rsp, err
			}
			if f.FlushID != id {
				return acks, rsp, fmt.Errorf("flush response for %#x, waiting for %#x", f.FlushID, id)
			}
			rsp, got = f, true
		}
	}
	return acks, rsp, nil
}

// ---- the catalogue ----

// badEnv is one worker with two clients: A (id 1) sends the bad input on a
// raw connection, B (id 2) appends records from an initiator process all
// along.
type badEnv struct {
	t    *testing.T
	tr   ucptest.Transport
	mode workerMode
	a, b *target
	raw  *rawInitiator
	// A's regions: a queue, a scatter area, a full queue, a queue whose
	// tail lies below its data region.
	qA, sA, fullA, lowA fenced
	// B's: the queue its initiator appends to, an area nobody may write.
	qB, sB fenced
	// refuseRndv: the worker's scatter handler refuses rendezvous.
	refuseRndv bool
	flushID    uint64
}

func (e *badEnv) send(hdr, payload []byte) { e.sendFlags(hdr, payload, 0) }

func (e *badEnv) sendFlags(hdr, payload []byte, flags ucp.SendFlags) {
	e.t.Helper()
	if err := sendRaw(e.raw, hdr, payload, flags); err != nil {
		e.t.Fatal(err)
	}
}

// badInput is one row of the catalogue: what is sent, and the status the
// initiator must get back for it.
type badInput struct {
	name string
	send func(e *badEnv)
	want []rdmo.Status // the documented status first; others acceptable
	// ack: the request carries FlagAck, so an ack with the status comes
	// back (a header too short to read flags cannot ask for one).
	ack bool
	// fails is how many failures the next flush reports (0 means 1).
	fails int
	// flush: the bad request is itself a FLUSH, answered by its own flush
	// response (flushID 0xBAD).
	flush bool
	only  func(e *badEnv) bool
}

const (
	clientA = 1
	clientB = 2
	ack     = rdmo.FlagAck
)

func badInputs(t testing.TB) []badInput {
	st := func(s ...rdmo.Status) []rdmo.Status { return s }
	x := []byte("12345678")
	return []badInput{
		// The header.
		{name: "reserved op id 7", ack: true, want: st(rdmo.StatusUnknownOp),
			send: func(e *badEnv) { e.send(append(commonHeader(clientA, 7, ack), x...), x) }},
		{name: "user op 4242 that no handler serves", ack: true, want: st(rdmo.StatusUnknownOp),
			send: func(e *badEnv) { e.send(commonHeader(clientA, 4242, ack), x) }},
		{name: "unknown flag bits", ack: true, want: st(rdmo.StatusUnknownFlags),
			send: func(e *badEnv) { e.send(appendReq(clientA, e.qA.base, e.qA.id, e.qA.id, ack|0x100), x) }},
		{name: "10-byte header (shorter than the common header)", want: st(rdmo.StatusShortHeader),
			send: func(e *badEnv) { e.send(appendReq(clientA, e.qA.base, e.qA.id, e.qA.id, ack)[:10], x) }},
		{name: "append sub-header cut to 32 bytes", ack: true, want: st(rdmo.StatusShortHeader),
			send: func(e *badEnv) { e.send(appendReq(clientA, e.qA.base, e.qA.id, e.qA.id, ack)[:32], x) }},
		{name: "scatter header of 16 bytes (no count)", ack: true, want: st(rdmo.StatusShortHeader),
			send: func(e *badEnv) { e.send(commonHeader(clientA, rdmo.OpScatter, ack), nil) }},
		{name: "72-byte header (over the 64-byte limit)", ack: true, want: st(rdmo.StatusHeaderTooLong),
			send: func(e *badEnv) {
				e.send(append(appendReq(clientA, e.qA.base, e.qA.id, e.qA.id, ack), make([]byte, 32)...), x)
			}},
		{name: "65-byte user-op header", ack: true, want: st(rdmo.StatusHeaderTooLong),
			send: func(e *badEnv) { e.send(append(commonHeader(clientA, 4242, ack), make([]byte, 49)...), x) }},
		{name: "append sub-header with 8 trailing bytes", ack: true, want: st(rdmo.StatusHeaderTooLong),
			send: func(e *badEnv) { e.send(append(appendReq(clientA, e.qA.base, e.qA.id, e.qA.id, ack), x...), x) }},
		{name: "flush carrying a payload", flush: true, want: st(rdmo.StatusPayloadMismatch),
			send: func(e *badEnv) {
				e.send(wire.AppendFlushRequest(nil, wire.Header{ClientID: clientA, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: 0xBAD}), x)
			}},
		{name: "flush carrying a rendezvous payload", flush: true, want: st(rdmo.StatusPayloadMismatch),
			send: func(e *badEnv) {
				e.sendFlags(wire.AppendFlushRequest(nil, wire.Header{ClientID: clientA, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: 0xBAD}),
					make([]byte, 64<<10), ucp.SendRendezvous)
			}},

		// The client id.
		{name: "another client's id on this connection", ack: true, want: st(rdmo.StatusClientMismatch),
			send: func(e *badEnv) { e.send(appendReq(clientB, e.qA.base, e.qA.id, e.qA.id, ack), x) }},
		{name: "another client's id and that client's queue", ack: true, want: st(rdmo.StatusClientMismatch),
			send: func(e *badEnv) { e.send(appendReq(clientB, e.qB.base, e.qB.id, e.qB.id, ack), x) }},
		{name: "client id 0 (the reference's hard-coded id)", ack: true, want: st(rdmo.StatusClientMismatch),
			send: func(e *badEnv) { e.send(appendReq(0, e.qA.base, e.qA.id, e.qA.id, ack), x) }},
		{name: "scatter with another client's id", ack: true, want: st(rdmo.StatusClientMismatch),
			send: func(e *badEnv) { e.send(scatterReq(clientB, ack, 1), iovs(t, e.sB.base, e.sB.id, x)) }},

		// Region ids.
		{name: "append naming an unknown region id", ack: true, want: st(rdmo.StatusUnknownRegion),
			send: func(e *badEnv) { e.send(appendReq(clientA, e.qA.base, 999999, 999999, ack), x) }},
		{name: "scatter naming region id 0", ack: true, want: st(rdmo.StatusUnknownRegion),
			send: func(e *badEnv) { e.send(scatterReq(clientA, ack, 1), iovs(t, e.sA.base, uint64(0), x)) }},
		{name: "scatter naming region id 2^64-1", ack: true, want: st(rdmo.StatusUnknownRegion),
			send: func(e *badEnv) { e.send(scatterReq(clientA, ack, 1), iovs(t, e.sA.base, ^uint64(0), x)) }},
		{name: "append to another client's queue (its ids and addresses)", ack: true, want: st(rdmo.StatusRegionNotOwned),
			send: func(e *badEnv) { e.send(appendReq(clientA, e.qB.base, e.qB.id, e.qB.id, ack), x) }},
		{name: "own tail word, another client's data region", ack: true, want: st(rdmo.StatusRegionNotOwned),
			send: func(e *badEnv) { e.send(appendReq(clientA, e.qA.base, e.qA.id, e.qB.id, ack), x) }},
		{name: "another client's tail word, own data region", ack: true, want: st(rdmo.StatusRegionNotOwned),
			send: func(e *badEnv) { e.send(appendReq(clientA, e.qB.base, e.qB.id, e.qA.id, ack), x) }},
		{name: "scatter into another client's region", ack: true, want: st(rdmo.StatusRegionNotOwned),
			send: func(e *badEnv) { e.send(scatterReq(clientA, ack, 1), iovs(t, e.sB.base, e.sB.id, x)) }},
		{name: "scatter: an own chunk, then one into another client's region (all or nothing)", ack: true, want: st(rdmo.StatusRegionNotOwned),
			send: func(e *badEnv) {
				e.send(scatterReq(clientA, ack, 2), iovs(t, e.sA.base, e.sA.id, x, e.sB.base+64, e.sB.id, x))
			}},
		{name: "scatter at another client's address through an own region id", ack: true, want: st(rdmo.StatusOutOfBounds),
			send: func(e *badEnv) { e.send(scatterReq(clientA, ack, 1), iovs(t, e.sB.base, e.sA.id, x)) }},

		// Addresses.
		{name: "scatter 8 bytes before the region", ack: true, want: st(rdmo.StatusOutOfBounds),
			send: func(e *badEnv) { e.send(scatterReq(clientA, ack, 1), iovs(t, e.sA.base-8, e.sA.id, x)) }},
		{name: "scatter across the region's end", ack: true, want: st(rdmo.StatusOutOfBounds),
			send: func(e *badEnv) {
				e.send(scatterReq(clientA, ack, 1), iovs(t, e.sA.base+uint64(e.sA.size)-4, e.sA.id, x))
			}},
		{name: "scatter of one byte just past the region", ack: true, want: st(rdmo.StatusOutOfBounds),
			send: func(e *badEnv) {
				e.send(scatterReq(clientA, ack, 1), iovs(t, e.sA.base+uint64(e.sA.size), e.sA.id, x[:1]))
			}},
		{name: "scatter at 2^64-4 (addr+len wraps)", ack: true, want: st(rdmo.StatusOutOfBounds),
			send: func(e *badEnv) { e.send(scatterReq(clientA, ack, 1), iovs(t, ^uint64(0)-3, e.sA.id, x)) }},
		{name: "scatter ending exactly at 2^64", ack: true, want: st(rdmo.StatusOutOfBounds),
			send: func(e *badEnv) { e.send(scatterReq(clientA, ack, 1), iovs(t, ^uint64(0)-7, e.sA.id, x)) }},
		{name: "append: tail word just past its region", ack: true, want: st(rdmo.StatusOutOfBounds),
			send: func(e *badEnv) { e.send(appendReq(clientA, e.qA.base+uint64(e.qA.size), e.qA.id, e.qA.id, ack), x) }},
		{name: "append: tail word at 2^64-8", ack: true, want: st(rdmo.StatusOutOfBounds),
			send: func(e *badEnv) { e.send(appendReq(clientA, ^uint64(0)-7, e.qA.id, e.qA.id, ack), x) }},
		{name: "append: misaligned tail word", ack: true, want: st(rdmo.StatusOutOfBounds),
			send: func(e *badEnv) { e.send(appendReq(clientA, e.qA.base+4, e.qA.id, e.qA.id, ack), x) }},
		{name: "append: tail value below its data region", ack: true, want: st(rdmo.StatusOutOfBounds),
			send: func(e *badEnv) { e.send(appendReq(clientA, e.lowA.base, e.lowA.id, e.lowA.id, ack), x) }},
		{name: "append past the end of its queue", ack: true, want: st(rdmo.StatusQueueOverflow),
			send: func(e *badEnv) {
				e.send(appendReq(clientA, e.fullA.base, e.fullA.id, e.fullA.id, ack), make([]byte, 16))
			}},
		{name: "append larger than its data region", ack: true, want: st(rdmo.StatusQueueOverflow),
			send: func(e *badEnv) {
				e.send(appendReq(clientA, e.qA.base, e.qA.id, e.qA.id, ack), bytes.Repeat(x, e.qA.size/8+1))
			}},
		{name: "zero-length append", ack: true, want: st(rdmo.StatusEmptyAppend),
			send: func(e *badEnv) { e.send(appendReq(clientA, e.qA.base, e.qA.id, e.qA.id, ack), nil) }},

		// Scatter payloads.
		{name: "scatter count 3, payload of 2 iovs", ack: true, want: st(rdmo.StatusPayloadMismatch),
			send: func(e *badEnv) {
				e.send(scatterReq(clientA, ack, 3), iovs(t, e.sA.base, e.sA.id, x, e.sA.base+64, e.sA.id, x))
			}},
		{name: "scatter count 1, payload of 2 iovs", ack: true, want: st(rdmo.StatusPayloadMismatch),
			send: func(e *badEnv) {
				e.send(scatterReq(clientA, ack, 1), iovs(t, e.sA.base, e.sA.id, x, e.sA.base+64, e.sA.id, x))
			}},
		{name: "scatter count 2^63", ack: true, want: st(rdmo.StatusPayloadMismatch),
			send: func(e *badEnv) { e.send(scatterReq(clientA, ack, 1<<63), iovs(t, e.sA.base, e.sA.id, x)) }},
		{name: "scatter count 0 with a payload", ack: true, want: st(rdmo.StatusPayloadMismatch),
			send: func(e *badEnv) { e.send(scatterReq(clientA, ack, 0), iovs(t, e.sA.base, e.sA.id, x)) }},
		{name: "iov descriptor cut short", ack: true, want: st(rdmo.StatusPayloadMismatch),
			send: func(e *badEnv) {
				p := iovs(t, e.sA.base, e.sA.id, x, e.sA.base+64, e.sA.id, x)
				e.send(scatterReq(clientA, ack, 2), p[:wire.IOVDescLen+8+10])
			}},
		{name: "iov length past the payload's end", ack: true, want: st(rdmo.StatusLengthOverflow),
			send: func(e *badEnv) {
				p := iovs(t, e.sA.base, e.sA.id, x)
				binary.LittleEndian.PutUint16(p[16:], 100)
				e.send(scatterReq(clientA, ack, 1), p)
			}},
		{name: "rendezvous scatter over the fetch limit", ack: true, want: st(rdmo.StatusRendezvousRefused),
			send: func(e *badEnv) {
				e.sendFlags(scatterReq(clientA, ack, 1), make([]byte, dpu.DefaultMaxRendezvousFetch+wire.IOVDescLen), ucp.SendRendezvous)
			}},
		{name: "eager scatter over the eager payload limit (16 full chunks)", ack: true, want: st(rdmo.StatusLengthOverflow),
			send: func(e *badEnv) {
				var elems []any
				for i := 0; i < 16; i++ {
					elems = append(elems, e.sA.base, e.sA.id, make([]byte, wire.MaxIOVLen))
				}
				p := iovs(t, elems...)
				if len(p) <= dpu.DefaultMaxEagerPayload {
					t.Fatalf("payload of %d bytes is within the limit", len(p))
				}
				e.sendFlags(scatterReq(clientA, ack, 16), p, ucp.SendEager)
			}},
		{name: "rendezvous scatter (refused by configuration)", ack: true, want: st(rdmo.StatusRendezvousRefused),
			only: func(e *badEnv) bool { return e.refuseRndv },
			send: func(e *badEnv) {
				e.sendFlags(scatterReq(clientA, ack, 1), iovs(t, e.sA.base, e.sA.id, x), ucp.SendRendezvous)
			}},

		// BATCH containers (docs/PROTOCOL.md section 11): a container that
		// cannot be unpacked is one failed request (op 3, no ack).
		{name: "batch container with another client's id", want: st(rdmo.StatusClientMismatch),
			send: func(e *badEnv) {
				e.send(batchReq(clientB, 0, 1), batchEntry(t, nil, appendReq(clientA, e.qA.base, e.qA.id, e.qA.id, 0), x))
			}},
		{name: "batch container with flags", want: st(rdmo.StatusUnknownFlags),
			send: func(e *badEnv) {
				e.send(batchReq(clientA, rdmo.FlagFence, 1), batchEntry(t, nil, appendReq(clientA, e.qA.base, e.qA.id, e.qA.id, 0), x))
			}},
		{name: "batch count that cannot fit its data", want: st(rdmo.StatusPayloadMismatch),
			send: func(e *badEnv) { e.send(batchReq(clientA, 0, 1000), make([]byte, 16)) }},
		{name: "batch container by rendezvous", want: st(rdmo.StatusRendezvousRefused),
			send: func(e *badEnv) {
				d := batchEntry(t, nil, appendReq(clientA, e.qA.base, e.qA.id, e.qA.id, 0), x)
				e.sendFlags(batchReq(clientA, 0, 1), d, ucp.SendRendezvous)
			}},
		{name: "batch container over the eager payload limit (its entry alone would fit)", want: st(rdmo.StatusLengthOverflow),
			send: func(e *badEnv) {
				d := batchEntry(t, nil, appendReq(clientA, e.qA.base, e.qA.id, e.qA.id, ack), make([]byte, dpu.DefaultMaxEagerPayload))
				e.sendFlags(batchReq(clientA, 0, 1), d, ucp.SendEager)
			}},
		{name: "batch entries with broken framing (a good entry does not run)", fails: 2,
			want: st(rdmo.StatusPayloadMismatch, rdmo.StatusLengthOverflow),
			send: func(e *badEnv) {
				d := batchEntry(t, nil, appendReq(clientA, e.qA.base, e.qA.id, e.qA.id, 0), x)
				d = append(d, 0xff, 0xff, 0, 0, 0xff, 0xff, 0xff, 0x7f) // hdr_len 65535, payload 2^31-1
				e.send(batchReq(clientA, 0, 2), d)
			}},
		{name: "batch entry with entry flags", ack: true, want: st(rdmo.StatusUnknownFlags),
			send: func(e *badEnv) {
				d := batchEntry(t, nil, appendReq(clientA, e.qA.base, e.qA.id, e.qA.id, ack), x)
				binary.LittleEndian.PutUint16(d[wire.BatchEntryFlagsOffset:], 1)
				e.send(batchReq(clientA, 0, 1), d)
			}},
		{name: "batch entry that is a batch container", want: st(rdmo.StatusUnknownOp),
			send: func(e *badEnv) {
				inner := batchReq(clientA, 0, 0)
				// AppendBatchEntry refuses to nest: build the entry by hand.
				d := binary.LittleEndian.AppendUint16(nil, uint16(len(inner)))
				d = binary.LittleEndian.AppendUint16(d, 0)
				d = binary.LittleEndian.AppendUint32(d, 0)
				d = append(d, inner...)
				e.send(batchReq(clientA, 0, 1), d)
			}},
		{name: "batch entry appending to another client's queue", ack: true, want: st(rdmo.StatusRegionNotOwned),
			send: func(e *badEnv) {
				e.send(batchReq(clientA, 0, 1), batchEntry(t, nil, appendReq(clientA, e.qB.base, e.qB.id, e.qB.id, ack), x))
			}},
		{name: "batch entry with another client's id", ack: true, want: st(rdmo.StatusClientMismatch),
			send: func(e *badEnv) {
				e.send(batchReq(clientA, 0, 1), batchEntry(t, nil, appendReq(clientB, e.qA.base, e.qA.id, e.qA.id, ack), x))
			}},
	}
}

// runCatalogue sends every bad input of the catalogue on A's connection,
// one at a time, while B's initiator process appends records. For each:
// the initiator gets the documented status (ack and flush report), nothing
// in any registered region or guard zone changes, and afterwards B's
// records are all in its queue exactly once.
func runCatalogue(t *testing.T, tr ucptest.Transport, mode workerMode) {
	ucptest.CheckLeaks(t)
	e := &badEnv{t: t, tr: tr, mode: mode}
	var start func() rdmoWorker
	if mode == modeInProcess {
		e.refuseRndv = true
		start = inProc(t, tr, dpu.Config{Handlers: []rdmo.Handler{
			appendop.New(appendop.Options{Strategy: appendop.Owned}),
			flush.New(),
			scatter.New(scatter.Options{RefuseRendezvous: true}),
		}})
	} else {
		start = func() rdmoWorker { return startUROMWorker(t, tr, []string{"append", "flush", "scatter"}, nil) }
	}
	tgs := newTargets(t, tr, start, clientA, clientB)
	e.a, e.b = tgs[0], tgs[1]
	e.qA = e.a.fencedQueue(4096, 8)
	e.sA = e.a.fenced(4096, 0)
	e.fullA = e.a.fencedQueue(256, 248)
	e.lowA = e.a.fencedQueue(256, 0)
	binary.LittleEndian.PutUint64(e.lowA.data(), 8) // a tail far below the region
	e.qB = e.b.fencedQueue(12<<20, 8)
	e.sB = e.b.fenced(4096, 0x5B)
	e.raw = e.a.raw(t, tr)

	pB := e.b.startInitiator(tr)
	bg := startAppender(pB, e.qB, 300, 30)

	watched := []fenced{e.qA, e.sA, e.fullA, e.lowA, e.sB}
	rows := badInputs(t)
	tried := 0
	for i, row := range rows {
		if row.only != nil && !row.only(e) {
			continue
		}
		tried++
		snaps := make([][]byte, len(watched))
		for k, f := range watched {
			snaps[k] = bytes.Clone(f.all)
		}
		row.send(e)
		fails := max(row.fails, 1)
		var acks []wire.AckResponse
		var rsp wire.FlushResponse
		var err error
		if row.flush {
			acks, rsp, err = awaitFlushRaw(e.raw, 0xBAD, 0)
		} else {
			minAcks := 0
			if row.ack {
				minAcks = 1
			}
			acks, rsp, err = flushRaw(e.raw, clientA, uint64(1000+i), minAcks)
		}
		if err != nil {
			t.Fatalf("%s: %v", row.name, err)
		}
		if row.ack {
			if len(acks) != 1 || !slices.Contains(row.want, acks[0].Status) {
				t.Errorf("%s: acks %+v, want one with status %v", row.name, acks, row.want[0])
			}
		} else if len(acks) != 0 {
			t.Errorf("%s: unexpected acks %+v", row.name, acks)
		}
		if int(rsp.Failed) != fails || !slices.Contains(row.want, rsp.FirstStatus) {
			t.Errorf("%s: flush reports %d failures, first %v (op %d); want %d, first %v",
				row.name, rsp.Failed, rsp.FirstStatus, rsp.FirstOp, fails, row.want[0])
		}
		for k, f := range watched {
			if err := f.unchanged(snaps[k]); err != nil {
				t.Errorf("%s: %v", row.name, err)
			}
		}
		if err := rsp.Err(); err == nil || !errors.Is(err, row.want[0].Err()) && !slices.Contains(row.want, rdmo.StatusOf(err)) {
			t.Errorf("%s: FlushResponse.Err() = %v, want a %v error", row.name, err, row.want[0])
		}
	}

	// A is still served: a good append and a good scatter land.
	e.send(appendReq(clientA, e.qA.base, e.qA.id, e.qA.id, ack), []byte("good one"))
	e.send(scatterReq(clientA, ack, 1), iovs(t, e.sA.base+128, e.sA.id, []byte("scattered")))
	acks, rsp, err := flushRaw(e.raw, clientA, 77, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range acks {
		if a.Status != rdmo.StatusOK {
			t.Errorf("good request after the catalogue: %+v", a)
		}
	}
	if rsp.Failed != 0 {
		t.Errorf("flush after the good requests: %+v", rsp)
	}
	if got := string(e.qA.data()[8:16]); got != "good one" {
		t.Errorf("good append after the catalogue: %q", got)
	}
	if got := string(e.sA.data()[128:137]); got != "scattered" {
		t.Errorf("good scatter after the catalogue: %q", got)
	}
	if err := bg.stop(e.qB); err != nil {
		t.Fatalf("client B, appending all along: %v", err)
	}
	for _, f := range append(watched, e.qB) {
		if err := f.guardsOK(); err != nil {
			t.Error(err)
		}
	}
	st := e.a.worker.Stats()
	t.Logf("%d bad inputs tried; client B appended %d records meanwhile; worker failures by status: %v", tried, bg.records(), st.Failures)
	pB.Send("quit")
}

// TestBadInputCatalogue: every row of badInputs against a live worker, in
// this process and as a UROM worker process.
func TestBadInputCatalogue(t *testing.T) {
	for _, c := range []struct {
		mode workerMode
		tr   ucptest.Transport
	}{
		{modeInProcess, ucptest.Transports[0]},
		{modeInProcess, ucptest.Transports[1]},
		{modeUROM, ucptest.Transports[1]},
	} {
		t.Run(c.mode.String()+"/"+c.tr.Name, func(t *testing.T) { runCatalogue(t, c.tr, c.mode) })
	}
}

// A flood past the in-flight limit: requests over MaxInFlightPerRQ fail
// with TooManyInFlight (each acked and counted at the flush), the accepted
// ones land exactly once where their ack says, and another client whose
// initiator stays within the limit loses nothing.
func TestBadInputFloodPastInFlightLimit(t *testing.T) {
	for _, tr := range ucptest.Transports {
		t.Run(tr.Name, func(t *testing.T) {
			ucptest.CheckLeaks(t)
			const limit = 8
			tgs := newTargets(t, tr, inProc(t, tr, dpu.Config{Handlers: handlers(appendop.Owned), MaxInFlightPerRQ: limit}), clientA, clientB)
			a, b := tgs[0], tgs[1]
			qA := a.fencedQueue(4<<20, 8)
			qB := b.fencedQueue(4<<20, 8)
			raw := a.raw(t, tr)

			// B: an initiator that stays under the limit: with acks, its
			// window counts a request until the worker completed it.
			in, err := initiator.New(initiator.Options{WorkerAddress: b.wAddr, ClientID: clientB, Window: limit / 2, Ack: true, UCX: tr.Config()})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			b.do(dpu.RQCreate{Client: clientB, Addr: in.Address()})
			stopB := make(chan struct{})
			var wg sync.WaitGroup
			var sentB int
			var errB error
			wg.Add(1)
			go func() {
				defer wg.Done()
				for seq := 0; ; seq++ {
					select {
					case <-stopB:
						_, errB = in.Flush(context.Background())
						sentB = seq
						return
					default:
					}
					if err := in.Append(qB.base, qB.id, qB.id, makeRecord(0, seq, 16+seq%100)); err != nil {
						errB, sentB = err, seq
						return
					}
					if seq%64 == 63 {
						if _, err := in.Flush(context.Background()); err != nil {
							errB, sentB = err, seq+1
							return
						}
					}
				}
			}()

			// A: bursts of acked appends until some were refused.
			var seq uint64
			ok, refused := map[uint64]uint64{}, 0
			for attempt := 0; attempt < 5 && refused == 0; attempt++ {
				const burst = 2000
				first := seq
				for i := 0; i < burst; i++ {
					p := binary.LittleEndian.AppendUint64(nil, seq)
					p = binary.LittleEndian.AppendUint64(p, ^seq)
					if err := sendRaw(raw, appendReq(clientA, qA.base, qA.id, qA.id, ack), p, 0); err != nil {
						t.Fatal(err)
					}
					seq++
				}
				// Every request is acked, refused or not. The flush goes
				// only after that, so that it is not refused itself.
				var acks []wire.AckResponse
				for len(acks) < burst {
					b, err := recvRaw(raw, 20*time.Second)
					if err != nil {
						t.Fatalf("%d acks of %d: %v", len(acks), burst, err)
					}
					ak, err := wire.ParseAck(b)
					if err != nil {
						t.Fatal(err)
					}
					acks = append(acks, ak)
				}
				_, rsp, err := flushRaw(raw, clientA, uint64(attempt), 0)
				seq++ // the flush took a sequence number too
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, ak := range acks {
					switch {
					case ak.Seq < first || ak.Seq >= first+burst:
						t.Fatalf("ack for seq %d outside the burst [%d, %d)", ak.Seq, first, first+burst)
					case ak.Status == rdmo.StatusOK:
						ok[ak.Seq] = ak.Value
					case ak.Status == rdmo.StatusTooManyInFlight:
						n++
					default:
						t.Fatalf("ack %+v", ak)
					}
				}
				if int(rsp.Failed) != n || n > 0 && rsp.FirstStatus != rdmo.StatusTooManyInFlight {
					t.Fatalf("flush %+v after %d refused requests", rsp, n)
				}
				refused += n
			}
			if refused == 0 {
				t.Fatalf("no request was refused in 5 bursts of 2000 with a limit of %d", limit)
			}
			// Every accepted append is where its ack says, exactly once.
			if got, want := qA.tail(), qA.base+8+16*uint64(len(ok)); got != want {
				t.Fatalf("tail %#x, want %#x for %d accepted appends", got, want, len(ok))
			}
			seen := map[uint64]bool{}
			for s, addr := range ok {
				off := addr - qA.base
				v := binary.LittleEndian.Uint64(qA.data()[off:])
				if v != s || binary.LittleEndian.Uint64(qA.data()[off+8:]) != ^s || seen[addr] {
					t.Fatalf("append seq %d: at %#x found %d", s, addr, v)
				}
				seen[addr] = true
			}
			close(stopB)
			wg.Wait()
			if errB != nil {
				t.Fatalf("client B: %v", errB)
			}
			if err := checkQueue(qB.data()[8:qB.tail()-qB.base], map[int]int{0: sentB}); err != nil {
				t.Fatalf("client B: %v", err)
			}
			for _, f := range []fenced{qA, qB} {
				if err := f.guardsOK(); err != nil {
					t.Error(err)
				}
			}
			t.Logf("limit %d: %d appends accepted, %d refused with TooManyInFlight; client B appended %d records meanwhile",
				limit, len(ok), refused, sentB)
		})
	}
}

// The limits of the command path, through a UROM worker process: the
// default client limit answers with a typed error on the command channel,
// and a command larger than a UROM frame is refused by the host before
// it is sent.
func TestLimitsOverTheCommandChannel(t *testing.T) {
	tr := ucptest.Transports[0]
	ucptest.CheckLeaks(t)
	tgs := newTargets(t, tr, func() rdmoWorker { return startUROMWorker(t, tr, []string{"append", "flush", "scatter"}, nil) }, 1)
	tg := tgs[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for id := uint64(2); id <= dpu.DefaultMaxClients; id++ {
		if _, err := tg.worker.Do(ctx, dpu.ClientInit{ID: id, Addr: tg.addr}); err != nil {
			t.Fatalf("client %d of %d: %v", id, dpu.DefaultMaxClients, err)
		}
	}
	n, err := tg.worker.Do(ctx, dpu.ClientInit{ID: 1000, Addr: tg.addr})
	if !errors.Is(err, rdmo.ErrTooManyInFlight) || n.Status != rdmo.StatusTooManyInFlight || !strings.Contains(n.Detail, "too many clients") {
		t.Fatalf("client %d: %+v, %v; want the too-many-clients notification", dpu.DefaultMaxClients+1, n, err)
	}
	if st := tg.worker.Stats(); st.Clients != dpu.DefaultMaxClients {
		t.Fatalf("%d clients, want %d", st.Clients, dpu.DefaultMaxClients)
	}
	_, err = tg.worker.Do(ctx, dpu.MRReg{Client: 1, VA: 4096, Len: 4096, PackedRkey: make([]byte, urom.MaxFrame+1)})
	if !errors.Is(err, urom.ErrFrameTooLarge) {
		t.Fatalf("MR_REG with a packed rkey over the frame limit: %v, want urom.ErrFrameTooLarge", err)
	}
	// The worker is still there.
	if _, err := tg.worker.Do(ctx, dpu.MRReg{Client: 1, VA: 4096, Len: 4096}); !errors.Is(err, dpu.ErrInvalidCommand) && !errors.Is(err, rdmo.ErrPayloadMismatch) {
		t.Fatalf("MR_REG without a packed rkey: %v", err)
	}
}

// A host chooses some of a worker process's environment (SpawnOptions.Env,
// meant for UCX_TLS and the like). It must not be able to make the worker,
// which runs as the UROM service's user on the DPU, load code or write
// files of the host's choosing: such entries are refused with
// ErrBadRequest and the worker is not started.
func TestBadInputSpawnEnvironment(t *testing.T) {
	testproc.CheckNoLeftovers(t)
	tr := ucptest.Transports[0]
	addr := uromtest.Start(t, service.Config{
		Builtins:         rdmoworker.Builtins(),
		MaxWorkers:       4,
		WorkerCommand:    []string{os.Args[0], "-test.run=^$"},
		WorkerEnv:        workerEnv(tr),
		ComponentVersion: command.ComponentVersion,
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := urom.Dial(ctx, addr, urom.ClientOptions{ComponentVersion: command.ComponentVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dir := t.TempDir()
	for _, env := range []string{
		"UCX_LOG_FILE=" + dir + "/clobbered", // UCX opens (truncates) it at start-up
		"LD_PRELOAD=" + dir + "/evil.so",
		"LD_LIBRARY_PATH=" + dir,
		"UCX_MODULE_DIR=" + dir,
		"UCX_HANDLE_ERRORS=debug", // with UCX_GDB_COMMAND, runs a command on a fault
	} {
		w, err := c.Spawn(ctx, urom.SpawnOptions{Plugins: []string{"append", "flush", "scatter"}, Env: []string{env}})
		if err == nil {
			w.Stop(ctx)
		}
		if !errors.Is(err, urom.ErrBadRequest) {
			t.Errorf("spawn with %s: %v, want ErrBadRequest", env, err)
		}
	}
	if _, err := os.Stat(dir + "/clobbered"); err == nil {
		t.Errorf("a host made the worker create %s/clobbered", dir)
	}
	// What the option is for still works.
	w, err := c.Spawn(ctx, urom.SpawnOptions{Plugins: []string{"append"}, Env: []string{"UCX_TLS=" + tr.TLS}})
	if err != nil {
		t.Fatalf("spawn with UCX_TLS: %v", err)
	}
	w.Stop(ctx)
}

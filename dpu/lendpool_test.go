package dpu_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	rdmoinit "github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/internal/testutil"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/plugins/flush"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// lendPool registers n bytes of fresh UCX memory as pool id on the raw
// initiator's connection and returns the memory and the ack.
func (s *setup) lendPool(id wire.PoolID, n int, claim uint64) (*ucp.Memory, wire.AckResponse) {
	s.e.t.Helper()
	mem, err := s.e.ctx.Allocate(n)
	if err != nil {
		s.e.t.Fatal(err)
	}
	s.e.t.Cleanup(func() { mem.Close() })
	packed, err := mem.PackRkey()
	if err != nil {
		s.e.t.Fatal(err)
	}
	if claim == 0 {
		claim = uint64(n)
	}
	hdr := wire.AppendLendPoolRequest(nil, wire.Header{ClientID: s.client, Flags: rdmo.FlagAck},
		wire.LendPoolHeader{Pool: id, VA: mem.Address(), Len: claim})
	return mem, s.in.ack(s.in.send(hdr, packed, ucp.SendEager))
}

// lendingInitiator connects an initiator.Initiator with Options.Lend (as
// the worker's capabilities allow) to the setup's client, closed when the
// test ends, and makes it a lend pool of n bytes.
func (s *setup) lendingInitiator(ctx context.Context, n int) (*rdmoinit.Initiator, *rdmoinit.LendPool) {
	t := s.e.t
	t.Helper()
	in, err := rdmoinit.New(rdmoinit.Options{WorkerAddress: s.waddr, ClientID: s.client, Context: s.e.ctx,
		Lend: rdmoinit.LendSupported(dpu.Capabilities()), Logger: nopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	s.e.do(dpu.RQCreate{Client: s.client, Addr: in.Address()})
	pool, err := in.NewLendPool(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	return in, pool
}

// byRef sends an acked opPut of the bytes ref names, to addr.
func (s *setup) byRef(ref wire.PoolRef, addr uint64, flags uint32) uint64 {
	return s.in.send(userReq(s.client, opPut, flags, s.region, addr), wire.AppendPoolRef(nil, ref), ucp.SendEager)
}

// The worker reads a FlagByRef payload in the initiator's lend pool in
// place (shared memory), and answers every bad reference with a typed
// failure while it goes on serving; over TCP it cannot map the pool and
// says so, and the initiator then sends bytes.
func TestLendPoolRequests(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers()})
		s := e.newSetup(1, 1<<20, 0, 1<<20)
		const poolLen = 256 << 10
		mem, a := s.lendPool(7, poolLen, 0)
		if tr.Name == "tcp" {
			if a.Status != rdmo.StatusOK || a.Value != 0 {
				t.Fatalf("registration over tcp: %s, value %d; want OK, 0 (not mapped)", a.Status.Name(), a.Value)
			}
			a := s.in.ack(s.byRef(wire.PoolRef{Pool: 7, Len: 8}, s.base, rdmo.FlagAck|rdmo.FlagByRef))
			if a.Status != rdmo.StatusUnknownPool {
				t.Fatalf("reference to the unmapped pool: %s, want UnknownPool", a.Status.Name())
			}
			return
		}
		if a.Status != rdmo.StatusOK || a.Value != wire.LendPoolMapped {
			t.Fatalf("registration: %s, value %d (%s)", a.Status.Name(), a.Value, s.in.details[a.Seq])
		}
		pool := mem.Bytes()
		for i := range pool {
			pool[i] = byte(i*7 + i>>8)
		}
		// 100 KiB at offset 4 KiB of the pool land at offset 64 KiB of the
		// region, exactly.
		const off, n, at = 4 << 10, 100 << 10, 64 << 10
		if a := s.in.ack(s.byRef(wire.PoolRef{Pool: 7, Offset: off, Len: n}, s.base+at, rdmo.FlagAck|rdmo.FlagByRef)); a.Status != rdmo.StatusOK {
			t.Fatalf("by-reference put: %s (%s)", a.Status.Name(), s.in.details[a.Seq])
		}
		if !bytes.Equal(s.mem(s.base+at, n), pool[off:off+n]) {
			t.Fatal("the region does not hold the pool's bytes")
		}
		if s.mem(s.base+at-1, 1)[0] != guard || s.mem(s.base+at+n, 1)[0] != guard {
			t.Fatal("bytes around the put changed")
		}

		bad := []struct {
			name   string
			ref    wire.PoolRef
			flags  uint32
			status rdmo.Status
		}{
			{"unknown pool", wire.PoolRef{Pool: 8, Len: 1}, rdmo.FlagAck | rdmo.FlagByRef, rdmo.StatusUnknownPool},
			{"offset past the end", wire.PoolRef{Pool: 7, Offset: poolLen, Len: 1}, rdmo.FlagAck | rdmo.FlagByRef, rdmo.StatusUnknownPool},
			{"length past the end", wire.PoolRef{Pool: 7, Offset: 1, Len: poolLen}, rdmo.FlagAck | rdmo.FlagByRef, rdmo.StatusUnknownPool},
			{"length wraps", wire.PoolRef{Pool: 7, Offset: 16, Len: ^uint64(0) - 8}, rdmo.FlagAck | rdmo.FlagByRef, rdmo.StatusUnknownPool},
			{"no bytes", wire.PoolRef{Pool: 7}, rdmo.FlagAck | rdmo.FlagByRef, rdmo.StatusPayloadMismatch},
		}
		for _, b := range bad {
			if a := s.in.ack(s.byRef(b.ref, s.base, b.flags)); a.Status != b.status {
				t.Errorf("%s: %s, want %s", b.name, a.Status.Name(), b.status.Name())
			}
		}
		// Without ACK nobody would learn when the bytes were read: refused,
		// and reported by the next flush.
		s.in.flush(2)
		seq := s.byRef(wire.PoolRef{Pool: 7, Len: 8}, s.base, rdmo.FlagByRef)
		if _, f := s.in.flush(1); f.Failed != 1 || f.FirstSeq != seq || f.FirstStatus != rdmo.StatusPayloadMismatch {
			t.Errorf("flush after BYREF without ACK: %+v", f)
		}
		// A reference of the wrong size.
		short := s.in.send(userReq(s.client, opPut, rdmo.FlagAck|rdmo.FlagByRef, s.region, s.base), make([]byte, 16), ucp.SendEager)
		if a := s.in.ack(short); a.Status != rdmo.StatusPayloadMismatch {
			t.Errorf("16-byte reference: %s, want PayloadMismatch", a.Status.Name())
		}
		if _, a := s.lendPool(7, 4096, 0); a.Status != rdmo.StatusPoolRefused {
			t.Errorf("second registration of pool 7: %s, want PoolRefused", a.Status.Name())
		}
		// A pool that claims more than was mapped is refused, not read past.
		if _, a := s.lendPool(9, 4096, 1<<40); a.Status != rdmo.StatusPoolRefused {
			t.Errorf("pool claiming 1 TiB: %s, want PoolRefused", a.Status.Name())
		}
		if !bytes.Equal(s.mem(s.base, 16), bytes.Repeat([]byte{guard}, 16)) {
			t.Fatal("a refused request wrote into the region")
		}

		// Release: later references fail, a second release too.
		rel := func() wire.AckResponse {
			return s.in.ack(s.in.send(wire.AppendLendPoolRequest(nil, wire.Header{ClientID: s.client, Flags: rdmo.FlagAck},
				wire.LendPoolHeader{Pool: 7}), nil, ucp.SendEager))
		}
		if a := rel(); a.Status != rdmo.StatusOK {
			t.Fatalf("release: %s", a.Status.Name())
		}
		if a := s.in.ack(s.byRef(wire.PoolRef{Pool: 7, Len: 8}, s.base, rdmo.FlagAck|rdmo.FlagByRef)); a.Status != rdmo.StatusUnknownPool {
			t.Errorf("reference after release: %s, want UnknownPool", a.Status.Name())
		}
		if a := rel(); a.Status != rdmo.StatusUnknownPool {
			t.Errorf("second release: %s, want UnknownPool", a.Status.Name())
		}
		// The worker still serves: a new pool under the old id works.
		mem2, a := s.lendPool(7, 4096, 0)
		if a.Status != rdmo.StatusOK {
			t.Fatalf("re-registration: %s", a.Status.Name())
		}
		copy(mem2.Bytes(), "after all that")
		if a := s.in.ack(s.byRef(wire.PoolRef{Pool: 7, Len: 14}, s.base, rdmo.FlagAck|rdmo.FlagByRef)); a.Status != rdmo.StatusOK {
			t.Fatalf("put from the new pool: %s", a.Status.Name())
		}
		if got := string(s.mem(s.base, 14)); got != "after all that" {
			t.Fatalf("region holds %q", got)
		}
	})
}

// An Initiator with Options.Lend appends records from a LendPool: over
// shared memory it sends references for the records above the rendezvous
// threshold, and their Lend comes back when the worker's ack says the
// bytes were read (not when the 24-byte send completed); smaller records,
// and every record over TCP, are lent by value. Either way every record
// lands byte for byte, although the caller overwrites each buffer as soon
// as it is returned.
func TestLendPoolAppends(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		slow := newSlow(t)
		e := newEnv(t, tr, dpu.Config{Handlers: []rdmo.Handler{appendop.New(appendop.Options{}), flush.New(), slow}})
		s := e.newSetup(1, 4<<20, 0, 4<<20)
		tail := s.mem(s.base, 8)
		le.PutUint64(tail, s.base+64)
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		in, pool := s.lendingInitiator(ctx, 1<<20)
		if want := tr.Name == "shm"; pool.ByReference() != want {
			t.Fatalf("ByReference %v over %s (%v)", pool.ByReference(), tr.Name, pool.Unmapped())
		}
		if tr.Name == "tcp" && !errors.Is(pool.Unmapped(), rdmoinit.ErrPoolUnmapped) {
			t.Errorf("Unmapped over tcp: %v", pool.Unmapped())
		}

		// A fenced append behind a blocked op has arrived but cannot
		// have been read: by reference its Lend stays out.
		buf := pool.Bytes()
		if err := in.User(opSlow, le.AppendUint64(le.AppendUint64(nil, s.region), s.base+8), []byte("slow")); err != nil {
			t.Fatal(err)
		}
		const firstLen = 20 << 10
		first := buf[:firstLen]
		fill(first, 1)
		var l rdmoinit.Lend
		before := e.w.Stats().Requests[rdmo.OpAppend]
		if _, err := in.With(ctx, rdmo.FlagFence).AppendLent(s.base, s.region, s.region, first, &l); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the fenced append to arrive", func() bool { return e.w.Stats().Requests[rdmo.OpAppend] > before })
		if tr.Name == "shm" && !l.Busy() {
			t.Fatal("a by-reference Lend came back before the worker ran the append")
		}
		slow.release()
		if err := l.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		fill(first, 0xEE)

		want := append([]byte(nil), pattern(firstLen, 1)...)
		sizes := []int{100, 4 << 10, 64 << 10, 300 << 10}
		lends := make([]rdmoinit.Lend, len(sizes))
		off := firstLen
		for i, n := range sizes {
			rec := buf[off : off+n]
			fill(rec, byte(i+2))
			want = append(want, rec...)
			if err := in.AppendLent(s.base, s.region, s.region, rec, &lends[i]); err != nil {
				t.Fatal(err)
			}
			off += n
		}
		for i := range lends {
			if err := lends[i].Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		fill(buf[firstLen:off], 0xEE) // the caller's again
		s.flushQueue(ctx, in, want)
		st := in.Stats()
		if tr.Name == "shm" {
			// The records above the rendezvous threshold went as 24-byte
			// references, each acked; the 100 and 4096 bytes by value,
			// besides the slow op's 4 and the pool's key.
			if st.Acks < 3 {
				t.Errorf("%d acks for 3 by-reference appends", st.Acks)
			}
			if st.PayloadBytes > 100+4096+4096 {
				t.Errorf("%d payload bytes sent, more than the by-value records, the references and the key", st.PayloadBytes)
			}
		} else if st.PayloadBytes < uint64(len(want)) {
			t.Errorf("%d payload bytes sent, the records alone are %d", st.PayloadBytes, len(want))
		}

		// Close has nothing to wait for now; it releases the pool, and a
		// second Close says it is closed.
		if err := pool.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := pool.Close(ctx); !errors.Is(err, rdmoinit.ErrPoolClosed) {
			t.Fatalf("second Close: %v", err)
		}
	})
}

// flushQueue flushes in and checks that the setup's append queue (its
// tail at base, records from base+64) holds exactly want.
func (s *setup) flushQueue(ctx context.Context, in *rdmoinit.Initiator, want []byte) {
	t := s.e.t
	t.Helper()
	if rsp, err := in.Flush(ctx); err != nil || rsp.Failed != 0 {
		t.Fatalf("flush: %+v, %v", rsp, err)
	}
	if got := le.Uint64(s.mem(s.base, 8)); got != s.base+64+uint64(len(want)) {
		t.Fatalf("tail %#x, want %#x", got, s.base+64+uint64(len(want)))
	}
	if !bytes.Equal(s.mem(s.base+64, len(want)), want) {
		t.Fatal("the queue does not hold the records as lent")
	}
}

// waitFor polls cond until it holds, failing the test at its deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := testutil.Deadline(t)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

func fill(b []byte, seed byte) {
	copy(b, pattern(len(b), seed))
}

// UserLent lends a plugin op's payload as AppendLent does: from a pool the
// worker maps, above the rendezvous threshold, the handler reads it in
// place as its Request.Payload; below it, and over TCP, it travels.
func TestLendPoolUserOps(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers()})
		s := e.newSetup(1, 1<<20, 0, 1<<20)
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		in, pool := s.lendingInitiator(ctx, 256<<10)
		buf := pool.Bytes()
		big, small := buf[:100<<10], buf[100<<10:100<<10+500]
		fill(big, 3)
		fill(small, 4)
		var lb, ls rdmoinit.Lend
		put := func(addr uint64) []byte { return le.AppendUint64(le.AppendUint64(nil, s.region), addr) }
		if err := in.UserLent(opPut, put(s.base), big, &lb); err != nil {
			t.Fatal(err)
		}
		if err := in.UserLent(opPut, put(s.base+200<<10), small, &ls); err != nil {
			t.Fatal(err)
		}
		if err := lb.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := ls.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if rsp, err := in.Flush(ctx); err != nil || rsp.Failed != 0 {
			t.Fatalf("flush: %+v, %v", rsp, err)
		}
		if !bytes.Equal(s.mem(s.base, len(big)), pattern(len(big), 3)) || !bytes.Equal(s.mem(s.base+200<<10, len(small)), pattern(len(small), 4)) {
			t.Fatal("the region does not hold the lent payloads")
		}
		// On shm the 100 KiB went as a reference: far fewer payload bytes
		// than it travelled.
		if st := in.Stats(); (tr.Name == "shm") != (st.PayloadBytes < 64<<10) {
			t.Errorf("%d payload bytes over %s for a 100 KiB and a 500-byte payload", st.PayloadBytes, tr.Name)
		}
		if err := in.UserLent(rdmo.OpAppend, nil, small, &ls); !errors.Is(err, rdmo.ErrUnknownOp) {
			t.Errorf("UserLent of a reference op: %v", err)
		}
	})
}

// Records too large for two to share the loop's payload budget of a round
// (dpu's inlineBytes, 1 MiB) all run on the loop, a round each, when they
// become ready together: none is sent to the client's executor. They wait
// behind a fenced first record that waits for a blocked op, so that all of
// them are queued when the op ends. Over TCP the worker cannot map the
// pool, nothing runs inline, and only the records are checked.
func TestLendPoolRecordsCarryOver(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		slow := newSlow(t)
		e := newEnv(t, tr, dpu.Config{Handlers: []rdmo.Handler{appendop.New(appendop.Options{}), flush.New(), slow}})
		const recLen, records = 600 << 10, 5
		s := e.newSetup(1, 4<<20, 0, 4<<20)
		tail := s.mem(s.base, 8)
		le.PutUint64(tail, s.base+64)
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		in, pool := s.lendingInitiator(ctx, records*recLen)
		if err := in.User(opSlow, le.AppendUint64(le.AppendUint64(nil, s.region), s.base+8), []byte("slow")); err != nil {
			t.Fatal(err)
		}
		buf := pool.Bytes()
		var want []byte
		lends := make([]rdmoinit.Lend, records)
		before := e.w.Stats()
		for i := range lends {
			rec := buf[i*recLen : (i+1)*recLen]
			fill(rec, byte(i+1))
			want = append(want, rec...)
			snd := in.With(ctx, 0)
			if i == 0 {
				snd = in.With(ctx, rdmo.FlagFence)
			}
			if _, err := snd.AppendLent(s.base, s.region, s.region, rec, &lends[i]); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the records to arrive", func() bool {
			return e.w.Stats().Requests[rdmo.OpAppend]-before.Requests[rdmo.OpAppend] >= records
		})
		slow.release()
		for i := range lends {
			if err := lends[i].Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		s.flushQueue(ctx, in, want)
		if tr.Name != "shm" {
			return
		}
		after := e.w.Stats()
		// The slow op's batch ran at the executor, every record's on the
		// loop, one batch each; the FLUSH, which writes the queue's tail
		// back, may run at either.
		batches, inline := after.Batches-before.Batches, after.InlineBatches-before.InlineBatches
		if inline < records || batches-inline > 2 {
			t.Fatalf("%d batches, %d of them on the loop: want the %d records each alone on the loop",
				batches, inline, records)
		}
	})
}

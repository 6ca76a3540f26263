package dpu_test

import (
	"bytes"
	"testing"

	"github.com/openrdmo/rdmo/dpu"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/plugins/flush"
	"github.com/openrdmo/rdmo/plugins/scatter"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

func appendReq(client uint64, flags uint32, ptrAddr, ptrRkey, dataRkey uint64) []byte {
	return wire.AppendAppendRequest(nil, wire.Header{ClientID: client, Flags: flags},
		rdmo.AppendHeader{PtrAddr: ptrAddr, PtrRkey: rdmo.RegionID(ptrRkey), DataRkey: rdmo.RegionID(dataRkey)})
}

// The reference demo (docs/PROTOCOL.md section 12.1) and more, through the real handlers.
func TestPluginsEndToEnd(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: []rdmo.Handler{
			appendop.New(appendop.Options{}), flush.New(), scatter.New(scatter.Options{}),
		}})
		const qlen = 128 << 10
		s := e.newSetup(0, 2*qlen, 0, qlen) // the reference target registers client 0
		in := s.in
		q := s.base
		le.PutUint64(s.mem(q, 8), q+8)
		scat := e.do(dpu.MRReg{Client: 0, VA: q + qlen, Len: qlen, PackedRkey: s.tgt.packedRkey(t)}).Region

		// Append 8 bytes of 0x33, flush 0xBEEF.
		one := bytes.Repeat([]byte{0x33}, 8)
		seq := in.send(appendReq(0, rdmo.FlagAck, q, s.region, s.region), one, 0)
		if a := in.ack(seq); a.Status != 0 || a.Value != q+8 {
			t.Fatalf("append ack %+v, want value %#x", a, q+8)
		}
		if _, f := in.flush(0xBEEF); f.Failed != 0 {
			t.Fatalf("flush %+v", f)
		}
		if got := le.Uint64(s.mem(q, 8)); got != q+16 || !bytes.Equal(s.mem(q+8, 8), one) {
			t.Fatalf("after the first append: tail %#x (want %#x), data %x", got, q+16, s.mem(q+8, 8))
		}

		// Many small appends: coalesced, in order.
		var want []byte
		for i := 0; i < 300; i++ {
			p := pattern(1+i%40, byte(i))
			want = append(want, p...)
			in.send(appendReq(0, 0, q, s.region, s.region), p, 0)
		}
		// A rendezvous append goes straight into target memory.
		big := pattern(40<<10, 99)
		want = append(want, big...)
		in.send(appendReq(0, 0, q, s.region, s.region), big, ucp.SendRendezvous)
		if _, f := in.flush(2); f.Failed != 0 {
			t.Fatalf("flush %+v", f)
		}
		end := q + 16 + uint64(len(want))
		if got := le.Uint64(s.mem(q, 8)); got != end {
			t.Fatalf("tail %#x, want %#x", got, end)
		}
		if !bytes.Equal(s.mem(q+16, len(want)), want) {
			t.Fatalf("appended data differs")
		}

		// Scatter 16 chunks of 8 bytes.
		var payload []byte
		for i := 0; i < 16; i++ {
			var err error
			payload, err = wire.AppendIOV(payload, wire.IOV{Addr: q + qlen + uint64(i)*64, Rkey: rdmo.RegionID(scat), Len: 8}, bytes.Repeat([]byte{byte(i)}, 8))
			if err != nil {
				t.Fatal(err)
			}
		}
		in.send(wire.AppendScatterRequest(nil, wire.Header{ClientID: 0}, rdmo.ScatterHeader{Count: 16}), payload, 0)
		if _, f := in.flush(3); f.Failed != 0 {
			t.Fatalf("flush %+v", f)
		}
		for i := 0; i < 16; i++ {
			if !bytes.Equal(s.mem(q+qlen+uint64(i)*64, 8), bytes.Repeat([]byte{byte(i)}, 8)) {
				t.Fatalf("scatter chunk %d not in target memory", i)
			}
		}

		// The cached tail is written back by MR_DEREG (reference defect 3).
		seq = in.send(appendReq(0, rdmo.FlagAck, q, s.region, s.region), one, 0)
		in.ack(seq)
		if got := le.Uint64(s.mem(q, 8)); got != end {
			t.Fatalf("tail moved before a flush: %#x", got)
		}
		e.do(dpu.MRDereg{Client: 0, Region: s.region}, in)
		if got := le.Uint64(s.mem(q, 8)); got != end+8 {
			t.Errorf("tail after MR_DEREG %#x, want the written-back %#x", got, end+8)
		}
		seq = in.send(appendReq(0, rdmo.FlagAck, q, s.region, s.region), one, 0)
		if a := in.ack(seq); a.Status != rdmo.StatusUnknownRegion && a.Status != rdmo.StatusRegionGone {
			t.Errorf("append to a deregistered queue: %+v", a)
		}
		st := e.w.Stats()
		t.Logf("%s: %d requests in %d batches (sizes %v); %d UCX puts, %d memcpy puts, %d places, %d syncs",
			tr.Name, st.BatchedRequests, st.Batches, st.BatchSizes, st.TargetPuts, st.MemcpyPuts, st.Places, st.Syncs)
	})
}

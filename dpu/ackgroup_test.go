package dpu_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// ACK groups (docs/PROTOCOL.md section 14): the acks of one container's
// requests sent with FlagAckGroup come in one message, each entry as its
// ack would be; requests without the flag keep their own ack; a group of
// one is the ack itself; and every answer made before a flush response
// arrives before it.
func TestAckGroups(t *testing.T) {
	if !slices.Contains(dpu.Capabilities(), wire.CapabilityAckGroup) {
		t.Fatalf("capabilities %v lack %q", dpu.Capabilities(), wire.CapabilityAckGroup)
	}
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		e := newEnv(t, tr, dpu.Config{Handlers: allHandlers()})
		s := e.newSetup(1, 8192, 0, 4096)
		in := s.in
		grouped := rdmo.FlagAck | rdmo.FlagAckGroup
		put := func(flags uint32, off uint64, seed byte) entry {
			return entry{userReq(1, opPut, flags, s.region, s.base+off), pattern(8, seed)}
		}
		// 20 grouped puts, one of them out of bounds (its failure and
		// detail travel in the group), then one put with its own ack.
		var ents []entry
		for i := range 20 {
			off := uint64(8 * i)
			if i == 7 {
				off = 1 << 20
			}
			ents = append(ents, put(grouped, off, byte(i)))
		}
		ents = append(ents, put(rdmo.FlagAck, 200, 20))
		seqs := in.sendBatch(ents...)
		lone := in.send(put(grouped, 300, 21).hdr, pattern(8, 21), 0)
		_, rsp := in.flush(0xa11)
		if rsp.Failed != 1 || rsp.FirstSeq != seqs[7] {
			t.Fatalf("flush reports %+v; want the one failure, seq %d", rsp, seqs[7])
		}
		for i, seq := range append(seqs, lone) {
			a, ok := in.acks[seq]
			switch {
			case !ok:
				t.Fatalf("request %d (seq %d) has no ack", i, seq)
			case i == 7:
				if a.Status != rdmo.StatusOutOfBounds || in.details[seq] == "" {
					t.Errorf("out-of-bounds put: %+v, detail %q", a, in.details[seq])
				}
			case a.Status != rdmo.StatusOK || a.Op != opPut:
				t.Errorf("request %d: %+v", i, a)
			}
		}
		// The container's 20 grouped acks in one or more groups of
		// several, in order; the lone grouped put's as a plain ack.
		if len(in.groups) == 0 || slices.Contains(in.groups, 1) {
			t.Errorf("groups %v: want groups of several entries", in.groups)
		}
		total := 0
		for _, n := range in.groups {
			total += n
		}
		if total != 20 {
			t.Errorf("groups %v hold %d acks, want 20", in.groups, total)
		}
		var want []string
		for _, seq := range seqs {
			want = append(want, fmt.Sprintf("ack:%d", seq))
		}
		want = append(want, fmt.Sprintf("ack:%d", lone), "flush:2577")
		if !slices.Equal(in.order, want) {
			t.Errorf("answers in order %v, want %v", in.order, want)
		}
		if st := e.w.Stats(); st.AckGroups != uint64(len(in.groups)) || st.Acks != 22 {
			t.Errorf("worker stats: %d ack groups, %d acks; the initiator saw %d groups and 22 acks", st.AckGroups, st.Acks, len(in.groups))
		}
		for i := range 20 {
			if i == 7 {
				continue
			}
			if got := s.mem(s.base+uint64(8*i), 8); !slices.Equal(got, pattern(8, byte(i))) {
				t.Fatalf("put %d wrote %x", i, got)
			}
		}
	})
}

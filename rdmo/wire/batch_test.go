package wire_test

import (
	"bytes"
	"math"
	"testing"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// batchEntry is one inner request for the batch tests.
type batchEntry struct {
	hdr, payload []byte
}

// sampleEntries are inner requests of every kind, flags included, with
// header and payload lengths that exercise the padding.
func sampleEntries(t testing.TB) []batchEntry {
	t.Helper()
	h := wire.Header{ClientID: 0x1122334455667788}
	scatter, _, _ := scatterPayload(t, 3, 0, 9)
	user5, _ := wire.AppendUserRequest(nil, wire.Header{ClientID: h.ClientID, Op: rdmo.OpUserBase + 1, Flags: rdmo.FlagAck}, []byte{1, 2, 3, 4, 5})
	user48, _ := wire.AppendUserRequest(nil, wire.Header{ClientID: h.ClientID, Op: rdmo.OpUserBase}, bytes.Repeat([]byte{7}, 48))
	return []batchEntry{
		{wire.AppendAppendRequest(nil, h, rdmo.AppendHeader{PtrAddr: 0x1000, PtrRkey: 1, DataRkey: 2}), []byte("0123456789")},
		{wire.AppendAppendRequest(nil, wire.Header{ClientID: h.ClientID, Flags: rdmo.FlagFence | rdmo.FlagAck},
			rdmo.AppendHeader{PtrAddr: 0x2000, PtrRkey: 3, DataRkey: 3}), bytes.Repeat([]byte{0x33}, 64)},
		{wire.AppendScatterRequest(nil, h, rdmo.ScatterHeader{Count: 3}), scatter},
		{user5, []byte{9}},
		{user48, nil},
		{wire.AppendFlushRequest(nil, wire.Header{ClientID: h.ClientID, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: 0xBEEF}), nil},
	}
}

func encodeBatch(t testing.TB, ents []batchEntry) []byte {
	t.Helper()
	var data []byte
	for i, e := range ents {
		var err error
		if data, err = wire.AppendBatchEntry(data, e.hdr, e.payload); err != nil {
			t.Fatalf("AppendBatchEntry(%d): %v", i, err)
		}
	}
	return data
}

func TestBatchRoundTrip(t *testing.T) {
	ents := sampleEntries(t)
	hdr := wire.AppendBatchRequest(nil, wire.Header{ClientID: 5, Op: rdmo.OpAppend}, wire.BatchHeader{Count: uint64(len(ents))})
	if len(hdr) != wire.BatchHeaderLen {
		t.Fatalf("container header is %d bytes, want %d", len(hdr), wire.BatchHeaderLen)
	}
	r, err := wire.ParseRequest(hdr)
	if err != nil {
		t.Fatal(err)
	}
	if r.Header != (wire.Header{ClientID: 5, Op: rdmo.OpBatch}) || r.Batch.Count != uint64(len(ents)) {
		t.Fatalf("container header decoded as %+v", r)
	}
	data := encodeBatch(t, ents)
	if len(data)%wire.BatchAlign != 0 {
		t.Fatalf("container data is %d bytes, not a multiple of 8", len(data))
	}
	want := 0
	for _, e := range ents {
		want += wire.BatchEntrySize(len(e.hdr), len(e.payload))
	}
	if len(data) != want {
		t.Fatalf("container data is %d bytes, BatchEntrySize sums to %d", len(data), want)
	}
	wantStatus(t, r.CheckPayload(data), rdmo.StatusOK)

	it := wire.NewBatchIter(data, r.Batch.Count)
	off := 0
	for i := 0; it.Next(); i++ {
		e := ents[i]
		if !bytes.Equal(it.Header(), e.hdr) || !bytes.Equal(it.Payload(), e.payload) {
			t.Fatalf("entry %d: header %x payload %x, want %x %x", i, it.Header(), it.Payload(), e.hdr, e.payload)
		}
		if off%wire.BatchAlign != 0 {
			t.Fatalf("entry %d starts at offset %d", i, off)
		}
		// The entry header's fields, read by hand at their offsets.
		if got := le.Uint16(data[off+wire.BatchEntryHdrLenOffset:]); int(got) != len(e.hdr) {
			t.Fatalf("entry %d: hdr_len %d", i, got)
		}
		if got := le.Uint32(data[off+wire.BatchEntryPayloadLenOffset:]); int(got) != len(e.payload) {
			t.Fatalf("entry %d: payload_len %d", i, got)
		}
		if got := le.Uint16(data[off+wire.BatchEntryFlagsOffset:]); got != 0 || it.EntryFlags() != 0 {
			t.Fatalf("entry %d: flags %d", i, got)
		}
		poff := off + wire.BatchEntryHeaderLen + len(e.hdr)
		if it.PayloadOffset() != poff {
			t.Fatalf("entry %d: PayloadOffset %d, want %d", i, it.PayloadOffset(), poff)
		}
		// Padding is zero.
		end := off + wire.BatchEntrySize(len(e.hdr), len(e.payload))
		if !bytes.Equal(data[poff+len(e.payload):end], make([]byte, end-poff-len(e.payload))) {
			t.Fatalf("entry %d: padding not zero", i)
		}
		// Slices alias the data without spare capacity.
		if cap(it.Header()) != len(it.Header()) || cap(it.Payload()) != len(it.Payload()) {
			t.Fatalf("entry %d: slices have spare capacity", i)
		}
		inner, err := it.Request()
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		want, _ := wire.ParseRequest(e.hdr)
		if inner.Header != want.Header || inner.Append != want.Append || inner.Flush != want.Flush ||
			inner.Scatter != want.Scatter || !bytes.Equal(inner.User, want.User) {
			t.Fatalf("entry %d: decoded %+v, want %+v", i, inner, want)
		}
		wantStatus(t, inner.CheckPayload(it.Payload()), rdmo.StatusOK)
		if it.Index() != uint64(i+1) {
			t.Fatalf("Index %d after entry %d", it.Index(), i)
		}
		off = end
	}
	wantStatus(t, it.Err(), rdmo.StatusOK)
	if it.Index() != uint64(len(ents)) {
		t.Fatalf("walked %d of %d entries", it.Index(), len(ents))
	}

	// An empty container is valid and does nothing.
	empty := wire.NewBatchIter(nil, 0)
	if empty.Next() || empty.Err() != nil {
		t.Fatalf("empty container: %v", empty.Err())
	}
}

func TestAppendBatchEntryErrors(t *testing.T) {
	good := wire.AppendFlushRequest(nil, wire.Header{}, rdmo.FlushHeader{})
	nested := wire.AppendBatchRequest(nil, wire.Header{}, wire.BatchHeader{})
	dst := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	for _, tt := range []struct {
		name string
		hdr  []byte
		want rdmo.Status
	}{
		{"short", good[:15], rdmo.StatusShortHeader},
		{"long", make([]byte, 65), rdmo.StatusHeaderTooLong},
		{"nested", nested, rdmo.StatusUnknownOp},
	} {
		out, err := wire.AppendBatchEntry(dst, tt.hdr, nil)
		wantStatus(t, err, tt.want)
		if !bytes.Equal(out, dst) {
			t.Errorf("%s: dst changed on error", tt.name)
		}
	}
}

// entryBytes builds one entry by hand, so tests can lie in its fields.
func entryBytes(hdrLen uint16, flags uint16, payloadLen uint32, body []byte, pad int) []byte {
	b := le.AppendUint16(nil, hdrLen)
	b = le.AppendUint16(b, flags)
	b = le.AppendUint32(b, payloadLen)
	b = append(b, body...)
	return append(b, make([]byte, pad)...)
}

func TestBatchIterFramingErrors(t *testing.T) {
	flush := wire.AppendFlushRequest(nil, wire.Header{ClientID: 1, Flags: rdmo.FlagFence}, rdmo.FlushHeader{FlushID: 1})
	one, err := wire.AppendBatchEntry(nil, flush, nil) // 32 bytes
	if err != nil {
		t.Fatal(err)
	}
	two := append(bytes.Clone(one), one...)
	tests := []struct {
		name  string
		data  []byte
		count uint64
		walk  int // entries decoded before the error
		want  rdmo.Status
	}{
		{"ok", two, 2, 2, rdmo.StatusOK},
		{"count too low: bytes left", two, 1, 1, rdmo.StatusPayloadMismatch},
		{"count too high: data ends", two, 3, 2, rdmo.StatusPayloadMismatch},
		{"count impossible", two, 9, 0, rdmo.StatusPayloadMismatch},
		{"count 2^64-1", two, math.MaxUint64, 0, rdmo.StatusPayloadMismatch},
		{"entry header truncated", append(bytes.Clone(one), 1, 2, 3), 2, 1, rdmo.StatusPayloadMismatch},
		{"lengths past the end", entryBytes(24, 0, 100, flush, 0), 1, 0, rdmo.StatusLengthOverflow},
		{"hdr_len past the end", entryBytes(65535, 0, 0, flush, 0), 1, 0, rdmo.StatusLengthOverflow},
		{"payload_len 2^32-1", entryBytes(24, 0, math.MaxUint32, flush, 0), 1, 0, rdmo.StatusLengthOverflow},
		{"padding missing", entryBytes(20, 0, 0, flush[:20], 0), 1, 0, rdmo.StatusPayloadMismatch},
		{"padding short", entryBytes(20, 0, 0, flush[:20], 3), 1, 0, rdmo.StatusPayloadMismatch},
		{"padding present", entryBytes(20, 0, 0, flush[:20], 4), 1, 1, rdmo.StatusOK},
		{"garbage padding is ignored", entryBytes(20, 0, 0, flush[:20], 4), 1, 1, rdmo.StatusOK},
		{"8 bytes left", append(bytes.Clone(two), make([]byte, 8)...), 2, 2, rdmo.StatusPayloadMismatch},
		{"empty with count 0", nil, 0, 0, rdmo.StatusOK},
		{"empty with count 1", nil, 1, 0, rdmo.StatusPayloadMismatch},
	}
	tests[12].data[len(tests[12].data)-1] = 0xFF
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := wire.NewBatchIter(tt.data, tt.count)
			n := 0
			for it.Next() {
				n++
			}
			if n != tt.walk {
				t.Errorf("decoded %d entries, want %d", n, tt.walk)
			}
			wantStatus(t, it.Err(), tt.want)
			wantStatus(t, wire.CheckBatchPayload(tt.data, tt.count), tt.want)
			r := wire.RequestHeader{Header: wire.Header{Op: rdmo.OpBatch}, Batch: wire.BatchHeader{Count: tt.count}}
			wantStatus(t, r.CheckPayload(tt.data), tt.want)
			if it.Next() {
				t.Error("Next true after the end")
			}
			if it.Header() != nil || it.Payload() != nil {
				t.Error("stale entry after the end")
			}
		})
	}
	if !wire.CountPlausible(two, 8) || wire.CountPlausible(two, 9) {
		t.Error("CountPlausible: 64 bytes hold at most 8 entries")
	}
	if wire.CountPlausible(two, 0) || !wire.CountPlausible(nil, 0) {
		t.Error("CountPlausible: a count of 0 comes with no data")
	}
}

// Malformed inner requests fail on their own; the framing around them is
// intact and the walk goes on.
func TestBatchInnerRequestErrors(t *testing.T) {
	flush := wire.AppendFlushRequest(nil, wire.Header{ClientID: 1, Flags: rdmo.FlagAck}, rdmo.FlushHeader{FlushID: 1})
	nested := wire.AppendBatchRequest(nil, wire.Header{ClientID: 1}, wire.BatchHeader{})
	var data []byte
	add := func(e []byte) { data = append(data, e...) }
	add(entryBytes(24, 0, 0, flush, 0))                                                            // 0: ok
	add(entryBytes(8, 0, 0, flush[:8], 0))                                                         // 1: short
	add(entryBytes(72, 0, 0, append(rawHeader(64, 1, rdmo.OpUserBase, 0), make([]byte, 8)...), 0)) // 2: too long
	add(entryBytes(24, 0, 0, nested, 0))                                                           // 3: nested
	add(entryBytes(24, 1, 0, flush, 0))                                                            // 4: entry flags
	add(entryBytes(24, 0, 0, rawHeader(24, 1, 7, 0), 0))                                           // 5: reserved op
	add(entryBytes(24, 0, 0, rawHeader(24, 1, rdmo.OpFlush, 1<<4), 0))                             // 6: unknown flag
	add(entryBytes(16, 0, 0, rawHeader(16, 1, rdmo.OpAppend, 0), 0))                               // 7: short append
	add(entryBytes(0, 0, 0, nil, 0))                                                               // 8: empty
	add(entryBytes(24, 0, 0, rawHeader(24, 1, rdmo.OpBatch, rdmo.FlagFence), 0))                   // 9: nested, flagged
	add(entryBytes(24, 0, 0, flush, 0))                                                            // 10: ok
	want := []rdmo.Status{rdmo.StatusOK, rdmo.StatusShortHeader, rdmo.StatusHeaderTooLong, rdmo.StatusUnknownOp,
		rdmo.StatusUnknownFlags, rdmo.StatusUnknownOp, rdmo.StatusUnknownFlags, rdmo.StatusShortHeader,
		rdmo.StatusShortHeader, rdmo.StatusUnknownFlags, rdmo.StatusOK}
	it := wire.NewBatchIter(data, uint64(len(want)))
	i := 0
	for ; it.Next(); i++ {
		r, err := it.Request()
		wantStatus(t, err, want[i])
		// The common header comes back whenever it is there.
		if len(it.Header()) >= wire.HeaderLen && r.Header.Op != le.Uint32(it.Header()[wire.HeaderOpOffset:]) {
			t.Errorf("entry %d: op %d not decoded", i, r.Header.Op)
		}
	}
	wantStatus(t, it.Err(), rdmo.StatusOK)
	if i != len(want) {
		t.Fatalf("walked %d entries", i)
	}
	// The entry flags are reported over the inner header's own errors,
	// but not over a header too short to name an op.
	_, err := wire.ParseBatchEntry(rawHeader(70, 1, rdmo.OpFlush, 0), 2)
	wantStatus(t, err, rdmo.StatusUnknownFlags)
	_, err = wire.ParseBatchEntry(make([]byte, 3), 2)
	wantStatus(t, err, rdmo.StatusShortHeader)
}

func TestBatchDoesNotAllocate(t *testing.T) {
	ents := sampleEntries(t)
	data := encodeBatch(t, ents)
	hdr := wire.AppendBatchRequest(nil, wire.Header{ClientID: 1}, wire.BatchHeader{Count: uint64(len(ents))})
	buf := make([]byte, 0, 4096)
	var sink uint64
	for name, fn := range map[string]func(){
		"walk": func() {
			r, err := wire.ParseRequest(hdr)
			if err != nil {
				panic(err)
			}
			if err := r.CheckPayload(data); err != nil {
				panic(err)
			}
			it := wire.NewBatchIter(data, r.Batch.Count)
			for it.Next() {
				inner, err := it.Request()
				if err != nil {
					panic(err)
				}
				if err := inner.CheckPayload(it.Payload()); err != nil {
					panic(err)
				}
				sink += uint64(inner.Header.Op)
			}
		},
		"encode": func() {
			b := wire.AppendBatchRequest(buf[:0], wire.Header{ClientID: 1}, wire.BatchHeader{Count: 6})
			for _, e := range ents {
				b, _ = wire.AppendBatchEntry(b, e.hdr, e.payload)
			}
			sink += uint64(len(b))
		},
	} {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %.1f allocs per run, want 0", name, n)
		}
	}
	_ = sink
}

func BenchmarkBatchIter(b *testing.B) {
	var ents []batchEntry
	h := wire.AppendAppendRequest(nil, wire.Header{ClientID: 1}, rdmo.AppendHeader{PtrAddr: 8, PtrRkey: 1, DataRkey: 1})
	for range 64 {
		ents = append(ents, batchEntry{h, make([]byte, 64)})
	}
	data := encodeBatch(b, ents)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		it := wire.NewBatchIter(data, 64)
		for it.Next() {
			if _, err := it.Request(); err != nil {
				b.Fatal(err)
			}
		}
		if it.Err() != nil {
			b.Fatal(it.Err())
		}
	}
}

func FuzzBatchIter(f *testing.F) {
	ents := sampleEntries(f)
	good := encodeBatch(f, ents)
	f.Add(good, uint64(len(ents)))
	f.Add(good, uint64(len(ents)-1))
	f.Add(good, uint64(len(ents)+1))
	f.Add(good[:len(good)-1], uint64(len(ents)))
	f.Add(append(bytes.Clone(good), 0), uint64(len(ents)))
	f.Add([]byte(nil), uint64(0))
	f.Add([]byte(nil), uint64(math.MaxUint64))
	f.Add(entryBytes(24, 3, 0, wire.AppendBatchRequest(nil, wire.Header{}, wire.BatchHeader{Count: 1}), 0), uint64(1))
	f.Add(entryBytes(0xFFFF, 0, 0xFFFFFFFF, nil, 0), uint64(1))
	f.Add(make([]byte, 64), uint64(8))

	f.Fuzz(func(t *testing.T, data []byte, count uint64) {
		it := wire.NewBatchIter(data, count)
		var reenc []byte
		var ignored []int // offsets of padding bytes, which decoders ignore
		var n uint64
		for it.Next() {
			hdr, payload := it.Header(), it.Payload()
			start := len(reenc)
			r, err := it.Request()
			if err != nil {
				checkDecodeError(t, err)
			} else {
				if r.Header.Op == rdmo.OpBatch {
					t.Fatalf("entry %d: nested batch accepted", n)
				}
				if it.EntryFlags() != 0 {
					t.Fatalf("entry %d: entry flags %d accepted", n, it.EntryFlags())
				}
				if err := r.CheckPayload(payload); err != nil {
					checkDecodeError(t, err)
				}
			}
			// Re-encode by hand: the encoder refuses malformed inner headers.
			reenc = le.AppendUint16(reenc, uint16(len(hdr)))
			reenc = le.AppendUint16(reenc, it.EntryFlags())
			reenc = le.AppendUint32(reenc, uint32(len(payload)))
			reenc = append(reenc, hdr...)
			reenc = append(reenc, payload...)
			for len(reenc)%wire.BatchAlign != 0 {
				ignored = append(ignored, len(reenc))
				reenc = append(reenc, 0)
			}
			if err == nil && it.EntryFlags() == 0 {
				enc, eerr := wire.AppendBatchEntry(nil, hdr, payload)
				if eerr != nil || !bytes.Equal(enc, reenc[start:]) {
					t.Fatalf("entry %d: AppendBatchEntry gives %x, %v; want %x", n, enc, eerr, reenc[start:])
				}
			}
			n++
		}
		err := it.Err()
		if cerr := wire.CheckBatchPayload(data, count); (err == nil) != (cerr == nil) {
			t.Fatalf("iterator error %v, CheckBatchPayload error %v", err, cerr)
		}
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		if n != count {
			t.Fatalf("clean end after %d of %d entries", n, count)
		}
		masked := bytes.Clone(data)
		for _, off := range ignored {
			masked[off] = 0
		}
		if !bytes.Equal(reenc, masked) {
			t.Fatalf("re-encoded data differs:\n got %x\nwant %x", reenc, masked)
		}
	})
}

package wire_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

type groupEntry struct {
	a            wire.AckResponse
	data, detail []byte
}

func buildGroup(entries []groupEntry) (hdr, data []byte) {
	hdr = wire.AppendAckGroupHeader(nil, uint32(len(entries)))
	for _, e := range entries {
		data = wire.AppendAckGroupEntry(data, e.a, e.data, e.detail)
	}
	return hdr, data
}

func TestAckGroupRoundTrip(t *testing.T) {
	entries := []groupEntry{
		{a: wire.AckResponse{Op: 16, Seq: 1, Value: 7}},
		{a: wire.AckResponse{Op: 17, Seq: 2, Value: 8}, data: []byte("abc")},
		{a: wire.AckResponse{Op: 16, Seq: 3, Status: rdmo.StatusHandlerFailed}, detail: []byte("no such key")},
		{a: wire.AckResponse{Op: rdmo.OpAppend, Seq: 4, Value: 1 << 40}, data: bytes.Repeat([]byte{9}, rdmo.MaxResultData), detail: bytes.Repeat([]byte("d"), rdmo.MaxResultDetail)},
	}
	hdr, data := buildGroup(entries)
	if len(hdr) != wire.AckGroupHeaderLen {
		t.Fatalf("header is %d bytes, want %d", len(hdr), wire.AckGroupHeaderLen)
	}
	want := 0
	for _, e := range entries {
		want += wire.AckGroupEntrySize(len(e.data), len(e.detail))
	}
	if len(data) != want || len(data)%wire.AckGroupAlign != 0 {
		t.Fatalf("data is %d bytes, want %d (a multiple of %d)", len(data), want, wire.AckGroupAlign)
	}
	if id, err := wire.ParseResponseID(hdr); err != nil || id != wire.RspAckGroup {
		t.Fatalf("ParseResponseID = %d, %v", id, err)
	}
	count, err := wire.ParseAckGroupHeader(hdr)
	if err != nil || count != uint32(len(entries)) {
		t.Fatalf("ParseAckGroupHeader = %d, %v", count, err)
	}
	it := wire.NewAckGroupIter(data, count)
	i := 0
	for it.Next() {
		e := entries[i]
		a := it.Ack()
		d, det, err := wire.AckResult(a, it.Result())
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if a.Op != e.a.Op || a.Seq != e.a.Seq || a.Status != e.a.Status || a.Value != e.a.Value ||
			!bytes.Equal(d, e.data) || !bytes.Equal(det, e.detail) {
			t.Fatalf("entry %d: got %+v %q %q, want %+v %q %q", i, a, d, det, e.a, e.data, e.detail)
		}
		i++
	}
	if it.Err() != nil || i != len(entries) {
		t.Fatalf("%d entries, err %v", i, it.Err())
	}
}

func TestAckGroupMalformed(t *testing.T) {
	_, good := buildGroup([]groupEntry{{a: wire.AckResponse{Op: 16, Seq: 1}}, {a: wire.AckResponse{Op: 16, Seq: 2}, data: []byte("xy")}})
	overlong := wire.AppendAckGroupEntry(nil, wire.AckResponse{Op: 16, Seq: 1}, nil, nil)
	le.PutUint32(overlong[wire.AckDataLenOffset:], rdmo.MaxResultData+1)
	notAck := wire.AppendAckGroupEntry(nil, wire.AckResponse{Op: 16, Seq: 1}, nil, nil)
	le.PutUint32(notAck[wire.ResponseIDOffset:], wire.RspFlush)
	for _, c := range []struct {
		name  string
		data  []byte
		count uint32
		good  int // entries read before the error
		want  error
	}{
		{"count above the entries", good, 3, 2, rdmo.ErrPayloadMismatch},
		{"bytes after the last entry", good, 1, 1, rdmo.ErrPayloadMismatch},
		{"truncated entry", good[:len(good)-8], 2, 1, rdmo.ErrPayloadMismatch},
		{"data length over the bound", overlong, 1, 0, rdmo.ErrLengthOverflow},
		{"entry that is no ack", notAck, 1, 0, rdmo.ErrUnknownOp},
	} {
		it := wire.NewAckGroupIter(c.data, c.count)
		n := 0
		for it.Next() {
			n++
		}
		if n != c.good || !errors.Is(it.Err(), c.want) {
			t.Errorf("%s: %d entries, err %v; want %d, %v", c.name, n, it.Err(), c.good, c.want)
		}
	}
	if _, err := wire.ParseAckGroupHeader(wire.AppendAckGroupHeader(nil, 1)[:8]); !errors.Is(err, rdmo.ErrShortHeader) {
		t.Errorf("short header: %v", err)
	}
	if _, err := wire.ParseAckGroupHeader(wire.AppendAck(nil, wire.AckResponse{})); !errors.Is(err, rdmo.ErrUnknownOp) {
		t.Errorf("an ack's header: %v", err)
	}
}

func FuzzAckGroup(f *testing.F) {
	hdr, data := buildGroup([]groupEntry{{a: wire.AckResponse{Op: 16, Seq: 1}}, {a: wire.AckResponse{Op: 16, Seq: 2}, data: []byte("xy"), detail: []byte("z")}})
	f.Add(hdr, data)
	f.Add(hdr, data[:41])
	f.Add(wire.AppendAckGroupHeader(nil, 1<<31), []byte{})
	f.Fuzz(func(t *testing.T, hdr, data []byte) {
		count, err := wire.ParseAckGroupHeader(hdr)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		it := wire.NewAckGroupIter(data, count)
		used := 0
		for it.Next() {
			a := it.Ack()
			d, det, err := wire.AckResult(a, it.Result())
			if err != nil {
				t.Fatalf("an entry the iterator accepted fails AckResult: %v", err)
			}
			used += wire.AckGroupEntrySize(len(d), len(det))
		}
		if err := it.Err(); err != nil {
			checkDecodeError(t, err)
		} else if used != len(data) {
			t.Fatalf("a good group of %d bytes used %d", len(data), used)
		}
	})
}

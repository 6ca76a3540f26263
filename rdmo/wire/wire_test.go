package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

var le = binary.LittleEndian

// rawHeader builds a request header of n bytes with the given common
// fields, bypassing the encoders so tests can produce malformed input.
func rawHeader(n int, clientID uint64, op, flags uint32) []byte {
	b := make([]byte, n)
	if n >= wire.HeaderLen {
		wire.Header{ClientID: clientID, Op: op, Flags: flags}.Put(b)
	}
	return b
}

// scatterPayload encodes iovs whose data is len bytes of a pattern that
// differs per element, so misplaced slices are caught.
func scatterPayload(t testing.TB, lens ...int) ([]byte, []wire.IOV, [][]byte) {
	t.Helper()
	var payload []byte
	var iovs []wire.IOV
	var datas [][]byte
	for i, n := range lens {
		data := bytes.Repeat([]byte{byte(0xA0 + i)}, n)
		iov := wire.IOV{Addr: 0x7f0000001000 + uint64(i)*0x100, Rkey: rdmo.RegionID(0xCAFE0000 + uint64(i)), Len: uint16(n)}
		var err error
		payload, err = wire.AppendIOV(payload, iov, data)
		if err != nil {
			t.Fatalf("AppendIOV(%d): %v", i, err)
		}
		iovs = append(iovs, iov)
		datas = append(datas, data)
	}
	return payload, iovs, datas
}

func wantStatus(t *testing.T, err error, want rdmo.Status) {
	t.Helper()
	if want == rdmo.StatusOK {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("got nil error, want %s", want.Name())
	}
	var we *rdmo.WireError
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T) is not a *WireError", err, err)
	}
	if we.Status != want {
		t.Fatalf("got status %s (%v), want %s", we.Status.Name(), err, want.Name())
	}
	if !errors.Is(err, want.Err()) || !errors.Is(err, want) {
		t.Fatalf("errors.Is(%v, %s) is false", err, want.Name())
	}
}

func TestHeaderPutParseRoundTrip(t *testing.T) {
	for _, h := range []wire.Header{
		{},
		{ClientID: 0x0102030405060708, Op: rdmo.OpAppend, Flags: rdmo.FlagFence},
		{ClientID: math.MaxUint64, Op: math.MaxUint32, Flags: rdmo.FlagFence | rdmo.FlagAck},
		{ClientID: 7, Op: rdmo.OpUserBase, Flags: rdmo.FlagAck},
	} {
		b := make([]byte, wire.HeaderLen)
		h.Put(b)
		if got := le.Uint64(b[wire.HeaderClientIDOffset:]); got != h.ClientID {
			t.Errorf("client id bytes = %#x, want %#x", got, h.ClientID)
		}
		if got := le.Uint32(b[wire.HeaderOpOffset:]); got != h.Op {
			t.Errorf("op bytes = %d, want %d", got, h.Op)
		}
		if got := le.Uint32(b[wire.HeaderFlagsOffset:]); got != h.Flags {
			t.Errorf("flags bytes = %#x, want %#x", got, h.Flags)
		}
		// A user op's header may be exactly the common header.
		if !rdmo.IsUserOp(h.Op) {
			continue
		}
		got, err := wire.ParseHeader(b)
		if err != nil || got != h {
			t.Errorf("ParseHeader = %+v, %v; want %+v", got, err, h)
		}
	}
}

func TestHeaderPutPanicsOnShortBuffer(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Put into a 15-byte buffer did not panic")
		}
	}()
	wire.Header{}.Put(make([]byte, wire.HeaderLen-1))
}

func TestHeaderFlagHelpers(t *testing.T) {
	h := wire.Header{Flags: rdmo.FlagFence}
	if !h.Fenced() || h.WantsAck() {
		t.Errorf("FENCE only: Fenced=%v WantsAck=%v", h.Fenced(), h.WantsAck())
	}
	h.Flags = rdmo.FlagAck
	if h.Fenced() || !h.WantsAck() {
		t.Errorf("ACK only: Fenced=%v WantsAck=%v", h.Fenced(), h.WantsAck())
	}
}

func TestRequestRoundTrip(t *testing.T) {
	hdr := wire.Header{ClientID: 0x1122334455667788, Flags: rdmo.FlagFence | rdmo.FlagAck}
	t.Run("flush", func(t *testing.T) {
		b := wire.AppendFlushRequest(nil, hdr, rdmo.FlushHeader{FlushID: 0xBEEF})
		if len(b) != wire.FlushHeaderLen {
			t.Fatalf("len = %d, want %d", len(b), wire.FlushHeaderLen)
		}
		r, err := wire.ParseRequest(b)
		if err != nil {
			t.Fatal(err)
		}
		want := hdr
		want.Op = rdmo.OpFlush
		if r.Header != want || r.Flush.FlushID != 0xBEEF || r.User != nil {
			t.Fatalf("got %+v", r)
		}
		wantStatus(t, r.CheckPayload(nil), rdmo.StatusOK)
	})
	t.Run("append", func(t *testing.T) {
		a := rdmo.AppendHeader{PtrAddr: 0x7fff00001000, PtrRkey: 0x55aa55aa55aa, DataRkey: math.MaxUint64}
		b := wire.AppendAppendRequest(nil, hdr, a)
		if len(b) != wire.AppendHeaderLen {
			t.Fatalf("len = %d, want %d", len(b), wire.AppendHeaderLen)
		}
		r, err := wire.ParseRequest(b)
		if err != nil {
			t.Fatal(err)
		}
		if r.Header.Op != rdmo.OpAppend || r.Header.ClientID != hdr.ClientID || r.Append != a {
			t.Fatalf("got %+v", r)
		}
		wantStatus(t, r.CheckPayload([]byte{0x33}), rdmo.StatusOK)
	})
	t.Run("scatter", func(t *testing.T) {
		payload, _, _ := scatterPayload(t, 8, 8, 3)
		b := wire.AppendScatterRequest(nil, hdr, rdmo.ScatterHeader{Count: 3})
		if len(b) != wire.ScatterHeaderLen {
			t.Fatalf("len = %d, want %d", len(b), wire.ScatterHeaderLen)
		}
		r, err := wire.ParseRequest(b)
		if err != nil {
			t.Fatal(err)
		}
		if r.Header.Op != rdmo.OpScatter || r.Scatter.Count != 3 {
			t.Fatalf("got %+v", r)
		}
		wantStatus(t, r.CheckPayload(payload), rdmo.StatusOK)
	})
	t.Run("user", func(t *testing.T) {
		for _, n := range []int{0, 1, 7, wire.MaxHeaderLen - wire.HeaderLen} {
			sub := bytes.Repeat([]byte{0x5C}, n)
			h := hdr
			h.Op = rdmo.OpUserBase + 3
			b, err := wire.AppendUserRequest(nil, h, sub)
			if err != nil {
				t.Fatal(err)
			}
			r, err := wire.ParseRequest(b)
			if err != nil {
				t.Fatal(err)
			}
			if r.Header != h || !bytes.Equal(r.User, sub) || len(r.User) != n {
				t.Fatalf("sub-header %d bytes: got %+v", n, r)
			}
			if n > 0 && &r.User[0] != &b[wire.SubHeaderOffset] {
				t.Fatal("User does not alias the input")
			}
			if cap(r.User) != len(r.User) {
				t.Fatal("User has spare capacity: appending to it could scribble on the caller's buffer")
			}
			wantStatus(t, r.CheckPayload([]byte("anything")), rdmo.StatusOK)
		}
	})
}

func TestEncodersForceTheirOp(t *testing.T) {
	wrong := wire.Header{ClientID: 1, Op: rdmo.OpScatter}
	for name, b := range map[string][]byte{
		"flush":   wire.AppendFlushRequest(nil, wire.Header{Op: rdmo.OpAppend}, rdmo.FlushHeader{}),
		"append":  wire.AppendAppendRequest(nil, wrong, rdmo.AppendHeader{}),
		"scatter": wire.AppendScatterRequest(nil, wire.Header{Op: 99}, rdmo.ScatterHeader{}),
	} {
		r, err := wire.ParseRequest(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rdmo.OpName(r.Header.Op) != name {
			t.Errorf("%s encoder wrote op %s", name, rdmo.OpName(r.Header.Op))
		}
	}
}

func TestEncodersAppendToDst(t *testing.T) {
	prefix := []byte("prefix")
	h := wire.Header{ClientID: 9}
	check := func(name string, got []byte, wantLen int) {
		t.Helper()
		if !bytes.HasPrefix(got, prefix) || len(got) != len(prefix)+wantLen {
			t.Errorf("%s: got %d bytes %q..., want prefix kept and %d bytes added", name, len(got), got[:min(len(got), 6)], wantLen)
		}
	}
	check("flush", wire.AppendFlushRequest(bytes.Clone(prefix), h, rdmo.FlushHeader{}), wire.FlushHeaderLen)
	check("append", wire.AppendAppendRequest(bytes.Clone(prefix), h, rdmo.AppendHeader{}), wire.AppendHeaderLen)
	check("scatter", wire.AppendScatterRequest(bytes.Clone(prefix), h, rdmo.ScatterHeader{}), wire.ScatterHeaderLen)
	user, err := wire.AppendUserRequest(bytes.Clone(prefix), wire.Header{Op: rdmo.OpUserBase}, []byte{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	check("user", user, wire.HeaderLen+2)
	iov, err := wire.AppendIOV(bytes.Clone(prefix), wire.IOV{Len: 2}, []byte{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	check("iov", iov, wire.IOVDescLen+2)
	check("flush response", wire.AppendFlushResponse(bytes.Clone(prefix), wire.FlushResponse{}), wire.FlushResponseLen)
	check("reference flush response", wire.AppendReferenceFlushResponse(bytes.Clone(prefix), 1), wire.ReferenceFlushResponseLen)
	check("ack", wire.AppendAck(bytes.Clone(prefix), wire.AckResponse{}), wire.AckResponseLen)
}

func TestParseRequestErrors(t *testing.T) {
	user := rdmo.OpUserBase
	tests := []struct {
		name string
		hdr  []byte
		want rdmo.Status
	}{
		{"nil", nil, rdmo.StatusShortHeader},
		{"15 bytes", rawHeader(15, 0, rdmo.OpFlush, 0), rdmo.StatusShortHeader},
		{"65 bytes user op", rawHeader(65, 0, user, 0), rdmo.StatusHeaderTooLong},
		{"65 bytes flush: length before op", rawHeader(65, 0, rdmo.OpFlush, 0), rdmo.StatusHeaderTooLong},
		{"batch 16", rawHeader(16, 0, rdmo.OpBatch, 0), rdmo.StatusShortHeader},
		{"batch 32", rawHeader(32, 0, rdmo.OpBatch, 0), rdmo.StatusHeaderTooLong},
		{"batch fenced", rawHeader(24, 0, rdmo.OpBatch, rdmo.FlagFence), rdmo.StatusUnknownFlags},
		{"batch acked", rawHeader(24, 0, rdmo.OpBatch, rdmo.FlagAck), rdmo.StatusUnknownFlags},
		{"batch unknown flag", rawHeader(24, 0, rdmo.OpBatch, 1<<9), rdmo.StatusUnknownFlags},
		{"ok batch", rawHeader(24, 0, rdmo.OpBatch, 0), rdmo.StatusOK},
		{"op 5 reserved", rawHeader(24, 0, 5, 0), rdmo.StatusUnknownOp},
		{"ok lend pool", rawHeader(40, 0, rdmo.OpLendPool, rdmo.FlagAck), rdmo.StatusOK},
		{"lend pool short", rawHeader(24, 0, rdmo.OpLendPool, 0), rdmo.StatusShortHeader},
		{"lend pool byref", rawHeader(40, 0, rdmo.OpLendPool, rdmo.FlagAck|rdmo.FlagByRef), rdmo.StatusPayloadMismatch},
		{"ok append byref", rawHeader(40, 0, rdmo.OpAppend, rdmo.FlagAck|rdmo.FlagByRef), rdmo.StatusOK},
		{"ok user byref", rawHeader(16, 0, user, rdmo.FlagAck|rdmo.FlagByRef), rdmo.StatusOK},
		{"append byref without ack", rawHeader(40, 0, rdmo.OpAppend, rdmo.FlagByRef), rdmo.StatusPayloadMismatch},
		{"flush byref", rawHeader(24, 0, rdmo.OpFlush, rdmo.FlagAck|rdmo.FlagByRef), rdmo.StatusPayloadMismatch},
		{"op 15 reserved", rawHeader(24, 0, 15, 0), rdmo.StatusUnknownOp},
		{"reserved op wins over bad flags", rawHeader(24, 0, 5, 1<<7), rdmo.StatusUnknownOp},
		{"flag bit 4", rawHeader(24, 0, rdmo.OpFlush, 1<<4), rdmo.StatusUnknownFlags},
		{"flag bit 31", rawHeader(40, 0, rdmo.OpAppend, rdmo.FlagFence|1<<31), rdmo.StatusUnknownFlags},
		{"user op unknown flag", rawHeader(16, 0, user, 1<<4), rdmo.StatusUnknownFlags},
		{"flush header only", rawHeader(16, 0, rdmo.OpFlush, 0), rdmo.StatusShortHeader},
		{"flush 23", rawHeader(23, 0, rdmo.OpFlush, 0), rdmo.StatusShortHeader},
		{"flush 25", rawHeader(25, 0, rdmo.OpFlush, 0), rdmo.StatusHeaderTooLong},
		{"append 39", rawHeader(39, 0, rdmo.OpAppend, 0), rdmo.StatusShortHeader},
		{"append 41", rawHeader(41, 0, rdmo.OpAppend, 0), rdmo.StatusHeaderTooLong},
		{"append 64", rawHeader(64, 0, rdmo.OpAppend, 0), rdmo.StatusHeaderTooLong},
		{"scatter 16", rawHeader(16, 0, rdmo.OpScatter, 0), rdmo.StatusShortHeader},
		{"scatter 32", rawHeader(32, 0, rdmo.OpScatter, 0), rdmo.StatusHeaderTooLong},
		{"ok flush fenced", rawHeader(24, 0, rdmo.OpFlush, rdmo.FlagFence), rdmo.StatusOK},
		{"ok append both flags", rawHeader(40, 0, rdmo.OpAppend, rdmo.FlagFence|rdmo.FlagAck), rdmo.StatusOK},
		{"ok user op 16 bytes", rawHeader(16, 0, user, 0), rdmo.StatusOK},
		{"ok user op 64 bytes", rawHeader(64, 0, user, 0), rdmo.StatusOK},
		{"ok max op id", rawHeader(20, 0, math.MaxUint32, 0), rdmo.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := wire.ParseRequest(tt.hdr)
			wantStatus(t, err, tt.want)
			if err != nil && !strings.HasPrefix(err.Error(), "rdmo: ") {
				t.Errorf("error text %q lacks the package prefix", err)
			}
			// The common header comes back even on error, so the worker can
			// report the op that failed.
			if len(tt.hdr) >= wire.HeaderLen {
				if got := r.Header.Op; got != le.Uint32(tt.hdr[wire.HeaderOpOffset:]) {
					t.Errorf("Header.Op = %d after error, want it decoded", got)
				}
			}
			_, herr := wire.ParseHeader(tt.hdr)
			if tt.want == rdmo.StatusOK && herr != nil {
				t.Errorf("ParseHeader: %v", herr)
			}
		})
	}
}

func TestParseHeaderReturnsFieldsOnError(t *testing.T) {
	h, err := wire.ParseHeader(rawHeader(16, 42, 5, 0))
	wantStatus(t, err, rdmo.StatusUnknownOp)
	if h.ClientID != 42 || h.Op != 5 {
		t.Fatalf("got %+v", h)
	}
	if !strings.Contains(err.Error(), "reserved") {
		t.Errorf("error %q does not say op 5 is reserved", err)
	}
}

func TestCheckPayload(t *testing.T) {
	good, _, _ := scatterPayload(t, 8, 0, 5)
	tests := []struct {
		name    string
		op      uint32
		count   uint64
		payload []byte
		want    rdmo.Status
	}{
		{"flush no payload", rdmo.OpFlush, 0, nil, rdmo.StatusOK},
		{"flush one byte", rdmo.OpFlush, 0, []byte{0}, rdmo.StatusPayloadMismatch},
		{"append empty", rdmo.OpAppend, 0, nil, rdmo.StatusEmptyAppend},
		{"append empty non-nil", rdmo.OpAppend, 0, []byte{}, rdmo.StatusEmptyAppend},
		{"append one byte", rdmo.OpAppend, 0, []byte{1}, rdmo.StatusOK},
		{"scatter good", rdmo.OpScatter, 3, good, rdmo.StatusOK},
		{"scatter count too high", rdmo.OpScatter, 4, good, rdmo.StatusPayloadMismatch},
		{"scatter count too low", rdmo.OpScatter, 2, good, rdmo.StatusPayloadMismatch},
		{"scatter empty", rdmo.OpScatter, 0, nil, rdmo.StatusOK},
		{"user op", rdmo.OpUserBase, 0, []byte{1, 2, 3}, rdmo.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := wire.RequestHeader{Header: wire.Header{Op: tt.op}, Scatter: rdmo.ScatterHeader{Count: tt.count}}
			wantStatus(t, r.CheckPayload(tt.payload), tt.want)
		})
	}
}

func TestScatterIterRoundTrip(t *testing.T) {
	// Lengths that leave later descriptors unaligned, plus the extremes.
	lens := []int{8, 0, 1, 5, wire.MaxIOVLen, 3}
	payload, iovs, datas := scatterPayload(t, lens...)
	wantLen := 0
	for _, n := range lens {
		wantLen += wire.IOVDescLen + n
	}
	if len(payload) != wantLen {
		t.Fatalf("payload is %d bytes, want %d", len(payload), wantLen)
	}
	it := wire.NewScatterIter(payload, uint64(len(lens)))
	i := 0
	for it.Next() {
		if it.IOV() != iovs[i] {
			t.Errorf("iov %d = %+v, want %+v", i, it.IOV(), iovs[i])
		}
		if !bytes.Equal(it.Data(), datas[i]) {
			t.Errorf("iov %d data differs", i)
		}
		if cap(it.Data()) != len(it.Data()) {
			t.Errorf("iov %d data has spare capacity over the next element", i)
		}
		i++
	}
	if err := it.Err(); err != nil || i != len(lens) {
		t.Fatalf("walked %d of %d iovs, err %v", i, len(lens), err)
	}
	if it.Next() || it.Err() != nil {
		t.Fatal("Next after the end must stay false without an error")
	}

	var seen int
	err := wire.ForEachIOV(payload, uint64(len(lens)), func(iov wire.IOV, data []byte) error {
		if iov != iovs[seen] || !bytes.Equal(data, datas[seen]) {
			t.Errorf("ForEachIOV element %d differs", seen)
		}
		seen++
		return nil
	})
	if err != nil || seen != len(lens) {
		t.Fatalf("ForEachIOV saw %d, err %v", seen, err)
	}
}

func TestScatterPaddingIsZeroAndIgnored(t *testing.T) {
	payload, iovs, _ := scatterPayload(t, 4)
	if !bytes.Equal(payload[wire.IOVLenOffset+2:wire.IOVDescLen], make([]byte, 6)) {
		t.Fatalf("padding = %x, want zeros", payload[wire.IOVLenOffset+2:wire.IOVDescLen])
	}
	// C initiators may leave garbage in struct padding; decoders must not care.
	for i := wire.IOVLenOffset + 2; i < wire.IOVDescLen; i++ {
		payload[i] = 0xFF
	}
	it := wire.NewScatterIter(payload, 1)
	if !it.Next() || it.IOV() != iovs[0] {
		t.Fatalf("garbage padding changed decoding: %+v, %v", it.IOV(), it.Err())
	}
}

func TestForEachIOVStopsOnCallbackError(t *testing.T) {
	payload, _, _ := scatterPayload(t, 1, 1, 1)
	stop := errors.New("stop")
	calls := 0
	err := wire.ForEachIOV(payload, 3, func(wire.IOV, []byte) error {
		calls++
		return stop
	})
	if err != stop || calls != 1 {
		t.Fatalf("got %v after %d calls, want the callback's error after 1", err, calls)
	}
}

func TestScatterIterErrors(t *testing.T) {
	one, _, _ := scatterPayload(t, 30)     // 54 bytes
	emptyIOV, _, _ := scatterPayload(t, 0) // 24 bytes
	overflow := make([]byte, wire.IOVDescLen+10)
	le.PutUint16(overflow[wire.IOVLenOffset:], 100)
	maxLenShort := make([]byte, wire.IOVDescLen+wire.MaxIOVLen-1)
	le.PutUint16(maxLenShort[wire.IOVLenOffset:], math.MaxUint16)

	tests := []struct {
		name    string
		payload []byte
		count   uint64
		yields  int // elements produced before the error
		want    rdmo.Status
	}{
		{"empty, count 0", nil, 0, 0, rdmo.StatusOK},
		{"empty, count 1", nil, 1, 0, rdmo.StatusPayloadMismatch},
		{"one byte, count 0: leftover", []byte{0}, 0, 0, rdmo.StatusPayloadMismatch},
		{"count needs more descriptors than fit", emptyIOV, 2, 0, rdmo.StatusPayloadMismatch},
		{"huge count refused before walking", append(bytes.Clone(emptyIOV), emptyIOV...), math.MaxUint64, 0, rdmo.StatusPayloadMismatch},
		{"count 2^64/24+1 does not overflow the check", make([]byte, 48), math.MaxUint64/wire.IOVDescLen + 1, 0, rdmo.StatusPayloadMismatch},
		{"payload ends after first", one, 2, 1, rdmo.StatusPayloadMismatch},
		{"truncated second descriptor", append(bytes.Clone(one), make([]byte, 20)...), 2, 1, rdmo.StatusPayloadMismatch},
		{"leftover after last", append(bytes.Clone(one), 1, 2, 3), 1, 1, rdmo.StatusPayloadMismatch},
		{"leftover of a whole descriptor", append(bytes.Clone(one), emptyIOV...), 1, 1, rdmo.StatusPayloadMismatch},
		{"len past the end", overflow, 1, 0, rdmo.StatusLengthOverflow},
		{"len 65535 one byte short", maxLenShort, 1, 0, rdmo.StatusLengthOverflow},
		{"second len past the end", append(bytes.Clone(one), overflow...), 2, 1, rdmo.StatusLengthOverflow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := wire.NewScatterIter(tt.payload, tt.count)
			n := 0
			for it.Next() {
				n++
			}
			if n != tt.yields {
				t.Errorf("yielded %d elements, want %d", n, tt.yields)
			}
			wantStatus(t, it.Err(), tt.want)
			if it.Next() {
				t.Error("Next returned true after stopping")
			}
			if (it.IOV() != wire.IOV{}) || it.Data() != nil {
				t.Error("a stopped iterator still exposes an element")
			}
			wantStatus(t, wire.ForEachIOV(tt.payload, tt.count, func(wire.IOV, []byte) error { return nil }), tt.want)
			r := wire.RequestHeader{Header: wire.Header{Op: rdmo.OpScatter}, Scatter: rdmo.ScatterHeader{Count: tt.count}}
			wantStatus(t, r.CheckPayload(tt.payload), tt.want)
		})
	}
}

func TestAppendIOVErrors(t *testing.T) {
	dst := []byte("keep")
	got, err := wire.AppendIOV(dst, wire.IOV{Len: 0}, make([]byte, wire.MaxIOVLen+1))
	wantStatus(t, err, rdmo.StatusLengthOverflow)
	if string(got) != "keep" {
		t.Errorf("dst changed on error: %q", got)
	}
	got, err = wire.AppendIOV(dst, wire.IOV{Len: 3}, []byte{1, 2})
	wantStatus(t, err, rdmo.StatusPayloadMismatch)
	if string(got) != "keep" {
		t.Errorf("dst changed on error: %q", got)
	}
	if _, err := wire.AppendIOV(nil, wire.IOV{Len: math.MaxUint16}, make([]byte, wire.MaxIOVLen)); err != nil {
		t.Errorf("a 65535-byte chunk must be accepted: %v", err)
	}
}

func TestAppendUserRequestErrors(t *testing.T) {
	_, err := wire.AppendUserRequest(nil, wire.Header{Op: rdmo.OpAppend}, nil)
	wantStatus(t, err, rdmo.StatusUnknownOp)
	_, err = wire.AppendUserRequest(nil, wire.Header{Op: rdmo.OpUserBase - 1}, nil)
	wantStatus(t, err, rdmo.StatusUnknownOp)
	_, err = wire.AppendUserRequest(nil, wire.Header{Op: rdmo.OpUserBase}, make([]byte, wire.MaxHeaderLen-wire.HeaderLen+1))
	wantStatus(t, err, rdmo.StatusHeaderTooLong)
}

func TestIOVEnd(t *testing.T) {
	for _, tt := range []struct {
		iov    wire.IOV
		end    uint64
		wantOK bool
	}{
		{wire.IOV{Addr: 0x1000, Len: 16}, 0x1010, true},
		{wire.IOV{Addr: math.MaxUint64 - 15, Len: 15}, math.MaxUint64, true},
		{wire.IOV{Addr: math.MaxUint64 - 15, Len: 16}, 0, false},
		{wire.IOV{Addr: math.MaxUint64, Len: math.MaxUint16}, math.MaxUint16 - 1, false},
	} {
		end, ok := tt.iov.End()
		if end != tt.end || ok != tt.wantOK {
			t.Errorf("%+v.End() = %#x, %v; want %#x, %v", tt.iov, end, ok, tt.end, tt.wantOK)
		}
	}
}

func TestOpNames(t *testing.T) {
	for op, want := range map[uint32]string{
		rdmo.OpFlush: "flush", rdmo.OpAppend: "append", rdmo.OpScatter: "scatter",
		rdmo.OpBatch: "batch", rdmo.OpLendPool: "lend-pool", 5: "reserved(5)", 15: "reserved(15)", 16: "user(16)",
		math.MaxUint32: "user(4294967295)",
	} {
		if got := rdmo.OpName(op); got != want {
			t.Errorf("OpName(%d) = %q, want %q", op, got, want)
		}
	}
	if rdmo.IsUserOp(15) || !rdmo.IsUserOp(16) {
		t.Error("IsUserOp boundary is not 16")
	}
}

func TestFlushResponseRoundTrip(t *testing.T) {
	in := wire.FlushResponse{
		FlushID: 0xBEEF, Failed: 3, FirstOp: rdmo.OpAppend,
		FirstStatus: rdmo.StatusOutOfBounds, FirstSeq: 1 << 40,
	}
	b := wire.AppendFlushResponse(nil, in)
	if len(b) != wire.FlushResponseLen {
		t.Fatalf("len = %d", len(b))
	}
	got, err := wire.ParseFlushResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	in.Extended = true
	if got != in {
		t.Fatalf("got %+v, want %+v", got, in)
	}
	// A reference initiator reads only the first 12 bytes; they must be the
	// reference response.
	if ref := wire.AppendReferenceFlushResponse(nil, 0xBEEF); !bytes.Equal(b[:12], ref) {
		t.Fatalf("extended prefix %x != reference %x", b[:12], ref)
	}
	id, err := wire.ParseResponseID(b)
	if err != nil || id != wire.RspFlush {
		t.Fatalf("ParseResponseID = %d, %v", id, err)
	}
}

func TestReferenceFlushResponseDecodes(t *testing.T) {
	// The exact bytes a DOCA 3.0 worker sends for the demo's flush id.
	ref := []byte{0, 0, 0, 0, 0xEF, 0xBE, 0, 0, 0, 0, 0, 0}
	got, err := wire.ParseFlushResponse(ref)
	if err != nil {
		t.Fatal(err)
	}
	if got != (wire.FlushResponse{FlushID: 0xBEEF}) || got.Extended {
		t.Fatalf("got %+v", got)
	}
	if got.Err() != nil {
		t.Fatalf("a reference response reports no failures, got %v", got.Err())
	}
	if enc := wire.AppendReferenceFlushResponse(nil, 0xBEEF); !bytes.Equal(enc, ref) {
		t.Fatalf("AppendReferenceFlushResponse = %x, want %x", enc, ref)
	}
}

func TestFlushResponseErrors(t *testing.T) {
	ext := wire.AppendFlushResponse(nil, wire.FlushResponse{FlushID: 1})
	ack := wire.AppendAck(nil, wire.AckResponse{})
	tests := []struct {
		name string
		b    []byte
		want rdmo.Status
	}{
		{"empty", nil, rdmo.StatusShortHeader},
		{"3 bytes", []byte{0, 0, 0}, rdmo.StatusShortHeader},
		{"rsp_id only", []byte{0, 0, 0, 0}, rdmo.StatusShortHeader},
		{"11 bytes", ext[:11], rdmo.StatusShortHeader},
		{"13 bytes", ext[:13], rdmo.StatusShortHeader},
		{"31 bytes", ext[:31], rdmo.StatusShortHeader},
		{"an ack", ack, rdmo.StatusUnknownOp},
		{"rsp_id 7", append([]byte{7, 0, 0, 0}, ext[4:]...), rdmo.StatusUnknownOp},
		{"12 bytes", ext[:12], rdmo.StatusOK},
		{"32 bytes", ext, rdmo.StatusOK},
		{"40 bytes: trailing ignored", append(bytes.Clone(ext), 1, 2, 3, 4, 5, 6, 7, 8), rdmo.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := wire.ParseFlushResponse(tt.b)
			wantStatus(t, err, tt.want)
		})
	}
}

func TestFlushResponseErr(t *testing.T) {
	r := wire.FlushResponse{FlushID: 0xBEEF, Failed: 2, FirstOp: rdmo.OpScatter, FirstStatus: rdmo.StatusOutOfBounds, FirstSeq: 5}
	err := r.Err()
	wantStatus(t, err, rdmo.StatusOutOfBounds)
	for _, part := range []string{"2 request(s)", "0xbeef", "scatter", "seq 5"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q lacks %q", err, part)
		}
	}
	r.FirstStatus = rdmo.StatusOK
	wantStatus(t, r.Err(), rdmo.StatusInternal)
	r.Failed = 0
	wantStatus(t, r.Err(), rdmo.StatusOK)
}

func TestAckRoundTrip(t *testing.T) {
	in := wire.AckResponse{Op: rdmo.OpUserBase + 1, Seq: math.MaxUint64, Status: rdmo.StatusHandlerFailed, Value: 0x0123456789ABCDEF}
	b := wire.AppendAck(nil, in)
	if len(b) != wire.AckResponseLen {
		t.Fatalf("len = %d", len(b))
	}
	if le.Uint32(b[wire.AckReservedOffset:]) != 0 {
		t.Fatal("reserved field not zero")
	}
	got, err := wire.ParseAck(b)
	if err != nil || got != in {
		t.Fatalf("got %+v, %v; want %+v", got, err, in)
	}
	id, err := wire.ParseResponseID(b)
	if err != nil || id != wire.RspAck {
		t.Fatalf("ParseResponseID = %d, %v", id, err)
	}
	// Reserved bytes and a longer header are for later extensions: ignored.
	le.PutUint32(b[wire.AckReservedOffset:], 0xFFFFFFFF)
	b = append(b, 9, 9, 9)
	if got, err := wire.ParseAck(b); err != nil || got != in {
		t.Fatalf("with reserved set and trailing bytes: %+v, %v", got, err)
	}
	wantStatus(t, in.Err(), rdmo.StatusHandlerFailed)
	if !strings.Contains(in.Err().Error(), "user(17) seq 18446744073709551615") {
		t.Errorf("ack error %q lacks op and seq", in.Err())
	}
	in.Status = rdmo.StatusOK
	wantStatus(t, in.Err(), rdmo.StatusOK)
}

func TestAckErrors(t *testing.T) {
	ack := wire.AppendAck(nil, wire.AckResponse{Op: 1})
	for _, tt := range []struct {
		name string
		b    []byte
		want rdmo.Status
	}{
		{"empty", nil, rdmo.StatusShortHeader},
		{"31 bytes", ack[:31], rdmo.StatusShortHeader},
		{"12 bytes", ack[:12], rdmo.StatusShortHeader},
		{"a flush response", wire.AppendFlushResponse(nil, wire.FlushResponse{}), rdmo.StatusUnknownOp},
		{"rsp_id 2", append([]byte{2, 0, 0, 0}, ack[4:]...), rdmo.StatusUnknownOp},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := wire.ParseAck(tt.b)
			wantStatus(t, err, tt.want)
		})
	}
}

func TestParseResponseIDErrors(t *testing.T) {
	_, err := wire.ParseResponseID([]byte{1, 0, 0})
	wantStatus(t, err, rdmo.StatusShortHeader)
	id, err := wire.ParseResponseID([]byte{0xFF, 0xFF, 0xFF, 0xFF})
	wantStatus(t, err, rdmo.StatusUnknownOp)
	if id != math.MaxUint32 {
		t.Errorf("id = %d, want it decoded even when unknown", id)
	}
}

// TestHotPathDoesNotAllocate pins the zero-allocation promise outside of
// benchmarks, which CI does not run.
func TestHotPathDoesNotAllocate(t *testing.T) {
	hdr := wire.Header{ClientID: 1, Flags: rdmo.FlagFence}
	appendReq := wire.AppendAppendRequest(nil, hdr, rdmo.AppendHeader{PtrAddr: 8, PtrRkey: 1, DataRkey: 1})
	scatterReq := wire.AppendScatterRequest(nil, hdr, rdmo.ScatterHeader{Count: 16})
	userReq, _ := wire.AppendUserRequest(nil, wire.Header{Op: rdmo.OpUserBase}, []byte{1, 2, 3})
	lens := make([]int, 16)
	for i := range lens {
		lens[i] = 8
	}
	payload, _, _ := scatterPayload(t, lens...)
	flushRsp := wire.AppendFlushResponse(nil, wire.FlushResponse{FlushID: 1})
	ack := wire.AppendAck(nil, wire.AckResponse{})
	buf := make([]byte, 0, 4096)
	data := make([]byte, 8)
	var sink uint64

	cases := map[string]func(){
		"ParseRequest append": func() {
			r, err := wire.ParseRequest(appendReq)
			if err != nil {
				panic(err)
			}
			sink += r.Append.PtrAddr
		},
		"ParseRequest user": func() {
			r, _ := wire.ParseRequest(userReq)
			sink += uint64(len(r.User))
		},
		"ParseRequest+CheckPayload scatter": func() {
			r, _ := wire.ParseRequest(scatterReq)
			if err := r.CheckPayload(payload); err != nil {
				panic(err)
			}
		},
		"ScatterIter": func() {
			it := wire.NewScatterIter(payload, 16)
			for it.Next() {
				sink += it.IOV().Addr
			}
		},
		"ForEachIOV": func() {
			_ = wire.ForEachIOV(payload, 16, func(iov wire.IOV, d []byte) error {
				sink += iov.Addr + uint64(len(d))
				return nil
			})
		},
		"encoders": func() {
			b := wire.AppendAppendRequest(buf[:0], hdr, rdmo.AppendHeader{})
			b = wire.AppendFlushRequest(b, hdr, rdmo.FlushHeader{})
			b = wire.AppendScatterRequest(b, hdr, rdmo.ScatterHeader{})
			b, _ = wire.AppendIOV(b, wire.IOV{Len: 8}, data)
			b, _ = wire.AppendUserRequest(b, wire.Header{Op: rdmo.OpUserBase}, data)
			b = wire.AppendFlushResponse(b, wire.FlushResponse{})
			b = wire.AppendAck(b, wire.AckResponse{})
			sink += uint64(len(b))
		},
		"responses": func() {
			f, _ := wire.ParseFlushResponse(flushRsp)
			a, _ := wire.ParseAck(ack)
			sink += f.FlushID + a.Seq
		},
		"Status.Err": func() {
			if rdmo.StatusOutOfBounds.Err() == nil {
				panic("nil")
			}
		},
	}
	for name, fn := range cases {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %.1f allocs per run, want 0", name, n)
		}
	}
	_ = sink
}

func BenchmarkParseRequest(b *testing.B) {
	hdr := wire.Header{ClientID: 1, Flags: rdmo.FlagFence}
	user, _ := wire.AppendUserRequest(nil, wire.Header{Op: rdmo.OpUserBase}, make([]byte, 24))
	for _, bc := range []struct {
		name string
		req  []byte
	}{
		{"flush", wire.AppendFlushRequest(nil, hdr, rdmo.FlushHeader{FlushID: 0xBEEF})},
		{"append", wire.AppendAppendRequest(nil, hdr, rdmo.AppendHeader{PtrAddr: 8, PtrRkey: 1, DataRkey: 1})},
		{"scatter", wire.AppendScatterRequest(nil, hdr, rdmo.ScatterHeader{Count: 16})},
		{"user", user},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var sink uint32
			for b.Loop() {
				r, err := wire.ParseRequest(bc.req)
				if err != nil {
					b.Fatal(err)
				}
				sink += r.Header.Op
			}
			_ = sink
		})
	}
}

func BenchmarkScatterIter(b *testing.B) {
	for _, shape := range []struct{ count, size int }{{16, 8}, {4, 4096}, {64, 64}} {
		lens := make([]int, shape.count)
		for i := range lens {
			lens[i] = shape.size
		}
		payload, _, _ := scatterPayload(b, lens...)
		b.Run(fmt.Sprintf("%dx%dB", shape.count, shape.size), func(b *testing.B) {
			b.ReportAllocs()
			var sink uint64
			for b.Loop() {
				it := wire.NewScatterIter(payload, uint64(shape.count))
				for it.Next() {
					sink += it.IOV().Addr + uint64(len(it.Data()))
				}
				if it.Err() != nil {
					b.Fatal(it.Err())
				}
			}
			_ = sink
		})
	}
}

func BenchmarkCheckPayloadScatter(b *testing.B) {
	lens := make([]int, 16)
	for i := range lens {
		lens[i] = 8
	}
	payload, _, _ := scatterPayload(b, lens...)
	r := wire.RequestHeader{Header: wire.Header{Op: rdmo.OpScatter}, Scatter: rdmo.ScatterHeader{Count: 16}}
	b.ReportAllocs()
	for b.Loop() {
		if err := r.CheckPayload(payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeAppendRequest(b *testing.B) {
	buf := make([]byte, 0, wire.AppendHeaderLen)
	h := wire.Header{ClientID: 1}
	a := rdmo.AppendHeader{PtrAddr: 8, PtrRkey: 1, DataRkey: 1}
	b.ReportAllocs()
	for b.Loop() {
		buf = wire.AppendAppendRequest(buf[:0], h, a)
	}
}

func BenchmarkEncodeScatterPayload(b *testing.B) {
	data := make([]byte, 8)
	buf := make([]byte, 0, 16*(wire.IOVDescLen+8))
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:0]
		for i := range 16 {
			buf, _ = wire.AppendIOV(buf, wire.IOV{Addr: uint64(i) * 8, Rkey: 1, Len: 8}, data)
		}
	}
}

func BenchmarkParseResponses(b *testing.B) {
	flush := wire.AppendFlushResponse(nil, wire.FlushResponse{FlushID: 1})
	ack := wire.AppendAck(nil, wire.AckResponse{Seq: 1})
	b.ReportAllocs()
	var sink uint64
	for b.Loop() {
		f, _ := wire.ParseFlushResponse(flush)
		a, _ := wire.ParseAck(ack)
		sink += f.FlushID + a.Seq
	}
	_ = sink
}

// checkDecodeError asserts the one error contract of every decoder: a
// *WireError with a known, non-OK status.
func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	var we *rdmo.WireError
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T) is not a *WireError", err, err)
	}
	if we.Status == rdmo.StatusOK || !we.Status.Known() {
		t.Fatalf("error %v carries status %d", err, we.Status)
	}
}

func FuzzParseRequest(f *testing.F) {
	hdr := wire.Header{ClientID: 3, Flags: rdmo.FlagFence}
	scatter, _, _ := scatterPayload(f, 8, 0, 3)
	user, _ := wire.AppendUserRequest(nil, wire.Header{Op: rdmo.OpUserBase + 2, Flags: rdmo.FlagAck}, []byte("plugin"))
	f.Add(wire.AppendFlushRequest(nil, hdr, rdmo.FlushHeader{FlushID: 0xBEEF}), []byte(nil))
	f.Add(wire.AppendAppendRequest(nil, hdr, rdmo.AppendHeader{PtrAddr: 0x1000, PtrRkey: 7, DataRkey: 7}), bytes.Repeat([]byte{0x33}, 8))
	f.Add(wire.AppendScatterRequest(nil, hdr, rdmo.ScatterHeader{Count: 3}), scatter)
	f.Add(wire.AppendScatterRequest(nil, hdr, rdmo.ScatterHeader{Count: math.MaxUint64}), scatter)
	f.Add(user, []byte{1, 2, 3})
	f.Add(rawHeader(16, 0, rdmo.OpBatch, 0), []byte(nil))
	f.Add(rawHeader(24, 0, rdmo.OpFlush, 1<<5), []byte{0})
	f.Add(rawHeader(65, 0, rdmo.OpUserBase, 0), []byte(nil))
	f.Add([]byte{1, 2, 3}, []byte(nil))
	f.Add(wire.AppendLendPoolRequest(nil, wire.Header{ClientID: 3, Flags: rdmo.FlagAck}, wire.LendPoolHeader{Pool: 1, VA: 0x7f00_0000_0000, Len: 1 << 20}), []byte("packed rkey"))
	f.Add(wire.AppendAppendRequest(nil, wire.Header{Flags: rdmo.FlagAck | rdmo.FlagByRef}, rdmo.AppendHeader{PtrAddr: 8, PtrRkey: 1, DataRkey: 1}),
		wire.AppendPoolRef(nil, wire.PoolRef{Pool: 1, Offset: 64, Len: 4096}))

	f.Fuzz(func(t *testing.T, b, payload []byte) {
		r, err := wire.ParseRequest(b)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		// A valid header re-encodes to exactly the input bytes.
		var enc []byte
		switch r.Header.Op {
		case rdmo.OpFlush:
			enc = wire.AppendFlushRequest(nil, r.Header, r.Flush)
		case rdmo.OpAppend:
			enc = wire.AppendAppendRequest(nil, r.Header, r.Append)
		case rdmo.OpScatter:
			enc = wire.AppendScatterRequest(nil, r.Header, r.Scatter)
		case rdmo.OpBatch:
			enc = wire.AppendBatchRequest(nil, r.Header, r.Batch)
		case rdmo.OpLendPool:
			enc = wire.AppendLendPoolRequest(nil, r.Header, r.Pool)
		default:
			if !rdmo.IsUserOp(r.Header.Op) {
				t.Fatalf("accepted op %d", r.Header.Op)
			}
			if enc, err = wire.AppendUserRequest(nil, r.Header, r.User); err != nil {
				t.Fatalf("re-encoding an accepted user request: %v", err)
			}
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("re-encoded %x, input %x", enc, b)
		}
		if h, err := wire.ParseHeader(b); err != nil || h != r.Header {
			t.Fatalf("ParseHeader disagrees with ParseRequest: %+v, %v", h, err)
		}
		if err := r.CheckPayload(payload); err != nil {
			checkDecodeError(t, err)
		}
		if r.Header.Flags&rdmo.FlagByRef != 0 {
			ref, err := wire.ParsePoolRef(payload)
			if err != nil {
				checkDecodeError(t, err)
			} else if !bytes.Equal(wire.AppendPoolRef(nil, ref), payload) {
				t.Fatalf("reference %+v re-encodes differently from %x", ref, payload)
			}
		}
	})
}

func FuzzScatterIter(f *testing.F) {
	good, _, _ := scatterPayload(f, 8, 0, 1, 5, 300)
	f.Add(good, uint64(5))
	f.Add(good, uint64(4))
	f.Add(good, uint64(6))
	f.Add(good[:len(good)-1], uint64(5))
	f.Add(append(bytes.Clone(good), 0), uint64(5))
	f.Add([]byte(nil), uint64(0))
	f.Add([]byte(nil), uint64(math.MaxUint64))
	f.Add(make([]byte, 48), uint64(2))

	f.Fuzz(func(t *testing.T, payload []byte, count uint64) {
		it := wire.NewScatterIter(payload, count)
		var reenc []byte
		var padding []int // offsets of padding bytes, which decoders ignore
		var n uint64
		for it.Next() {
			iov, data := it.IOV(), it.Data()
			if len(data) != int(iov.Len) {
				t.Fatalf("iov %d: Len %d but %d data bytes", n, iov.Len, len(data))
			}
			for i := wire.IOVLenOffset + 2; i < wire.IOVDescLen; i++ {
				padding = append(padding, len(reenc)+i)
			}
			var err error
			if reenc, err = wire.AppendIOV(reenc, iov, data); err != nil {
				t.Fatalf("re-encoding a decoded iov: %v", err)
			}
			n++
		}
		err := it.Err()
		forEachErr := wire.ForEachIOV(payload, count, func(wire.IOV, []byte) error { return nil })
		if (err == nil) != (forEachErr == nil) {
			t.Fatalf("iterator error %v, ForEachIOV error %v", err, forEachErr)
		}
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		if n != count {
			t.Fatalf("clean end after %d of %d iovs", n, count)
		}
		// A clean walk consumed every byte: re-encoding reproduces the
		// payload except for padding, which is written as zero.
		masked := bytes.Clone(payload)
		for _, off := range padding {
			masked[off] = 0
		}
		if !bytes.Equal(reenc, masked) {
			t.Fatalf("re-encoded payload differs:\n got %x\nwant %x", reenc, masked)
		}
	})
}

func FuzzParseFlushResponse(f *testing.F) {
	f.Add(wire.AppendReferenceFlushResponse(nil, 0xBEEF))
	f.Add(wire.AppendFlushResponse(nil, wire.FlushResponse{FlushID: 1, Failed: 2, FirstOp: 1, FirstStatus: rdmo.StatusOutOfBounds, FirstSeq: 9}))
	f.Add(append(wire.AppendFlushResponse(nil, wire.FlushResponse{}), 0xFF))
	f.Add(wire.AppendAck(nil, wire.AckResponse{}))
	f.Add([]byte{0, 0, 0, 0, 1})

	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := wire.ParseFlushResponse(b)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		var enc []byte
		if r.Extended {
			enc = wire.AppendFlushResponse(nil, r)
		} else {
			if r.Failed != 0 || r.FirstOp != 0 || r.FirstStatus != 0 || r.FirstSeq != 0 {
				t.Fatalf("reference response with extension fields: %+v", r)
			}
			enc = wire.AppendReferenceFlushResponse(nil, r.FlushID)
		}
		if !bytes.HasPrefix(b, enc) {
			t.Fatalf("re-encoded %x is not a prefix of %x", enc, b)
		}
		if (r.Failed == 0) != (r.Err() == nil) {
			t.Fatalf("Failed=%d but Err()=%v", r.Failed, r.Err())
		}
	})
}

func FuzzParseAck(f *testing.F) {
	f.Add(wire.AppendAck(nil, wire.AckResponse{Op: 1, Seq: 2, Status: rdmo.StatusQueueOverflow, Value: 3}))
	f.Add(append(wire.AppendAck(nil, wire.AckResponse{}), 1, 2, 3))
	f.Add(wire.AppendReferenceFlushResponse(nil, 1))
	f.Add([]byte{1, 0, 0, 0})

	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := wire.ParseAck(b)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		want := bytes.Clone(b[:wire.AckResponseLen])
		clear(want[wire.AckReservedOffset : wire.AckReservedOffset+4])
		if a.DataLen != 0 || a.DetailLen != 0 {
			want = append(want, b[wire.AckResponseLen:wire.AckResultLen]...)
		}
		if enc := wire.AppendAck(nil, a); !bytes.Equal(enc, want) {
			t.Fatalf("re-encoded %x, want %x", enc, want)
		}
		if (a.Status == rdmo.StatusOK) != (a.Err() == nil) {
			t.Fatalf("Status=%d but Err()=%v", a.Status, a.Err())
		}
	})
}

func TestAckResult(t *testing.T) {
	a := wire.AckResponse{Op: rdmo.OpUserBase, Seq: 7, Status: rdmo.StatusOK, Value: 9, DataLen: 3, DetailLen: 2}
	b := wire.AppendAck(nil, a)
	if len(b) != wire.AckResultLen {
		t.Fatalf("ack with result lengths is %d bytes, want %d", len(b), wire.AckResultLen)
	}
	got, err := wire.ParseAck(b)
	if err != nil || got != a {
		t.Fatalf("ParseAck = %+v, %v; want %+v", got, err, a)
	}
	data, detail, err := wire.AckResult(got, []byte("abcde"))
	if err != nil || string(data) != "abc" || string(detail) != "de" {
		t.Fatalf("AckResult = %q %q %v", data, detail, err)
	}
	if n := len(wire.AppendAck(nil, wire.AckResponse{Op: 1})); n != wire.AckResponseLen {
		t.Fatalf("ack without result is %d bytes, want %d", n, wire.AckResponseLen)
	}
	if wire.MaxAckMessageLen != 256 {
		t.Fatalf("MaxAckMessageLen = %d: the bound is chosen to fill the 256-byte inline send slot", wire.MaxAckMessageLen)
	}
	for _, c := range []struct {
		name string
		a    wire.AckResponse
		data []byte
		want error
	}{
		{"data too long", wire.AckResponse{DataLen: rdmo.MaxResultData + 1}, make([]byte, rdmo.MaxResultData+1), rdmo.ErrLengthOverflow},
		{"detail too long", wire.AckResponse{DetailLen: rdmo.MaxResultDetail + 1}, make([]byte, rdmo.MaxResultDetail+1), rdmo.ErrLengthOverflow},
		{"short data", wire.AckResponse{DataLen: 4}, make([]byte, 3), rdmo.ErrPayloadMismatch},
		{"extra data", wire.AckResponse{DataLen: 4}, make([]byte, 5), rdmo.ErrPayloadMismatch},
		{"data on a 32-byte ack", wire.AckResponse{}, make([]byte, 1), rdmo.ErrPayloadMismatch},
	} {
		if _, _, err := wire.AckResult(c.a, c.data); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
}

func FuzzAckResult(f *testing.F) {
	f.Add(wire.AppendAck(nil, wire.AckResponse{Op: 16, DataLen: 2, DetailLen: 1}), []byte("abc"))
	f.Add(wire.AppendAck(nil, wire.AckResponse{Op: 16}), []byte{})
	f.Add(wire.AppendAck(nil, wire.AckResponse{DataLen: 1 << 31, DetailLen: 1 << 31}), []byte("x"))
	f.Fuzz(func(t *testing.T, hdr, amData []byte) {
		a, err := wire.ParseAck(hdr)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		data, detail, err := wire.AckResult(a, amData)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		if len(data) != int(a.DataLen) || len(detail) != int(a.DetailLen) ||
			len(data) > rdmo.MaxResultData || len(detail) > rdmo.MaxResultDetail {
			t.Fatalf("split %d+%d bytes for lengths %d+%d", len(data), len(detail), a.DataLen, a.DetailLen)
		}
	})
}

func TestLendPoolAndPoolRef(t *testing.T) {
	p := wire.LendPoolHeader{Pool: 0x0102030405060708, VA: 0x1112131415161718, Len: 0x2122232425262728}
	b := wire.AppendLendPoolRequest(nil, wire.Header{ClientID: 7, Flags: rdmo.FlagAck}, p)
	if len(b) != wire.LendPoolHeaderLen {
		t.Fatalf("LEND_POOL header is %d bytes, want %d", len(b), wire.LendPoolHeaderLen)
	}
	rh, err := wire.ParseRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if rh.Header.Op != rdmo.OpLendPool || rh.Header.ClientID != 7 || rh.Pool != p {
		t.Fatalf("decoded %+v", rh)
	}
	wantStatus(t, rh.CheckPayload(nil), rdmo.StatusPayloadMismatch) // a registration needs its key
	if err := rh.CheckPayload([]byte{1}); err != nil {
		t.Fatal(err)
	}
	rel, _ := wire.ParseRequest(wire.AppendLendPoolRequest(nil, wire.Header{}, wire.LendPoolHeader{Pool: 3}))
	wantStatus(t, rel.CheckPayload([]byte{1}), rdmo.StatusPayloadMismatch) // a release carries nothing
	if err := rel.CheckPayload(nil); err != nil {
		t.Fatal(err)
	}

	ref := wire.PoolRef{Pool: 9, Offset: 0x0A0B0C0D, Len: 1 << 20}
	rb := wire.AppendPoolRef(nil, ref)
	got, err := wire.ParsePoolRef(rb)
	if err != nil || got != ref {
		t.Fatalf("ParsePoolRef = %+v, %v; want %+v", got, err, ref)
	}
	_, err = wire.ParsePoolRef(rb[:23])
	wantStatus(t, err, rdmo.StatusPayloadMismatch)
	_, err = wire.ParsePoolRef(wire.AppendPoolRef(nil, wire.PoolRef{Pool: 9}))
	wantStatus(t, err, rdmo.StatusPayloadMismatch)
}

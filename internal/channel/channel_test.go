package channel

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
)

var typed = Format{Proto: "test", Magic: "TEST", Version: 3, Typed: true}

func frame(f Format, typ uint16, body []byte) []byte {
	b := make([]byte, f.PrefixLen(), f.PrefixLen()+len(body))
	f.PutPrefix(b, typ, len(body))
	return append(b, body...)
}

// A frame round-trips through its prefix; magic, version and length are
// refused from the prefix alone, each as its kind, with the prefix kept.
func TestReadChecksThePrefix(t *testing.T) {
	for _, f := range []Format{typed, {Proto: "u", Magic: "UNTY", Version: 1}} {
		body := []byte{0x80}
		r := Reader{R: bytes.NewReader(frame(f, 7, body)), Format: f}
		got, err := r.Read(16)
		if err != nil || !bytes.Equal(got.Body, body) || got.Length != 1 || (f.Typed && got.Type != 7) || len(got.Raw) != f.PrefixLen()+1 {
			t.Fatalf("%s: %+v %v", f.Proto, got, err)
		}
	}
	other := typed
	other.Version = 4
	bad := typed
	bad.Magic = "NOPE"
	for _, tc := range []struct {
		name string
		b    []byte
		want *Error
	}{
		{"version", frame(other, 1, nil), Sentinel("test", KindVersion)},
		{"magic", frame(bad, 1, nil), Sentinel("test", KindBadMagic)},
		{"oversize", frame(typed, 1, make([]byte, 17)), Sentinel("test", KindOversize)},
	} {
		r := Reader{R: bytes.NewReader(tc.b), Format: typed}
		f, err := r.Read(16)
		var e *Error
		if !errors.Is(err, tc.want) || !errors.As(err, &e) || f == nil || f.Body != nil {
			t.Errorf("%s: %+v %v, want %v", tc.name, f, err, tc.want)
		}
		if tc.name == "version" && (e.Local != 3 || e.Peer != 4) {
			t.Errorf("version: %+v", e)
		}
	}
}

// I/O errors say where the stream broke.
func TestIOError(t *testing.T) {
	b := frame(typed, 1, []byte{0x81, 0xa1, 'a', 1})
	r := Reader{R: bytes.NewReader(b[:5]), Format: typed}
	_, err := r.Read(16)
	if e := typed.IOError("receive", err, r.Got, r.Want); !errors.Is(e, Sentinel("test", KindTruncated)) {
		t.Errorf("cut prefix: %v", e)
	}
	if e := typed.IOError("receive", io.EOF, 0, 12); !errors.Is(e, Sentinel("test", KindPeerGone)) {
		t.Errorf("EOF at a boundary: %v", e)
	}
	if e := typed.IOError("receive", syscall.ECONNRESET, 3, 12); !errors.Is(e, Sentinel("test", KindPeerGone)) {
		t.Errorf("reset: %v", e)
	}
}

// Decoding checks the counts against the bytes first: a hostile count is
// malformed, not an allocation.
func TestDecodeBounded(t *testing.T) {
	var v []int
	if err := typed.Decode([]byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0x01}, 8, &v); !errors.Is(err, Sentinel("test", KindMalformed)) {
		t.Errorf("hostile count: %v", err)
	}
	var m map[string]int
	if err := typed.DecodeMap([]byte{0x91, 0x01}, 8, &m); !errors.Is(err, Sentinel("test", KindMalformed)) {
		t.Errorf("array where a map must be: %v", err)
	}
	if err := typed.DecodeMap([]byte{0x81, 0xa1, 'a', 0x01}, 8, &m); err != nil || m["a"] != 1 {
		t.Errorf("good map: %v %v", m, err)
	}
}

// A failed handshake is PreAuth unless the secret was proved or this
// side's context ended; each error matches its kind's sentinel only.
func TestHandshakePreAuth(t *testing.T) {
	version := &Error{Proto: "test", Kind: KindVersion, Local: 1, Peer: 9}
	if e := Handshake("test", "peer:1", version, false); !IsPreAuth(e) || e.Remote != "peer:1" || !errors.Is(e, Sentinel("test", KindVersion)) {
		t.Errorf("version mismatch: %v (pre-auth %v)", e, IsPreAuth(e))
	}
	if e := Handshake("test", "peer:1", &Error{Proto: "test", Kind: KindPeerGone, Err: io.EOF}, true); IsPreAuth(e) {
		t.Errorf("after authentication: %v is pre-auth", e)
	}
	if e := Handshake("test", "peer:1", context.Canceled, false); IsPreAuth(e) || !errors.Is(e, context.Canceled) || !errors.Is(e, Sentinel("test", KindHandshake)) {
		t.Errorf("this side's cancel: %v (pre-auth %v)", e, IsPreAuth(e))
	}
	if IsPreAuth(&Error{Proto: "test", Kind: KindVersion}) || IsPreAuth(errors.New("x")) {
		t.Error("an error outside a handshake is pre-auth")
	}
	timeout := &Error{Proto: "test", Kind: KindTimeout}
	if !errors.Is(timeout, os.ErrDeadlineExceeded) || !timeout.Timeout() || errors.Is(timeout, Sentinel("test", KindAuth)) {
		t.Errorf("timeout matching: %v", timeout)
	}
}

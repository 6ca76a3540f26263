package oob

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

type eitherResult struct {
	c   *Conn
	r   *RefConn
	err error
}

func acceptEitherAsync(t *testing.T, l *Listener) <-chan eitherResult {
	ch := make(chan eitherResult, 1)
	go func() {
		c, r, err := l.AcceptEither(context.Background())
		if c != nil {
			t.Cleanup(func() { c.Close() })
		}
		if r != nil {
			t.Cleanup(func() { r.Close() })
		}
		ch <- eitherResult{c, r, err}
	}()
	return ch
}

func refBytes(msg []byte) []byte { return appendRef(nil, msg) }

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want Protocol
		err  bool
	}{
		{prefixBytes(Magic, Version, TypeHello, 10), ProtocolRDMO, false},
		{prefixBytes(Magic, 7, TypeHello, 10), ProtocolRDMO, false}, // other versions too: the handshake reports them
		{refBytes(make([]byte, 1024))[:8], ProtocolReference, false},
		{refBytes(nil)[:8], ProtocolReference, false},
		{binary.LittleEndian.AppendUint64(nil, 1025), 0, true},
		// What a reference client reads when it takes rdmo's hello for a length.
		{binary.LittleEndian.AppendUint64(nil, 0x1000100424f4452), ProtocolRDMO, false},
		{[]byte("RDO"), 0, true},
	} {
		got, err := Detect(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("Detect(% x) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
		if err != nil && !errors.Is(err, ErrReference) {
			t.Errorf("Detect(% x): %v does not match ErrReference", tc.in, err)
		}
	}
}

// Both kinds of initiator are accepted on one listener: an rdmo dialer runs
// the handshake as with Accept, a reference one is handed over with its
// first message, and the exchange works both ways.
func TestAcceptEither(t *testing.T) {
	checkLeaks(t)
	l := listen(t, testOptions(t))
	ctx := context.Background()

	ch := acceptEitherAsync(t, l)
	dc, err := Dial(ctx, l.Addr().String(), testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, dc)
	r := <-ch
	if r.err != nil || r.c == nil || r.r != nil {
		t.Fatalf("rdmo dialer: %+v", r)
	}
	if err := dc.Send(ctx, Barrier{ID: 3}); err != nil {
		t.Fatal(err)
	}
	if m, err := Expect[Barrier](ctx, r.c); err != nil || m.ID != 3 {
		t.Fatalf("Barrier over AcceptEither: %v %v", m, err)
	}

	ch = acceptEitherAsync(t, l)
	rc, err := DialReference(ctx, l.Addr().String(), testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	addr := bytes.Repeat([]byte{0xab}, 300)
	done := make(chan []byte, 1)
	go func() {
		m, err := rc.Exchange(ctx, addr)
		if err != nil {
			t.Error(err)
		}
		done <- m
	}()
	r = <-ch
	if r.err != nil || r.r == nil || r.c != nil {
		t.Fatalf("reference dialer: %+v", r)
	}
	if !bytes.Equal(r.r.First(), addr) {
		t.Fatalf("first message % x", r.r.First())
	}
	if err := r.r.Send(ctx, []byte("worker")); err != nil {
		t.Fatal(err)
	}
	if m := <-done; string(m) != "worker" {
		t.Fatalf("dialer got %q", m)
	}
	// An exchange of two empty messages (the barrier).
	go func() {
		m, err := rc.Exchange(ctx, nil)
		if err != nil || m != nil {
			t.Errorf("barrier: %q %v", m, err)
		}
		done <- nil
	}()
	if m, err := r.r.Exchange(ctx, nil); err != nil || m != nil {
		t.Fatalf("barrier: %q %v", m, err)
	}
	<-done
	if _, err := r.r.Exchange(ctx, make([]byte, RefMaxLen+1)); !errors.Is(err, ErrReference) {
		t.Fatalf("oversize send: %v", err)
	}
}

// Bad input on the reference channel fails that one accept with one log
// line; the listener then accepts a proper initiator, and nothing leaks.
func TestAcceptEitherBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		send  []byte
		close bool
		want  error
	}{
		{"length over 1024", binary.LittleEndian.AppendUint64(nil, 1025), false, ErrReference},
		{"huge length", binary.LittleEndian.AppendUint64(nil, 1<<62), false, ErrReference},
		{"closes mid-length", []byte{8, 0, 0}, true, ErrTruncated},
		{"closes mid-message", append(binary.LittleEndian.AppendUint64(nil, 100), 1, 2, 3), true, ErrReference},
		{"closes before its message", binary.LittleEndian.AppendUint64(nil, 100), true, ErrReference},
		{"empty address", binary.LittleEndian.AppendUint64(nil, 0), false, ErrReference},
		{"sends nothing", nil, false, ErrTimeout},
		{"connects and closes", nil, true, ErrPeerGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			core, logs := observer.New(zap.DebugLevel)
			opts := testOptions(t)
			opts.Timeout = 500 * time.Millisecond
			opts.Logger = zap.New(core)
			l := listen(t, opts)
			ch := acceptEitherAsync(t, l)
			nc := rawDial(t, l.Addr().String())
			nc.Write(tc.send)
			if tc.close {
				nc.Close()
			}
			r := <-ch
			if r.err == nil || !errors.Is(r.err, tc.want) {
				t.Fatalf("AcceptEither = %+v, want an error matching %v", r, tc.want)
			}
			var he *ConnError
			if !errors.As(r.err, &he) || he.Remote == "" || !IsPreAuth(r.err) {
				t.Fatalf("%v is not a handshake failure before authentication naming the peer", r.err)
			}
			if n := logs.FilterMessage("oob: handshake failed").Len(); n != 1 {
				t.Errorf("%d log lines for one bad peer, want 1: %v", n, logs.All())
			}
			// The listener still serves a proper reference initiator.
			ch = acceptEitherAsync(t, l)
			rc, err := DialReference(context.Background(), l.Addr().String(), testOptions(t))
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if err := rc.Send(context.Background(), []byte{1, 2, 3}); err != nil {
				t.Fatal(err)
			}
			if r := <-ch; r.err != nil || r.r == nil || !bytes.Equal(r.r.First(), []byte{1, 2, 3}) {
				t.Fatalf("after bad input: %+v", r)
			}
		})
	}
}

// A listener with a secret refuses reference initiators, which cannot
// authenticate.
func TestAcceptEitherSecretRefusesReference(t *testing.T) {
	checkLeaks(t)
	opts := testOptions(t)
	opts.Secret = secretA
	l := listen(t, opts)
	ch := acceptEitherAsync(t, l)
	rc, err := DialReference(context.Background(), l.Addr().String(), testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := rc.Exchange(context.Background(), []byte{1}); !errors.Is(err, ErrPeerGone) {
		t.Errorf("reference initiator at a listener with a secret: %v", err)
	}
	if r := <-ch; !errors.Is(r.err, ErrReference) {
		t.Fatalf("AcceptEither = %+v", r)
	}
	if _, err := DialReference(context.Background(), l.Addr().String(), opts); err == nil {
		t.Errorf("DialReference with a secret succeeded")
	}
}

// FuzzDetect: any first bytes are classified without panic; whatever is
// called reference is a length within the limit.
func FuzzDetect(f *testing.F) {
	f.Add(prefixBytes(Magic, Version, TypeHello, 10))
	f.Add(refBytes(make([]byte, 16))[:8])
	f.Add(binary.LittleEndian.AppendUint64(nil, 1025))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Detect(b)
		switch {
		case err != nil:
			if !errors.Is(err, ErrReference) || p != 0 {
				t.Fatalf("Detect(% x) = %v, %v", b, p, err)
			}
		case p == ProtocolRDMO:
			if string(b[:4]) != Magic {
				t.Fatalf("rdmo without magic: % x", b)
			}
		case p == ProtocolReference:
			if binary.LittleEndian.Uint64(b) > RefMaxLen {
				t.Fatalf("reference length over the limit: % x", b)
			}
		default:
			t.Fatalf("Detect(% x) = %v", b, p)
		}
	})
}

// FuzzDecodeRef: the reference framing never panics, never accepts more
// than RefMaxLen, and what it accepts re-encodes to the same bytes.
func FuzzDecodeRef(f *testing.F) {
	f.Add(refBytes([]byte("address")))
	f.Add(refBytes(nil))
	f.Add(refBytes(make([]byte, RefMaxLen)))
	f.Add(binary.LittleEndian.AppendUint64(nil, RefMaxLen+1))
	f.Add(append(refBytes([]byte{1}), 0))
	f.Add([]byte{1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeRef(b)
		if err != nil {
			if !errors.Is(err, ErrReference) && !errors.Is(err, io.EOF) {
				t.Fatalf("decodeRef(% x): unexpected error %v", b, err)
			}
			return
		}
		if len(m) > RefMaxLen {
			t.Fatalf("accepted %d bytes", len(m))
		}
		if !bytes.Equal(appendRef(nil, m), b) {
			t.Fatalf("round trip of % x", b)
		}
	})
}

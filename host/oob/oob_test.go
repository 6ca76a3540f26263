package oob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/openrdmo/rdmo/internal/channel"
)

// One value of every application message type, with every field set.
func sampleMessages() []Message {
	addr := bytes.Repeat([]byte{0xAB, 0x01, 0x00, 0xFF}, 100) // 400 bytes, like a UCP address
	return []Message{
		WorkerInfo{
			WorkerAddress: addr,
			ClientID:      0x1122334455667788,
			Regions: []RegionInfo{
				{ID: 0x7f00deadbeef, Base: 0x7ffff7a00000, Len: 128 << 10, Name: "queue"},
				{ID: 1, Base: ^uint64(0) - 8, Len: 8, Name: ""},
			},
			Capabilities: []string{"append", "scatter", "flush"},
		},
		InitiatorInfo{WorkerAddress: addr[:37], Name: "initiator-1 ✓"},
		Done{Ops: 17, Bytes: 136, Errors: 1, Message: "one scatter rejected"},
		Verified{OK: true, Detail: "136 bytes match"},
		Verified{},
		Barrier{ID: 0xBEEF},
		Error{Code: 100, Message: "application failure"},
		WorkerInfo{}, // zero values round-trip too
	}
}

func TestSampleCoversEveryType(t *testing.T) {
	seen := map[Type]bool{}
	for _, m := range sampleMessages() {
		seen[m.MessageType()] = true
	}
	for typ := range registry {
		if !handshakeType(typ) && !seen[typ] {
			t.Errorf("sampleMessages lacks %v", typ)
		}
	}
}

func TestRoundTripEveryMessage(t *testing.T) {
	for _, secret := range [][]byte{nil, secretA} {
		t.Run(fmt.Sprintf("secret=%v", secret != nil), func(t *testing.T) {
			checkLeaks(t)
			lo, do := testOptions(t), testOptions(t)
			lo.Secret, do.Secret = secret, secret
			s, c := pair(t, lo, do)
			if s.Authenticated() != (secret != nil) || c.Authenticated() != (secret != nil) {
				t.Errorf("Authenticated = %v, %v", s.Authenticated(), c.Authenticated())
			}
			if s.PeerRole() != RoleInitiator || c.PeerRole() != RoleTarget {
				t.Errorf("peer roles %v, %v", s.PeerRole(), c.PeerRole())
			}
			ctx := context.Background()
			for _, m := range sampleMessages() {
				for _, dir := range []struct {
					name     string
					from, to *Conn
				}{{"initiator→target", c, s}, {"target→initiator", s, c}} {
					if err := dir.from.Send(ctx, m); err != nil {
						t.Fatalf("%s send %T: %v", dir.name, m, err)
					}
					got, err := dir.to.Receive(ctx)
					if err != nil {
						t.Fatalf("%s receive %T: %v", dir.name, m, err)
					}
					if !reflect.DeepEqual(got, m) {
						t.Errorf("%s: sent %#v, got %#v", dir.name, m, got)
					}
				}
			}
			// Pointers can be sent; values are received.
			if err := c.Send(ctx, &Barrier{ID: 9}); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Receive(ctx); err != nil || got != (Barrier{ID: 9}) {
				t.Fatalf("got %#v, %v", got, err)
			}
		})
	}
}

func TestExpect(t *testing.T) {
	checkLeaks(t)
	s, c := pair(t, testOptions(t), testOptions(t))
	ctx := context.Background()
	wi := WorkerInfo{WorkerAddress: []byte{1, 2, 3}, ClientID: 7}
	if err := s.Send(ctx, wi); err != nil {
		t.Fatal(err)
	}
	got, err := Expect[WorkerInfo](ctx, c)
	if err != nil || !reflect.DeepEqual(got, wi) {
		t.Fatalf("Expect = %#v, %v", got, err)
	}

	s.Send(ctx, Error{Code: 150, Message: "no memory"})
	_, err = Expect[WorkerInfo](ctx, c)
	var pe Error
	if !errors.As(err, &pe) || pe.Code != 150 {
		t.Fatalf("Expect after peer Error = %v", err)
	}

	s.Send(ctx, Barrier{ID: 1})
	_, err = Expect[WorkerInfo](ctx, c)
	var ue *ConnError
	if !errors.Is(err, ErrUnexpected) || !errors.As(err, &ue) || ue.Kind != ErrUnexpected.Kind || ue.PreAuth {
		t.Fatalf("Expect on Barrier = %v", err)
	}
	mustContain(t, err, "Barrier(20)", "WorkerInfo(16)")

	// The connection is still in sync.
	s.Send(ctx, Done{Ops: 3})
	if d, err := Expect[Done](ctx, c); err != nil || d.Ops != 3 {
		t.Fatalf("Expect Done = %v, %v", d, err)
	}
}

// Concurrent senders never interleave frames.
func TestConcurrentSend(t *testing.T) {
	checkLeaks(t)
	s, c := pair(t, testOptions(t), testOptions(t))
	ctx := context.Background()
	const senders, each = 8, 50
	var wg sync.WaitGroup
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				addr := bytes.Repeat([]byte{byte(g)}, 1000+i)
				if err := c.Send(ctx, InitiatorInfo{WorkerAddress: addr, Name: fmt.Sprint(g)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range senders * each {
		m, err := Expect[InitiatorInfo](ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(m.WorkerAddress[0]) != m.Name {
			t.Fatalf("interleaved frame: name %s, address byte %d", m.Name, m.WorkerAddress[0])
		}
	}
	wg.Wait()
}

func TestWrongSecret(t *testing.T) {
	checkLeaks(t)
	lo, do := testOptions(t), testOptions(t)
	lo.Secret, do.Secret = secretA, secretB
	l := listen(t, lo)
	ctx := context.Background()
	sent := make(chan error, 1)
	go func() {
		c, err := l.Accept(ctx)
		if err == nil {
			c.Send(ctx, WorkerInfo{WorkerAddress: []byte("secret worker address")})
			c.Close()
		}
		sent <- err
	}()
	c, derr := Dial(ctx, l.Addr().String(), do)
	if c != nil {
		c.Close()
		t.Fatal("dial succeeded with the wrong secret")
	}
	serr := <-sent
	for name, err := range map[string]error{"listener": serr, "dialer": derr} {
		var ce *ConnError
		if !errors.Is(err, ErrAuth) || !errors.As(err, &ce) || ce.Remote == "" || !IsPreAuth(err) {
			t.Errorf("%s: %v, want an authentication failure of the handshake, before authentication, naming the peer", name, err)
		}
		if errors.Is(err, ErrPeerGone) || errors.Is(err, ErrTimeout) {
			t.Errorf("%s: %v matches another sentinel too", name, err)
		}
	}
	mustContain(t, derr, "rejected this side's proof", "secrets differ")
	mustContain(t, serr, "proof does not match", "secrets differ")
}

// A raw peer without the secret, whatever it does, receives nothing but
// handshake frames: never a WorkerInfo.
func TestUnauthenticatedPeerLearnsNothing(t *testing.T) {
	badProof := func(t *testing.T, nc net.Conn) {
		nc.Write(frameBytes(t, Version, authChallenge{Nonce: bytes.Repeat([]byte{7}, NonceLen)}))
		nc.Write(frameBytes(t, Version, authProof{MAC: make([]byte, 32)}))
	}
	cases := []struct {
		name  string
		hello Hello
		after func(t *testing.T, nc net.Conn)
		want  error
	}{
		{"no auth in hello", Hello{Role: RoleInitiator}, nil, ErrAuth},
		{"forged proof", Hello{Role: RoleInitiator, Auth: true}, badProof, ErrAuth},
		{"skips the challenge", Hello{Role: RoleInitiator, Auth: true}, func(t *testing.T, nc net.Conn) {
			nc.Write(frameBytes(t, Version, InitiatorInfo{Name: "x"}))
		}, ErrUnexpected},
		{"skips the proof", Hello{Role: RoleInitiator, Auth: true}, func(t *testing.T, nc net.Conn) {
			nc.Write(frameBytes(t, Version, authChallenge{Nonce: bytes.Repeat([]byte{7}, NonceLen)}))
			nc.Write(frameBytes(t, Version, InitiatorInfo{Name: "x"}))
		}, ErrUnexpected},
		{"short nonce", Hello{Role: RoleInitiator, Auth: true}, func(t *testing.T, nc net.Conn) {
			nc.Write(frameBytes(t, Version, authChallenge{Nonce: []byte{1}}))
		}, ErrAuth},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			lo := testOptions(t)
			lo.Secret = secretA
			l := listen(t, lo)
			ctx := context.Background()
			sent := make(chan error, 1)
			go func() {
				c, err := l.Accept(ctx)
				if err == nil {
					c.Send(ctx, WorkerInfo{WorkerAddress: []byte("secret")})
					c.Close()
				}
				sent <- err
			}()
			nc := rawDial(t, l.Addr().String())
			if h := rawHello(t, nc, tc.hello); !h.Auth {
				t.Errorf("listener hello %+v lacks auth", h)
			}
			if tc.after != nil {
				tc.after(t, nc)
			}
			types := rawReadAll(nc)
			if err := <-sent; !errors.Is(err, tc.want) {
				t.Errorf("listener: %v, want %v", err, tc.want)
			}
			for _, typ := range types {
				if typ != TypeAuthChallenge && typ != TypeError {
					t.Errorf("unauthenticated peer received %v (all: %v)", typ, types)
				}
			}
		})
	}
}

func TestSecretOnOneSideOnly(t *testing.T) {
	for _, serverHasSecret := range []bool{true, false} {
		t.Run(fmt.Sprintf("server=%v", serverHasSecret), func(t *testing.T) {
			checkLeaks(t)
			lo, do := testOptions(t), testOptions(t)
			if serverHasSecret {
				lo.Secret = secretA
			} else {
				do.Secret = secretA
			}
			l := listen(t, lo)
			ch := acceptAsync(t, context.Background(), l)
			c, derr := Dial(context.Background(), l.Addr().String(), do)
			closeLater(t, c)
			r := <-ch
			closeLater(t, r.c)
			withSecret, without := r.err, derr
			if !serverHasSecret {
				withSecret, without = derr, r.err
			}
			if !errors.Is(withSecret, ErrAuth) || !errors.Is(without, ErrAuth) {
				t.Fatalf("with secret: %v; without: %v; want auth errors", withSecret, without)
			}
			mustContain(t, withSecret, "requires a shared secret", "peer has none configured")
			mustContain(t, without, "peer requires a shared secret", "none is configured on this side")
		})
	}
}

func TestSecretTooShort(t *testing.T) {
	_, err := Listen("127.0.0.1:0", Options{Secret: []byte("short")})
	mustContain(t, err, "at least 16")
	_, err = Dial(context.Background(), "127.0.0.1:1", Options{Secret: []byte("short")})
	mustContain(t, err, "at least 16")
}

func TestRoleConflict(t *testing.T) {
	checkLeaks(t)
	lo, do := testOptions(t), testOptions(t)
	do.Role = RoleTarget
	l := listen(t, lo)
	ch := acceptAsync(t, context.Background(), l)
	c, derr := Dial(context.Background(), l.Addr().String(), do)
	closeLater(t, c)
	r := <-ch
	closeLater(t, r.c)
	for _, err := range []error{derr, r.err} {
		if !errors.Is(err, ErrRole) || !IsPreAuth(err) {
			t.Errorf("%v, want a role conflict before authentication", err)
		}
		mustContain(t, err, "this side is the target and so is the peer")
	}
}

// A relay that re-encodes the dialer's hello (a semantically equal map with
// an extra key) makes the authentication fail on both sides.
func TestTamperedHandshakeFailsAuth(t *testing.T) {
	checkLeaks(t)
	lo, do := testOptions(t), testOptions(t)
	lo.Secret, do.Secret = secretA, secretA
	l := listen(t, lo)
	ch := acceptAsync(t, context.Background(), l)

	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		in, err := proxy.Accept()
		if err != nil {
			return
		}
		defer in.Close()
		out, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			return
		}
		defer out.Close()
		fr := channel.Reader{R: in, Format: format(Version)}
		f, err := fr.Read(1024)
		if err != nil {
			return
		}
		var m map[string]any
		msgpack.Unmarshal(f.Body, &m)
		m["comment"] = "inserted by a relay"
		body, _ := msgpack.Marshal(m)
		out.Write(append(prefixBytes(Magic, Version, TypeHello, uint32(len(body))), body...))
		var cwg sync.WaitGroup
		cwg.Add(1)
		go func() { defer cwg.Done(); io.Copy(in, out); in.(*net.TCPConn).CloseWrite() }()
		io.Copy(out, in)
		out.(*net.TCPConn).CloseWrite()
		cwg.Wait()
	}()

	c, derr := Dial(context.Background(), proxy.Addr().String(), do)
	closeLater(t, c)
	r := <-ch
	closeLater(t, r.c)
	if !errors.Is(derr, ErrAuth) || !errors.Is(r.err, ErrAuth) {
		t.Errorf("dialer: %v; listener: %v; want auth errors", derr, r.err)
	}
	wg.Wait()
}

func TestTruncatedFrame(t *testing.T) {
	full := frameBytes(t, Version, InitiatorInfo{WorkerAddress: make([]byte, 200), Name: "x"})
	for _, cut := range []int{5, PrefixLen, PrefixLen + 100, len(full) - 1} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			checkLeaks(t)
			l := listen(t, testOptions(t))
			ch := acceptAsync(t, context.Background(), l)
			nc := rawDial(t, l.Addr().String())
			rawHello(t, nc, Hello{Role: RoleInitiator})
			r := <-ch
			closeLater(t, r.c)
			if r.err != nil {
				t.Fatal(r.err)
			}
			nc.Write(full[:cut])
			nc.Close()
			_, err := r.c.Receive(context.Background())
			var te *ConnError
			if !errors.Is(err, ErrTruncated) || !errors.As(err, &te) {
				t.Fatalf("Receive = %v, want a TruncatedError", err)
			}
			want := PrefixLen
			if cut >= PrefixLen {
				want = len(full)
			}
			if te.Got != cut || te.Want != want {
				t.Errorf("TruncatedError %+v, want Got %d Want %d", te, cut, want)
			}
			if _, err := r.c.Receive(context.Background()); !errors.Is(err, ErrTruncated) {
				t.Errorf("second Receive = %v, want the same failure", err)
			}
		})
	}
}

func TestOversizeReceive(t *testing.T) {
	for _, length := range []uint32{DefaultMaxBody + 1, 0xFFFFFFFF} {
		t.Run(fmt.Sprint(length), func(t *testing.T) {
			checkLeaks(t)
			opts := testOptions(t)
			opts.Timeout = time.Minute // a receiver waiting for the body would hang
			l := listen(t, opts)
			ch := acceptAsync(t, context.Background(), l)
			nc := rawDial(t, l.Addr().String())
			rawHello(t, nc, Hello{Role: RoleInitiator})
			r := <-ch
			closeLater(t, r.c)
			if r.err != nil {
				t.Fatal(r.err)
			}
			// Only the prefix: the body is never sent.
			nc.Write(prefixBytes(Magic, Version, TypeInitiatorInfo, length))
			_, err := r.c.Receive(context.Background())
			var oe *ConnError
			if !errors.Is(err, ErrOversize) || !errors.As(err, &oe) || oe.Size != uint64(length) || oe.Limit != DefaultMaxBody {
				t.Fatalf("Receive = %v, want OversizeError{Size %d, Limit %d}", err, length, DefaultMaxBody)
			}
			mustContain(t, err, fmt.Sprint(length), fmt.Sprint(DefaultMaxBody))
		})
	}
}

// The decoder rejects an oversize length without allocating the body.
func TestOversizeDoesNotAllocate(t *testing.T) {
	hdr := prefixBytes(Magic, Version, TypeWorkerInfo, 0xFFFFFFFF)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 100
	for range runs {
		if _, err := decodeFrame(hdr, DefaultMaxBody); !errors.Is(err, ErrOversize) {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 1024 {
		t.Errorf("%d bytes allocated per oversize frame", per)
	}
}

// A body whose msgpack counts claim more than is present is rejected before
// the msgpack decoder allocates from the claim.
func TestHostileCountsDoNotAllocate(t *testing.T) {
	bodies := map[string][]byte{
		// {"regions": array32 of 2^32-1 elements}
		"regions": append([]byte{0x81, 0xa7, 'r', 'e', 'g', 'i', 'o', 'n', 's', 0xdd}, 0xff, 0xff, 0xff, 0xff),
		// {"worker_address": bin32 of 2^32-1 bytes}
		"address": append(append([]byte{0x81, 0xae}, "worker_address"...), 0xc6, 0xff, 0xff, 0xff, 0xff),
		// {"capabilities": array32 of 2^32-1 strings}
		"capabilities": append(append([]byte{0x81, 0xac}, "capabilities"...), 0xdd, 0xff, 0xff, 0xff, 0xff),
		// map32 of 2^32-1 entries
		"map": {0xdf, 0xff, 0xff, 0xff, 0xff},
		// 20-deep nesting
		"deep": append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 20)...),
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			frame := append(prefixBytes(Magic, Version, TypeWorkerInfo, uint32(len(body))), body...)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := decodeFrame(frame, DefaultMaxBody)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("decode = %v, want ErrMalformed", err)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
				t.Errorf("%d bytes allocated", n)
			}
		})
	}
}

func TestOversizeSendKeepsConnection(t *testing.T) {
	checkLeaks(t)
	opts := testOptions(t)
	opts.MaxBody = 1024
	s, c := pair(t, opts, opts)
	ctx := context.Background()
	err := c.Send(ctx, InitiatorInfo{WorkerAddress: make([]byte, 2000)})
	var oe *ConnError
	if !errors.As(err, &oe) || oe.Limit != 1024 || oe.Size < 2000 {
		t.Fatalf("Send = %v, want an OversizeError", err)
	}
	if err := c.Send(ctx, Barrier{ID: 5}); err != nil {
		t.Fatal(err)
	}
	if b, err := Expect[Barrier](ctx, s); err != nil || b.ID != 5 {
		t.Fatalf("after oversize send: %v, %v", b, err)
	}
}

// A peer that connects and says nothing: the handshake in Accept gives up
// after Options.Timeout.
func TestSilentPeerDuringHandshake(t *testing.T) {
	checkLeaks(t)
	opts := testOptions(t)
	opts.Timeout = 300 * time.Millisecond
	l := listen(t, opts)
	start := time.Now()
	ch := acceptAsync(t, context.Background(), l)
	rawDial(t, l.Addr().String())
	r := <-ch
	closeLater(t, r.c)
	var te *ConnError
	if !errors.Is(r.err, ErrTimeout) || !errors.As(r.err, &te) || te.Wait != opts.Timeout || !IsPreAuth(r.err) {
		t.Fatalf("Accept = %v, want a TimeoutError", r.err)
	}
	notBefore(t, time.Since(start), opts.Timeout)
}

// After the handshake, a silent peer makes Receive fail within Timeout; the
// connection stays usable since nothing of a frame was consumed.
func TestSilentPeerReceive(t *testing.T) {
	checkLeaks(t)
	s, c := pair(t, testOptions(t), testOptions(t))
	s.opts.Timeout = 300 * time.Millisecond // after the handshake, which a loaded machine may slow
	start := time.Now()
	_, err := s.Receive(context.Background())
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Receive = %v, want a TimeoutError", err)
	}
	mustContain(t, err, "deadline exceeded", "300ms")
	notBefore(t, time.Since(start), s.opts.Timeout)

	c.Send(context.Background(), Barrier{ID: 1})
	if _, err := Expect[Barrier](context.Background(), s); err != nil {
		t.Fatalf("after a timeout at a frame boundary: %v", err)
	}
}

// A context deadline governs the wait for a message, even beyond Timeout.
func TestContextDeadlineGovernsWait(t *testing.T) {
	checkLeaks(t)
	s, _ := pair(t, testOptions(t), testOptions(t))
	s.opts.Timeout = 100 * time.Millisecond
	// start is read before the deadline is set, so the deadline is at
	// least 400 ms after it (read after, a loaded machine showed 399.9 ms).
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	_, err := s.Receive(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive = %v, want context.DeadlineExceeded", err)
	}
	notBefore(t, time.Since(start), 400*time.Millisecond)
}

// A peer that stalls in the middle of a frame is cut off after Timeout,
// whatever the context's deadline.
func TestStalledMidFrame(t *testing.T) {
	checkLeaks(t)
	l := listen(t, testOptions(t))
	ch := acceptAsync(t, context.Background(), l)
	nc := rawDial(t, l.Addr().String())
	rawHello(t, nc, Hello{Role: RoleInitiator})
	r := <-ch
	closeLater(t, r.c)
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.c.opts.Timeout = 300 * time.Millisecond
	opts := r.c.opts
	nc.Write(frameBytes(t, Version, Barrier{ID: 1})[:7])
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	start := time.Now()
	_, err := r.c.Receive(ctx)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Receive = %v, want ErrTimeout", err)
	}
	notBefore(t, time.Since(start), opts.Timeout)
	if _, err := r.c.Receive(ctx); !errors.Is(err, ErrTimeout) {
		t.Errorf("after a mid-frame timeout: %v, want the connection failed", err)
	}
}

func TestVersionMismatch(t *testing.T) {
	checkLeaks(t)
	lo, do := testOptions(t), testOptions(t)
	do.version = 2
	l := listen(t, lo)
	ch := acceptAsync(t, context.Background(), l)
	c, derr := Dial(context.Background(), l.Addr().String(), do)
	closeLater(t, c)
	r := <-ch
	closeLater(t, r.c)
	check := func(who string, err error, local, peer uint16) {
		var ve *ConnError
		if !errors.Is(err, ErrVersion) || !errors.As(err, &ve) || ve.Local != local || ve.Peer != peer || !IsPreAuth(err) {
			t.Errorf("%s: %v, want VersionError{%d, %d}", who, err, local, peer)
		}
		mustContain(t, err, fmt.Sprintf("this side speaks version %d", local), fmt.Sprintf("the peer speaks version %d", peer))
	}
	check("listener", r.err, 1, 2)
	check("dialer", derr, 2, 1)
}

func TestBadMagic(t *testing.T) {
	t.Run("handshake", func(t *testing.T) {
		checkLeaks(t)
		l := listen(t, testOptions(t))
		ch := acceptAsync(t, context.Background(), l)
		nc := rawDial(t, l.Addr().String())
		nc.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		r := <-ch
		closeLater(t, r.c)
		var be *ConnError
		if !errors.Is(r.err, ErrBadMagic) || !errors.As(r.err, &be) || string(be.Magic[:]) != "GET " || !IsPreAuth(r.err) {
			t.Fatalf("Accept = %v, want BadMagicError", r.err)
		}
	})
	t.Run("after handshake", func(t *testing.T) {
		checkLeaks(t)
		l := listen(t, testOptions(t))
		ch := acceptAsync(t, context.Background(), l)
		nc := rawDial(t, l.Addr().String())
		rawHello(t, nc, Hello{Role: RoleInitiator})
		r := <-ch
		closeLater(t, r.c)
		if r.err != nil {
			t.Fatal(r.err)
		}
		nc.Write(append(prefixBytes("XDOB", Version, TypeBarrier, 3), 0x81, 0xa1, 'x'))
		if _, err := r.c.Receive(context.Background()); !errors.Is(err, ErrBadMagic) {
			t.Fatalf("Receive = %v, want ErrBadMagic", err)
		}
		_, err := r.c.Receive(context.Background())
		if !errors.Is(err, ErrBadMagic) {
			t.Fatalf("second Receive = %v, want the connection failed", err)
		}
		mustContain(t, err, "unusable")
	})
}

func TestUnknownTypeKeepsConnection(t *testing.T) {
	checkLeaks(t)
	l := listen(t, testOptions(t))
	ch := acceptAsync(t, context.Background(), l)
	nc := rawDial(t, l.Addr().String())
	rawHello(t, nc, Hello{Role: RoleInitiator})
	r := <-ch
	closeLater(t, r.c)
	if r.err != nil {
		t.Fatal(r.err)
	}
	ctx := context.Background()
	nc.Write(append(prefixBytes(Magic, Version, 999, 3), 0x81, 0xa1, 'x'))                         // a future type
	nc.Write(append(prefixBytes(Magic, Version, TypeAuthProof, 1), 0x80))                          // a handshake type
	nc.Write(append(prefixBytes(Magic, Version, TypeBarrier, 6), 0x81, 0xa2, 'i', 'd', 0xa1, 'z')) // id is a string
	nc.Write(append(prefixBytes(Magic, Version, TypeBarrier, 5), 0x81, 0xa2, 'i', 'd', 0x2a))      // id 42
	for _, want := range []error{ErrUnexpected, ErrUnexpected, ErrMalformed} {
		if _, err := r.c.Receive(ctx); !errors.Is(err, want) {
			t.Fatalf("Receive = %v, want %v", err, want)
		}
	}
	if b, err := Expect[Barrier](ctx, r.c); err != nil || b.ID != 42 {
		t.Fatalf("after skipped frames: %v, %v", b, err)
	}
}

func TestSendRejectsBadMessages(t *testing.T) {
	checkLeaks(t)
	_, c := pair(t, testOptions(t), testOptions(t))
	ctx := context.Background()
	if err := c.Send(ctx, nil); err == nil {
		t.Error("nil message sent")
	}
	if err := c.Send(ctx, (*Barrier)(nil)); err == nil {
		t.Error("nil pointer sent")
	}
	if err := c.Send(ctx, Hello{Role: RoleInitiator}); err == nil {
		t.Error("Hello sent after the handshake")
	}
	if err := c.Send(ctx, Barrier{}); err != nil {
		t.Errorf("connection unusable after rejected sends: %v", err)
	}
}

func TestCancelUnblocksReceive(t *testing.T) {
	checkLeaks(t)
	s, c := pair(t, testOptions(t), testOptions(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Receive(ctx)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive = %v, want context.Canceled", err)
	}
	// Nothing was consumed: the connection still works.
	c.Send(context.Background(), Barrier{ID: 3})
	if b, err := Expect[Barrier](context.Background(), s); err != nil || b.ID != 3 {
		t.Fatalf("after cancel: %v, %v", b, err)
	}
}

func TestCancelUnblocksAcceptAndDial(t *testing.T) {
	checkLeaks(t)
	t.Run("accept", func(t *testing.T) {
		l := listen(t, testOptions(t))
		ctx, cancel := context.WithCancel(context.Background())
		ch := acceptAsync(t, ctx, l)
		cancel()
		if r := <-ch; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("Accept = %v", r.err)
		}
	})
	t.Run("dial handshake", func(t *testing.T) {
		raw, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			nc, err := raw.Accept()
			if err == nil {
				accepted <- nc
			}
			close(accepted)
		}()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			c, err := Dial(ctx, raw.Addr().String(), testOptions(t))
			if c != nil {
				c.Close()
			}
			done <- err
		}()
		nc := <-accepted // a listener that never answers
		defer nc.Close()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Dial = %v, want context.Canceled", err)
		}
	})
	t.Run("close listener", func(t *testing.T) {
		l := listen(t, testOptions(t))
		ch := acceptAsync(t, context.Background(), l)
		l.Close()
		if r := <-ch; !errors.Is(r.err, ErrClosed) {
			t.Fatalf("Accept = %v, want ErrClosed", r.err)
		}
	})
}

func TestCancelUnblocksSend(t *testing.T) {
	checkLeaks(t)
	opts := testOptions(t)
	opts.MaxBody = MaxBodyLimit
	s, _ := pair(t, opts, opts) // the client never reads: the socket buffers fill up
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		big := WorkerInfo{WorkerAddress: make([]byte, 4<<20)}
		for {
			if err := s.Send(ctx, big); err != nil {
				done <- err
				return
			}
		}
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Send = %v, want context.Canceled", err)
	}
}

func TestCloseUnblocksReceive(t *testing.T) {
	checkLeaks(t)
	s, _ := pair(t, testOptions(t), testOptions(t))
	done := make(chan error, 1)
	go func() {
		_, err := s.Receive(context.Background())
		done <- err
	}()
	s.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Receive = %v, want ErrClosed", err)
	}
	if err := s.Send(context.Background(), Barrier{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v", err)
	}
}

func TestPeerGone(t *testing.T) {
	t.Run("between messages", func(t *testing.T) {
		checkLeaks(t)
		s, c := pair(t, testOptions(t), testOptions(t))
		done := make(chan error, 1)
		go func() {
			_, err := s.Receive(context.Background())
			done <- err
		}()
		c.Close()
		err := <-done
		if !errors.Is(err, ErrPeerGone) || !errors.Is(err, io.EOF) {
			t.Fatalf("Receive = %v, want ErrPeerGone", err)
		}
	})
	t.Run("reset mid-message", func(t *testing.T) {
		checkLeaks(t)
		l := listen(t, testOptions(t))
		ch := acceptAsync(t, context.Background(), l)
		nc := rawDial(t, l.Addr().String())
		rawHello(t, nc, Hello{Role: RoleInitiator})
		r := <-ch
		closeLater(t, r.c)
		if r.err != nil {
			t.Fatal(r.err)
		}
		full := frameBytes(t, Version, InitiatorInfo{WorkerAddress: make([]byte, 300)})
		nc.Write(full[:PrefixLen+50])
		nc.SetLinger(0) // close with RST: the peer crashed
		nc.Close()
		_, err := r.c.Receive(context.Background())
		if !errors.Is(err, ErrPeerGone) {
			t.Fatalf("Receive = %v, want ErrPeerGone", err)
		}
	})
	t.Run("send to a gone peer", func(t *testing.T) {
		checkLeaks(t)
		s, c := pair(t, testOptions(t), testOptions(t))
		c.Send(context.Background(), Barrier{}) // unread by c: its close resets
		c.Close()
		var err error
		for range 1000 {
			if err = s.Send(context.Background(), Barrier{}); err != nil {
				break
			}
		}
		if !errors.Is(err, ErrPeerGone) {
			t.Fatalf("Send = %v, want ErrPeerGone", err)
		}
	})
}

// Every failure matches exactly one sentinel.
func TestSentinelsAreExclusive(t *testing.T) {
	sentinels := []*ConnError{ErrPeerGone, ErrTruncated, ErrBadMagic, ErrVersion, ErrOversize,
		ErrUnexpected, ErrMalformed, ErrTimeout, ErrAuth, ErrRole, ErrClosed, ErrHandshake}
	for i, s := range sentinels {
		err := &ConnError{Proto: protoName, Kind: s.Kind, Op: "x", Err: io.EOF}
		for j, s2 := range sentinels {
			if got := errors.Is(err, s2); got != (i == j) {
				t.Errorf("errors.Is(%v, %v) = %v", err, s2, got)
			}
		}
		if !strings.HasPrefix(err.Error(), "oob: ") {
			t.Errorf("%v: message %q lacks the oob: prefix", s.Kind, err)
		}
	}
}

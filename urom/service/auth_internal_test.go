package service

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/openrdmo/rdmo/internal/hmacauth"
	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/internal/uromwire"
)

// These tests speak the wire protocol by hand, as a hostile host or a
// hostile service would. The service's workers are processes of this test
// binary (TestMain in urom_test.go serves UROM_TEST_ROLE=worker).

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// hangGuard bounds every wait of these tests so that a bug fails them
// instead of hanging them; it is not a measurement.
const hangGuard = 30 * time.Second

func startRawTestService(t *testing.T, secret []byte, handshake time.Duration) (string, *Service, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	addr, s := startForTest(t, Config{
		Listen:           "127.0.0.1:0",
		Builtins:         []urom.PluginInfo{{Name: "echo", Version: "1.0.0"}},
		MaxWorkers:       2,
		WorkerCommand:    []string{os.Args[0], "-test.run=^$"},
		WorkerEnv:        []string{"UROM_TEST_ROLE=worker"},
		ComponentVersion: "1.2.0",
		Secret:           secret,
		HandshakeTimeout: handshake,
		Logger:           zap.New(core),
	})
	return addr, s, logs
}

// rawHost is a host connection driven frame by frame.
type rawHost struct {
	t  *testing.T
	nc net.Conn
	c  *uromwire.Conn
}

func dialRaw(t *testing.T, addr string) *rawHost {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawHost{t: t, nc: nc, c: uromwire.NewConn(nc, hangGuard)}
}

func (h *rawHost) send(cookie uint64, kind string, body any) {
	h.t.Helper()
	b, err := uromwire.EncodeBody(body)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.c.Write(&uromwire.Envelope{Cookie: cookie, Kind: kind, Body: b}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *rawHost) recv() *uromwire.Envelope {
	h.t.Helper()
	env, err := h.c.Read(hangGuard)
	if err != nil {
		h.t.Fatalf("reading the service's answer: %v", err)
	}
	return env
}

// closed checks that the service closed the connection without sending
// anything more.
func (h *rawHost) closed() {
	h.t.Helper()
	h.nc.SetReadDeadline(time.Now().Add(hangGuard))
	var b [1]byte
	if n, err := h.nc.Read(b[:]); n != 0 || !(errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err)) {
		h.t.Fatalf("connection not closed by the service: read %d bytes, %v", n, err)
	}
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "connection reset") }

// hello sends an authenticating hello and returns the challenge.
func (h *rawHost) hello(nonce []byte) (*uromwire.Envelope, urom.HelloReply) {
	h.t.Helper()
	h.send(1, uromwire.KindHello, urom.Hello{Component: "rdmo", ComponentVersion: "1.0.0", Auth: true, Nonce: nonce})
	env := h.recv()
	var r urom.HelloReply
	if err := uromwire.DecodeBody(env.Body, &r); err != nil || env.Status != "" {
		h.t.Fatalf("challenge: %+v %v", env, err)
	}
	return env, r
}

func refusals(logs *observer.ObservedLogs, h *rawHost) int {
	return logs.FilterField(zap.String("peer", h.nc.LocalAddr().String())).Len()
}

// Before a host proved the secret the service answers nothing but the
// handshake: no plugin list, no worker, not even its component version;
// every wrong step ends the connection with an error answer, and one log
// line names the host.
func TestNothingServedBeforeAuthentication(t *testing.T) {
	addr, svc, logs := startRawTestService(t, testSecret, 0)
	nonce := bytes.Repeat([]byte{7}, 32)
	for _, tc := range []struct {
		name string
		run  func(h *rawHost) *uromwire.Envelope // returns the refusal
		code string
	}{
		{"plugins first", func(h *rawHost) *uromwire.Envelope { h.send(1, uromwire.KindPlugins, nil); return h.recv() }, uromwire.CodeBadRequest},
		{"spawn first", func(h *rawHost) *uromwire.Envelope {
			h.send(1, uromwire.KindSpawn, urom.SpawnOptions{})
			return h.recv()
		}, uromwire.CodeBadRequest},
		{"hello without auth", func(h *rawHost) *uromwire.Envelope {
			h.send(1, uromwire.KindHello, urom.Hello{Component: "rdmo", ComponentVersion: "1.0.0"})
			return h.recv()
		}, uromwire.CodeAuth},
		{"short nonce", func(h *rawHost) *uromwire.Envelope {
			h.send(1, uromwire.KindHello, urom.Hello{Component: "rdmo", ComponentVersion: "1.0.0", Auth: true, Nonce: nonce[:5]})
			return h.recv()
		}, uromwire.CodeAuth},
		{"spawn instead of the proof", func(h *rawHost) *uromwire.Envelope {
			_, ch := h.hello(nonce)
			if !ch.Auth || len(ch.Nonce) != 32 || ch.ComponentVersion != "" || ch.MAC != nil {
				t.Errorf("challenge %+v: want a nonce and nothing else", ch)
			}
			h.send(2, uromwire.KindSpawn, urom.SpawnOptions{})
			return h.recv()
		}, uromwire.CodeAuth},
		{"wrong proof", func(h *rawHost) *uromwire.Envelope {
			h.hello(nonce)
			h.send(2, uromwire.KindAuth, uromwire.AuthProof{MAC: bytes.Repeat([]byte{1}, 32)})
			return h.recv()
		}, uromwire.CodeAuth},
		{"replayed proof of another connection", func(h *rawHost) *uromwire.Envelope {
			// A proof is bound to the service's fresh nonce: one made for
			// an earlier challenge does not pass a new one.
			env, ch := h.hello(nonce)
			tr := hmacauth.Transcript{Label: uromwire.AuthLabel, DialerHello: mustBody(h.t, urom.Hello{Component: "rdmo", ComponentVersion: "1.0.0", Auth: true, Nonce: nonce}),
				ListenerHello: env.Body, DialerNonce: nonce, ListenerNonce: ch.Nonce}
			h2 := dialRaw(h.t, addr)
			h2.hello(nonce)
			h2.send(2, uromwire.KindAuth, uromwire.AuthProof{MAC: tr.Proof(testSecret, hmacauth.Dialer)})
			return h2.recv()
		}, uromwire.CodeAuth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := dialRaw(t, addr)
			env := tc.run(h)
			if env.Code != tc.code || len(env.Body) != 0 {
				t.Errorf("answer %+v, want error code %q and no body", env, tc.code)
			}
			if tc.code == uromwire.CodeAuth && !strings.Contains(env.Status, "authentication failed") {
				t.Errorf("answer %q does not say authentication failed", env.Status)
			}
			if tc.name != "replayed proof of another connection" {
				h.closed()
				if n := refusals(logs, h); n != 1 {
					t.Errorf("%d log lines name the host, want 1", n)
				}
			}
		})
	}
	if ws := svc.Workers(); len(ws) != 0 {
		t.Errorf("workers started for unauthenticated hosts: %+v", ws)
	}
}

func mustBody(t *testing.T, v any) []byte {
	b, err := uromwire.EncodeBody(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A host that connects and sends nothing, or stops after its hello, or
// sends a hello too large to be one, is dropped at the handshake deadline
// (or at once); a host that authenticated meanwhile is served before and
// after, its session not bound by that deadline.
func TestHandshakeDeadline(t *testing.T) {
	addr, _, logs := startRawTestService(t, testSecret, 300*time.Millisecond)
	ctx := context.Background()
	good, err := urom.Dial(ctx, addr, urom.ClientOptions{ComponentVersion: "1.0.0", Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	w, err := good.Spawn(ctx, urom.SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	silent := dialRaw(t, addr)
	stalled := dialRaw(t, addr)
	stalled.hello(bytes.Repeat([]byte{7}, 32))
	huge := dialRaw(t, addr)
	prefix := []byte(uromwire.FrameMagic)
	prefix = binary.BigEndian.AppendUint16(prefix, urom.ProtocolVersion)
	prefix = binary.BigEndian.AppendUint32(prefix, uromwire.HandshakeMaxFrame+1)
	huge.nc.Write(prefix)

	var echo string
	if err := w.Call(ctx, "echo", "meanwhile", &echo); err != nil || echo != "meanwhile" {
		t.Fatalf("good host while others stall: %q %v", echo, err)
	}
	for _, h := range []*rawHost{silent, stalled, huge} {
		h.closed()
		if n := refusals(logs, h); n != 1 {
			t.Errorf("%d log lines name the dropped host, want 1", n)
		}
	}
	for _, h := range []*rawHost{silent, stalled} {
		e := logs.FilterField(zap.String("peer", h.nc.LocalAddr().String())).AllUntimed()
		if len(e) == 1 && !strings.Contains(e[0].ContextMap()["error"].(string), "within the handshake deadline") {
			t.Errorf("drop logged as %v", e[0].ContextMap())
		}
	}
	// The silent host connected after the good one finished its
	// handshake, so the good one's deadline has passed too.
	if err := w.Call(ctx, "echo", "after", &echo); err != nil || echo != "after" {
		t.Fatalf("good host after the handshake deadline: %q %v", echo, err)
	}
}

// fakeService accepts one host and answers its hello with answer.
func fakeService(t *testing.T, answer func(c *uromwire.Conn, hello *uromwire.Envelope)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		c := uromwire.NewConn(nc, hangGuard)
		env, err := c.Read(hangGuard)
		if err != nil {
			return
		}
		answer(c, env)
		// Hold the connection until the host gives up.
		c.Read(hangGuard)
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// A host with a secret refuses a service that does not prove it — one
// without authentication (an older service, or a plain TCP listener
// pretending), one whose proof is wrong, one that reflects the host's
// nonce — with ErrAuth, and never falls back to an unauthenticated
// session.
func TestHostRefusesServiceThatDoesNotProve(t *testing.T) {
	reply := func(c *uromwire.Conn, cookie uint64, kind string, r urom.HelloReply) {
		body, _ := uromwire.EncodeBody(r)
		c.Write(&uromwire.Envelope{Cookie: cookie, Kind: kind, Body: body})
	}
	challengeThen := func(nonce func(h urom.Hello) []byte, mac []byte) func(*uromwire.Conn, *uromwire.Envelope) {
		return func(c *uromwire.Conn, env *uromwire.Envelope) {
			var h urom.Hello
			uromwire.DecodeBody(env.Body, &h)
			reply(c, env.Cookie, uromwire.KindHello, urom.HelloReply{Service: uromwire.ServiceName, Auth: true, Nonce: nonce(h)})
			p, err := c.Read(hangGuard)
			if err != nil {
				return
			}
			reply(c, p.Cookie, uromwire.KindAuth, urom.HelloReply{Service: uromwire.ServiceName, ComponentVersion: "1.2.0", MAC: mac})
		}
	}
	fresh := func(urom.Hello) []byte { return bytes.Repeat([]byte{9}, 32) }
	for _, tc := range []struct {
		name   string
		answer func(*uromwire.Conn, *uromwire.Envelope)
		want   string
	}{
		{"no authentication", func(c *uromwire.Conn, env *uromwire.Envelope) {
			reply(c, env.Cookie, uromwire.KindHello, urom.HelloReply{Service: uromwire.ServiceName, ComponentVersion: "1.2.0"})
		}, "the service did not"},
		{"wrong proof", challengeThen(fresh, bytes.Repeat([]byte{1}, 32)), "the UROM service's proof does not match"},
		{"no proof", challengeThen(fresh, nil), "the UROM service's proof does not match"},
		{"reflected nonce", challengeThen(func(h urom.Hello) []byte { return h.Nonce }, nil), "echoed"},
		{"short nonce", challengeThen(func(urom.Hello) []byte { return []byte{1} }, nil), "nonce is 1 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := fakeService(t, tc.answer)
			c, err := urom.Dial(context.Background(), addr, urom.ClientOptions{ComponentVersion: "1.0.0", Secret: testSecret})
			if err == nil {
				c.Close()
				t.Fatal("connected to a service that did not prove the secret")
			}
			if !errors.Is(err, urom.ErrAuth) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want urom.ErrAuth saying %q", err, tc.want)
			}
		})
	}
}

// A service that never answers the hello: Dial ends with the context's
// error (deadline or cancellation), or ErrTimeout after CallTimeout when
// the context has no deadline.
func TestDialSilentService(t *testing.T) {
	silent := func(*uromwire.Conn, *uromwire.Envelope) {}
	for _, secret := range [][]byte{nil, testSecret} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := urom.Dial(ctx, fakeService(t, silent), urom.ClientOptions{ComponentVersion: "1.0.0", Secret: secret})
		cancel()
		if err != context.DeadlineExceeded {
			t.Errorf("deadline (secret %v): %v, want context.DeadlineExceeded", secret != nil, err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		addr := fakeService(t, func(*uromwire.Conn, *uromwire.Envelope) { cancel() })
		if _, err := urom.Dial(ctx, addr, urom.ClientOptions{ComponentVersion: "1.0.0", Secret: secret}); err != context.Canceled {
			t.Errorf("cancelled (secret %v): %v, want context.Canceled", secret != nil, err)
		}
		_, err = urom.Dial(context.Background(), fakeService(t, silent), urom.ClientOptions{ComponentVersion: "1.0.0", Secret: secret, CallTimeout: 200 * time.Millisecond})
		if !errors.Is(err, urom.ErrTimeout) {
			t.Errorf("CallTimeout (secret %v): %v, want urom.ErrTimeout", secret != nil, err)
		}
	}
}

// A command that reaches the service after its worker ended (sent before
// its host read the death notice) is told the worker died, and why, not
// that there is no such worker.
func TestCommandAfterWorkerDeath(t *testing.T) {
	addr, _, _ := startRawTestService(t, nil, 0)
	h := dialRaw(t, addr)
	h.send(1, uromwire.KindHello, urom.Hello{Component: "rdmo", ComponentVersion: "1.0.0"})
	if env := h.recv(); env.Status != "" {
		t.Fatalf("hello refused: %+v", env)
	}
	h.send(2, uromwire.KindSpawn, urom.SpawnOptions{})
	env := h.recv()
	var sp urom.SpawnReply
	if err := uromwire.DecodeBody(env.Body, &sp); err != nil || env.Status != "" {
		t.Fatalf("spawn: %+v %v", env, err)
	}
	syscall.Kill(sp.PID, syscall.SIGKILL)
	for {
		if env = h.recv(); env.Kind == uromwire.KindWorkerDied && env.Cookie == 0 {
			break
		}
	}
	body, _ := uromwire.EncodeBody("late")
	h.send(3, uromwire.KindCommand, uromwire.CommandRequest{Worker: sp.Worker, Kind: "echo", Body: body})
	env = h.recv()
	if env.Code != uromwire.CodeWorkerDied || !strings.Contains(env.Status, "killed") {
		t.Errorf("command after the death: %q %q, want %q saying killed", env.Code, env.Status, uromwire.CodeWorkerDied)
	}
}

// A hello in a frame of another protocol version is refused for its
// version (rdmo_urom_hosts_refused_total{reason="version"}), not counted
// as a host that dropped, and the service keeps serving.
func TestWrongFrameVersionCountsAsVersion(t *testing.T) {
	addr, svc, logs := startRawTestService(t, nil, 0)
	h := dialRaw(t, addr)
	body, err := uromwire.EncodeBody(uromwire.Envelope{Cookie: 1, Kind: uromwire.KindHello})
	if err != nil {
		t.Fatal(err)
	}
	frame := []byte(uromwire.FrameMagic)
	frame = binary.BigEndian.AppendUint16(frame, urom.ProtocolVersion+8)
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(body)))
	h.nc.Write(append(frame, body...))
	h.closed()
	refused := svc.stats.snapshot(svc.stats.refused)
	if refused["version"] != 1 || refused["dropped"] != 0 {
		t.Errorf("refusals %v, want version 1 and dropped 0", refused)
	}
	if n := logs.FilterMessage("host refused: incompatible protocol version").Len(); n != 1 {
		t.Errorf("%d log lines for the refusal, want 1", n)
	}
	good := dialRaw(t, addr)
	good.send(1, uromwire.KindHello, urom.Hello{Component: "rdmo", ComponentVersion: "1.0.0"})
	if env := good.recv(); env.Status != "" {
		t.Errorf("a host after the refusal: %+v", env)
	}
}

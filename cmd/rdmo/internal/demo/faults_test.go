package demo_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/cli"
	"github.com/openrdmo/rdmo/cmd/rdmo/internal/demo"
	"github.com/openrdmo/rdmo/host/oob"
	"github.com/openrdmo/rdmo/internal/testutil"
)

// captureHello returns the hello frame a real oob dialer with opts sends
// first, read by a plain TCP listener (the dial itself then fails).
func captureHello(t *testing.T, opts oob.Options) []byte {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(time.Minute)) // hang guard
		got <- readFrame(nc)
	}()
	opts.Timeout = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if c, err := oob.Dial(ctx, ln.Addr().String(), opts); err == nil {
			c.Close()
		}
	}()
	b := <-got
	cancel()
	<-done
	if b == nil {
		t.Fatal("no hello captured")
	}
	return b
}

// readFrame reads one whole frame (prefix and body) of the out-of-band
// protocol; nil when the stream ends first.
func readFrame(r io.Reader) []byte {
	prefix := make([]byte, oob.PrefixLen)
	if _, err := io.ReadFull(r, prefix); err != nil {
		return nil
	}
	body := make([]byte, binary.BigEndian.Uint32(prefix[8:12]))
	if _, err := io.ReadFull(r, body); err != nil {
		return nil
	}
	return append(prefix, body...)
}

// hostile connects to addr, writes b, ends its side and reads until the
// server closes: the server has dealt with this peer when it returns.
func hostile(t *testing.T, addr string, b []byte) []byte {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(2 * time.Minute)) // hang guard
	if len(b) > 0 {
		nc.Write(b)
	}
	nc.(*net.TCPConn).CloseWrite()
	reply, _ := io.ReadAll(nc)
	return reply
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// Whatever fails before authentication at the out-of-band port of a
// server with --secret-file is one log line and a counter, and the wait
// goes on: hellos of another version ("RDOB" and random bytes), the
// server's own hello sent back (role conflict), hellos without the auth
// flag, real dialers with another secret, random bytes, a hello and then
// nothing, a connection closed at once; 100 of them. A legit client then
// runs and verifies.
func TestHostileBeforeAuth(t *testing.T) {
	r := newRun(t)
	port := freePort(t)
	addr := "127.0.0.1:" + port
	secret, other := writeSecret(t, 0o600), writeSecret(t, 0o600)
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "500", "--secret-file", secret)
	waitOutput(t, server, "waiting for the initiator")

	authHello := captureHello(t, oob.Options{Role: oob.RoleInitiator, Secret: randomBytes(32)})
	plainHello := captureHello(t, oob.Options{Role: oob.RoleInitiator})
	// The server's own hello: it answers an initiator's hello with it.
	serverHello := readFrame(strings.NewReader(string(hostile(t, addr, authHello))))
	if serverHello == nil {
		t.Fatalf("the server sent no hello; it says:\n%s", tail(output(server), 2000))
	}
	bad := 1 // that connection ended mid-handshake
	otherSecret := loadSecret(t, other)
	kinds := []func(){
		func() { hostile(t, addr, append([]byte(oob.Magic), randomBytes(30)...)) },
		func() { hostile(t, addr, serverHello) },
		func() { hostile(t, addr, plainHello) },
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
			defer cancel()
			c, err := oob.Dial(ctx, addr, oob.Options{Role: oob.RoleInitiator, Secret: otherSecret, Timeout: time.Minute})
			if err == nil {
				c.Close()
				t.Fatal("a dialer with another secret got through")
			}
			if !errors.Is(err, oob.ErrAuth) {
				t.Fatalf("a dialer with another secret: %v, want an authentication failure", err)
			}
		},
		func() { hostile(t, addr, randomBytes(64)) },
		func() { hostile(t, addr, authHello) },
		func() { hostile(t, addr, nil) },
	}
	for i := 0; i < 100; i++ {
		select {
		case <-server.Done():
			t.Fatalf("the server exited after %d hostile peers:\n%s", bad, tail(output(server), 3000))
		default:
		}
		kinds[i%len(kinds)]()
		bad++
	}
	// One line per peer, each with its counter.
	lines := regexp.MustCompile(`(?m)^.*still waiting for the initiator.*$`)
	testutil.WaitFor(t, "a log line for every hostile peer", func() bool {
		select {
		case <-server.Done():
			return true
		default:
		}
		return len(lines.FindAllString(server.Stderr(), -1)) >= bad
	})
	logged := lines.FindAllString(server.Stderr(), -1)
	if len(logged) != bad {
		t.Errorf("%d log lines for %d hostile peers:\n%s", len(logged), bad, tail(server.Stderr(), 3000))
	}
	for _, want := range []string{`"auth_failures": `, `"refused": `, "protocol version mismatch", "role conflict"} {
		if !strings.Contains(server.Stderr(), want) {
			t.Errorf("the server's log lacks %q", want)
		}
	}
	if n := strings.Count(server.Stderr(), "oob: handshake failed"); n != 0 {
		t.Errorf("%d extra lines from the out-of-band channel", n)
	}
	client := r.start("client", nil, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port, "--secret-file", secret)
	expectPass(t, server, client)
}

// A second client while one runs is told at once that the server is busy;
// the run goes on and verifies.
func TestSecondClientBusy(t *testing.T) {
	r := newRun(t)
	port := freePort(t)
	// The second client starts once the workload is under way (the first
	// client's progress line, every 20 ms here): the server stays busy for
	// the rest of it and its verification, about half a second on a quiet
	// machine, and far longer under load (the whole run must also fit
	// runTimeout there, with the race detector: 300 000 operations do).
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "300000")
	client := r.start("client", []string{demo.ProgressIntervalEnv + "=20ms"}, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port)
	waitOutput(t, server, "request queue created")
	waitOutput(t, client, `rdmo client: [1-9]\d*/\d+ ops`)
	second := r.start("second client", nil, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port)
	if code := second.Wait(t, runTimeout); code != 1 {
		t.Errorf("second client exit %d, want 1", code)
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: server at 127\.0\.0\.1:\d+ is busy: this server already serves an initiator`).MatchString(second.Stderr()) {
		t.Errorf("the second client was not told the server is busy:\n%s", tail(second.Stderr(), 2000))
	}
	if strings.Contains(second.Stderr(), "cannot reach") || strings.Contains(second.Stderr(), "waiting for the server") {
		t.Errorf("the second client retried:\n%s", tail(second.Stderr(), 2000))
	}
	expectPass(t, server, client)
}

// The client killed (SIGKILL) or interrupted (Ctrl-C) mid-run: the server
// acts when its connection closes, checks that its worker still answers,
// and exits with the reason.
func TestClientGoneServerActs(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		want string
	}{
		{"SIGKILL", syscall.SIGKILL, `(?m)^rdmo: error: initiator went away \(out-of-band connection closed\): .*; the RDMO worker still answers$`},
		{"SIGINT", syscall.SIGINT, `(?m)^rdmo: error: initiator stopped: initiator interrupted; the RDMO worker still answers$`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRun(t)
			server, client, _ := midRun(t, r)
			client.Signal(tc.sig)
			client.Wait(t, exitTimeout)
			start := time.Now()
			if code := server.Wait(t, exitTimeout); code != 1 {
				t.Errorf("server exit %d, want 1", code)
			}
			t.Logf("server exited %v after the client", time.Since(start).Round(time.Millisecond))
			if !regexp.MustCompile(tc.want).MatchString(server.Stderr()) {
				t.Errorf("server error does not give the reason:\n%s", tail(server.Stderr(), 2000))
			}
		})
	}
}

// When the client is gone and the worker does not answer (stopped), the
// server says what it waits for, and exits with the reason once the
// worker answers.
func TestClientGoneWorkerSilent(t *testing.T) {
	r := newRun(t)
	server, client, pid := midRun(t, r)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop worker %d: %v", pid, err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	client.Kill()
	client.Wait(t, exitTimeout)
	waitOutput(t, server, `the initiator is gone; waiting for the RDMO worker to answer, to tell whether it failed first`)
	syscall.Kill(pid, syscall.SIGCONT)
	if code := server.Wait(t, exitTimeout); code != 1 {
		t.Errorf("server exit %d, want 1", code)
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: initiator went away .*; the RDMO worker still answers$`).MatchString(server.Stderr()) {
		t.Errorf("server error does not give the reason:\n%s", tail(server.Stderr(), 2000))
	}
}

func loadSecret(t *testing.T, path string) []byte {
	t.Helper()
	b, err := cli.LoadSecret(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Connections that nobody authenticates can use up the UROM service's file
// descriptors (here a limit of 64): accepting then fails, and the service
// logs it and keeps accepting; once they are gone, hosts are served.
func TestUROMOutOfDescriptors(t *testing.T) {
	r := newRun(t)
	addr := "127.0.0.1:" + freePort(t)
	dpu := r.start("dpu", nil, "prlimit", "--nofile=64:64", "rdmo", "dpu", "--listen", addr)
	waitOutput(t, dpu, "UROM_LISTEN "+regexp.QuoteMeta(addr))
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 100; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	waitOutput(t, dpu, "accepting a host failed; retrying")
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	pl := r.start("plugins", nil, "rdmo", "plugins", "--urom", addr)
	if code := pl.Wait(t, runTimeout); code != 0 || !strings.Contains(pl.Stdout(), "of the UROM service at "+addr) {
		t.Errorf("plugins --urom after the flood: exit %d\n%s", code, output(pl))
	}
	stopDPU(t, dpu)
}

// cpuSeconds is the CPU time a process used so far (user and system), from
// /proc; -1 when it is gone.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// The worker stopped (SIGSTOP) for good mid-run: the client's overdue
// flush (RDMO_FLUSH_TIMEOUT, short here) fails every request at once and
// the client exits naming it; the server learns it from the client, finds
// the worker silent, kills it and exits naming both.
func TestWorkerStoppedForGood(t *testing.T) {
	r := newRun(t)
	port := freePort(t)
	// A run long enough to be caught under way (see midRun).
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "1000000")
	client := r.start("client", []string{"RDMO_FLUSH_TIMEOUT=3s", demo.ProgressIntervalEnv + "=20ms"}, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port)
	m := waitOutput(t, server, `RDMO worker started  \{"worker": \d+, "pid": (\d+)`)
	pid, _ := strconv.Atoi(m[1])
	waitOutput(t, client, `rdmo client: [1-9]\d*/\d+ ops`)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop worker %d: %v", pid, err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	start := time.Now()
	cpu0, cpu := cpuSeconds(client.Pid()), 0.0
	var cpuAt time.Duration
	testutil.WaitFor(t, "the client to exit", func() bool {
		if c := cpuSeconds(client.Pid()); c >= 0 {
			cpu, cpuAt = c, time.Since(start)
		}
		select {
		case <-client.Done():
			return true
		default:
			return false
		}
	})
	clientAt := time.Since(start)
	if code := client.Wait(t, exitTimeout); code != 1 {
		t.Errorf("client exit %d, want 1", code)
	}
	if code := server.Wait(t, exitTimeout); code != 1 {
		t.Errorf("server exit %d, want 1", code)
	}
	t.Logf("after SIGSTOP: client exited at %v (CPU %.2f s in its first %v), server at %v",
		clientAt.Round(time.Millisecond), cpu-cpu0, cpuAt.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if !regexp.MustCompile(`(?m)^rdmo: error: .*flush \d+ not answered within 3s \(the RDMO worker stopped serving this queue\)$`).MatchString(client.Stderr()) {
		t.Errorf("client error does not name the overdue flush:\n%s", tail(client.Stderr(), 2000))
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: initiator stopped: .*flush \d+ not answered within 3s .*; and the RDMO worker did not answer within `).MatchString(server.Stderr()) {
		t.Errorf("server error does not name the cause:\n%s", tail(server.Stderr(), 2000))
	}
}

// An initiator whose endpoint asks for peer-failure detection and falls
// back to none (host/initiator's ucp.ErrorHandlingPrefer, in a process with
// UCX's defaults: shared-memory error handling off, and only shared-memory
// transports) does not match the worker's endpoint: its requests arrive
// on an endpoint the worker does not serve. Its flush is answered with
// StatusNoQueue, and the client exits at once saying so, instead of
// waiting for an answer that never comes.
func TestInitiatorEndpointMismatch(t *testing.T) {
	r := newRun(t)
	port := freePort(t)
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "1000")
	client := r.start("client", []string{"UCX_TLS=posix,sysv,cma,self", "UCX_POSIX_ERROR_HANDLING=n", "UCX_SYSV_ERROR_HANDLING=n"},
		"rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port)
	if code := client.Wait(t, runTimeout); code != 1 {
		t.Errorf("client exit %d, want 1", code)
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: .*the worker serves no request queue on this endpoint.*UCX_POSIX_ERROR_HANDLING`).MatchString(client.Stderr()) {
		t.Errorf("client error does not say its endpoint is not served:\n%s", tail(client.Stderr(), 2000))
	}
	if code := server.Wait(t, exitTimeout); code != 1 {
		t.Errorf("server exit %d, want 1", code)
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: initiator stopped: .*the worker serves no request queue on this endpoint`).MatchString(server.Stderr()) {
		t.Errorf("server error does not give the initiator's reason:\n%s", tail(server.Stderr(), 2000))
	}
}

// Peers that connect to the out-of-band port and say nothing do not keep
// the initiator that comes after them from being served.
func TestSilentPeersBeforeAuth(t *testing.T) {
	r := newRun(t)
	port := freePort(t)
	addr := "127.0.0.1:" + port
	secret := writeSecret(t, 0o600)
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "500", "--secret-file", secret)
	waitOutput(t, server, "waiting for the initiator")
	for i := 0; i < 3; i++ {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
	}
	client := r.start("client", nil, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port, "--secret-file", secret)
	expectPass(t, server, client)
}

package demo_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/demo"
	"github.com/openrdmo/rdmo/internal/testproc"
	"github.com/openrdmo/rdmo/internal/testutil"
)

// These tests run the rdmo binary as real processes: a server (with its
// embedded UROM service and worker process) and a client, on loopback or
// in two network namespaces. Every test ends with no process of its own
// left running (testproc.CheckNoLeftovers).

var (
	rdmoBin  string // built by TestMain
	buildErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rdmo-host-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rdmoBin = filepath.Join(dir, "rdmo")
	var flags []string
	if raceEnabled {
		flags = append(flags, "-race") // the host code runs only in these processes
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	buildErr = testproc.GoBuild(ctx, rdmoBin, "github.com/openrdmo/rdmo/cmd/rdmo", flags...)
	cancel()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run is one test's set of processes: none may be left running when it
// ends, nor any process they started (testproc tags them all).
type run struct {
	t *testing.T
}

func newRun(t *testing.T) *run {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	testproc.CheckNoLeftovers(t)
	return &run{t: t}
}

// start starts argv (argv[0] "rdmo" is the test binary; a prefix such as
// "ip netns exec" may come first) with env added.
func (r *run) start(name string, env []string, argv ...string) *testproc.Proc {
	r.t.Helper()
	for i, a := range argv {
		if a == "rdmo" {
			argv[i] = rdmoBin
		}
	}
	// rdmo does not read its stdin: when the test is over, it is killed
	// at once.
	return testproc.StartCommand(r.t, argv, testproc.Options{Name: name, Env: append([]string{"UCX_WARN_UNUSED_ENV_VARS=n"}, env...), Grace: -1})
}

// waitOutput waits until the process's output (stdout and stderr) matches
// re, and returns the match; it fails the test when the process exits
// first, or at the test's deadline.
func waitOutput(t *testing.T, p *testproc.Proc, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	exited := false
	testutil.WaitFor(t, fmt.Sprintf("%s to print %q", p, re), func() bool {
		select {
		case <-p.Done(): // read the output after this: all of it
			exited = true
		default:
		}
		m = rx.FindStringSubmatch(p.Stderr() + p.Stdout())
		return m != nil || exited
	})
	if m == nil {
		t.Fatalf("%s exited (status %d) before printing %q", p, p.ExitCode(), re)
	}
	return m
}

func output(p *testproc.Proc) string { return p.Stdout() + p.Stderr() }

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func writeSecret(t *testing.T, mode os.FileMode) string {
	t.Helper()
	var b [32]byte
	rand.Read(b[:])
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(hex.EncodeToString(b[:])+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// Timeouts of the tests: generous, as the binaries may be race-enabled
// and CI machines are shared.
const (
	runTimeout  = 90 * time.Second
	exitTimeout = 30 * time.Second
)

func expectPass(t *testing.T, server, client *testproc.Proc) {
	t.Helper()
	if code := client.Wait(t, runTimeout); code != 0 {
		t.Errorf("client exit %d", code)
	}
	if code := server.Wait(t, exitTimeout); code != 0 {
		t.Errorf("server exit %d", code)
	}
	if !strings.Contains(server.Stdout(), "rdmo server: verification PASSED") {
		t.Errorf("server did not report a passed verification:\n%s", server.Stdout())
	}
	if !strings.Contains(client.Stdout(), "rdmo client: server verification PASSED") {
		t.Errorf("client did not report a passed verification:\n%s", client.Stdout())
	}
}

// The demo flow at a small size over the default transports (shared
// memory between the processes): both sides exit 0 with their summaries.
func TestDemoFlow(t *testing.T) {
	r := newRun(t)
	port := freePort(t)
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "3000")
	client := r.start("client", nil, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port)
	expectPass(t, server, client)
	for _, want := range []string{"records", "exactly once, intact, in order", "scatters", "seed flow", "worker "} {
		if !strings.Contains(server.Stdout(), want) {
			t.Errorf("server summary lacks %q", want)
		}
	}
	for _, want := range []string{"ops           3000 (", "flushes ", "latency p50 ", "p99 ", "errors        0", "kops/s"} {
		if !strings.Contains(client.Stdout(), want) {
			t.Errorf("client summary lacks %q", want)
		}
	}
	if strings.Contains(server.Stderr(), "WARN") {
		t.Errorf("server warned:\n%s", server.Stderr())
	}
}

// Both sides with the same secret file: authenticated, and the run passes.
func TestSecret(t *testing.T) {
	r := newRun(t)
	port := freePort(t)
	secret := writeSecret(t, 0o600)
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "500", "--secret-file", secret)
	client := r.start("client", nil, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port, "--secret-file", secret)
	expectPass(t, server, client)
	if !strings.Contains(server.Stderr(), `initiator connected  {"from": "127.0.0.1:`) || !strings.Contains(server.Stderr(), `"authenticated": true`) {
		t.Errorf("server did not log an authenticated initiator")
	}
}

// A wrong secret, or a secret on one side only: the client exits non-zero
// with a clear authentication error and never gets the worker address; the
// server logs the failure, counts it and keeps waiting, and the right
// initiator then completes the run.
func TestWrongSecret(t *testing.T) {
	a, b := writeSecret(t, 0o600), writeSecret(t, 0o600)
	for _, tc := range []struct {
		name           string
		server, client []string
	}{
		{"different secrets", []string{"--secret-file", a}, []string{"--secret-file", b}},
		{"client without secret", []string{"--secret-file", a}, nil},
		{"server without secret", nil, []string{"--secret-file", b}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRun(t)
			port := freePort(t)
			server := r.start("server", nil, append([]string{"rdmo", "-m", "server", "--oob-port", port, "--ops", "100"}, tc.server...)...)
			client := r.start("client", nil, append([]string{"rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port}, tc.client...)...)
			if code := client.Wait(t, exitTimeout); code == 0 {
				t.Errorf("client exit 0")
			}
			if !regexp.MustCompile(`(?m)^rdmo: error: .*authentication failed`).MatchString(client.Stderr()) {
				t.Errorf("client: no authentication error line:\n%s", client.Stderr())
			}
			if strings.Contains(output(client), "received the RDMO worker's address") || strings.Contains(output(client), "connected to the server") {
				t.Errorf("client got past the handshake:\n%s", output(client))
			}
			waitOutput(t, server, `WARN  rdmo  initiator refused: out-of-band authentication failed: .*; still waiting for the initiator  \{"auth_failures": 1\}`)
			good := r.start("good client", nil, append([]string{"rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port}, tc.server...)...)
			expectPass(t, server, good)
		})
	}
}

// The client may start first: it retries until the server listens.
func TestClientBeforeServer(t *testing.T) {
	r := newRun(t)
	port := freePort(t)
	client := r.start("client", nil, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port)
	// The client prints this after its first dial failed: from here on
	// only a retry can connect it.
	waitOutput(t, client, "waiting for the server")
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "500")
	expectPass(t, server, client)
}

// midRun starts a run long enough to be interrupted and waits until the
// workload is under way: a million operations (about 1.5 s on a quiet
// 2-core machine, longer under load), whose client reports its progress
// every 20 ms, so the test sees the workload under way long before it
// ends.
func midRun(t *testing.T, r *run) (server, client *testproc.Proc, workerPID int) {
	port := freePort(t)
	server = r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "1000000")
	client = r.start("client", []string{demo.ProgressIntervalEnv + "=20ms"}, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port)
	m := waitOutput(t, server, `RDMO worker started  \{"worker": \d+, "pid": (\d+)`)
	workerPID, _ = strconv.Atoi(m[1])
	waitOutput(t, server, "seed append verified")
	// Into the workload: the client reports operations done (its progress
	// line, every 20 ms here).
	waitOutput(t, client, `rdmo client: [1-9]\d*/\d+ ops`)
	return server, client, workerPID
}

// The server killed outright mid-run: its embedded service and worker die
// with it, and the client exits with a clear error, in bounded time.
func TestServerKilled(t *testing.T) {
	r := newRun(t)
	server, client, _ := midRun(t, r)
	server.Kill()
	server.Wait(t, exitTimeout)
	start := time.Now()
	code := client.Wait(t, exitTimeout)
	if code == 0 || code > 128 {
		t.Errorf("client exit %d", code)
	}
	line := regexp.MustCompile(`(?m)^rdmo: error: .*server went away.*$`).FindString(client.Stderr())
	if line == "" {
		t.Errorf("client error does not say the server went away:\n%s", tail(client.Stderr(), 2000))
	} else if n := strings.Count(line, "went away"); n != 1 {
		t.Errorf("client error says the server went away %d times, want once:\n%s", n, line)
	}
	t.Logf("client exited %v after the server was killed", time.Since(start).Round(time.Millisecond))
}

// SIGINT to the server mid-run: it tears everything down and exits with
// 128+SIGINT; the client learns it from the server and exits with an error.
func TestServerInterrupted(t *testing.T) {
	r := newRun(t)
	server, client, _ := midRun(t, r)
	server.Signal(syscall.SIGINT)
	if code := server.Wait(t, exitTimeout); code != 128+int(syscall.SIGINT) {
		t.Errorf("server exit %d, want %d", code, 128+int(syscall.SIGINT))
	}
	if !strings.Contains(server.Stderr(), "rdmo: stopped by signal (interrupt)") {
		t.Errorf("server did not report the signal")
	}
	if strings.Contains(server.Stderr(), "teardown:") {
		t.Errorf("teardown was not clean:\n%s", server.Stderr())
	}
	if code := client.Wait(t, exitTimeout); code == 0 {
		t.Errorf("client exit 0")
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: .*server stopped: target interrupted`).MatchString(client.Stderr()) {
		t.Errorf("client error does not say the server was interrupted:\n%s", tail(client.Stderr(), 2000))
	}
}

// The RDMO worker process dies mid-run: the server exits with a clear
// error and tells the client, which exits too.
func TestWorkerDied(t *testing.T) {
	r := newRun(t)
	server, client, pid := midRun(t, r)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill worker %d: %v", pid, err)
	}
	if code := server.Wait(t, exitTimeout); code != 1 {
		t.Errorf("server exit %d, want 1", code)
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: .*RDMO worker died`).MatchString(server.Stderr()) {
		t.Errorf("server error does not say the worker died:\n%s", tail(server.Stderr(), 2000))
	}
	if code := client.Wait(t, exitTimeout); code == 0 {
		t.Errorf("client exit 0")
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: .*RDMO worker died`).MatchString(client.Stderr()) {
		t.Errorf("client error does not say the worker died:\n%s", tail(client.Stderr(), 2000))
	}
}

// The CLI hooks: the UCX version, the device check, the plugin table.
func TestCLI(t *testing.T) {
	r := newRun(t)
	v := r.start("version", nil, "rdmo", "-v")
	if v.Wait(t, exitTimeout) != 0 || !regexp.MustCompile(`(?m)^ucx: \d+\.\d+\.\d+$`).MatchString(v.Stdout()) {
		t.Errorf("version: %s", output(v))
	}
	d := r.start("device", nil, "rdmo", "-m", "server", "-d", "nosuchdev0")
	if code := d.Wait(t, exitTimeout); code != 2 || !strings.Contains(d.Stderr(), `rdmo: error: -d/--device: no device "nosuchdev0"; devices UCX reports: `) ||
		!strings.Contains(d.Stderr(), "lo") {
		t.Errorf("bad device: exit %d %s", code, output(d))
	}
	p := r.start("plugins", nil, "rdmo", "plugins")
	if code := p.Wait(t, exitTimeout); code != 0 || !regexp.MustCompile(`(?m)^1\s+append\s+\S+\s+builtin\s+append\(1\)`).MatchString(p.Stdout()) ||
		!strings.Contains(p.Stdout(), "scatter(2)") || !strings.Contains(p.Stdout(), "flush(0)") {
		t.Errorf("plugins: exit %d\n%s", code, output(p))
	}
	w := r.start("worker", nil, "rdmo", "__urom-worker")
	if code := w.Wait(t, exitTimeout); code == 0 {
		t.Errorf("__urom-worker without a service: exit 0")
	}
}

// `rdmo dpu` as a separate daemon, used by a server with --urom, and
// listed by `rdmo plugins --urom`.
func TestRemoteService(t *testing.T) {
	r := newRun(t)
	svcPort := freePort(t)
	addr := "127.0.0.1:" + svcPort
	dpu := r.start("dpu", nil, "rdmo", "dpu", "--listen", addr)
	waitOutput(t, dpu, "UROM_LISTEN "+regexp.QuoteMeta(addr))
	pl := r.start("plugins", nil, "rdmo", "plugins", "--urom", addr)
	if code := pl.Wait(t, exitTimeout); code != 0 || !strings.Contains(pl.Stdout(), "of the UROM service at "+addr) {
		t.Errorf("plugins --urom: exit %d\n%s", code, output(pl))
	}
	port := freePort(t)
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "500", "--urom", addr, "--append-strategy", "shared")
	client := r.start("client", nil, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port)
	expectPass(t, server, client)
	dpu.Signal(syscall.SIGTERM)
	if code := dpu.Wait(t, exitTimeout); code != 0 {
		t.Errorf("dpu exit %d after SIGTERM", code)
	}
}

// Ctrl-C at any point of the server's set-up: a clean exit with 128+SIGINT
// and nothing left behind.
func TestServerInterruptedDuringSetup(t *testing.T) {
	for _, at := range []string{"embedded UROM service started", "RDMO worker started", "waiting for the initiator"} {
		t.Run(at, func(t *testing.T) {
			r := newRun(t)
			server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", freePort(t), "--ops", "1000")
			waitOutput(t, server, at)
			server.Signal(syscall.SIGINT)
			if code := server.Wait(t, exitTimeout); code != 128+int(syscall.SIGINT) {
				t.Errorf("server exit %d, want %d", code, 128+int(syscall.SIGINT))
			}
			if strings.Contains(server.Stderr(), "teardown:") {
				t.Errorf("teardown was not clean:\n%s", server.Stderr())
			}
		})
	}
}

// Ctrl-C to the client mid-run: it exits with 128+SIGINT and tells the
// server, which tears down and exits with an error saying so.
func TestClientInterrupted(t *testing.T) {
	r := newRun(t)
	server, client, _ := midRun(t, r)
	client.Signal(syscall.SIGINT)
	if code := client.Wait(t, exitTimeout); code != 128+int(syscall.SIGINT) {
		t.Errorf("client exit %d, want %d", code, 128+int(syscall.SIGINT))
	}
	if code := server.Wait(t, exitTimeout); code != 1 {
		t.Errorf("server exit %d, want 1", code)
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: initiator stopped: initiator interrupted`).MatchString(server.Stderr()) {
		t.Errorf("server error does not say the initiator was interrupted:\n%s", tail(server.Stderr(), 2000))
	}
	// The answers to the flushes its own Close failed are no news to the
	// client: no warning about them on its way out.
	if strings.Contains(client.Stderr(), "matches no outstanding") {
		t.Errorf("the interrupted client warns about its own teardown:\n%s", tail(client.Stderr(), 2000))
	}
}

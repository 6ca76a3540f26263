package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests run the rdmo binary as real processes: a server (with its
// embedded UROM service and worker process) and a client, on loopback or
// in two network namespaces. Every test ends with no process of its own
// left running: each gets a tag in its environment, which every
// descendant inherits, and /proc is searched for it.

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
	args := []string{"build", "-o", rdmoBin}
	if raceEnabled {
		args = append(args, "-race") // the host code runs only in these processes
	}
	args = append(args, "github.com/openrdmo/rdmo/cmd/rdmo")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	if out, err := exec.CommandContext(ctx, goTool(), args...).CombinedOutput(); err != nil {
		buildErr = fmt.Errorf("go build: %v\n%s", err, out)
	}
	cancel()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is one rdmo process of a test.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdout syncBuffer
	stderr syncBuffer
	done   chan struct{}
	code   int
}

// run is one test's set of processes, tagged.
type run struct {
	t     *testing.T
	tag   string
	procs []*proc
}

const tagVar = "RDMO_HOST_TEST_TAG"

func newRun(t *testing.T) *run {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	var b [6]byte
	rand.Read(b[:])
	r := &run{t: t, tag: hex.EncodeToString(b[:])}
	t.Cleanup(func() {
		for _, p := range r.procs {
			select {
			case <-p.done:
			default:
				p.cmd.Process.Kill()
				<-p.done
			}
		}
		for _, p := range r.procs {
			for _, rep := range raceReports(p.stderr.String()) {
				t.Errorf("%s: the race detector reported a data race:\n%s", p.name, rep)
			}
		}
		if t.Failed() || os.Getenv("RDMO_HOST_TEST_VERBOSE") != "" {
			for _, p := range r.procs {
				t.Logf("--- %s (exit %d) stdout:\n%s\n--- %s stderr:\n%s", p.name, p.code, tail(p.stdout.String(), 4000), p.name, tail(p.stderr.String(), 8000))
			}
		}
		// Whatever is left is an orphan: report it, then kill it.
		if left := r.tagged(); len(left) > 0 {
			t.Errorf("processes left running: %v", left)
			for _, pid := range left {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return r
}

// raceReports returns the race detector's reports in a process's output.
func raceReports(out string) []string {
	var reps []string
	for _, part := range strings.Split(out, "WARNING: DATA RACE")[1:] {
		if i := strings.Index(part, "=================="); i >= 0 {
			part = part[:i]
		}
		reps = append(reps, part)
	}
	return reps
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// start starts argv (argv[0] "rdmo" is the test binary; a prefix such as
// "ip netns exec" may come first) with env added.
func (r *run) start(name string, env []string, argv ...string) *proc {
	r.t.Helper()
	for i, a := range argv {
		if a == "rdmo" {
			argv[i] = rdmoBin
		}
	}
	p := &proc{t: r.t, name: name, done: make(chan struct{}), code: -1}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(append(os.Environ(), tagVar+"="+r.tag, "UCX_WARN_UNUSED_ENV_VARS=n"), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.procs = append(r.procs, p)
	go func() {
		err := p.cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			p.code = 0
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.code = 128 + int(ws.Signal())
			}
		}
		close(p.done)
	}()
	return p
}

// wait waits for the process to exit and returns its status.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("%s did not exit within %v", p.name, timeout)
	}
	return -1
}

// waitFor waits until the process's output (stdout and stderr) matches re.
func (p *proc) waitFor(re string, timeout time.Duration) []string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(timeout)
	for {
		if m := rx.FindStringSubmatch(p.stderr.String() + p.stdout.String()); m != nil {
			return m
		}
		select {
		case <-p.done:
			if m := rx.FindStringSubmatch(p.stderr.String() + p.stdout.String()); m != nil {
				return m
			}
			p.t.Fatalf("%s exited (status %d) before printing %q", p.name, p.code, re)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s did not print %q within %v", p.name, re, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *proc) output() string { return p.stdout.String() + p.stderr.String() }

// tagged lists the live processes (not zombies) that carry the run's tag.
func (r *run) tagged() []int {
	want := []byte(tagVar + "=" + r.tag + "\x00")
	var pids []int
	for deadline := time.Now().Add(5 * time.Second); ; {
		pids = pids[:0]
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
			if err != nil || !bytes.Contains(env, want) {
				continue
			}
			if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
				if i := bytes.LastIndexByte(st, ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
					continue
				}
			}
			pids = append(pids, pid)
		}
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkNoOrphans fails the test if a process of the run is still alive
// (after a grace period for exits in progress).
func (r *run) checkNoOrphans() {
	r.t.Helper()
	if left := r.tagged(); len(left) > 0 {
		var desc []string
		for _, pid := range left {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			desc = append(desc, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(string(cmd), "\x00", " ")))
		}
		r.t.Errorf("processes left running:\n%s", strings.Join(desc, "\n"))
	}
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

func expectPass(t *testing.T, server, client *proc) {
	t.Helper()
	if code := client.wait(runTimeout); code != 0 {
		t.Errorf("client exit %d", code)
	}
	if code := server.wait(exitTimeout); code != 0 {
		t.Errorf("server exit %d", code)
	}
	if !strings.Contains(server.stdout.String(), "rdmo server: verification PASSED") {
		t.Errorf("server did not report a passed verification:\n%s", server.stdout.String())
	}
	if !strings.Contains(client.stdout.String(), "rdmo client: server verification PASSED") {
		t.Errorf("client did not report a passed verification:\n%s", client.stdout.String())
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
		if !strings.Contains(server.stdout.String(), want) {
			t.Errorf("server summary lacks %q", want)
		}
	}
	for _, want := range []string{"ops           3000 (", "flushes ", "latency p50 ", "p99 ", "errors        0", "kops/s"} {
		if !strings.Contains(client.stdout.String(), want) {
			t.Errorf("client summary lacks %q", want)
		}
	}
	if strings.Contains(server.stderr.String(), "WARN") {
		t.Errorf("server warned:\n%s", server.stderr.String())
	}
	r.checkNoOrphans()
}

// Both sides with the same secret file: authenticated, and the run passes.
func TestSecret(t *testing.T) {
	r := newRun(t)
	port := freePort(t)
	secret := writeSecret(t, 0o600)
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "500", "--secret-file", secret)
	client := r.start("client", nil, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port, "--secret-file", secret)
	expectPass(t, server, client)
	if !strings.Contains(server.stderr.String(), `initiator connected  {"from": "127.0.0.1:`) || !strings.Contains(server.stderr.String(), `"authenticated": true`) {
		t.Errorf("server did not log an authenticated initiator")
	}
	r.checkNoOrphans()
}

// A wrong secret, or a secret on one side only: both sides exit non-zero
// with a clear authentication error, and the client never gets the worker
// address.
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
			if code := client.wait(exitTimeout); code == 0 {
				t.Errorf("client exit 0")
			}
			if code := server.wait(exitTimeout); code == 0 {
				t.Errorf("server exit 0")
			}
			for _, p := range []*proc{server, client} {
				if !regexp.MustCompile(`(?m)^rdmo: error: .*authentication failed`).MatchString(p.stderr.String()) {
					t.Errorf("%s: no authentication error line:\n%s", p.name, p.stderr.String())
				}
			}
			if strings.Contains(client.output(), "received the RDMO worker's address") || strings.Contains(client.output(), "connected to the server") {
				t.Errorf("client got past the handshake:\n%s", client.output())
			}
			r.checkNoOrphans()
		})
	}
}

// The client may start first: it retries until the server listens.
func TestClientBeforeServer(t *testing.T) {
	r := newRun(t)
	port := freePort(t)
	client := r.start("client", nil, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port)
	client.waitFor("waiting for the server", 20*time.Second)
	time.Sleep(300 * time.Millisecond)
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "500")
	expectPass(t, server, client)
	r.checkNoOrphans()
}

// midRun starts a run long enough to be interrupted and waits until the
// workload is under way.
func midRun(t *testing.T, r *run) (server, client *proc, workerPID int) {
	port := freePort(t)
	server = r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "400000")
	client = r.start("client", nil, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port)
	m := server.waitFor(`RDMO worker started  \{"worker": \d+, "pid": (\d+)`, 60*time.Second)
	workerPID, _ = strconv.Atoi(m[1])
	server.waitFor("seed append verified", 60*time.Second)
	time.Sleep(300 * time.Millisecond) // into the workload
	return server, client, workerPID
}

// The server killed outright mid-run: its embedded service and worker die
// with it, and the client exits with a clear error, in bounded time.
func TestServerKilled(t *testing.T) {
	r := newRun(t)
	server, client, _ := midRun(t, r)
	server.cmd.Process.Kill()
	server.wait(exitTimeout)
	start := time.Now()
	code := client.wait(exitTimeout)
	if code == 0 || code > 128 {
		t.Errorf("client exit %d", code)
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: .*server went away`).MatchString(client.stderr.String()) {
		t.Errorf("client error does not say the server went away:\n%s", tail(client.stderr.String(), 2000))
	}
	t.Logf("client exited %v after the server was killed", time.Since(start).Round(time.Millisecond))
	r.checkNoOrphans()
}

// SIGINT to the server mid-run: it tears everything down and exits with
// 128+SIGINT; the client learns it from the server and exits with an error.
func TestServerInterrupted(t *testing.T) {
	r := newRun(t)
	server, client, _ := midRun(t, r)
	server.cmd.Process.Signal(syscall.SIGINT)
	if code := server.wait(exitTimeout); code != 128+int(syscall.SIGINT) {
		t.Errorf("server exit %d, want %d", code, 128+int(syscall.SIGINT))
	}
	if !strings.Contains(server.stderr.String(), "rdmo: stopped by signal (interrupt)") {
		t.Errorf("server did not report the signal")
	}
	if strings.Contains(server.stderr.String(), "teardown:") {
		t.Errorf("teardown was not clean:\n%s", server.stderr.String())
	}
	if code := client.wait(exitTimeout); code == 0 {
		t.Errorf("client exit 0")
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: .*server stopped: target interrupted`).MatchString(client.stderr.String()) {
		t.Errorf("client error does not say the server was interrupted:\n%s", tail(client.stderr.String(), 2000))
	}
	r.checkNoOrphans()
}

// The RDMO worker process dies mid-run: the server exits with a clear
// error and tells the client, which exits too.
func TestWorkerDied(t *testing.T) {
	r := newRun(t)
	server, client, pid := midRun(t, r)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill worker %d: %v", pid, err)
	}
	if code := server.wait(exitTimeout); code != 1 {
		t.Errorf("server exit %d, want 1", code)
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: .*RDMO worker died`).MatchString(server.stderr.String()) {
		t.Errorf("server error does not say the worker died:\n%s", tail(server.stderr.String(), 2000))
	}
	if code := client.wait(exitTimeout); code == 0 {
		t.Errorf("client exit 0")
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: .*RDMO worker died`).MatchString(client.stderr.String()) {
		t.Errorf("client error does not say the worker died:\n%s", tail(client.stderr.String(), 2000))
	}
	r.checkNoOrphans()
}

// The CLI hooks: the UCX version, the device check, the plugin table.
func TestCLI(t *testing.T) {
	r := newRun(t)
	v := r.start("version", nil, "rdmo", "-v")
	if v.wait(exitTimeout) != 0 || !regexp.MustCompile(`(?m)^ucx: \d+\.\d+\.\d+$`).MatchString(v.stdout.String()) {
		t.Errorf("version: %s", v.output())
	}
	d := r.start("device", nil, "rdmo", "-m", "server", "-d", "nosuchdev0")
	if code := d.wait(exitTimeout); code != 2 || !strings.Contains(d.stderr.String(), `rdmo: error: -d/--device: no device "nosuchdev0"; devices UCX reports: `) ||
		!strings.Contains(d.stderr.String(), "lo") {
		t.Errorf("bad device: exit %d %s", code, d.output())
	}
	p := r.start("plugins", nil, "rdmo", "plugins")
	if code := p.wait(exitTimeout); code != 0 || !regexp.MustCompile(`(?m)^1\s+append\s+\S+\s+builtin\s+append\(1\)`).MatchString(p.stdout.String()) ||
		!strings.Contains(p.stdout.String(), "scatter(2)") || !strings.Contains(p.stdout.String(), "flush(0)") {
		t.Errorf("plugins: exit %d\n%s", code, p.output())
	}
	w := r.start("worker", nil, "rdmo", "__urom-worker")
	if code := w.wait(exitTimeout); code == 0 {
		t.Errorf("__urom-worker without a service: exit 0")
	}
	r.checkNoOrphans()
}

// `rdmo dpu` as a separate daemon, used by a server with --urom, and
// listed by `rdmo plugins --urom`.
func TestRemoteService(t *testing.T) {
	r := newRun(t)
	svcPort := freePort(t)
	addr := "127.0.0.1:" + svcPort
	dpu := r.start("dpu", nil, "rdmo", "dpu", "--listen", addr)
	dpu.waitFor("UROM_LISTEN "+regexp.QuoteMeta(addr), 30*time.Second)
	pl := r.start("plugins", nil, "rdmo", "plugins", "--urom", addr)
	if code := pl.wait(exitTimeout); code != 0 || !strings.Contains(pl.stdout.String(), "of the UROM service at "+addr) {
		t.Errorf("plugins --urom: exit %d\n%s", code, pl.output())
	}
	port := freePort(t)
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "500", "--urom", addr, "--append-strategy", "shared")
	client := r.start("client", nil, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port)
	expectPass(t, server, client)
	dpu.cmd.Process.Signal(syscall.SIGTERM)
	if code := dpu.wait(exitTimeout); code != 0 {
		t.Errorf("dpu exit %d after SIGTERM", code)
	}
	r.checkNoOrphans()
}

// Ctrl-C at any point of the server's set-up: a clean exit with 128+SIGINT
// and nothing left behind.
func TestServerInterruptedDuringSetup(t *testing.T) {
	for _, at := range []string{"embedded UROM service started", "RDMO worker started", "waiting for the initiator"} {
		t.Run(at, func(t *testing.T) {
			r := newRun(t)
			server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", freePort(t), "--ops", "1000")
			server.waitFor(at, 60*time.Second)
			server.cmd.Process.Signal(syscall.SIGINT)
			if code := server.wait(exitTimeout); code != 128+int(syscall.SIGINT) {
				t.Errorf("server exit %d, want %d", code, 128+int(syscall.SIGINT))
			}
			if strings.Contains(server.stderr.String(), "teardown:") {
				t.Errorf("teardown was not clean:\n%s", server.stderr.String())
			}
			r.checkNoOrphans()
		})
	}
}

// Ctrl-C to the client mid-run: it exits with 128+SIGINT and tells the
// server, which tears down and exits with an error saying so.
func TestClientInterrupted(t *testing.T) {
	r := newRun(t)
	server, client, _ := midRun(t, r)
	client.cmd.Process.Signal(syscall.SIGINT)
	if code := client.wait(exitTimeout); code != 128+int(syscall.SIGINT) {
		t.Errorf("client exit %d, want %d", code, 128+int(syscall.SIGINT))
	}
	if code := server.wait(exitTimeout); code != 1 {
		t.Errorf("server exit %d, want 1", code)
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: initiator stopped: initiator interrupted`).MatchString(server.stderr.String()) {
		t.Errorf("server error does not say the initiator was interrupted:\n%s", tail(server.stderr.String(), 2000))
	}
	r.checkNoOrphans()
}

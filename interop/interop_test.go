package interop_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/internal/testproc"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

var (
	dir       string // built binaries
	rdmoBin   string
	cClient   string
	buildErr  error
	cBuildErr error
)

// TestMain builds bin/rdmo and the C initiator once for every test.
func TestMain(m *testing.M) {
	var err error
	dir, err = os.MkdirTemp("", "rdmo-interop-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rdmoBin = filepath.Join(dir, "rdmo")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	buildErr = testproc.GoBuild(ctx, rdmoBin, "github.com/openrdmo/rdmo/cmd/rdmo")
	cancel()
	cClient, cBuildErr = buildCClient(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildCClient compiles testdata/doca_client.c with the system's C compiler
// against libucp, as a DOCA application is built (not cgo).
func buildCClient(dir string) (string, error) {
	flags, err := exec.Command("pkg-config", "--cflags", "--libs", "ucx").Output()
	if err != nil {
		return "", fmt.Errorf("pkg-config --cflags --libs ucx: %v", err)
	}
	out := filepath.Join(dir, "doca_client")
	args := append([]string{"-Wall", "-Wextra", "-Werror", "-O1", "-o", out, filepath.Join("testdata", "doca_client.c")}, strings.Fields(string(flags))...)
	if b, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("cc %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out, nil
}

func needBinaries(t *testing.T) {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	if cBuildErr != nil {
		ucptest.SkipOrFail(t, "cannot build the C initiator: %v", cBuildErr)
	}
	testproc.CheckNoLeftovers(t)
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

func start(t *testing.T, name string, tr ucptest.Transport, argv ...string) *testproc.Proc {
	t.Helper()
	return testproc.StartCommand(t, argv, testproc.Options{Name: name, Env: tr.Env(), Grace: -1})
}

const (
	runTimeout  = 120 * time.Second
	exitTimeout = 30 * time.Second
)

// server starts `rdmo -m server` on a free port; its smallest workload
// (the reference initiator never runs it).
func server(t *testing.T, tr ucptest.Transport) (*testproc.Proc, string) {
	port := freePort(t)
	return start(t, "server", tr, rdmoBin, "-m", "server", "--oob-port", port, "--ops", "1"), port
}

// expectReferencePass waits for both sides and checks that both exit 0 and
// that the server verified the reference demo.
func expectReferencePass(t *testing.T, srv, client *testproc.Proc) {
	t.Helper()
	defer func() {
		if !t.Failed() {
			return
		}
		t.Logf("server:\n%s%s\n%s:\n%s%s", srv.Stdout(), srv.Stderr(), client.Name(), client.Stdout(), client.Stderr())
	}()
	if code := client.Wait(t, runTimeout); code != 0 {
		t.Errorf("%s exit %d\n%s\n%s", client.Name(), code, client.Stdout(), client.Stderr())
	}
	if code := srv.Wait(t, exitTimeout); code != 0 {
		t.Errorf("server exit %d\n%s\n%s", code, srv.Stdout(), srv.Stderr())
	}
	for _, want := range []string{
		"rdmo server: verification PASSED (reference initiator)",
		"append        8 bytes of 0x33 at base+8, tail base+16: intact",
		"scatter       16 chunks of 8 bytes of 0x33 at base..base+127: intact",
	} {
		if !strings.Contains(srv.Stdout(), want) {
			t.Errorf("server summary lacks %q:\n%s", want, srv.Stdout())
		}
	}
	// The worker dropped nothing and failed nothing (no "not a request
	// queue's endpoint", no ClientMismatch).
	if regexp.MustCompile(`rdmo message dropped|rdmo request failed`).MatchString(srv.Stderr()) {
		t.Errorf("the worker dropped or failed requests:\n%s", srv.Stderr())
	}
}

// The C initiator, written like the reference client, runs the reference
// demo unchanged against `rdmo -m server` (which tells its exchange from
// rdmo's by itself), over TCP and over shared memory: both exit 0. The
// server has UCX's shared-memory error handling on (ucp.NewContext's
// default); over shared memory the C initiator runs with UCX's own default
// (off, as a DOCA application has it) and with it on: its endpoint asks
// for no error handling either way, and so does the server's to it.
func TestCInitiatorAgainstServer(t *testing.T) {
	for _, tr := range ucptest.Transports {
		variants := []struct {
			name string
			env  []string
		}{{"", nil}}
		if tr.Name == "shm" {
			variants = []struct {
				name string
				env  []string
			}{
				{"ucx-default", []string{"UCX_POSIX_ERROR_HANDLING=n", "UCX_SYSV_ERROR_HANDLING=n"}},
				{"shm-error-handling", []string{"UCX_POSIX_ERROR_HANDLING=y", "UCX_SYSV_ERROR_HANDLING=y"}},
			}
		}
		for _, v := range variants {
			t.Run(strings.TrimSuffix(tr.Name+"/"+v.name, "/"), func(t *testing.T) {
				needBinaries(t)
				srv, port := server(t, tr)
				client := testproc.StartCommand(t, []string{cClient, "127.0.0.1", port}, testproc.Options{
					Name: "doca_client", Env: append(tr.Env(), v.env...), Grace: -1})
				expectReferencePass(t, srv, client)
				for _, want := range []string{"append of 8 bytes done and flushed", "scatter of 16 chunks done and flushed", "RDMO demo done"} {
					if !strings.Contains(client.Stdout(), want) {
						t.Errorf("C initiator output lacks %q:\n%s", want, client.Stdout())
					}
				}
			})
		}
	}
}

// rdmo's own client in reference mode does the same.
func TestDOCAClientAgainstServer(t *testing.T) {
	for _, tr := range ucptest.Transports {
		t.Run(tr.Name, func(t *testing.T) {
			needBinaries(t)
			srv, port := server(t, tr)
			client := start(t, "client", tr, rdmoBin, "-m", "client", "-s", "127.0.0.1", "--oob-port", port, "--oob-protocol", "doca")
			expectReferencePass(t, srv, client)
			for _, want := range []string{"rdmo client: append of 8 bytes of 0x33 done and flushed", "rdmo client: reference demo done", "errors        0"} {
				if !strings.Contains(client.Stdout(), want) {
					t.Errorf("client output lacks %q:\n%s", want, client.Stdout())
				}
			}
		})
	}
}

// Peers that are neither protocol, or break off mid-message, before the
// reference initiator comes: one log line each, and the server still
// serves the initiator that follows.
func TestBadPeersThenReference(t *testing.T) {
	tr := ucptest.Transports[1] // tcp
	needBinaries(t)
	srv, port := server(t, tr)
	addr := net.JoinHostPort("127.0.0.1", port)
	dial := func() net.Conn {
		deadline := time.Now().Add(60 * time.Second)
		for {
			nc, err := net.Dial("tcp", addr)
			if err == nil {
				return nc
			}
			if time.Now().After(deadline) {
				t.Fatalf("server not listening: %v", err)
			}
			select {
			case <-srv.Done():
				t.Fatalf("server exited: %s", srv.Stderr())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	bad := [][]byte{
		binary.LittleEndian.AppendUint64(nil, 4096),                 // length over 1024
		append(binary.LittleEndian.AppendUint64(nil, 100), 1, 2, 3), // closes mid-message
	}
	for _, b := range bad {
		nc := dial()
		nc.Write(b)
		nc.Close()
	}
	// Peers that complete their first message and then fail: random bytes
	// for an address (UCX 1.13 would abort the worker on them, were they
	// not refused), and a real worker address (of a worker that is gone)
	// followed by a close mid-exchange.
	uctx := ucptest.NewContext(t, tr)
	w, err := uctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	real, err := w.Address()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	garbage := append([]byte{0x25}, bytes.Repeat([]byte{0xa7}, 78)...)
	abandoned := [][]byte{garbage, real}
	for _, a := range abandoned {
		nc := dial()
		nc.Write(append(binary.LittleEndian.AppendUint64(nil, uint64(len(a))), a...))
		nc.Close()
	}
	// The server takes peers as their handshakes end, not as they
	// connected: wait until it has refused every one above, so that the
	// reference initiator comes after them (else it may be served first,
	// and the peers still in their handshake get "busy").
	refused := func() bool {
		return strings.Count(srv.Stderr(), "out-of-band handshake failed; still waiting for the initiator") >= len(bad) &&
			strings.Count(srv.Stderr(), "reference initiator failed before its work began; still waiting for an initiator") >= len(abandoned)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !refused() {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not refuse the %d bad and %d abandoned peers within 60s:\n%s", len(bad), len(abandoned), srv.Stderr())
		}
		select {
		case <-srv.Done():
			t.Fatalf("server exited: %s", srv.Stderr())
		case <-time.After(20 * time.Millisecond):
		}
	}
	client := start(t, "doca_client", tr, cClient, "127.0.0.1", port)
	expectReferencePass(t, srv, client)
	if n := strings.Count(srv.Stderr(), "out-of-band handshake failed; still waiting for the initiator"); n != len(bad) {
		t.Errorf("%d log lines for %d bad peers:\n%s", n, len(bad), srv.Stderr())
	}
	if n := strings.Count(srv.Stderr(), "reference initiator failed before its work began; still waiting for an initiator"); n != len(abandoned) {
		t.Errorf("%d log lines for %d peers that left early:\n%s", n, len(abandoned), srv.Stderr())
	}
}

// A reference initiator that writes the wrong bytes: the server exits 1
// with one line naming the check that failed.
func TestServerNamesFailedCheck(t *testing.T) {
	tr := ucptest.Transports[0] // shm
	needBinaries(t)
	srv, port := server(t, tr)
	client := testproc.StartCommand(t, []string{cClient, "127.0.0.1", port}, testproc.Options{
		Name: "doca_client", Env: append(tr.Env(), "DOCA_CLIENT_BYTE=0x34"), Grace: -1})
	client.Wait(t, runTimeout) // it may or may not notice: it reads no verdict
	if code := srv.Wait(t, exitTimeout); code != 1 {
		t.Errorf("server exit %d, want 1\n%s", code, srv.Stderr())
	}
	lines := regexp.MustCompile(`(?m)^rdmo: error: .*$`).FindAllString(srv.Stderr(), -1)
	if len(lines) != 1 || !strings.Contains(lines[0], "verification FAILED: reference append check: the appended bytes are 34 34 34 34 34 34 34 34, want 8 × 33") {
		t.Errorf("server error lines %q", lines)
	}
}

// A server with a secret refuses reference initiators (they cannot
// authenticate), with one log line, and keeps waiting.
func TestSecretRefusesReference(t *testing.T) {
	tr := ucptest.Transports[1] // tcp
	needBinaries(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	srv := start(t, "server", tr, rdmoBin, "-m", "server", "--oob-port", port, "--ops", "1", "--secret-file", secret)
	client := start(t, "doca_client", tr, cClient, "127.0.0.1", port)
	if code := client.Wait(t, runTimeout); code == 0 {
		t.Errorf("the reference initiator passed a server with a secret")
	}
	if !strings.Contains(client.Stderr(), "the server closed the connection") {
		t.Errorf("C initiator: %s", client.Stderr())
	}
	// The server logs the refusal once the connection is closed: wait for
	// the line (the client may see the close first).
	for deadline := time.Now().Add(exitTimeout); !strings.Contains(srv.Stderr(), "a reference (DOCA) initiator cannot authenticate"); {
		if time.Now().After(deadline) {
			t.Fatalf("server did not log the refusal:\n%s", srv.Stderr())
		}
		select {
		case <-srv.Done():
			t.Fatalf("server exited (%d): it should keep waiting\n%s", srv.ExitCode(), srv.Stderr())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if strings.Contains(srv.Stderr(), "reference initiator connected") {
		t.Errorf("server served the reference initiator")
	}
}

package ucp_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/internal/testproc"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// Tests between OS processes re-execute the test binary in a child role
// (testproc). The child speaks a line protocol on stdin/stdout.

func TestMain(m *testing.M) {
	switch testproc.Role() {
	case "":
		os.Exit(m.Run())
	case "server":
		os.Exit(childServer())
	case "initiator":
		os.Exit(childInitiator())
	case "sink":
		os.Exit(childSink())
	case "shm-settings":
		// What NewContext's environment handling decided, before any
		// context: the detection it reports and the settings it left.
		fmt.Printf("%v %s %s %s\n", ucp.ShmPeerFailureDetection(), os.Getenv("UCX_POSIX_ERROR_HANDLING"),
			os.Getenv("UCX_SYSV_ERROR_HANDLING"), os.Getenv("UCX_KEEPALIVE_INTERVAL"))
		os.Exit(0)
	default:
		fmt.Fprintln(os.Stderr, "unknown role", testproc.Role())
		os.Exit(2)
	}
}

const regionSize = 1 << 20

// childServer owns two regions (UCX-allocated and user memory mapped after
// the fact), echoes AM id 1 back as AM id 2 on the reply endpoint, and
// answers "dump <alloc|user> <off> <len>" and "quit" on stdin.
func childServer() int {
	ctx, w, err := ucptest.NewChildWorker()
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	alloc, err := ctx.Allocate(regionSize)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	user := make([]byte, regionSize)
	mapped, err := ctx.Map(user)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	addr, _ := w.Address()
	ka, _ := alloc.PackRkey()
	ku, _ := mapped.PackRkey()
	w.SetHandler(1, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) {
		for i := range msgs {
			m := &msgs[i]
			hdr := append([]byte(nil), m.Header...)
			reply := m.Reply
			if m.Rendezvous {
				buf := make([]byte, m.Length)
				m.Receive(buf, ucp.CompleterFunc(func(c ucp.Completion) {
					reply.SendAM(2, hdr, buf, 0, nil, 0)
				}), 0)
				continue
			}
			held := m.Keep()
			reply.SendAM(2, hdr, held.Data, 0, ucp.CompleterFunc(func(ucp.Completion) { w.Release(held) }), 0)
		}
	}))
	fmt.Printf("READY %x %x %d %x %d\n", addr, ka, alloc.Address(), ku, mapped.Address())
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for {
		select {
		case line, ok := <-lines:
			if !ok || line == "quit" {
				w.Close()
				alloc.Close()
				mapped.Close()
				ctx.Close()
				return 0
			}
			var which string
			var off, n int
			fmt.Sscanf(line, "dump %s %d %d", &which, &off, &n)
			src := alloc.Bytes()
			if which == "user" {
				src = user
			}
			fmt.Printf("DUMP %x\n", src[off:off+n])
		default:
			w.Progress()
		}
	}
}

// childInitiator connects to a server and, on its allocated region's first
// word, runs UCP_TEST_N fetch-adds of 1 and UCP_TEST_N compare-swap
// increments, then prints "DONE <retries>".
func childInitiator() int {
	ctx, w, err := ucptest.NewChildWorker()
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	addr, _ := hex.DecodeString(os.Getenv("UCP_TEST_ADDR"))
	rk, _ := hex.DecodeString(os.Getenv("UCP_TEST_RKEY"))
	base, _ := strconv.ParseUint(os.Getenv("UCP_TEST_BASE"), 10, 64)
	n, _ := strconv.Atoi(os.Getenv("UCP_TEST_N"))
	ep, err := w.Connect(addr, ucp.EndpointOptions{})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	rkey, err := ep.UnpackRkey(rk)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	for i := 0; i < n; i++ {
		if _, err := ep.AtomicSync(ucp.AtomicFetchAdd, 1, 0, base, rkey, 0); err != nil {
			fmt.Println("ERR", err)
			return 1
		}
	}
	retries := 0
	for i := 0; i < n; i++ {
		old, err := ep.AtomicSync(ucp.AtomicFetchAdd, 0, 0, base, rkey, 0)
		for err == nil {
			var got uint64
			got, err = ep.AtomicSync(ucp.AtomicCompareSwap, old+1, old, base, rkey, 0)
			if got == old {
				break
			}
			old = got
			retries++
		}
		if err != nil {
			fmt.Println("ERR", err)
			return 1
		}
	}
	fmt.Println("DONE", retries)
	ep.Close()
	w.Close()
	ctx.Close()
	return 0
}

// startChild starts the test binary in role over tr. Benchmarks pin the
// peer to its own core (UCP_BENCH_CHILD_CPU), as the script pins
// ucx_perftest's two processes, so both are measured alike.
func startChild(t testing.TB, role string, tr ucptest.Transport, env ...string) *testproc.Proc {
	t.Helper()
	opt := testproc.Options{Env: append(tr.Env(), env...)}
	if cpu := os.Getenv("UCP_BENCH_CHILD_CPU"); cpu != "" {
		opt.Command = func(argv ...string) *exec.Cmd {
			return exec.Command("taskset", append([]string{"-c", cpu}, argv...)...)
		}
	}
	return testproc.Start(t, role, opt)
}

// lineWhile is Must with a 20 s timeout, progressing w while waiting.
func lineWhile(t testing.TB, c *testproc.Proc, w *ucp.Worker, prefix string) []string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); w.Progress() {
		f, err := c.Await(prefix, 0)
		if err == nil {
			return f
		}
		if !errors.Is(err, testproc.ErrTimeout) {
			t.Fatal(err)
		}
	}
	t.Fatalf("timed out waiting for %s", prefix)
	return nil
}

type serverInfo struct {
	addr, rkeyAlloc, rkeyUser []byte
	baseAlloc, baseUser       uint64
}

func startServer(t *testing.T, tr ucptest.Transport) (*testproc.Proc, serverInfo) {
	c := startChild(t, "server", tr)
	f := c.Must(t, "READY", 20*time.Second)
	var si serverInfo
	si.addr, _ = hex.DecodeString(f[0])
	si.rkeyAlloc, _ = hex.DecodeString(f[1])
	si.baseAlloc, _ = strconv.ParseUint(f[2], 10, 64)
	si.rkeyUser, _ = hex.DecodeString(f[3])
	si.baseUser, _ = strconv.ParseUint(f[4], 10, 64)
	return c, si
}

func newLocalWorker(t *testing.T, tr ucptest.Transport) *ucp.Worker {
	ctx := ucptest.NewContext(t, tr)
	w, err := ctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func TestProcessAMWithReply(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		_, si := startServer(t, tr)
		w := newLocalWorker(t, tr)
		ep, err := w.Connect(si.addr, ucp.EndpointOptions{Name: "to-server"})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]byte{}
		w.SetHandler(2, ucp.MessageHandlerFunc(func(w *ucp.Worker, msgs []ucp.Message) {
			for i := range msgs {
				m := &msgs[i]
				key := string(m.Header)
				if !m.Rendezvous {
					got[key] = append([]byte(nil), m.Data...)
					continue
				}
				buf := make([]byte, m.Length)
				m.Receive(buf, ucp.CompleterFunc(func(ucp.Completion) { got[key] = buf }), 0)
			}
		}))
		sizes := []int{8, 64, 8 << 10, 1 << 20}
		for i, n := range sizes {
			flags := ucp.SendReply
			if i == 3 {
				flags |= ucp.SendRendezvous
			} else if i < 2 {
				flags |= ucp.SendEager
			}
			if err := ep.SendAM(1, []byte(strconv.Itoa(n)), pattern(n, byte(i)), flags, nil, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.ProgressUntil(func() bool { return len(got) == len(sizes) }, 20*time.Second); err != nil {
			t.Fatalf("%v (got %d of %d echoes)", err, len(got), len(sizes))
		}
		for i, n := range sizes {
			if !bytes.Equal(got[strconv.Itoa(n)], pattern(n, byte(i))) {
				t.Errorf("%d-byte echo corrupted", n)
			}
		}
		if ep.Transports() == nil {
			t.Errorf("endpoint reports no transports:\n%s", ep.Info())
		}
		t.Logf("%s endpoint lanes: %v", tr.Name, ep.Transports())
		ep.Close()
	})
}

func TestProcessPutGet(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		srv, si := startServer(t, tr)
		w := newLocalWorker(t, tr)
		ep, err := w.Connect(si.addr, ucp.EndpointOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		for _, region := range []struct {
			name   string
			packed []byte
			base   uint64
		}{{"alloc", si.rkeyAlloc, si.baseAlloc}, {"user", si.rkeyUser, si.baseUser}} {
			rkey, err := ep.UnpackRkey(region.packed)
			if err != nil {
				t.Fatal(err)
			}
			data := pattern(100000, 9)
			if err := ep.PutSync(data, region.base+4096, rkey, 0); err != nil {
				t.Fatalf("%s put: %v", region.name, err)
			}
			if err := ep.FlushSync(0); err != nil {
				t.Fatal(err)
			}
			back := make([]byte, len(data))
			if err := ep.GetSync(back, region.base+4096, rkey, 0); err != nil {
				t.Fatalf("%s get: %v", region.name, err)
			}
			if !bytes.Equal(back, data) {
				t.Fatalf("%s: get returned other bytes than put", region.name)
			}
			srv.Send(fmt.Sprintf("dump %s 4096 %d", region.name, len(data)))
			dump, _ := hex.DecodeString(lineWhile(t, srv, w, "DUMP")[0])
			if !bytes.Equal(dump, data) {
				t.Fatalf("%s: target memory does not hold the put", region.name)
			}
		}
	})
}

func TestProcessAtomicsFromTwoInitiators(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		srv, si := startServer(t, tr)
		const n = 2000
		env := []string{
			"UCP_TEST_ADDR=" + hex.EncodeToString(si.addr),
			"UCP_TEST_RKEY=" + hex.EncodeToString(si.rkeyAlloc),
			"UCP_TEST_BASE=" + strconv.FormatUint(si.baseAlloc, 10),
			"UCP_TEST_N=" + strconv.Itoa(n),
		}
		a := startChild(t, "initiator", tr, env...)
		b := startChild(t, "initiator", tr, env...)
		ra := a.Must(t, "DONE", 60*time.Second)
		rb := b.Must(t, "DONE", 60*time.Second)
		t.Logf("compare-swap retries under contention: %s + %s", ra[0], rb[0])
		srv.Send("dump alloc 0 8")
		dump, _ := hex.DecodeString(srv.Must(t, "DUMP", 10*time.Second)[0])
		var v uint64
		for i := 7; i >= 0; i-- {
			v = v<<8 | uint64(dump[i])
		}
		if v != 4*n {
			t.Fatalf("counter = %d, want %d (2 initiators x %d fetch-adds + %d CAS increments)", v, 4*n, n, n)
		}
	})
}

// A peer killed with SIGKILL while operations are outstanding: every
// operation completes (with an error where it could not finish), nothing
// hangs. UCX detects the failure itself (over TCP, and over shared memory
// with the error handling NewContext turns on); where it cannot (that
// turned off in the environment) the layer above notices the dead process
// and closes the endpoint with CloseForce, which is what this test does
// then.
func TestProcessPeerKilled(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		srv, si := startServer(t, tr)
		w := newLocalWorker(t, tr)
		var epErr error
		ep, err := w.Connect(si.addr, ucp.EndpointOptions{Name: "victim", OnError: func(_ *ucp.Endpoint, err error) { epErr = err }})
		if err != nil {
			t.Fatal(err)
		}
		rkey, err := ep.UnpackRkey(si.rkeyAlloc)
		if err != nil {
			t.Fatal(err)
		}
		if err := ep.PutSync([]byte("alive"), si.baseAlloc, rkey, 0); err != nil {
			t.Fatal(err)
		}
		var d done
		issued := 0
		buf := make([]byte, 64<<10)
		for i := 0; i < 32; i++ {
			if err := ep.Get(buf, si.baseAlloc+uint64(i%8)*(64<<10), rkey, &d, uint64(i)); err != nil {
				t.Fatal(err)
			}
			issued++
		}
		w.Submit()
		srv.Kill()
		// Keep issuing while the peer is dead.
		for i := 0; i < 16; i++ {
			if err := ep.SendAM(1, nil, make([]byte, 256<<10), ucp.SendRendezvous, &d, 100); err != nil {
				break
			}
			issued++
		}
		deadline := time.Now().Add(30 * time.Second)
		killedAt := time.Now()
		for d.n < issued && time.Now().Before(deadline) {
			w.Progress()
			if !ep.PeerFailureDetection() && time.Since(killedAt) > 200*time.Millisecond && ep.Err() == nil {
				// The control layer's job when UCX cannot detect it.
				ep.CloseForce()
			}
		}
		if d.n != issued {
			t.Fatalf("%d of %d operations completed after the peer died", d.n, issued)
		}
		if ep.PeerFailureDetection() != tr.PeerFailureDetection() {
			t.Errorf("endpoint detection %v, want %v over %s", ep.PeerFailureDetection(), tr.PeerFailureDetection(), tr.Name)
		}
		if ep.PeerFailureDetection() {
			if !errors.Is(epErr, ucp.ErrPeerFailed) {
				t.Errorf("endpoint error callback: %v, want ErrPeerFailed", epErr)
			}
			if err := ep.Put([]byte{1}, si.baseAlloc, rkey, nil, 0); !errors.Is(err, ucp.ErrPeerFailed) {
				t.Errorf("put after failure: %v, want ErrPeerFailed", err)
			}
			if len(d.errs) == 0 {
				t.Errorf("no operation failed although the peer died with them outstanding")
			}
			ep.Close()
		}
		t.Logf("%s: %d ops, %d failed, detection=%v", tr.Name, issued, len(d.errs), ep.PeerFailureDetection())
	})
}

// Shared-memory error handling is on by default; RDMO_SHM_PEER_FAILURE=0
// turns it off, and settings the environment makes itself win (each case
// in a child process of a clean environment: the settings are read once
// per process).
func TestShmErrorHandlingSettings(t *testing.T) {
	var clean []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "RDMO_SHM_PEER_FAILURE", "UCX_POSIX_ERROR_HANDLING", "UCX_SYSV_ERROR_HANDLING", "UCX_MM_ERROR_HANDLING", "UCX_KEEPALIVE_INTERVAL":
		default:
			clean = append(clean, kv)
		}
	}
	for _, c := range []struct {
		env  []string
		want string // detection, posix, sysv, keepalive
	}{
		{nil, "true y y 1s"},
		{[]string{"RDMO_SHM_PEER_FAILURE=1"}, "true y y 1s"},
		{[]string{"RDMO_SHM_PEER_FAILURE=0"}, "false   "},
		{[]string{"UCX_POSIX_ERROR_HANDLING=n"}, "false n  1s"},
		{[]string{"UCX_MM_ERROR_HANDLING=n"}, "false   1s"},
		{[]string{"UCX_POSIX_ERROR_HANDLING=y", "UCX_SYSV_ERROR_HANDLING=y", "RDMO_SHM_PEER_FAILURE=0"}, "true y y "},
		{[]string{"UCX_KEEPALIVE_INTERVAL=5s"}, "true y y 5s"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(slices.Clip(clean), testproc.RoleEnv+"=shm-settings"), c.env...)
		out, err := cmd.Output()
		if got := strings.TrimSuffix(string(out), "\n"); err != nil || got != c.want {
			t.Errorf("environment %q: %q (%v), want %q", c.env, got, err, c.want)
		}
	}
}

// Endpoints that require peer-failure detection connect where the
// transport can detect (TCP; shared memory with UCX's shm error handling on,
// NewContext's default), and a killed peer fails them with
// ErrPeerFailed without anyone closing them; where it cannot, Connect
// refuses with ErrNotSupported instead of handing out an endpoint that
// would never notice.
func TestProcessRequireDetection(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		srv, si := startServer(t, tr)
		w := newLocalWorker(t, tr)
		if !tr.PeerFailureDetection() {
			ep, err := w.Connect(si.addr, ucp.EndpointOptions{Name: "required", ErrorHandling: ucp.ErrorHandlingRequire})
			if err == nil {
				ep.CloseForce()
				t.Fatalf("%s without detection: Connect requiring it succeeded", tr.Name)
			}
			if !errors.Is(err, ucp.ErrNotSupported) {
				t.Fatalf("%s without detection: %v, want ErrNotSupported", tr.Name, err)
			}
			return
		}
		failed := make(chan error, 1)
		ep, err := w.Connect(si.addr, ucp.EndpointOptions{Name: "required", ErrorHandling: ucp.ErrorHandlingRequire,
			OnError: func(_ *ucp.Endpoint, err error) { failed <- err }})
		if err != nil {
			t.Fatalf("%s: Connect requiring detection: %v", tr.Name, err)
		}
		if !ep.PeerFailureDetection() {
			t.Fatalf("%s: endpoint without detection", tr.Name)
		}
		rkey, err := ep.UnpackRkey(si.rkeyAlloc)
		if err != nil {
			t.Fatal(err)
		}
		if err := ep.PutSync([]byte("alive"), si.baseAlloc, rkey, 0); err != nil {
			t.Fatal(err)
		}
		srv.Kill()
		deadline := time.Now().Add(60 * time.Second) // a hang guard
		for {
			w.Progress()
			select {
			case err := <-failed:
				if !errors.Is(err, ucp.ErrPeerFailed) {
					t.Errorf("%s: endpoint error %v, want ErrPeerFailed", tr.Name, err)
				}
				ep.Close()
				return
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the dead peer was not detected", tr.Name)
			}
			w.Wait(time.Millisecond)
		}
	})
}

package service_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/service"
)

// The test binary doubles as the worker process and as a service process,
// chosen by UROM_TEST_ROLE.
func TestMain(m *testing.M) {
	switch os.Getenv("UROM_TEST_ROLE") {
	case "worker":
		err := service.ServeWorker(context.Background(), os.NewFile(service.ControlFD, "control"), testFactory, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "service":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		cfg := serviceConfig()
		if f := os.Getenv("UROM_TEST_SECRET_FILE"); f != "" {
			secret, err := os.ReadFile(f)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			cfg.Secret = secret
		}
		s, err := service.New(ctx, cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		addr, err := s.Listen()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		urom.Announce(os.Stdout, addr)
		s.Serve(ctx)
		os.Exit(0)
	}
	code := m.Run()
	if left := strays(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: processes of this test still running after the tests: %v\n", left)
		code = 1
	}
	os.Exit(code)
}

// strays lists running processes started from this test binary, other than
// this one.
func strays() []int {
	var out []int
	deadline := time.Now().Add(10 * time.Second)
	for {
		out = out[:0]
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			var pid int
			if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
				continue
			}
			cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err != nil || !strings.HasPrefix(string(cmd), os.Args[0]+"\x00") || !alive(pid) {
				continue
			}
			out = append(out, pid)
		}
		if len(out) == 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func serviceConfig() service.Config {
	return service.Config{
		Listen:           "127.0.0.1:0",
		Builtins:         []urom.PluginInfo{{Name: "echo", Version: "1.0.0", Ops: []uint32{16}}, {Name: "other", Version: "1.0.0"}},
		MaxWorkers:       3,
		WorkerCommand:    []string{os.Args[0], "-test.run=^$"},
		WorkerEnv:        []string{"UROM_TEST_ROLE=worker"},
		ComponentVersion: "1.2.0",
		CallTimeout:      2 * time.Second,
	}
}

type testHandler struct{ spec urom.WorkerSpec }

func testFactory(ctx context.Context, spec urom.WorkerSpec, log *zap.Logger) (service.CommandHandler, error) {
	if spec.Config["refuse"] != "" {
		return nil, errors.New("refused by configuration")
	}
	return &testHandler{spec: spec}, nil
}

func (h *testHandler) Handle(ctx context.Context, kind string, body msgpack.RawMessage) (any, error) {
	switch kind {
	case "echo":
		var s string
		err := msgpack.Unmarshal(body, &s)
		return s, err
	case "pid":
		return os.Getpid(), nil
	case "plugins":
		var names []string
		for _, p := range h.spec.Plugins {
			names = append(names, p.Name)
		}
		return names, nil
	case "sleep":
		// With a FIFO's path, say "started" by opening it: the test's
		// open of the other end returns once the command runs.
		var fifo string
		if len(body) > 0 {
			if err := msgpack.Unmarshal(body, &fifo); err != nil {
				return nil, err
			}
		}
		if fifo != "" {
			f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err != nil {
				return nil, err
			}
			f.Close()
		}
		time.Sleep(5 * time.Second)
		return nil, nil
	case "crash":
		os.Exit(3)
	}
	return nil, fmt.Errorf("unknown command %q", kind)
}

func (h *testHandler) Close() error { return nil }

func startService(t *testing.T) string {
	t.Helper()
	addr, _ := startServiceWith(t, nil)
	return addr
}

// startServiceWith starts a service in this process (its workers are
// processes of this binary) with serviceConfig changed by change.
func startServiceWith(t *testing.T, change func(*service.Config)) (string, *service.Service) {
	t.Helper()
	cfg := serviceConfig()
	if change != nil {
		change(&cfg)
	}
	return service.StartForTest(t, cfg)
}

func dial(t *testing.T, addr string) *urom.Client {
	t.Helper()
	c, err := urom.Dial(context.Background(), addr, urom.ClientOptions{ComponentVersion: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !alive(pid) {
			return
		}
	}
	t.Fatalf("process %d still running", pid)
}

// waitOpened returns once a process opened the FIFO at path for writing
// (the worker's "sleep" command does as it starts).
func waitOpened(t *testing.T, path string) {
	t.Helper()
	opened := make(chan error, 1)
	go func() {
		f, err := os.Open(path)
		if err == nil {
			f.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		// Unblock the open above so the goroutine ends with the test.
		if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("the worker never started the command")
	}
}

func TestTwoHostsTwoWorkers(t *testing.T) {
	addr := startService(t)
	ctx := context.Background()
	a, b := dial(t, addr), dial(t, addr)
	plugins, err := a.Plugins(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(plugins) != 2 || plugins[0].ID != 1 || plugins[0].Name != "echo" || !plugins[0].Builtin {
		t.Fatalf("plugins: %+v", plugins)
	}
	wa, err := a.Spawn(ctx, urom.SpawnOptions{Plugins: []string{"echo"}})
	if err != nil {
		t.Fatal(err)
	}
	wb, err := b.Spawn(ctx, urom.SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if wa.PID == wb.PID || wa.PID == os.Getpid() {
		t.Fatalf("workers are not separate processes: %d %d", wa.PID, wb.PID)
	}
	for _, w := range []*urom.WorkerProcess{wa, wb} {
		var pid int
		if err := w.Call(ctx, "pid", nil, &pid); err != nil {
			t.Fatal(err)
		}
		if pid != w.PID {
			t.Fatalf("worker %d answered from pid %d, spawned as %d", w.ID, pid, w.PID)
		}
		var echo string
		if err := w.Call(ctx, "echo", "hello", &echo); err != nil || echo != "hello" {
			t.Fatalf("echo: %q %v", echo, err)
		}
	}
	var names []string
	wb.Call(ctx, "plugins", nil, &names)
	if len(names) != 2 {
		t.Errorf("default plugin set %v, want every built-in", names)
	}
	if err := wa.Call(ctx, "nope", nil, nil); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Errorf("unknown command: %v", err)
	}
	if err := wa.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, wa.PID)
	if err := wa.Call(ctx, "pid", nil, nil); !errors.Is(err, urom.ErrWorkerDied) {
		t.Errorf("call after stop: %v, want ErrWorkerDied", err)
	}
}

func TestKilledWorkerIsReportedAndOthersKeepServing(t *testing.T) {
	addr := startService(t)
	ctx := context.Background()
	c := dial(t, addr)
	victim, err := c.Spawn(ctx, urom.SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Spawn(ctx, urom.SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A command in flight when the worker dies fails, it does not hang.
	errc := make(chan error, 1)
	fifo := filepath.Join(t.TempDir(), "started")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	go func() { errc <- victim.Call(ctx, "sleep", fifo, nil) }()
	waitOpened(t, fifo)
	syscall.Kill(victim.PID, syscall.SIGKILL)
	select {
	case <-victim.Gone():
	case <-time.After(10 * time.Second):
		t.Fatal("host was not told its worker died")
	}
	if !strings.Contains(victim.Reason(), "killed") {
		t.Errorf("reason %q does not say the worker was killed", victim.Reason())
	}
	if err := <-errc; !errors.Is(err, urom.ErrWorkerDied) {
		t.Errorf("in-flight command: %v, want ErrWorkerDied", err)
	}
	var echo string
	if err := other.Call(ctx, "echo", "still here", &echo); err != nil || echo != "still here" {
		t.Fatalf("other worker: %q %v", echo, err)
	}
	// A worker that exits by itself mid-command too.
	if err := other.Call(ctx, "crash", nil, nil); !errors.Is(err, urom.ErrWorkerDied) {
		t.Errorf("crashing command: %v, want ErrWorkerDied", err)
	}
	<-other.Gone()
}

func TestLimitsAndErrors(t *testing.T) {
	addr := startService(t)
	ctx := context.Background()
	c := dial(t, addr)
	var ws []*urom.WorkerProcess
	for i := 0; i < 3; i++ {
		w, err := c.Spawn(ctx, urom.SpawnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	if _, err := c.Spawn(ctx, urom.SpawnOptions{}); !errors.Is(err, urom.ErrLimit) {
		t.Fatalf("fourth worker: %v, want ErrLimit", err)
	}
	if _, err := c.Spawn(ctx, urom.SpawnOptions{Plugins: []string{"nosuch"}}); !errors.Is(err, urom.ErrNotFound) {
		t.Fatalf("unknown plugin: %v, want ErrNotFound", err)
	}
	if err := ws[0].Call(ctx, "sleep", nil, nil); !errors.Is(err, urom.ErrTimeout) {
		t.Fatalf("slow command: %v, want ErrTimeout", err)
	}
	ws[1].Stop(ctx)
	if _, err := c.Spawn(ctx, urom.SpawnOptions{Config: map[string]string{"refuse": "yes"}}); err == nil || !strings.Contains(err.Error(), "refused by configuration") {
		t.Fatalf("worker refusing its spec: %v", err)
	}
	if _, err := urom.Dial(ctx, addr, urom.ClientOptions{ComponentVersion: "2.0.0"}); !errors.Is(err, urom.ErrVersion) {
		t.Fatalf("incompatible host: %v, want ErrVersion", err)
	}
	if _, err := urom.Dial(ctx, addr, urom.ClientOptions{ComponentVersion: "1.5.0"}); !errors.Is(err, urom.ErrVersion) {
		t.Fatalf("host newer than service: %v, want ErrVersion", err)
	}
}

func TestHostDisconnectStopsItsWorkers(t *testing.T) {
	addr := startService(t)
	ctx := context.Background()
	c, err := urom.Dial(ctx, addr, urom.ClientOptions{ComponentVersion: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Spawn(ctx, urom.SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitGone(t, w.PID)
}

// The embedded service is a child process; killing it abruptly takes its
// workers with it (parent-death signal and the control-socket watchdog).
func TestEmbeddedServiceKilledTakesWorkersDown(t *testing.T) {
	ctx := context.Background()
	e, err := urom.StartEmbedded(ctx, []string{os.Args[0], "-test.run=^$"}, []string{"UROM_TEST_ROLE=service"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	c := dial(t, e.Addr)
	w, err := c.Spawn(ctx, urom.SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(e.PID(), syscall.SIGKILL)
	<-e.Done()
	waitGone(t, w.PID)
	select {
	case <-w.Gone():
	case <-time.After(10 * time.Second):
		t.Fatal("host not told its worker is gone when the service died")
	}
}

// A context that is already done fails every call with its own error,
// before anything is sent: an expired Spawn starts no worker.
func TestDoneContext(t *testing.T) {
	addr := startService(t)
	c := dial(t, addr)
	w, err := c.Spawn(context.Background(), urom.SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	for _, ctx := range []context.Context{expired, cancelled} {
		want := ctx.Err()
		// Several times: the bug this guards against answered with a
		// random choice between two errors.
		for i := 0; i < 10; i++ {
			if _, err := c.Plugins(ctx); err != want {
				t.Fatalf("Plugins: %v, want %v", err, want)
			}
			if _, err := c.Spawn(ctx, urom.SpawnOptions{}); err != want {
				t.Fatalf("Spawn: %v, want %v", err, want)
			}
			if err := w.Call(ctx, "echo", "x", nil); err != want {
				t.Fatalf("Call: %v, want %v", err, want)
			}
			if err := w.Stop(ctx); err != want {
				t.Fatalf("Stop: %v, want %v", err, want)
			}
			if _, err := urom.Dial(ctx, addr, urom.ClientOptions{ComponentVersion: "1.0.0"}); err != want {
				t.Fatalf("Dial: %v, want %v", err, want)
			}
		}
	}
	ws, err := c.Workers(context.Background())
	if err != nil || len(ws) != 1 || ws[0].ID != w.ID {
		t.Errorf("workers %+v %v: want only the first (nothing sent with a done context)", ws, err)
	}
	var echo string
	if err := w.Call(context.Background(), "echo", "alive", &echo); err != nil || echo != "alive" {
		t.Errorf("worker after the refused calls: %q %v", echo, err)
	}
}

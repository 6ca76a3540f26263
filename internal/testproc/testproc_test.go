package testproc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	switch Role() {
	case "echo":
		os.Exit(echoMain())
	case "sleeper":
		time.Sleep(time.Hour)
		os.Exit(0)
	case "spawner":
		os.Exit(spawnerMain())
	}
	os.Exit(m.Run())
}

// echoMain prints "READY", then answers "say x" with "SAID x", "fail"
// with "ERR failed", "exit n" by exiting with n, and stdin's end by
// exiting 0.
func echoMain() int {
	fmt.Println("READY", os.Getenv("ECHO_ARG"))
	fmt.Fprintln(os.Stderr, "echo: on stderr")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch f[0] {
		case "say":
			fmt.Println("NOISE")
			fmt.Println("SAID", f[1])
		case "fail":
			fmt.Println("ERR failed")
		case "exit":
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// spawnerMain starts a sleeper as its own child, the way a test does, and
// prints its pid.
func spawnerMain() int {
	tb := &fakeTB{}
	p := Start(tb, "sleeper", Options{})
	fmt.Println("CHILD", p.Pid())
	time.Sleep(time.Hour)
	return 0
}

// fakeTB is enough of a testing.TB for Start and CheckNoLeftovers
// outside a test.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	errs     []string
}

func (f *fakeTB) Helper()             {}
func (f *fakeTB) Failed() bool        { f.mu.Lock(); defer f.mu.Unlock(); return len(f.errs) > 0 }
func (f *fakeTB) Cleanup(fn func())   { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Logf(string, ...any) {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}
func (f *fakeTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (f *fakeTB) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }

func (f *fakeTB) cleanup() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestLines(t *testing.T) {
	CheckNoLeftovers(t)
	p := Start(t, "echo", Options{Env: []string{"ECHO_ARG=hello"}})
	if f := p.Must(t, "READY", 30*time.Second); len(f) != 1 || f[0] != "hello" {
		t.Fatalf("READY fields %q", f)
	}
	if _, err := p.Await("SAID", 0); !errors.Is(err, ErrTimeout) {
		t.Fatalf("poll before anything was said: %v, want ErrTimeout", err)
	}
	p.Send("say one")
	p.Send("say two")
	if f := p.Must(t, "SAID", 10*time.Second); f[0] != "one" {
		t.Fatalf("first SAID %q", f)
	}
	if f := p.Must(t, "SAID", 10*time.Second); f[0] != "two" {
		t.Fatalf("second SAID %q", f)
	}
	if _, err := p.Await("SAID", 100*time.Millisecond); !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "no SAID from echo (pid ") {
		t.Fatalf("await of a line that does not come: %v", err)
	}
	p.Send("fail")
	if f, err := p.Await("SAID", 10*time.Second); err == nil || f[0] != "ERR" || !strings.Contains(err.Error(), "ERR failed") {
		t.Fatalf("ERR line: %q %v", f, err)
	}
	p.Send("exit 3")
	if code := p.Wait(t, 10*time.Second); code != 3 {
		t.Fatalf("exit status %d, want 3", code)
	}
	if _, err := p.Await("SAID", 10*time.Second); err == nil || !strings.Contains(err.Error(), "exited (status 3) before printing SAID") {
		t.Fatalf("await after the exit: %v", err)
	}
	if !strings.Contains(p.Stdout(), "NOISE\nSAID one\n") || p.Stderr() != "echo: on stderr\n" {
		t.Fatalf("stdout %q, stderr %q", p.Stdout(), p.Stderr())
	}
}

func TestKill(t *testing.T) {
	CheckNoLeftovers(t)
	p := Start(t, "sleeper", Options{Name: "dormouse"})
	p.Kill()
	if code := p.ExitCode(); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit status %d after Kill", code)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after Kill")
	}
}

// A child that ignores its stdin is killed after its grace period when
// the test ends.
func TestCleanupKills(t *testing.T) {
	tb := &fakeTB{}
	p := Start(tb, "sleeper", Options{Grace: 100 * time.Millisecond})
	start := time.Now()
	tb.cleanup()
	if code := p.ExitCode(); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit status %d after the cleanup", code)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("cleanup took %v", el)
	}
}

// A child dies with the test binary that started it, even a killed one.
func TestChildDiesWithParent(t *testing.T) {
	CheckNoLeftovers(t)
	p := Start(t, "spawner", Options{})
	pid, _ := strconv.Atoi(p.Must(t, "CHILD", 30*time.Second)[0])
	if !alive(pid) {
		t.Fatalf("grandchild %d not running", pid)
	}
	p.Kill()
	for deadline := time.Now().Add(10 * time.Second); alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d still runs 10 s after its parent was killed", pid)
		}
	}
}

// CheckNoLeftovers reports and kills a child that is still around, even
// one that is not a descendant any more but carries the tag.
func TestCheckNoLeftovers(t *testing.T) {
	defer func(g time.Duration) { leftoverGrace = g }(leftoverGrace)
	leftoverGrace = 200 * time.Millisecond
	tb := &fakeTB{}
	CheckNoLeftovers(tb)
	direct := exec.Command("sleep", "60")
	if err := direct.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { direct.Wait(); close(reaped) }()
	// An orphan: the shell exits at once, its sleep is reparented.
	orphan := exec.Command("sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!")
	orphan.Env = append(os.Environ(), tagEnv+"="+tag)
	out, err := orphan.Output()
	if err != nil {
		t.Fatal(err)
	}
	opid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	tb.cleanup()
	<-reaped
	if len(tb.errs) != 2 || !strings.Contains(strings.Join(tb.errs, "\n"), fmt.Sprintf("pid %d ", direct.Process.Pid)) ||
		!strings.Contains(strings.Join(tb.errs, "\n"), fmt.Sprintf("pid %d ", opid)) {
		t.Fatalf("reports %q, want the direct child %d and the orphan %d", tb.errs, direct.Process.Pid, opid)
	}
	for deadline := time.Now().Add(10 * time.Second); alive(opid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d not killed", opid)
		}
	}
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

package childproc

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/internal/testutil"
)

const roleEnv = "CHILDPROC_TEST_ROLE"

// The test binary plays the children.
func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		os.Exit(m.Run())
	case "echo": // a ready line after some noise, then echoes its input
		fmt.Println("noise")
		fmt.Println("READY 42")
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Println("ECHO " + sc.Text())
		}
		os.Exit(0)
	case "stubborn": // ignores SIGTERM and its input
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("READY")
		for {
			time.Sleep(time.Hour) // until killed
		}
	case "group": // a child in its group, then waits
		c := exec.Command("sleep", "1000")
		if err := c.Start(); err != nil {
			os.Exit(2)
		}
		fmt.Println("READY", c.Process.Pid)
		for {
			time.Sleep(time.Hour) // until killed
		}
	case "parent": // starts a grandchild with Start, prints its pid, exits
		p, err := Start([]string{os.Args[0]}, Options{Env: []string{roleEnv + "=stubborn"}, Lines: true})
		if err != nil {
			os.Exit(2)
		}
		if _, err := p.AwaitLine(context.Background(), "READY", time.Minute, nil); err != nil {
			os.Exit(3)
		}
		fmt.Println("READY", p.Pid())
		os.Exit(0)
	case "silent":
		os.Exit(4)
	}
	os.Exit(5)
}

func start(t *testing.T, role string, o Options) *Proc {
	t.Helper()
	o.Env = append(o.Env, roleEnv+"="+role)
	p, err := Start([]string{os.Args[0], "-test.run=^$"}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// alive reports whether pid is a live process (not gone, not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("pid %d to be gone", pid), func() bool { return !alive(pid) })
}

func TestReadyLineAndStop(t *testing.T) {
	p := start(t, "echo", Options{Name: "echo", Stdin: true, Lines: true})
	var skipped []string
	rest, err := p.AwaitLine(context.Background(), "READY ", time.Minute, func(l string) { skipped = append(skipped, l) })
	if err != nil || rest != "42" || len(skipped) != 1 || skipped[0] != "noise" {
		t.Fatalf("ready line %q, skipped %q, %v", rest, skipped, err)
	}
	fmt.Fprintln(p.Stdin(), "hello")
	if rest, err := p.AwaitLine(context.Background(), "ECHO ", time.Minute, nil); err != nil || rest != "hello" {
		t.Fatalf("echo %q %v", rest, err)
	}
	if p.Stop(0, time.Minute) {
		t.Error("a child that exits when its input closes was killed")
	}
	if p.Err() != nil || p.Cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("exit: %v", p.Err())
	}
}

func TestStopKillsAStubbornChild(t *testing.T) {
	p := start(t, "stubborn", Options{Stdin: true, Lines: true})
	if _, err := p.AwaitLine(context.Background(), "READY", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if !p.Stop(syscall.SIGTERM, 100*time.Millisecond) {
		t.Error("a child that ignores SIGTERM and its input was not killed")
	}
	if !strings.Contains(p.ExitReason(), "killed") {
		t.Errorf("exit reason %q", p.ExitReason())
	}
}

func TestGroupKill(t *testing.T) {
	p := start(t, "group", Options{Group: true, Lines: true})
	rest, err := p.AwaitLine(context.Background(), "READY ", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(rest)
	if !alive(pid) {
		t.Fatalf("grandchild %d not running", pid)
	}
	p.Kill()
	waitGone(t, pid)
}

// A child dies with the process that started it, however that one ends.
func TestParentDeath(t *testing.T) {
	p := start(t, "parent", Options{Lines: true})
	rest, err := p.AwaitLine(context.Background(), "READY ", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(rest)
	<-p.Done()
	waitGone(t, pid)
}

func TestNoReadyLine(t *testing.T) {
	p := start(t, "silent", Options{Lines: true})
	_, err := p.AwaitLine(context.Background(), "READY", time.Minute, nil)
	if err == nil || !strings.Contains(err.Error(), "ended its output") || !strings.Contains(err.Error(), "exit status 4") {
		t.Errorf("%v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	q := start(t, "stubborn", Options{Lines: true})
	if _, err := q.AwaitLine(ctx, "NEVER", time.Minute, nil); err != context.Canceled {
		t.Errorf("cancelled wait: %v", err)
	}
	if _, err := Start(nil, Options{}); err == nil {
		t.Error("no command accepted")
	}
}

// Package testproc runs child processes for tests (the test binary itself
// in a role, or another program), talks to them in lines over stdin and
// stdout, and sees to it that none outlives its test.
//
// A test binary that plays roles dispatches on Role in its TestMain:
//
//	func TestMain(m *testing.M) {
//		switch testproc.Role() {
//		case "server":
//			os.Exit(serverMain())
//		}
//		os.Exit(m.Run())
//	}
//
// and a test starts a server with Start(t, "server", testproc.Options{}),
// waits for its "READY ..." line with Must and tells it what to do with
// Send. A child's stdout is kept whole, so one that prints a lot never
// blocks on a test that does not read. Its stderr is kept too: a report of
// the race detector in it fails the test, and it is logged with the end of
// the stdout when the test failed (always, with TESTPROC_VERBOSE set).
// When the test ends the child's stdin is closed, and a child that has not
// exited within its grace period is killed. A child also dies with the
// test binary (Pdeathsig), even one that crashed.
package testproc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/internal/childproc"
)

// RoleEnv is the environment variable that carries a child's role.
const RoleEnv = "TESTPROC_ROLE"

// Role is the role this process was started in by Start, or "".
func Role() string { return os.Getenv(RoleEnv) }

// tagEnv carries the test binary's tag to every child, and from there to
// their descendants (a child passes on the tag it got), so
// CheckNoLeftovers finds them even when they have been reparented.
const tagEnv = "TESTPROC_TAG"

var tag = func() string {
	if t := os.Getenv(tagEnv); t != "" {
		return t
	}
	var b [6]byte
	rand.Read(b[:])
	return strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}()

// Options say how to start a child. The zero value will do.
type Options struct {
	// Name names the child in messages; default the role, or the base
	// name of the program.
	Name string
	// Env is added to this process's environment (a later entry wins).
	Env []string
	// Command makes the command that runs argv, for instance somewhere
	// else (netns.Host.Command) or pinned to a CPU (taskset); default
	// exec.Command.
	Command func(argv ...string) *exec.Cmd
	// Grace is how long the child has, once its test is over and its
	// stdin closed, to exit by itself before it is killed: 0 means 10 s;
	// a negative grace kills it at once (for programs that do not read
	// their stdin).
	Grace time.Duration
}

// Proc is a running (or exited) child.
type Proc struct {
	name string
	cp   *childproc.Proc
	cmd  *exec.Cmd
	in   io.WriteCloser

	mu      sync.Mutex
	lines   []string // stdout, whole lines
	partial []byte   // stdout after the last newline
	next    int      // lines[next:] are not yet passed by Await
	stderr  bytes.Buffer
	changed chan struct{} // closed (and replaced) when output arrives or the child ends
	ended   bool          // the child exited and its output is all in
	code    int           // exit status, 128+n for signal n; -1 while running

	done chan struct{} // closed when the child has exited and was reaped
}

// Start starts the test binary as a child in role (see Role); it runs no
// tests.
func Start(t testing.TB, role string, opt Options) *Proc {
	t.Helper()
	if opt.Name == "" {
		opt.Name = role
	}
	opt.Env = append([]string{RoleEnv + "=" + role}, opt.Env...)
	return StartCommand(t, []string{os.Args[0], "-test.run=^$"}, opt)
}

// StartCommand starts argv as a child.
func StartCommand(t testing.TB, argv []string, opt Options) *Proc {
	t.Helper()
	if opt.Name == "" {
		opt.Name = filepath.Base(argv[0])
	}
	p := &Proc{name: opt.Name, changed: make(chan struct{}), code: -1, done: make(chan struct{})}
	cp, err := childproc.Start(argv, childproc.Options{
		Name: opt.Name, Env: append([]string{tagEnv + "=" + tag}, opt.Env...), Command: opt.Command, Stdin: true,
		Stdout: stdoutWriter{p}, Stderr: stderrWriter{p},
		// A descendant that keeps our end of stdout or stderr open does
		// not hold Wait up for longer than this after the child exited.
		WaitDelay: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	p.cp, p.cmd, p.in = cp, cp.Cmd, cp.Stdin()
	go func() {
		<-cp.Done()
		p.mu.Lock()
		if len(p.partial) > 0 {
			p.lines = append(p.lines, string(p.partial))
			p.partial = nil
		}
		if st := p.cmd.ProcessState; st != nil {
			p.code = st.ExitCode()
			if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.code = 128 + int(ws.Signal())
			}
		}
		p.ended = true
		p.notifyLocked()
		p.mu.Unlock()
		close(p.done)
	}()
	grace := opt.Grace
	if grace == 0 {
		grace = 10 * time.Second
	}
	t.Cleanup(func() { p.stop(t, grace) })
	return p
}

// stop ends the child after its test and reports what it printed when the
// test failed.
func (p *Proc) stop(t testing.TB, grace time.Duration) {
	p.in.Close()
	if grace > 0 {
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	p.Kill()
	for _, rep := range raceReports(p.Stderr()) {
		t.Errorf("%s: the race detector reported a data race:\n%s", p, rep)
	}
	if t.Failed() || os.Getenv("TESTPROC_VERBOSE") != "" {
		t.Logf("--- %s (exit %d) stdout:\n%s\n--- %s stderr:\n%s", p, p.ExitCode(), tail(p.Stdout(), 4000), p, clip(p.Stderr(), 4000, 4000))
	}
}

// raceReports returns the race detector's reports in a child's output.
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

// clip keeps the start and the end of s: a crash names its cause at the
// start of its goroutine dump, a failure its last words at the end.
func clip(s string, head, end int) string {
	if len(s) <= head+end {
		return s
	}
	return s[:head] + "\n...\n" + s[len(s)-end:]
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

type stdoutWriter struct{ p *Proc }

func (w stdoutWriter) Write(b []byte) (int, error) {
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		p.lines = append(p.lines, string(p.partial[:i]))
		p.partial = p.partial[i+1:]
	}
	p.notifyLocked()
	return len(b), nil
}

type stderrWriter struct{ p *Proc }

func (w stderrWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.stderr.Write(b)
}

func (p *Proc) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// String is the child's name and pid.
func (p *Proc) String() string { return fmt.Sprintf("%s (pid %d)", p.name, p.Pid()) }

// Name is the child's name (Options.Name).
func (p *Proc) Name() string { return p.name }

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Send writes line and a newline to the child's stdin.
func (p *Proc) Send(line string) { fmt.Fprintln(p.in, line) }

// ErrTimeout is what Await's error is when the line did not come in time.
var ErrTimeout = errors.New("testproc: timeout")

type timeoutError string

func (e timeoutError) Error() string        { return string(e) }
func (e timeoutError) Is(target error) bool { return target == ErrTimeout }

// Await waits up to timeout (zero or less: looks only at what the child
// printed already) for the next stdout line that starts with prefix, and
// returns its fields after the first. Lines before it are passed over. A
// line starting with "ERR" is returned as an error (with its fields, the
// first being "ERR"), as are the child's end and the timeout (ErrTimeout).
// It never fails the test, so any goroutine may call it.
func (p *Proc) Await(prefix string, timeout time.Duration) ([]string, error) {
	var deadline <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		deadline = tm.C
	}
	for {
		p.mu.Lock()
		for p.next < len(p.lines) {
			l := p.lines[p.next]
			p.next++
			if strings.HasPrefix(l, "ERR") {
				p.mu.Unlock()
				return strings.Fields(l), fmt.Errorf("%s: %s", p, l)
			}
			if strings.HasPrefix(l, prefix) {
				p.mu.Unlock()
				return strings.Fields(l)[1:], nil
			}
		}
		ended, changed := p.ended, p.changed
		p.mu.Unlock()
		if ended {
			return nil, fmt.Errorf("%s exited (status %d) before printing %s", p, p.ExitCode(), prefix)
		}
		if timeout <= 0 {
			return nil, timeoutError(fmt.Sprintf("no %s from %s yet", prefix, p))
		}
		select {
		case <-changed:
		case <-deadline:
			return nil, timeoutError(fmt.Sprintf("no %s from %s within %v", prefix, p, timeout))
		}
	}
}

// Must is Await that fails the test on an error.
func (p *Proc) Must(t testing.TB, prefix string, timeout time.Duration) []string {
	t.Helper()
	f, err := p.Await(prefix, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Kill ends the child with SIGKILL (if it still runs) and waits until it
// was reaped.
func (p *Proc) Kill() {
	p.cp.Kill()
	<-p.done
}

// Signal sends sig to the child.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Wait waits up to timeout for the child to exit and returns its exit
// status (128+n when signal n ended it). A child still running then is
// killed and the test fails.
func (p *Proc) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.Kill()
		t.Fatalf("%s did not exit within %v", p, timeout)
	}
	return p.ExitCode()
}

// Done is closed when the child has exited and its output is all in.
func (p *Proc) Done() <-chan struct{} { return p.done }

// ExitCode is the child's exit status (128+n when signal n ended it), or
// -1 while it runs.
func (p *Proc) ExitCode() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code
}

// Stdout is everything the child printed on stdout so far.
func (p *Proc) Stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	b.Write(p.partial)
	return b.String()
}

// Stderr is everything the child printed on stderr so far.
func (p *Proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// CheckNoLeftovers fails the test if, once everything else was cleaned
// up, a process it started is still around: a descendant of this process
// (even one not yet reaped), or one that carries the tag of the children
// this package starts (so reparented ones count too). It waits up to 10 s
// for them to go, reports each that did not and kills it. Call it before
// anything else in the test, so that its cleanup runs last.
func CheckNoLeftovers(t testing.TB) {
	t.Cleanup(func() {
		var left []leftover
		for deadline := time.Now().Add(leftoverGrace); ; {
			if left = leftovers(); len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, l := range left {
			t.Errorf("process left over: pid %d (state %s): %s", l.pid, l.state, l.cmd)
			syscall.Kill(l.pid, syscall.SIGKILL)
		}
	})
}

var leftoverGrace = 10 * time.Second

type leftover struct {
	pid        int
	ppid       int
	state, cmd string
}

// leftovers lists the processes below this one, and the live ones with
// its tag.
func leftovers() []leftover {
	procs := map[int]leftover{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		procs[pid] = leftover{pid: pid, ppid: ppid, state: f[0], cmd: strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))}
	}
	want := []byte(tagEnv + "=" + tag + "\x00")
	self := os.Getpid()
	var out []leftover
	for pid, p := range procs {
		below := false
		for q, hops := p.ppid, 0; q > 1 && hops < 64; q, hops = procs[q].ppid, hops+1 {
			if q == self {
				below = true
				break
			}
		}
		if !below && p.state != "Z" && pid != self {
			env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
			below = bytes.Contains(env, want)
		}
		if below {
			out = append(out, p)
		}
	}
	return out
}

// GoTool is the go command tests build binaries with: the one on PATH, else
// the one of GOROOT.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// GoBuild builds the main package pkg into the file out (flags, e.g.
// "-race", go before the package), with the compiler's output in the error.
func GoBuild(ctx context.Context, out, pkg string, flags ...string) error {
	args := append(append([]string{"build", "-o", out}, flags...), pkg)
	if b, err := exec.CommandContext(ctx, GoTool(), args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// ChildOf returns a live (not zombie) child process of pid whose command
// line contains name, or 0: how tests find a worker's plugin process to
// kill it.
func ChildOf(pid int, name string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var p int
		if _, err := fmt.Sscanf(e.Name(), "%d", &p); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name: state, ppid, ...
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 2 {
			continue
		}
		var ppid int
		fmt.Sscanf(f[1], "%d", &ppid)
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if ppid == pid && strings.Contains(string(cmd), name) && f[0] != "Z" {
			return p
		}
	}
	return 0
}

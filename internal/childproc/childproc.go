// Package childproc starts child processes that die with their parent: the
// parent-death signal, the start on a thread kept for the child's lifetime,
// the wait for a ready line, and killing and reaping, written once.
package childproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Options say how to start a child. The zero value runs argv with this
// process's environment, stdin, stdout and stderr discarded.
type Options struct {
	// Name names the child in errors (default: argv[0]'s base name).
	Name string
	// Env is added to this process's environment (a later entry wins).
	Env []string
	// CPUs pins the child to these CPUs (a taskset list; "" unpinned).
	CPUs string
	// Group gives the child a process group of its own: Kill and Stop end
	// the group (the child's own children too).
	Group bool
	// Stdin gives the child a pipe as standard input (Proc.Stdin).
	Stdin bool
	// Lines delivers the child's standard output line by line
	// (Proc.Lines, Proc.AwaitLine); else it goes to Stdout.
	Lines bool
	// Stdout and Stderr receive the child's output (nil: discarded).
	Stdout, Stderr io.Writer
	// ExtraFiles are inherited as file descriptors 3, 4, ...
	ExtraFiles []*os.File
	// WaitDelay bounds the wait for the child's output once it exited
	// (exec.Cmd.WaitDelay; 0: none).
	WaitDelay time.Duration
	// Command makes the command that runs argv (for instance in another
	// network namespace); default exec.Command.
	Command func(argv ...string) *exec.Cmd
}

// Proc is a started child.
type Proc struct {
	// Cmd is the command; read its ProcessState only after Done.
	Cmd   *exec.Cmd
	name  string
	group bool
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
	err   error // Wait's, once done is closed
}

// Start starts argv. The child gets SIGKILL when the thread that started
// it ends (Pdeathsig), so that thread is kept for the child's lifetime: a
// child never outlives this process, even one that crashed.
func Start(argv []string, o Options) (*Proc, error) {
	if len(argv) == 0 {
		return nil, errors.New("childproc: no command")
	}
	if o.Name == "" {
		o.Name = argv[0][strings.LastIndexByte(argv[0], '/')+1:]
	}
	if o.CPUs != "" {
		argv = append([]string{"taskset", "-c", o.CPUs}, argv...)
	}
	if o.Command == nil {
		o.Command = func(argv ...string) *exec.Cmd { return exec.Command(argv[0], argv[1:]...) }
	}
	cmd := o.Command(argv...)
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.ExtraFiles = o.ExtraFiles
	cmd.Stdout, cmd.Stderr = o.Stdout, o.Stderr
	cmd.WaitDelay = o.WaitDelay
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if o.Group {
		cmd.SysProcAttr.Setpgid = true
	}
	p := &Proc{Cmd: cmd, name: o.Name, group: o.Group, done: make(chan struct{})}
	var err error
	if o.Stdin {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	var out io.ReadCloser
	if o.Lines {
		cmd.Stdout = nil
		if out, err = cmd.StdoutPipe(); err != nil {
			return nil, err
		}
		p.lines = make(chan string, 256)
	}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the child
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Name, err)
	}
	if out != nil {
		go func() {
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 64<<10), 16<<20)
			for sc.Scan() {
				p.lines <- sc.Text()
			}
			close(p.lines)
		}()
	}
	return p, nil
}

// Name is the child's name (Options.Name).
func (p *Proc) Name() string { return p.name }

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Stdin is the child's standard input (Options.Stdin; else nil).
func (p *Proc) Stdin() io.WriteCloser { return p.stdin }

// Lines delivers the child's standard output lines (Options.Lines); it is
// closed at the end of the output.
func (p *Proc) Lines() <-chan string { return p.lines }

// Done is closed once the child exited and was reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is how the child ended (exec.Cmd.Wait's error) once Done is closed.
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// ExitReason says how the child ended, or that it still runs.
func (p *Proc) ExitReason() string {
	select {
	case <-p.done:
		if p.err == nil {
			return "exited"
		}
		return p.err.Error()
	default:
		return "still running"
	}
}

// AwaitLine reads the child's output lines (Options.Lines) up to the first
// that starts with prefix and returns the rest of it: the child's ready
// line. Lines before it go to skipped (nil: dropped). It fails when the
// output ends first, after timeout, or when ctx ends.
func (p *Proc) AwaitLine(ctx context.Context, prefix string, timeout time.Duration, skipped func(string)) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				select { // the reason, if it comes soon
				case <-p.done:
				case <-time.After(time.Second):
				}
				return "", fmt.Errorf("%s ended its output before %q (%s)", p.name, prefix, p.ExitReason())
			}
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest, nil
			}
			if skipped != nil {
				skipped(l)
			}
		case <-t.C:
			return "", fmt.Errorf("%s did not print %q within %v", p.name, prefix, timeout)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// Signal sends sig to the child.
func (p *Proc) Signal(sig syscall.Signal) error { return syscall.Kill(p.Pid(), sig) }

// kill sends SIGKILL to the child and its group (Options.Group).
func (p *Proc) kill() {
	if p.group {
		syscall.Kill(-p.Pid(), syscall.SIGKILL)
	}
	syscall.Kill(p.Pid(), syscall.SIGKILL)
}

// Kill ends the child (and its group) with SIGKILL and waits until it was
// reaped.
func (p *Proc) Kill() {
	p.kill()
	<-p.done
}

// Stop closes the child's stdin (Options.Stdin), sends it sig (0: none)
// and gives it grace to exit, then kills it; its group is killed either
// way. It reports whether the child had to be
// killed.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) (killed bool) {
	if p.stdin != nil {
		p.stdin.Close()
	}
	if sig != 0 {
		p.Signal(sig)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		killed = true
		p.Kill()
	}
	if p.group {
		syscall.Kill(-p.Pid(), syscall.SIGKILL) // what the child left of its group
	}
	return killed
}

package urom

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// announcePrefix starts the line a service prints when it listens, so a
// parent that started it knows where to connect.
const announcePrefix = "UROM_LISTEN "

// Announce prints the line StartEmbedded waits for.
func Announce(w io.Writer, addr string) {
	fmt.Fprintf(w, "%s%s\n", announcePrefix, addr)
}

// Embedded is a UROM service the host started as its own child process, on
// loopback, for one-machine use without a daemon.
type Embedded struct {
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartEmbedded starts argv (a command that runs a service and Announces
// its address on standard output, e.g. `rdmo dpu --listen 127.0.0.1:0`)
// and waits for the address. The service dies with the calling process.
func StartEmbedded(ctx context.Context, argv []string, env []string) (*Embedded, error) {
	return StartEmbeddedWith(ctx, argv, EmbeddedOptions{Env: env})
}

// EmbeddedSecretFile is where a service started with
// EmbeddedOptions.Secret finds its secret: the file descriptor 3 it
// inherits, a pipe holding the secret and then closed.
const EmbeddedSecretFile = "/dev/fd/3"

// EmbeddedOptions configure StartEmbeddedWith.
type EmbeddedOptions struct {
	// Env is added to the service's environment.
	Env []string
	// Secret, if set, is handed to the service on a pipe it inherits as
	// EmbeddedSecretFile; argv must make the service read it there (e.g.
	// `rdmo dpu --secret-file /dev/fd/3`). Unlike an argument or an
	// environment variable, a pipe shows the secret to no other process
	// (/proc/PID/cmdline is world-readable) and is empty once read.
	Secret []byte
}

// StartEmbeddedWith is StartEmbedded with options.
func StartEmbeddedWith(ctx context.Context, argv []string, opts EmbeddedOptions) (*Embedded, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("urom: no service command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), opts.Env...)
	cmd.Stderr = os.Stderr
	if len(opts.Secret) > 0 {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("urom: secret pipe: %w", err)
		}
		// A pipe buffers far more than a secret: the write does not wait
		// for the reader.
		_, err = w.Write(opts.Secret)
		w.Close()
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("urom: secret pipe: %w", err)
		}
		defer r.Close() // the child has its copy once started
		cmd.ExtraFiles = []*os.File{r}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	e := &Embedded{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig follows the thread that forked: keep it for the
		// child's lifetime.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			close(e.done)
			return
		}
		started <- nil
		e.err = cmd.Wait()
		close(e.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("urom: start embedded service: %w", err)
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), announcePrefix); ok {
				addrc <- a
				break
			}
		}
		io.Copy(os.Stderr, out)
	}()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case e.Addr = <-addrc:
		return e, nil
	case <-e.done:
		return nil, fmt.Errorf("urom: embedded service exited before listening: %v", e.err)
	case <-t.C:
		e.Stop()
		return nil, fmt.Errorf("urom: embedded service did not announce its address within 30s")
	case <-ctx.Done():
		e.Stop()
		return nil, ctx.Err()
	}
}

// PID is the service process's id.
func (e *Embedded) PID() int { return e.cmd.Process.Pid }

// Stop ends the service (SIGTERM, then SIGKILL of its process group after a
// grace period) and waits for it.
func (e *Embedded) Stop() error {
	if e.cmd.Process == nil {
		return nil
	}
	e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
		<-e.done
	}
	syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
	return nil
}

// Done is closed when the service process exited.
func (e *Embedded) Done() <-chan struct{} { return e.done }

package bench

import (
	"bufio"
	"encoding/json"
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

// child is a benchmark process as the driver sees it: commands go to its
// standard input, answers come from its standard output, one line each.
type child struct {
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	done  chan struct{}
	err   error // the process's exit, once done is closed
}

// startChild starts exe in a benchmark role. It dies with the driver
// (Pdeathsig) and on its standard input closing.
func startChild(name, exe, cpus string, env []string, stderr io.Writer) (*child, error) {
	argv := []string{exe}
	if cpus != "" {
		argv = append([]string{"taskset", "-c", cpus}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c := &child{name: name, cmd: cmd, in: in, lines: make(chan string, 256), done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig follows the thread that forked: keep it for the
		// child's lifetime.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.err = cmd.Wait()
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	return c, nil
}

// send writes one command line.
func (c *child) send(verb string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(c.in, "%s %s\n", verb, b); err != nil {
		return fmt.Errorf("%s: %w (%s)", c.name, err, c.exitReason())
	}
	return nil
}

// expect waits for the answer verb and decodes it into v (may be nil).
func (c *child) expect(verb string, v any, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				return fmt.Errorf("%s exited before answering %s (%s)", c.name, verb, c.exitReason())
			}
			got, body, _ := strings.Cut(l, " ")
			switch got {
			case "ERR":
				return fmt.Errorf("%s: %s", c.name, body)
			case verb:
				if v == nil {
					return nil
				}
				if err := json.Unmarshal([]byte(body), v); err != nil {
					return fmt.Errorf("%s: bad %s answer: %w", c.name, verb, err)
				}
				return nil
			}
			// Anything else is chatter: ignore it.
		case <-t.C:
			return fmt.Errorf("%s did not answer %s within %v", c.name, verb, timeout)
		}
	}
}

// call sends a command and waits for its answer.
func (c *child) call(verb string, body any, answer string, v any, timeout time.Duration) error {
	if err := c.send(verb, body); err != nil {
		return err
	}
	return c.expect(answer, v, timeout)
}

func (c *child) exitReason() string {
	select {
	case <-c.done:
		if c.err == nil {
			return "exited"
		}
		return c.err.Error()
	case <-time.After(200 * time.Millisecond):
		return "still running"
	}
}

// stop asks the child to quit (closing its input), then kills it after
// grace.
func (c *child) stop(grace time.Duration) error {
	c.send("quit", struct{}{})
	c.in.Close()
	select {
	case <-c.done:
	case <-time.After(grace):
		c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s did not exit within %v: killed", c.name, grace)
	}
	var ee *exec.ExitError
	if c.err != nil && !errors.As(c.err, &ee) {
		return c.err
	}
	if c.err != nil {
		return fmt.Errorf("%s: %v", c.name, c.err)
	}
	return nil
}

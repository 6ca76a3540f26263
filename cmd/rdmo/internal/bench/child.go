package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/openrdmo/rdmo/internal/childproc"
)

// child is a benchmark process as the driver sees it: commands go to its
// standard input, answers come from its standard output, one line each.
type child struct {
	name string
	p    *childproc.Proc
}

// startChild starts exe in a benchmark role. It dies with the driver
// (childproc) and on its standard input closing.
func startChild(name, exe, cpus string, env []string, stderr io.Writer) (*child, error) {
	p, err := childproc.Start([]string{exe}, childproc.Options{Name: name, Env: env, CPUs: cpus, Stdin: true, Lines: true, Stderr: stderr})
	if err != nil {
		return nil, err
	}
	return &child{name: name, p: p}, nil
}

// pid is the child's process id.
func (c *child) pid() int { return c.p.Pid() }

// send writes one command line.
func (c *child) send(verb string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(c.p.Stdin(), "%s %s\n", verb, b); err != nil {
		return fmt.Errorf("%s: %w (%s)", c.name, err, c.p.ExitReason())
	}
	return nil
}

// expect waits for the answer verb and decodes it into v (may be nil).
func (c *child) expect(verb string, v any, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case l, ok := <-c.p.Lines():
			if !ok {
				<-c.p.Done()
				return fmt.Errorf("%s exited before answering %s (%s)", c.name, verb, c.p.ExitReason())
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

// stop asks the child to quit (closing its input), then kills it after
// grace.
func (c *child) stop(grace time.Duration) error {
	c.send("quit", struct{}{})
	if c.p.Stop(0, grace) {
		return fmt.Errorf("%s did not exit within %v: killed", c.name, grace)
	}
	if err := c.p.Err(); err != nil {
		return fmt.Errorf("%s: %v", c.name, err)
	}
	return nil
}

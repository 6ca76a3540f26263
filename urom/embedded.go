package urom

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/openrdmo/rdmo/internal/childproc"
)

// announcePrefix starts the line a service prints when it listens, so a
// parent that started it knows where to connect.
const announcePrefix = "UROM_LISTEN "

// AnnounceKey is the key of the announce line's JSON form (AnnounceJSON).
const AnnounceKey = "urom_listen"

// Announce prints the line StartEmbedded waits for: "UROM_LISTEN
// host:port".
func Announce(w io.Writer, addr string) {
	fmt.Fprintf(w, "%s%s\n", announcePrefix, addr)
}

// AnnounceJSON prints the announce line as one JSON object,
// {"urom_listen":"host:port"}, for a service whose output is JSON
// (rdmo dpu --log-format json); StartEmbedded reads both forms.
func AnnounceJSON(w io.Writer, addr string) {
	b, _ := json.Marshal(map[string]string{AnnounceKey: addr})
	fmt.Fprintf(w, "%s\n", b)
}

// parseAnnounce reads an announce line of either form.
func parseAnnounce(line string) (string, bool) {
	if a, ok := strings.CutPrefix(line, announcePrefix); ok {
		return a, true
	}
	var m map[string]string
	if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &m) == nil && m[AnnounceKey] != "" {
		return m[AnnounceKey], true
	}
	return "", false
}

// Embedded is a UROM service the host started as its own child process, on
// loopback, for one-machine use without a daemon.
type Embedded struct {
	Addr string
	p    *childproc.Proc
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
	o := childproc.Options{Name: "embedded UROM service", Env: opts.Env, Group: true, Lines: true, Stderr: os.Stderr}
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
		o.ExtraFiles = []*os.File{r}
	}
	p, err := childproc.Start(argv, o)
	if err != nil {
		return nil, fmt.Errorf("urom: start embedded service: %w", err)
	}
	e := &Embedded{p: p}
	addr, err := awaitAnnounce(ctx, p, 30*time.Second)
	if err != nil {
		e.Stop()
		return nil, fmt.Errorf("urom: embedded service did not announce its address: %w", err)
	}
	e.Addr = addr
	go func() { // the rest of its output, as its stderr
		for l := range p.Lines() {
			fmt.Fprintln(os.Stderr, l)
		}
	}()
	return e, nil
}

// awaitAnnounce reads the child's output until its announce line, in
// either form (parseAnnounce), and copies the lines before it to stderr.
func awaitAnnounce(ctx context.Context, p *childproc.Proc, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return "", fmt.Errorf("no %q line within %v", strings.TrimSpace(announcePrefix), timeout)
		}
		// The empty prefix takes each line as it comes.
		l, err := p.AwaitLine(ctx, "", left, nil)
		if err != nil && ctx.Err() == nil && time.Until(deadline) <= 0 {
			return "", fmt.Errorf("no %q line within %v", strings.TrimSpace(announcePrefix), timeout)
		}
		if err != nil {
			return "", err
		}
		if addr, ok := parseAnnounce(l); ok {
			return addr, nil
		}
		fmt.Fprintln(os.Stderr, l)
	}
}

// PID is the service process's id.
func (e *Embedded) PID() int { return e.p.Pid() }

// Stop ends the service (SIGTERM, then SIGKILL of its process group after a
// grace period) and waits for it.
func (e *Embedded) Stop() error {
	e.p.Stop(syscall.SIGTERM, 5*time.Second)
	return nil
}

// Done is closed when the service process exited.
func (e *Embedded) Done() <-chan struct{} { return e.p.Done() }

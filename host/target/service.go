package target

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/urom"
)

// Default timeouts.
const (
	DefaultCommandTimeout = 30 * time.Second // one UROM call or RDMO command
	DefaultStartTimeout   = 30 * time.Second // an embedded service until it listens
)

// Service is a session with a UROM service that spawns RDMO workers: one
// this process dialed (Dial), or one it started as its child process
// (StartEmbedded). It is safe for concurrent use.
type Service struct {
	uc   *urom.Client
	emb  *urom.Embedded
	addr string
	log  *zap.Logger
}

// DialOptions configure Dial.
type DialOptions struct {
	// Secret is the service's shared secret (rdmo dpu --secret-file);
	// nil: the service must not require one.
	Secret []byte
	// Timeout bounds the dial and handshake when ctx has no earlier
	// deadline (default DefaultCommandTimeout).
	Timeout time.Duration
	Logger  *zap.Logger
}

// Dial opens a session with the UROM service at addr. Errors are
// *ServiceError (wrapping urom.ErrAuth, urom.ErrVersion, ...) or, when ctx
// ended, ctx.Err().
func Dial(ctx context.Context, addr string, opts DialOptions) (*Service, error) {
	log := orNop(opts.Logger)
	dctx, cancel := context.WithTimeout(ctx, orDefault(opts.Timeout, DefaultCommandTimeout))
	defer cancel()
	uc, err := urom.Dial(dctx, addr, urom.ClientOptions{ComponentVersion: command.ComponentVersion, Secret: opts.Secret, Logger: log.Named("urom")})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ServiceError{Addr: addr, Err: err}
	}
	return &Service{uc: uc, addr: addr, log: log}, nil
}

// EmbeddedOptions configure StartEmbedded.
type EmbeddedOptions struct {
	// Command runs the service: a program (and arguments) that takes
	// `--listen ADDR --secret-file FILE` and announces its address with
	// urom.Announce, as `rdmo dpu` does. Default: this executable with
	// the argument "dpu".
	Command []string
	// Env is added to the service's environment.
	Env []string
	// StartTimeout bounds each start until the service listens (default
	// DefaultStartTimeout).
	StartTimeout time.Duration
	Logger       *zap.Logger
}

// StartEmbedded starts a UROM service as a child process of this one on a
// free loopback port and opens a session with it. The service gets a fresh
// random secret on a pipe (urom.EmbeddedSecretFile), never in its
// arguments or environment, so that no other local user who reaches its
// port can start or command workers as this process. It dies with this
// process; Close stops it.
func StartEmbedded(ctx context.Context, opts EmbeddedOptions) (*Service, error) {
	log := orNop(opts.Logger)
	fail := func(err error) (*Service, error) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ServiceError{Embedded: true, Err: err}
	}
	secret, err := runSecret()
	if err != nil {
		return fail(err)
	}
	cmd := opts.Command
	if len(cmd) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fail(fmt.Errorf("cannot find this program's executable (to start worker processes): %w", err))
		}
		cmd = []string{exe, "dpu"}
	}
	emb, err := startEmbedded(ctx, cmd, opts, secret)
	if err != nil {
		return fail(err)
	}
	log.Info("embedded UROM service started", zap.String("addr", emb.Addr), zap.Int("pid", emb.PID()))
	s, err := Dial(ctx, emb.Addr, DialOptions{Secret: secret, Logger: log})
	if err != nil {
		emb.Stop()
		return nil, err
	}
	s.emb = emb
	return s, nil
}

// runSecret is a fresh secret for one embedded service: 32 random bytes,
// hex, as a secret file would hold them.
func runSecret() ([]byte, error) {
	var b [32]byte
	if _, err := crand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("random secret: %w", err)
	}
	return []byte(hex.EncodeToString(b[:])), nil
}

// startEmbedded starts the service on a free loopback port. (rdmo dpu's
// --listen does not take port 0, so the port is chosen here; should
// another process take it first, the next attempt picks another.)
func startEmbedded(ctx context.Context, cmd []string, opts EmbeddedOptions, secret []byte) (*urom.Embedded, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var port int
		if port, err = freePort(); err != nil {
			return nil, err
		}
		argv := append(append([]string(nil), cmd...), "--listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			"--secret-file", urom.EmbeddedSecretFile)
		sctx, cancel := context.WithTimeout(ctx, orDefault(opts.StartTimeout, DefaultStartTimeout))
		var emb *urom.Embedded
		emb, err = urom.StartEmbeddedWith(sctx, argv, urom.EmbeddedOptions{Env: opts.Env, Secret: secret})
		cancel()
		if err == nil || ctx.Err() != nil {
			return emb, err
		}
	}
	return nil, err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr is the service's address.
func (s *Service) Addr() string { return s.addr }

// Embedded reports whether the service is this process's child.
func (s *Service) Embedded() bool { return s.emb != nil }

// PID is the embedded service's process id (0 for a dialed service).
func (s *Service) PID() int {
	if s.emb == nil {
		return 0
	}
	return s.emb.PID()
}

// Exited is closed when the embedded service process exited; nil (never
// ready) for a dialed service.
func (s *Service) Exited() <-chan struct{} {
	if s.emb == nil {
		return nil
	}
	return s.emb.Done()
}

// Close ends the session and stops the embedded service. Workers the
// session spawned are stopped by the service when the session ends; stop
// them first (Target.Close) to deregister cleanly.
func (s *Service) Close() error {
	var errs []error
	if err := s.uc.Close(); err != nil {
		errs = append(errs, fmt.Errorf("closing the UROM session: %w", err))
	}
	if s.emb != nil {
		if err := s.emb.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping the embedded UROM service: %w", err))
		}
	}
	return errors.Join(errs...)
}

func orNop(l *zap.Logger) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return l
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

package urom

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/hmacauth"
	"github.com/openrdmo/rdmo/urom/internal/uromwire"
)

// ClientOptions configure a host's connection to a service.
type ClientOptions struct {
	// Component and ComponentVersion are what the host speaks; the service
	// refuses incompatible hosts with ErrVersion.
	Component        string
	ComponentVersion string
	// CallTimeout bounds every request without a context deadline
	// (default 30 s), the hello included.
	CallTimeout time.Duration
	// Secret, if set, is the service's shared secret (Config.Secret):
	// host and service prove it to each other in the hello, and Dial
	// fails with ErrAuth if the service does not (another secret, none,
	// or a service that cannot authenticate). At least MinSecretLen
	// random bytes.
	Secret []byte
	Logger *zap.Logger
}

// Client is a host's session with a UROM service.
type Client struct {
	c    *uromwire.Conn
	opts ClientOptions
	log  *zap.Logger

	mu      sync.Mutex
	pending map[uint64]chan *uromwire.Envelope
	next    uint64
	workers map[uint64]*WorkerProcess
	err     error
	done    chan struct{}
	// shutdown: the service said it is shutting down (ShutdownNotice).
	shutdown bool
}

// Dial connects to the service at addr, checks versions and, with a
// secret, authenticates the service and itself. A context whose deadline
// passed or that was cancelled makes it fail with ctx.Err().
func Dial(ctx context.Context, addr string, opts ClientOptions) (*Client, error) {
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Component == "" {
		opts.Component = "rdmo"
	}
	if err := hmacauth.CheckSecret(opts.Secret); err != nil {
		return nil, fmt.Errorf("urom: ClientOptions.Secret: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("urom: connect to service %s: %w", addr, err)
	}
	c := &Client{c: uromwire.NewConn(nc, 10*time.Second), opts: opts, log: opts.Logger,
		pending: map[uint64]chan *uromwire.Envelope{}, workers: map[uint64]*WorkerProcess{}, done: make(chan struct{}), next: 2}
	reply, err := c.handshake(ctx)
	if err != nil {
		return nil, err
	}
	go c.readLoop()
	c.log.Debug("connected to UROM service", zap.String("addr", addr), zap.String("version", reply.ComponentVersion),
		zap.Bool("authenticated", len(opts.Secret) > 0))
	return c, nil
}

func (c *Client) readLoop() {
	defer close(c.done)
	for {
		env, err := c.c.Read(0)
		if err != nil {
			c.mu.Lock()
			c.err = fmt.Errorf("urom: connection to service lost: %w", err)
			pending := c.pending
			c.pending = map[uint64]chan *uromwire.Envelope{}
			workers := c.workers
			c.mu.Unlock()
			for _, ch := range pending {
				ch <- nil
			}
			reason := "connection to the service lost"
			if c.ShuttingDown() {
				reason = ReasonShuttingDown
			}
			for _, w := range workers {
				w.died(reason)
			}
			return
		}
		if env.Kind == uromwire.KindShutdown && env.Cookie == 0 {
			var n ShutdownNotice
			uromwire.DecodeBody(env.Body, &n)
			c.mu.Lock()
			c.shutdown = true
			c.mu.Unlock()
			c.log.Warn("the UROM service is shutting down: it accepts no new workers and stops this host's workers after its drain timeout",
				zap.Duration("drain_timeout", n.Drain))
			continue
		}
		if env.Kind == uromwire.KindWorkerDied && env.Cookie == 0 {
			var ev WorkerDied
			uromwire.DecodeBody(env.Body, &ev)
			c.mu.Lock()
			w := c.workers[ev.Worker]
			delete(c.workers, ev.Worker)
			c.mu.Unlock()
			if w != nil {
				w.died(ev.Reason)
			}
			continue
		}
		c.mu.Lock()
		ch := c.pending[env.Cookie]
		delete(c.pending, env.Cookie)
		c.mu.Unlock()
		if ch != nil {
			ch <- env
		}
	}
}

// call sends a request and decodes its answer into resp. A context that
// is already done fails the call with ctx.Err() before anything is sent.
func (c *Client) call(ctx context.Context, kind string, req, resp any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	body, err := uromwire.EncodeBody(req)
	if err != nil {
		return err
	}
	ch := make(chan *uromwire.Envelope, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.next++
	cookie := c.next
	c.pending[cookie] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, cookie)
		c.mu.Unlock()
	}
	if err := c.c.Write(&uromwire.Envelope{Cookie: cookie, Kind: kind, Body: body}); err != nil {
		forget()
		return fmt.Errorf("urom: send %s: %w", kind, err)
	}
	// The context's deadline, if it has one, governs; CallTimeout
	// otherwise.
	var expired <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		t := time.NewTimer(c.opts.CallTimeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case env := <-ch:
		if env == nil {
			c.mu.Lock()
			err := c.err
			c.mu.Unlock()
			return err
		}
		if err := uromwire.ErrorOf(env); err != nil {
			return err
		}
		return uromwire.DecodeBody(env.Body, resp)
	case <-expired:
		forget()
		return errorf(uromwire.CodeTimeout, "%s: no answer from the service within %v", kind, c.opts.CallTimeout)
	case <-ctx.Done():
		forget()
		return ctx.Err()
	}
}

// Plugins lists the plugins the service offers.
func (c *Client) Plugins(ctx context.Context) ([]PluginInfo, error) {
	var out []PluginInfo
	err := c.call(ctx, uromwire.KindPlugins, nil, &out)
	return out, err
}

// Workers lists the service's running workers.
func (c *Client) Workers(ctx context.Context) ([]WorkerInfo, error) {
	var out []WorkerInfo
	err := c.call(ctx, uromwire.KindWorkers, nil, &out)
	return out, err
}

// Spawn starts a worker process with the chosen plugins.
func (c *Client) Spawn(ctx context.Context, opts SpawnOptions) (*WorkerProcess, error) {
	var reply SpawnReply
	if err := c.call(ctx, uromwire.KindSpawn, opts, &reply); err != nil {
		return nil, err
	}
	w := &WorkerProcess{ID: reply.Worker, PID: reply.PID, c: c, gone: make(chan struct{})}
	c.mu.Lock()
	c.workers[w.ID] = w
	c.mu.Unlock()
	return w, nil
}

// ShuttingDown reports whether the service said it is shutting down.
func (c *Client) ShuttingDown() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shutdown
}

// Close ends the session; the service stops this host's workers.
func (c *Client) Close() error {
	err := c.c.Close()
	<-c.done
	return err
}

// WorkerProcess is a worker process the host spawned.
type WorkerProcess struct {
	ID  uint64
	PID int
	c   *Client

	once   sync.Once
	gone   chan struct{}
	reason string
}

func (w *WorkerProcess) died(reason string) {
	w.once.Do(func() {
		w.reason = reason
		close(w.gone)
	})
}

// Gone is closed when the worker exited (or the service connection was
// lost); Reason then says why.
func (w *WorkerProcess) Gone() <-chan struct{} { return w.gone }

// Reason says why the worker is gone.
func (w *WorkerProcess) Reason() string {
	select {
	case <-w.gone:
		return w.reason
	default:
		return ""
	}
}

// Err says why the worker is gone, nil while it runs: an error matching
// ErrShuttingDown when the service stopped it on its way down,
// ErrWorkerDied otherwise.
func (w *WorkerProcess) Err() error {
	select {
	case <-w.gone:
	default:
		return nil
	}
	if w.reason == ReasonShuttingDown {
		return errorf(uromwire.CodeShuttingDown, "%s", ReasonShuttingDown)
	}
	return errorf(uromwire.CodeWorkerDied, "worker %d is gone: %s", w.ID, w.reason)
}

// Call sends a command of the given kind to the worker and decodes its
// answer into resp. A command to a dead worker fails with ErrWorkerDied.
func (w *WorkerProcess) Call(ctx context.Context, kind string, req, resp any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := w.Err(); err != nil {
		return err
	}
	body, err := uromwire.EncodeBody(req)
	if err != nil {
		return err
	}
	var raw []byte
	var out uromwire.RawBody
	if err := w.c.call(ctx, uromwire.KindCommand, uromwire.CommandRequest{Worker: w.ID, Kind: kind, Body: body}, &out); err != nil {
		return err
	}
	raw = out
	return uromwire.DecodeBody(raw, resp)
}

// Stop stops the worker.
func (w *WorkerProcess) Stop(ctx context.Context) error {
	err := w.c.call(ctx, uromwire.KindStop, StopRequest{Worker: w.ID}, nil)
	if err != nil && !errors.Is(err, ErrUnknownWorker) {
		return err
	}
	w.died("stopped")
	return nil
}

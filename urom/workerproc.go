package urom

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/zap"
)

// CommandHandler runs worker commands inside a worker process. Handle may be
// called from several goroutines at once.
type CommandHandler interface {
	Handle(ctx context.Context, kind string, body msgpack.RawMessage) (any, error)
	Close() error
}

// WorkerFactory builds a worker process's command handler from its spec.
type WorkerFactory func(ctx context.Context, spec WorkerSpec, log *zap.Logger) (CommandHandler, error)

// kindSpec is the first frame the service sends a new worker process.
const kindSpec = "spec"

// ControlFD is the file descriptor a worker process finds its control
// socket on (the service passes it as the first extra file).
const ControlFD = 3

// fatalCloseWait bounds the close of a component that reported itself
// failed (ReportFatal) before the worker process ends anyway.
const fatalCloseWait = 2 * time.Second

// ServeWorker is the body of a worker process: it reads its spec from the
// control socket, builds its handler, answers commands, and returns when the
// service closes the socket (which is also how a worker notices that the
// service died abruptly) or ctx ends.
func ServeWorker(ctx context.Context, ctl *os.File, factory WorkerFactory, log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	nc, err := net.FileConn(ctl)
	ctl.Close()
	if err != nil {
		return fmt.Errorf("urom worker: control socket: %w", err)
	}
	c := newConn(nc, 10*time.Second)
	defer c.Close()
	env, err := c.read(10 * time.Second)
	if err != nil {
		return fmt.Errorf("urom worker: reading spec: %w", err)
	}
	if env.Kind != kindSpec {
		return fmt.Errorf("urom worker: first frame is %q, want spec", env.Kind)
	}
	var spec WorkerSpec
	if err := decodeBody(env.Body, &spec); err != nil {
		return fmt.Errorf("urom worker: spec: %w", err)
	}
	log = log.With(zap.Uint64("worker", spec.ID))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// What the component reports on its own (ReportPluginFailed, ...)
	// goes to the service, which counts it beyond this process's life.
	ctx = context.WithValue(ctx, eventsKey{}, func(ev workerEvent) {
		body, _ := encodeBody(ev)
		c.write(&envelope{Kind: kindEvent, Body: body})
	})
	var fatal error
	var fatalOnce sync.Once
	ctx = context.WithValue(ctx, fatalKey{}, func(err error) {
		fatalOnce.Do(func() {
			fatal = err
			cancel()
		})
	})
	h, err := factory(ctx, spec, log)
	ready := &envelope{Cookie: env.Cookie, Kind: kindReady}
	if err != nil {
		setError(ready, err)
		c.write(ready)
		return err
	}
	defer func() {
		fatalOnce.Do(func() {}) // fatal is final from here on
		if fatal == nil {
			h.Close()
			return
		}
		// A component that failed may not close cleanly (endpoints
		// whose close waits on peers it cannot hear): give it a moment,
		// then leave, so that the peers see the process gone.
		closed := make(chan struct{})
		go func() {
			h.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(fatalCloseWait):
			log.Warn("worker ends without closing its component", zap.Duration("waited", fatalCloseWait))
		}
	}()
	ready.Body, _ = encodeBody(os.Getpid())
	if err := c.write(ready); err != nil {
		return err
	}
	log.Info("worker ready", zap.Int("pid", os.Getpid()), zap.Int("plugins", len(spec.Plugins)))
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	for {
		env, err := c.read(0)
		if err != nil {
			if ctx.Err() != nil {
				var ferr error
				fatalOnce.Do(func() {}) // fatal is final from here on
				if fatal != nil {
					ferr = fmt.Errorf("urom worker: %w", fatal)
					log.Error("worker ends: its component failed", zap.Error(fatal))
				}
				return ferr
			}
			log.Info("control socket closed: worker exits", zap.Error(err))
			return nil
		}
		if env.Kind != kindCommand {
			reply := &envelope{Cookie: env.Cookie, Kind: env.Kind}
			setError(reply, errorf(codeBadRequest, "worker does not understand %q", env.Kind))
			c.write(reply)
			continue
		}
		go func(env *envelope) {
			var req commandRequest
			reply := &envelope{Cookie: env.Cookie, Kind: kindCommand}
			if err := decodeBody(env.Body, &req); err != nil {
				setError(reply, errorf(codeBadRequest, "malformed command: %v", err))
			} else if resp, err := h.Handle(ctx, req.Kind, req.Body); err != nil {
				setError(reply, err)
			} else if reply.Body, err = encodeBody(resp); err != nil {
				setError(reply, err)
			}
			if err := c.write(reply); err != nil {
				log.Warn("answering a command", zap.Error(err))
			}
		}(env)
	}
}

package service

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/internal/uromwire"
)

// CommandHandler runs worker commands inside a worker process. Handle may be
// called from several goroutines at once.
type CommandHandler interface {
	Handle(ctx context.Context, kind string, body msgpack.RawMessage) (any, error)
	Close() error
}

// WorkerFactory builds a worker process's command handler from its spec.
type WorkerFactory func(ctx context.Context, spec urom.WorkerSpec, log *zap.Logger) (CommandHandler, error)

// uromwire.KindSpec is the first frame the service sends a new worker process.

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
	c := uromwire.NewConn(nc, 10*time.Second)
	defer c.Close()
	env, err := c.Read(10 * time.Second)
	if err != nil {
		return fmt.Errorf("urom worker: reading spec: %w", err)
	}
	if env.Kind != uromwire.KindSpec {
		return fmt.Errorf("urom worker: first frame is %q, want spec", env.Kind)
	}
	var spec urom.WorkerSpec
	if err := uromwire.DecodeBody(env.Body, &spec); err != nil {
		return fmt.Errorf("urom worker: spec: %w", err)
	}
	log = log.With(zap.Uint64("worker", spec.ID))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// What the component reports on its own (ReportPluginFailed, ...)
	// goes to the service, which counts it beyond this process's life.
	ctx = context.WithValue(ctx, eventsKey{}, func(ev workerEvent) {
		body, _ := uromwire.EncodeBody(ev)
		c.Write(&uromwire.Envelope{Kind: uromwire.KindEvent, Body: body})
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
	ready := &uromwire.Envelope{Cookie: env.Cookie, Kind: uromwire.KindReady}
	if err != nil {
		uromwire.SetError(ready, err)
		c.Write(ready)
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
	ready.Body, _ = uromwire.EncodeBody(os.Getpid())
	if err := c.Write(ready); err != nil {
		return err
	}
	log.Info("worker ready", zap.Int("pid", os.Getpid()), zap.Int("plugins", len(spec.Plugins)))
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	for {
		env, err := c.Read(0)
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
		if env.Kind != uromwire.KindCommand {
			reply := &uromwire.Envelope{Cookie: env.Cookie, Kind: env.Kind}
			uromwire.SetError(reply, errorf(uromwire.CodeBadRequest, "worker does not understand %q", env.Kind))
			c.Write(reply)
			continue
		}
		go func(env *uromwire.Envelope) {
			var req uromwire.CommandRequest
			reply := &uromwire.Envelope{Cookie: env.Cookie, Kind: uromwire.KindCommand}
			if err := uromwire.DecodeBody(env.Body, &req); err != nil {
				uromwire.SetError(reply, errorf(uromwire.CodeBadRequest, "malformed command: %v", err))
			} else if resp, err := h.Handle(ctx, req.Kind, req.Body); err != nil {
				uromwire.SetError(reply, err)
			} else if reply.Body, err = uromwire.EncodeBody(resp); err != nil {
				uromwire.SetError(reply, err)
			}
			if err := c.Write(reply); err != nil {
				log.Warn("answering a command", zap.Error(err))
			}
		}(env)
	}
}

package target

import (
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/ucp"
)

// Local is a target's own UCX: a context whose memory RDMO workers write
// into, and a UCP worker (the one CLIENT_INIT names: Options.Address) that
// one goroutine owns and progresses once started — TCP RMA needs the
// target side to progress — and that sleeps in Wait when idle.
type Local struct {
	log  *zap.Logger
	ctx  *ucp.Context
	w    *ucp.Worker
	addr []byte
	mems []*ucp.Memory

	stop    atomic.Bool
	running bool
	done    chan struct{}
}

// LocalOptions configure NewLocal.
type LocalOptions struct {
	// Config is UCX configuration (names without the UCX_ prefix), e.g.
	// {"TLS": "shm,self"}; nil: UCX's defaults and environment.
	Config map[string]string
	// Logger gets the progress goroutine's UCX errors (once each).
	Logger *zap.Logger
}

// NewLocal makes the target's UCX context and worker. Allocate its memory,
// then Start it.
func NewLocal(opts LocalOptions) (*Local, error) {
	log := orNop(opts.Logger)
	ctx, err := ucp.NewContext(ucp.ContextOptions{Name: "rdmo-target", Config: opts.Config})
	if err != nil {
		return nil, err
	}
	w, err := ctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		ctx.Close()
		return nil, err
	}
	addr, err := w.Address()
	if err != nil {
		w.Close()
		ctx.Close()
		return nil, err
	}
	return &Local{log: log, ctx: ctx, w: w, addr: addr, done: make(chan struct{})}, nil
}

// Address is the UCP worker's address, for Options.Address.
func (t *Local) Address() []byte { return t.addr }

// Allocate maps n bytes of UCX-allocated memory (which the shared-memory
// transports reach directly) and returns it zeroed.
func (t *Local) Allocate(n int) (*ucp.Memory, error) {
	m, err := t.ctx.Allocate(n)
	if err != nil {
		return nil, err
	}
	t.mems = append(t.mems, m)
	clear(m.Bytes())
	return m, nil
}

// Start hands the worker to its progress goroutine; from then on only
// Wake is called on it from elsewhere.
func (t *Local) Start() {
	t.running = true
	go t.progress()
}

func (t *Local) progress() {
	defer close(t.done)
	reported := false
	for !t.stop.Load() {
		n, err := t.w.Progress()
		if err != nil && !reported {
			t.log.Warn("target UCX worker", zap.Error(err))
			reported = true
		}
		if n == 0 && !t.stop.Load() {
			if _, err := t.w.Wait(250 * time.Millisecond); err != nil && !reported {
				t.log.Warn("target UCX worker wait", zap.Error(err))
				reported = true
			}
		}
	}
	// The worker is this goroutine's: close it here.
	if err := t.w.Close(); err != nil {
		t.log.Warn("closing the target UCX worker", zap.Error(err))
	}
}

// Close stops the progress goroutine and frees the memory and the context.
// Call it after every Target that registered this memory is closed: no
// worker may write into freed memory.
func (t *Local) Close() error {
	var errs []error
	if t.running {
		t.stop.Store(true)
		t.w.Wake()
		<-t.done
	} else {
		errs = append(errs, t.w.Close())
	}
	for _, m := range t.mems {
		errs = append(errs, m.Close())
	}
	errs = append(errs, t.ctx.Close())
	return errors.Join(errs...)
}

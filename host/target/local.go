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
	begin   chan struct{} // closed by Start or Close
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
	t := &Local{log: log, ctx: ctx, begin: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan error, 1)
	go t.own(ready)
	if err := <-ready; err != nil {
		ctx.Close()
		return nil, err
	}
	return t, nil
}

// own is the worker's goroutine from its birth: UCX binds a worker to the
// thread that made it (ucp.NewWorker locks this goroutine to its thread),
// so it is made, progressed and closed here.
func (t *Local) own(ready chan<- error) {
	defer close(t.done)
	w, err := t.ctx.NewWorker(ucp.WorkerOptions{})
	if err == nil {
		if t.addr, err = w.Address(); err != nil {
			w.Close()
		}
	}
	if err == nil {
		t.w = w
	}
	ready <- err
	if err != nil {
		return
	}
	<-t.begin
	t.progress()
}

// Address is the UCP worker's address, for Options.Address.
func (t *Local) Address() []byte { return t.addr }

// Allocate maps n bytes of UCX-allocated memory (which the shared-memory
// transports reach directly) and returns it zeroed. It asks for huge pages
// (UCX tries hugetlb first; then AdviseHugePages) and falls back to small
// ones where the host has none; PagesOf says which it got.
func (t *Local) Allocate(n int) (*ucp.Memory, error) {
	m, err := t.ctx.Allocate(n)
	if err != nil {
		return nil, err
	}
	t.mems = append(t.mems, m)
	_ = AdviseHugePages(m) // refused where THP is off: small pages, as before
	clear(m.Bytes())
	return m, nil
}

// Start lets the worker's goroutine progress it; from then on only Wake
// is called on it from elsewhere.
func (t *Local) Start() {
	t.running = true
	close(t.begin)
}

func (t *Local) progress() {
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
	t.stop.Store(true)
	if t.running {
		t.w.Wake()
	} else {
		close(t.begin)
	}
	<-t.done
	for _, m := range t.mems {
		errs = append(errs, m.Close())
	}
	errs = append(errs, t.ctx.Close())
	return errors.Join(errs...)
}

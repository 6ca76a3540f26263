package host

import (
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/ucp"
)

// targetUCX is the target's own UCX: a context whose memory the RDMO worker
// writes into, and a worker (the one CLIENT_INIT names) that one goroutine
// owns and progresses — TCP RMA needs the target side to progress — and
// that sleeps in Wait when idle.
type targetUCX struct {
	log  *zap.Logger
	ctx  *ucp.Context
	w    *ucp.Worker
	addr []byte
	mems []*ucp.Memory

	stop    atomic.Bool
	running bool
	done    chan struct{}
}

func newTargetUCX(cfg map[string]string, log *zap.Logger) (*targetUCX, error) {
	ctx, err := ucp.NewContext(ucp.ContextOptions{Name: "rdmo-target", Config: cfg})
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
	return &targetUCX{log: log, ctx: ctx, w: w, addr: addr, done: make(chan struct{})}, nil
}

// allocate maps n bytes of UCX-allocated memory (which the shared-memory
// transports reach directly) and returns it zeroed.
func (t *targetUCX) allocate(n int) (*ucp.Memory, error) {
	m, err := t.ctx.Allocate(n)
	if err != nil {
		return nil, err
	}
	t.mems = append(t.mems, m)
	clear(m.Bytes())
	return m, nil
}

// start hands the worker to its progress goroutine; from then on only
// Wake is called on it from elsewhere.
func (t *targetUCX) start() {
	t.running = true
	go t.progress()
}

func (t *targetUCX) progress() {
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

// close stops the progress goroutine and releases everything. Call it
// after the RDMO worker is gone: it must not write into freed memory.
func (t *targetUCX) close() error {
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

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
	begin   chan struct{} // closed by start or close
	done    chan struct{}
}

func newTargetUCX(cfg map[string]string, log *zap.Logger) (*targetUCX, error) {
	ctx, err := ucp.NewContext(ucp.ContextOptions{Name: "rdmo-target", Config: cfg})
	if err != nil {
		return nil, err
	}
	t := &targetUCX{log: log, ctx: ctx, begin: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan error, 1)
	go t.own(ready)
	if err := <-ready; err != nil {
		ctx.Close()
		return nil, err
	}
	return t, nil
}

// own is the worker's goroutine from its birth: UCX binds a worker to the
// thread that made it, so it is made, progressed and closed here.
func (t *targetUCX) own(ready chan<- error) {
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

// start lets the worker's goroutine progress it; only Wake is called on it
// from elsewhere.
func (t *targetUCX) start() {
	t.running = true
	close(t.begin)
}

func (t *targetUCX) progress() {
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

package e2e_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/internal/testproc"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/plugins/flush"
	"github.com/openrdmo/rdmo/plugins/scatter"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// target plays the target process: it owns a UCX worker (progressed on its
// own goroutine, as TCP RMA needs the target side to progress) and regions
// of memory that the RDMO worker writes into.
type target struct {
	t      testing.TB
	ctx    *ucp.Context
	w      *ucp.Worker
	addr   []byte
	mems   []*ucp.Memory
	stop   chan struct{}
	done   chan struct{}
	worker rdmoWorker
	client uint64
	wAddr  []byte // the RDMO worker's address, from CLIENT_INIT
}

type region struct {
	id  uint64
	mem *ucp.Memory
}

func (r region) base() uint64  { return r.mem.Address() }
func (r region) bytes() []byte { return r.mem.Bytes() }

func handlers(strategy appendop.Strategy) []rdmo.Handler {
	return []rdmo.Handler{
		appendop.New(appendop.Options{Strategy: strategy}),
		flush.New(),
		scatter.New(scatter.Options{}),
	}
}

// rdmoWorker is the RDMO worker under test: in this process, or a worker
// process behind a UROM service.
type rdmoWorker interface {
	Do(ctx context.Context, cmd dpu.Command) (dpu.Notification, error)
	Stats() dpu.Stats
}

// newTarget starts an RDMO worker with the three handlers (the way the
// test's mode says) and a target registered with it as client id 1.
func newTarget(t testing.TB, tr ucptest.Transport, strategy appendop.Strategy) *target {
	return newTargetMode(t, tr, strategy, modeInProcess)
}

func newTargetMode(t testing.TB, tr ucptest.Transport, strategy appendop.Strategy, mode workerMode) *target {
	return newTargetWith(t, tr, func() rdmoWorker { return startWorker(t, tr, strategy, mode) })
}

// newTargetWith registers a target with the worker start makes.
func newTargetWith(t testing.TB, tr ucptest.Transport, start func() rdmoWorker) *target {
	t.Helper()
	ctx := ucptest.NewContext(t, tr)
	tg := &target{t: t, ctx: ctx, stop: make(chan struct{}), done: make(chan struct{}), client: 1}
	ready := make(chan error, 1)
	go tg.progress(ready)
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.close)
	tg.worker = start()
	n := tg.do(dpu.ClientInit{ID: tg.client, Addr: tg.addr})
	tg.wAddr = n.Addr
	return tg
}

// progress is the target worker's goroutine from its birth: UCX binds a
// worker to the thread that made it, so it is made, progressed and closed
// here.
func (tg *target) progress(ready chan<- error) {
	defer close(tg.done)
	w, err := tg.ctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		ready <- err
		return
	}
	defer w.Close()
	if tg.addr, err = w.Address(); err != nil {
		ready <- err
		return
	}
	tg.w = w
	ready <- nil
	for {
		select {
		case <-tg.stop:
			return
		default:
		}
		if n, _ := tg.w.Progress(); n == 0 {
			tg.w.Wait(time.Millisecond)
		}
	}
}

func (tg *target) close() {
	close(tg.stop)
	<-tg.done
	for _, m := range tg.mems {
		m.Close()
	}
}

func (tg *target) do(cmd dpu.Command) dpu.Notification {
	tg.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := tg.worker.Do(ctx, cmd)
	if err != nil {
		tg.t.Fatalf("%T: %v", cmd, err)
	}
	return n
}

// register allocates size bytes of target memory and registers them.
func (tg *target) register(size int) region {
	tg.t.Helper()
	mem, err := tg.ctx.Allocate(size)
	if err != nil {
		tg.t.Fatal(err)
	}
	tg.mems = append(tg.mems, mem)
	packed, err := mem.PackRkey()
	if err != nil {
		tg.t.Fatal(err)
	}
	n := tg.do(dpu.MRReg{Client: tg.client, VA: mem.Address(), Len: uint64(size), PackedRkey: packed})
	return region{id: n.Region, mem: mem}
}

// queue registers a queue region whose first word is its tail, initialised
// to the address just after it (as the reference demo does).
func (tg *target) queue(size int) region {
	r := tg.register(size)
	binary.LittleEndian.PutUint64(r.bytes(), r.base()+8)
	return r
}

func tail(r region) uint64 { return binary.LittleEndian.Uint64(r.bytes()) }

// The test binary doubles as the initiator process (role "initiator") and
// the UROM worker process (role "worker").
func TestMain(m *testing.M) {
	switch testproc.Role() {
	case "initiator":
		os.Exit(initiatorMain())
	case "worker":
		os.Exit(workerProcessMain())
	}
	code := m.Run()
	if pluginPath != "" {
		os.RemoveAll(pluginPath)
	}
	os.Exit(code)
}

// workerEnv is the environment of a UROM worker process: the test binary
// in the worker role, over tr.
func workerEnv(tr ucptest.Transport) []string {
	return append([]string{testproc.RoleEnv + "=worker"}, tr.Env()...)
}

// initiatorProc is an initiator child process.
type initiatorProc struct {
	*testproc.Proc
	addr []byte
	rq   uint64
}

// startInitiator starts an initiator process running the named workload
// against the target's worker and creates its RQ.
func (tg *target) startInitiator(tr ucptest.Transport, env ...string) *initiatorProc {
	t := tg.t
	t.Helper()
	p := &initiatorProc{Proc: testproc.Start(t, "initiator", testproc.Options{
		Env: append(append([]string{"E2E_WORKER=" + hex.EncodeToString(tg.wAddr),
			fmt.Sprintf("E2E_CLIENT=%d", tg.client)}, tr.Env()...), env...),
		Grace: 20 * time.Second,
	})}
	f := p.Must(t, "ADDR", 30*time.Second)
	p.addr, _ = hex.DecodeString(f[0])
	p.rq = tg.do(dpu.RQCreate{Client: tg.client, Addr: p.addr}).RQ
	return p
}

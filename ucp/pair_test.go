package ucp_test

import (
	"errors"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// pair is two workers in one process, driven by the test goroutine, with an
// endpoint from a to b.
type pair struct {
	t    testing.TB
	ctx  *ucp.Context
	a, b *ucp.Worker
	ab   *ucp.Endpoint
}

func newPair(t testing.TB, tr ucptest.Transport) *pair {
	t.Helper()
	return newPairIn(t, ucptest.NewContext(t, tr))
}

// newPairIn is newPair with workers of ctx.
func newPairIn(t testing.TB, ctx *ucp.Context) *pair {
	t.Helper()
	p := &pair{t: t, ctx: ctx}
	var err error
	if p.a, err = ctx.NewWorker(ucp.WorkerOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.a.Close() })
	if p.b, err = ctx.NewWorker(ucp.WorkerOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.b.Close() })
	addr, err := p.b.Address()
	if err != nil {
		t.Fatal(err)
	}
	if p.ab, err = p.a.Connect(addr, ucp.EndpointOptions{Name: "a->b"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.closeEndpoint(p.ab) })
	return p
}

// progress drives both workers until cond holds.
func (p *pair) progress(cond func() bool) {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if _, err := p.a.Progress(); err != nil {
			p.t.Fatal(err)
		}
		if _, err := p.b.Progress(); err != nil {
			p.t.Fatal(err)
		}
		if time.Now().After(deadline) {
			p.t.Fatal("timed out progressing the pair")
		}
	}
}

// done collects completions.
type done struct {
	n    int
	errs []error
	vals map[uint64]uint64
}

func (d *done) Complete(c ucp.Completion) {
	d.n++
	if c.Err != nil {
		d.errs = append(d.errs, c.Err)
	}
	if d.vals == nil {
		d.vals = map[uint64]uint64{}
	}
	d.vals[c.Tag] = c.Value
}

// closeEndpoint closes an endpoint of a gracefully while b keeps
// progressing (a graceful close needs the peer).
func (p *pair) closeEndpoint(ep *ucp.Endpoint) { p.closeWhile(ep) }

// closeEndpointB closes an endpoint of b while a keeps progressing.
func (p *pair) closeEndpointB(ep *ucp.Endpoint) { p.closeWhile(ep) }

// closeWhile closes ep gracefully while both workers progress. Both live on
// the test goroutine's thread (UCX binds a worker to one thread), so the
// close is started and both are progressed until it completes, rather than
// blocking in Close while a second goroutine drives the peer. An endpoint
// that its worker's Close already closed is left alone.
func (p *pair) closeWhile(ep *ucp.Endpoint) {
	p.t.Helper()
	var d done
	if err := ep.StartClose(false, &d, 0); err != nil {
		if !errors.Is(err, ucp.ErrClosed) {
			p.t.Errorf("close %s: %v", ep.Name(), err)
		}
		return
	}
	p.progress(func() bool { return d.n == 1 })
	for _, err := range d.errs {
		p.t.Errorf("close %s: %v", ep.Name(), err)
	}
}

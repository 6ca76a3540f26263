package ucp_test

import (
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
	ctx := ucptest.NewContext(t, tr)
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
// progressing on another goroutine (a graceful close needs the peer).
func (p *pair) closeEndpoint(ep *ucp.Endpoint) { p.closeWhile(ep, p.b) }

// closeEndpointB closes an endpoint of b while a keeps progressing.
func (p *pair) closeEndpointB(ep *ucp.Endpoint) { p.closeWhile(ep, p.a) }

// closeWhile closes ep on the test goroutine while peer, the other worker,
// is progressed on a goroutine of its own until the close returned.
func (p *pair) closeWhile(ep *ucp.Endpoint, peer *ucp.Worker) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				peer.Progress()
			}
		}
	}()
	if err := ep.Close(); err != nil {
		p.t.Errorf("close %s: %v", ep.Name(), err)
	}
	close(stop)
	<-done
}

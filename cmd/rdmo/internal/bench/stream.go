package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// What the RDMO streaming rounds (append, scatter, flush under load)
// share: the end of a stream, the acks of sampled requests, and the
// credits that keep a stream within the worker's in-flight limit.

// endStream ends a streaming round of n requests of size payload bytes
// each: the credit flushes, the final flush, then the sampled acks.
func (p *initProc) endStream(cr *creditor, start time.Time, n, size int) (roundResult, error) {
	if err := cr.drain(); err != nil {
		return roundResult{}, err
	}
	if err := p.flush(); err != nil {
		return roundResult{}, err
	}
	el := time.Since(start)
	lat, err := p.acks.wait(30 * time.Second)
	if err != nil {
		return roundResult{}, err
	}
	return roundResult{Ops: uint64(n), Bytes: uint64(n) * uint64(size), Elapsed: el, Lat: lat}, nil
}

// ackTracker matches the acks of sampled RDMO requests to their send
// times. onAck runs on the RDMO initiator's goroutine. It is armed from
// reset (a streaming round starts) until wait returns: the op rows' Calls
// are acked too, and outside a streaming round their acks must cost the
// loop nothing (no clock reading, lock or map entry per Call).
type ackTracker struct {
	armed   atomic.Bool
	mu      sync.Mutex
	pending map[uint64]time.Time // seq -> send time
	early   map[uint64]time.Time // acks that arrived before sent() ran
	hist    Hist
	err     error
}

func (a *ackTracker) init() { a.reset(); a.armed.Store(false) }

func (a *ackTracker) reset() {
	a.mu.Lock()
	a.pending = map[uint64]time.Time{}
	a.early = map[uint64]time.Time{}
	a.hist = Hist{}
	a.err = nil
	a.mu.Unlock()
	a.armed.Store(true)
}

func (a *ackTracker) onAck(ack wire.AckResponse, _ []byte) {
	if !a.armed.Load() {
		return
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if ack.Status != rdmo.StatusOK && a.err == nil {
		a.err = fmt.Errorf("%s seq %d failed: %v", rdmo.OpName(ack.Op), ack.Seq, ack.Status)
	}
	if t0, ok := a.pending[ack.Seq]; ok {
		a.hist.Add(now.Sub(t0))
		delete(a.pending, ack.Seq)
		return
	}
	a.early[ack.Seq] = now
}

func (a *ackTracker) sent(seq uint64, t0 time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t, ok := a.early[seq]; ok {
		a.hist.Add(t.Sub(t0))
		delete(a.early, seq)
		return
	}
	a.pending[seq] = t0
}

// wait waits until every sampled request was acked and returns their
// latencies.
func (a *ackTracker) wait(timeout time.Duration) (Hist, error) {
	deadline := time.Now().Add(timeout)
	for {
		a.mu.Lock()
		n, err := len(a.pending), a.err
		if n == 0 || err != nil || time.Now().After(deadline) {
			a.armed.Store(false)
			h := a.hist
			a.hist = Hist{}
			a.mu.Unlock()
			if err == nil && n > 0 {
				err = fmt.Errorf("%d sampled requests were never acked", n)
			}
			return h, err
		}
		a.mu.Unlock()
		time.Sleep(100 * time.Microsecond)
	}
}

// creditor keeps an initiator's RDMO requests that the worker may not have
// completed under a credit: the worker fails requests beyond its limit per
// request queue (dpu.Config.MaxInFlightPerRQ, TooManyInFlight), and the
// initiator's send window counts a request only until UCX sent it, so a
// fast stream overruns the worker. Every credit/4 requests the creditor
// queues a FLUSH (FlushAsync); before a request that would put more than
// credit requests past the last answered flush, it waits for the oldest
// flush. Zero credit: no limit.
type creditor struct {
	in     *initiator.Initiator
	credit int
	step   int
	sent   int
	done   int // requests before the last answered flush
	marks  []flushMark
}

type flushMark struct {
	fw   *initiator.FlushWait
	mark int // requests sent before the flush
}

func newCreditor(in *initiator.Initiator, credit int) *creditor {
	return &creditor{in: in, credit: credit, step: max(credit/4, 1)}
}

func (c *creditor) before() error {
	if c.credit <= 0 {
		return nil
	}
	for c.sent-c.done >= c.credit {
		if len(c.marks) == 0 {
			if err := c.issue(); err != nil {
				return err
			}
		}
		if err := c.waitOldest(); err != nil {
			return err
		}
	}
	return nil
}

func (c *creditor) after() error {
	c.sent++
	if c.credit > 0 && c.sent%c.step == 0 {
		return c.issue()
	}
	return nil
}

func (c *creditor) issue() error {
	fw, err := c.in.FlushAsync(nil)
	if err != nil {
		return fmt.Errorf("credit flush: %w", err)
	}
	c.marks = append(c.marks, flushMark{fw, c.sent})
	return nil
}

func (c *creditor) waitOldest() error {
	m := c.marks[0]
	c.marks = c.marks[1:]
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	rsp, err := m.fw.Wait(ctx)
	if err != nil {
		return fmt.Errorf("credit flush: %w", err)
	}
	if rsp.Failed != 0 {
		return fmt.Errorf("credit flush reports %d failed requests (first: %v)", rsp.Failed, rsp.FirstStatus)
	}
	c.done = m.mark
	return nil
}

// drain waits for every credit flush (their answers report failures).
func (c *creditor) drain() error {
	for len(c.marks) > 0 {
		if err := c.waitOldest(); err != nil {
			return err
		}
	}
	return nil
}

package initiator

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// Result is what the worker answered to one Call (docs/PROTOCOL.md
// section 6.4).
type Result struct {
	Op     uint32      // the request's op id
	Seq    uint64      // its arrival sequence number on the connection
	Status rdmo.Status // StatusOK, a catalogue code, or a plugin's own (rdmo.IsUserStatus)
	// Value is the op's u64 result (0 on failure).
	Value uint64
	// Data is the op's result data, at most rdmo.MaxResultData bytes
	// (empty on failure, and from a worker without wire.CapabilityResult).
	// It is the caller's.
	Data []byte
	// Detail is the handler's explanation of a failure, its first
	// rdmo.MaxResultDetail bytes (empty on success, and from a worker
	// without wire.CapabilityResult).
	Detail string
}

// Err is nil for StatusOK, else a *RequestError for the result.
func (r Result) Err() error {
	if r.Status == rdmo.StatusOK {
		return nil
	}
	return &RequestError{Op: r.Op, Seq: r.Seq, Status: r.Status, Detail: r.Detail}
}

// CallWait is an outstanding Call (CallAsync, Driver.Start).
type CallWait struct {
	in  *Initiator
	res Result
	err error
	// once is claimed by whichever of finish and fail settles the call.
	once atomic.Bool
	// sig is set once res and err are final. Its channel is made on
	// demand (Done, and a Wait that parks): a Driver's calls wait by
	// running the loop, so a pipeline of Driver.Start calls allocates
	// nothing per call.
	sig latch
}

// Done is closed when the call has its answer (or failed).
func (c *CallWait) Done() <-chan struct{} { return c.sig.C() }

// Ready reports whether the call has its answer or has failed: Wait (or
// Driver.Wait) would return at once. It never runs the loop, so a caller
// that drives can take every answered call after one Driver.Wait without
// another round.
func (c *CallWait) Ready() bool { return c.sig.isSet() }

// reset makes a settled (or never queued) CallWait ready for another call.
func (c *CallWait) reset(in *Initiator) {
	c.in, c.res, c.err = in, Result{}, nil
	c.once.Store(false)
	c.sig.reset()
}

// ErrNoCall is returned by a Wait for a CallWait that holds no call (the
// zero CallWait, or one whose Driver.Start failed): nothing would ever
// answer it.
var ErrNoCall = errors.New("initiator: Wait for a CallWait that holds no call")

// outstanding reports whether c was queued and is not settled yet.
func (c *CallWait) outstanding() bool { return c.in != nil && !c.once.Load() }

// Wait waits for the answer, ctx, Close or a peer failure. It returns the
// Result and Result.Err() when the worker answered (a failed request is a
// *RequestError matching its status, with the handler's detail); ctx.Err()
// when ctx ended first (the call stays outstanding: Wait again, or let it
// go); ErrClosed or a *PeerFailedError when no answer can come.
//
// Inside a Drive's fn, use Driver.Wait: Wait then returns ErrInsideDrive
// unless the answer is there.
func (c *CallWait) Wait(ctx context.Context) (Result, error) {
	return c.wait(ctx, nil)
}

// wait is Wait; br is as for FlushWait.wait (Call).
func (c *CallWait) wait(ctx context.Context, br *borrower) (Result, error) {
	if c.in == nil {
		return Result{}, ErrNoCall
	}
	if err := c.in.await(&c.sig, ctx, br); err != nil {
		return Result{}, err
	}
	return c.res, c.err
}

// finish runs on the worker goroutine when the ack arrived. data and
// detail point into the message: they are copied.
func (c *CallWait) finish(a wire.AckResponse, data, detail []byte) {
	if c == nil || !c.once.CompareAndSwap(false, true) {
		return
	}
	c.res = Result{Op: a.Op, Seq: a.Seq, Status: a.Status, Value: a.Value, Detail: string(detail)}
	if len(data) > 0 {
		c.res.Data = append([]byte(nil), data...)
	}
	c.err = c.res.Err()
	c.sig.fire()
}

// fail ends a call that gets no answer.
func (c *CallWait) fail(err error) {
	if c == nil || !c.once.CompareAndSwap(false, true) {
		return
	}
	c.err = err
	c.sig.fire()
}

// Call sends a plugin operation with rdmo.FlagAck and waits for its answer:
// op (>= rdmo.OpUserBase), an opaque sub-header of at most 48 bytes and a
// payload (both copied). ctx bounds the whole call (window space and the
// answer). See CallWait.Wait for what it returns. A failed Call is
// reported only here, not on Errors; it is still counted in the next
// flush response, like every failure. Ordering and FENCE are those of
// every request: With(ctx, rdmo.FlagFence).Call fences it.
func (in *Initiator) Call(ctx context.Context, op uint32, sub, payload []byte) (Result, error) {
	return Sender{in: in, ctx: ctx}.Call(op, sub, payload)
}

// CallAsync queues a Call and returns at once (after waiting for window
// space, bounded by ctx), so that many calls can be in flight: pipelining
// dependent-free operations costs one round trip for all of them. The
// answers may complete in any order.
func (in *Initiator) CallAsync(ctx context.Context, op uint32, sub, payload []byte) (*CallWait, error) {
	return Sender{in: in, ctx: ctx}.CallAsync(op, sub, payload)
}

// Call is Initiator.Call with the Sender's flags (rdmo.FlagAck is always
// added) and context.
func (s Sender) Call(op uint32, sub, payload []byte) (Result, error) {
	br := s.in.borrowBegin()
	defer br.end(false)
	c, err := s.CallAsync(op, sub, payload)
	if err != nil {
		return Result{}, err
	}
	return c.wait(s.ctx, &br)
}

// CallAsync is Initiator.CallAsync with the Sender's flags (rdmo.FlagAck is
// always added) and context.
func (s Sender) CallAsync(op uint32, sub, payload []byte) (*CallWait, error) {
	s.flags |= rdmo.FlagAck
	c := &CallWait{in: s.in}
	if _, err := s.user(op, sub, payload, c); err != nil {
		return nil, err
	}
	return c, nil
}

// ResultSupported reports whether a worker with these capabilities (as the
// target passes them out of band) answers with result data and failure
// details; without it a Call still returns status and value.
func ResultSupported(capabilities []string) bool {
	for _, c := range capabilities {
		if c == wire.CapabilityResult {
			return true
		}
	}
	return false
}

package initiator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// ErrInsideDrive is returned by a call made inside a Drive's fn that would
// wait for the progress loop, which is blocked in fn: Drive itself, Flush,
// CallWait.Wait and FlushWait.Wait before their answer, and a call that
// finds the send window full. Inside fn, use the Driver.
var ErrInsideDrive = errors.New("initiator: blocking call inside Drive's fn (use the Driver)")

// ErrDriverDone is returned by a Driver used after its Drive's fn returned.
var ErrDriverDone = errors.New("initiator: Driver used after its Drive returned")

// ErrCallOutstanding is returned by Driver.Start given a CallWait whose
// call has not settled: its storage is still the Initiator's.
var ErrCallOutstanding = errors.New("initiator: Start with a CallWait whose call is outstanding")

// ErrDrivePanicked is matched by the error Drive returns when fn panicked.
var ErrDrivePanicked = errors.New("initiator: Drive's fn panicked")

// driveReq is a Drive waiting for the loop, and then running on it.
type driveReq struct {
	ctx  context.Context
	fn   func(*Driver) error
	done chan error // 1 slot: the loop never waits for the caller
}

// Drive runs fn on the Initiator's progress loop, the goroutine (locked to
// its OS thread) that owns the UCP worker, and returns fn's error. Inside
// fn, the Driver's calls (Call, CallAsync, Wait, Flush) send exactly what
// the Initiator's own methods send, through the same queue, with the same
// results, errors, ordering and FENCE, but wait by running the loop
// themselves: taking and issuing requests, progressing the worker,
// settling answers, until their answer is there. No other thread is
// involved in a round trip, so a dependent conversation (Call, look at
// the result, Call again) costs what the network and the worker cost,
// without the two thread hand-offs per call that a Call from another
// goroutine makes (and without a third thread polling for the answer on
// a machine with few cores).
//
// The cost: while fn runs, the loop runs only inside the Driver's calls.
// Other goroutines' Appends, Flushes and Calls on this Initiator are
// taken, issued and answered whenever fn is in a Driver call, and wait
// while fn computes between calls: keep that short, and do not block in
// fn (no channel waits, locks others hold long, or sleeps). Use Drive for
// a conversation whose next request depends on the last answer; for
// independent calls, CallAsync pipelines them from any goroutine.
//
// ctx bounds the wait for the loop (Drives run one at a time, in call
// order) and every Driver call, which returns ctx.Err() once it ended; nil
// means no limit. Drive returns ErrClosed after Close, and a
// *PeerFailedError after the peer failed; when Close is called while fn
// runs, the Driver's calls return ErrClosed and the loop closes after fn
// returns. If fn panics, Drive returns an error matching ErrDrivePanicked
// and the loop carries on. Called from inside fn, Drive returns
// ErrInsideDrive. fn must not call runtime.Goexit (t.FailNow): it would
// end the progress loop.
func (in *Initiator) Drive(ctx context.Context, fn func(d *Driver) error) error {
	if fn == nil {
		return errors.New("initiator: Drive: fn is nil")
	}
	if in.onLoop() {
		return ErrInsideDrive
	}
	if ctx == nil {
		ctx = context.Background()
	}
	dr := &driveReq{ctx: ctx, fn: fn, done: make(chan error, 1)}
	q := &in.q
	q.Lock()
	if q.closed {
		q.Unlock()
		return ErrClosed
	}
	if q.failed != nil {
		err := q.failed
		q.Unlock()
		return err
	}
	q.drives = append(q.drives, dr)
	q.attn.Store(true)
	q.Unlock()
	in.wake()
	select {
	case err := <-dr.done:
		return err
	case <-ctx.Done():
	}
	q.Lock()
	if i := slices.Index(q.drives, dr); i >= 0 {
		// Not started: withdraw it.
		q.drives = slices.Delete(q.drives, i, i+1)
		q.Unlock()
		return ctx.Err()
	}
	q.Unlock()
	// fn runs (its Driver calls see ctx end) or has run.
	return <-dr.done
}

// onLoop reports whether the caller runs inside a Drive's fn: on the
// progress loop's thread, to which nothing but the loop's goroutine is
// scheduled while it is locked there.
func (in *Initiator) onLoop() bool {
	if in == nil {
		return false
	}
	t := in.driveTID.Load()
	return t != 0 && t == int32(syscall.Gettid())
}

// waitable returns ErrInsideDrive when the caller would wait for done
// inside a Drive's fn, where nothing would close it.
func (in *Initiator) waitable(l *latch) error {
	if in == nil || in.driveTID.Load() == 0 || l.isSet() {
		return nil
	}
	if in.onLoop() {
		return ErrInsideDrive
	}
	return nil
}

// drive runs a Drive's fn on the loop.
func (lp *loop) drive(dr *driveReq) {
	d := &Driver{lp: lp, ctx: dr.ctx, done: dr.ctx.Done(), active: true}
	d.pollFn = d.poll
	lp.driving = true
	lp.in.driveTID.Store(lp.tid)
	err := lp.runFn(d, dr.fn)
	lp.in.driveTID.Store(0)
	lp.driving = false
	d.active = false
	q := &lp.in.q
	q.Lock()
	// take left Drives that came meanwhile and failReq out of attn.
	q.attn.Store(q.closed || q.failReq || len(q.drives) > 0)
	q.Unlock()
	lp.in.stats.drives.Add(1)
	dr.done <- err
}

func (lp *loop) runFn(d *Driver, fn func(*Driver) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			lp.in.log.Error("Drive's fn panicked; the loop carries on", zap.Any("panic", v), zap.Stack("stack"))
			err = fmt.Errorf("%w: %v", ErrDrivePanicked, v)
		}
	}()
	return fn(d)
}

// Driver makes calls from inside a Drive's fn, on the progress loop's own
// thread. It is valid only during fn, and only on fn's goroutine.
type Driver struct {
	lp     *loop
	ctx    context.Context
	done   <-chan struct{}
	pollFn func() error // d.poll, made once
	// sync is Call's CallWait, reused once answered; a call cut short by
	// ctx or Close leaves it outstanding, and the next Call makes another.
	sync   *CallWait
	active bool
	closed bool // the loop saw Close: every call returns ErrClosed
	// queued counts the appends queued since the Driver last ran a loop
	// round (DriverSender.Append).
	queued int
}

// Context is the Drive's context.
func (d *Driver) Context() context.Context { return d.ctx }

// Call is Initiator.Call from inside fn: it sends the plugin operation with
// rdmo.FlagAck and runs the loop until the answer is there, the Drive's
// context ends (ctx.Err(); the call stays outstanding), Close was called
// (ErrClosed) or the peer failed (*PeerFailedError). A failed request is a
// *RequestError matching its status, with the handler's detail.
func (d *Driver) Call(op uint32, sub, payload []byte) (Result, error) {
	return DriverSender{d: d}.Call(op, sub, payload)
}

// CallAsync is Initiator.CallAsync from inside fn: it queues the call and
// returns at once (running the loop while the window or the credits are
// full). Wait for it with d.Wait inside fn; after fn, CallWait.Wait works
// from any goroutine.
func (d *Driver) CallAsync(op uint32, sub, payload []byte) (*CallWait, error) {
	return DriverSender{d: d}.CallAsync(op, sub, payload)
}

// Start is CallAsync into c, storage of the caller's (the zero CallWait
// is ready), so that a pipeline of calls allocates nothing per call: keep
// an array of CallWaits, Start a call in each, and Wait for the oldest
// before you Start the next one in its place. c is the caller's again once
// the call settled (Wait returned its answer or its failure); Start
// refuses a c whose call is still outstanding (ErrCallOutstanding), such
// as one whose Wait ended with the context. CallWait.Wait and Done work
// for it as for CallAsync's.
func (d *Driver) Start(c *CallWait, op uint32, sub, payload []byte) error {
	return DriverSender{d: d}.Start(c, op, sub, payload)
}

// Wait runs the loop until c (from CallAsync, Start, Initiator.CallAsync
// or a Sender) has its answer, and returns what CallWait.Wait returns.
func (d *Driver) Wait(c *CallWait) (Result, error) {
	if err := d.usable(); err != nil {
		return Result{}, err
	}
	if c == nil || c.in == nil {
		return Result{}, ErrNoCall
	}
	return d.wait(c)
}

// Flush is Initiator.Flush from inside fn: it sends a fenced FLUSH and runs
// the loop until its response is there (see FlushWait.Wait for the errors).
func (d *Driver) Flush() (wire.FlushResponse, error) {
	if err := d.usable(); err != nil {
		return wire.FlushResponse{}, err
	}
	fw, err := d.lp.in.flushAsync(d.ctx, d.pollFn)
	if err != nil {
		return wire.FlushResponse{}, err
	}
	for {
		if fw.sig.isSet() {
			return fw.rsp, fw.err
		}
		if err := d.poll(); err != nil {
			return wire.FlushResponse{}, err
		}
	}
}

// With returns a DriverSender whose calls carry flags (rdmo.FlagFence;
// rdmo.FlagAck is always added), as Initiator.With does for a Sender.
func (d *Driver) With(flags uint32) DriverSender { return DriverSender{d: d, flags: flags} }

// DriverSender makes a Driver's calls with per-call flags (Driver.With).
type DriverSender struct {
	d     *Driver
	flags uint32
}

// Call is Driver.Call with the DriverSender's flags.
func (s DriverSender) Call(op uint32, sub, payload []byte) (Result, error) {
	d := s.d
	if err := d.usable(); err != nil {
		return Result{}, err
	}
	c := d.sync
	if c == nil {
		c = &CallWait{in: d.lp.in}
	} else {
		c.reset(d.lp.in)
	}
	d.sync = nil
	if err := s.send(op, sub, payload, c); err != nil {
		d.sync = c // never queued
		return Result{}, err
	}
	res, err := d.wait(c)
	if c.once.Load() {
		// Answered (or failed): nothing refers to it any more but a
		// batch entry whose ack is gone, which never touches it.
		d.sync = c
	}
	return res, err
}

// CallAsync is Driver.CallAsync with the DriverSender's flags.
func (s DriverSender) CallAsync(op uint32, sub, payload []byte) (*CallWait, error) {
	c := new(CallWait)
	if err := s.Start(c, op, sub, payload); err != nil {
		return nil, err
	}
	return c, nil
}

// Start is Driver.Start with the DriverSender's flags.
func (s DriverSender) Start(c *CallWait, op uint32, sub, payload []byte) error {
	if err := s.d.usable(); err != nil {
		return err
	}
	if c == nil {
		return errors.New("initiator: Start with a nil CallWait")
	}
	if c.outstanding() {
		return ErrCallOutstanding
	}
	c.reset(s.d.lp.in)
	if err := s.send(op, sub, payload, c); err != nil {
		c.in = nil // never queued: free to Start again
		return err
	}
	return nil
}

// send queues the call through Sender.user, the path every call takes.
func (s DriverSender) send(op uint32, sub, payload []byte, c *CallWait) error {
	d := s.d
	_, err := Sender{in: d.lp.in, ctx: d.ctx, flags: s.flags | rdmo.FlagAck, poll: d.pollFn}.user(op, sub, payload, c)
	return err
}

func (d *Driver) usable() error {
	switch {
	case d == nil || d.lp == nil:
		return errors.New("initiator: zero Driver (use Initiator.Drive)")
	case !d.active:
		return ErrDriverDone
	case d.closed:
		return ErrClosed
	}
	return nil
}

// wait runs loop rounds until c is settled, preferring an answer that is
// there to the context's end, as CallWait.Wait does.
func (d *Driver) wait(c *CallWait) (Result, error) {
	for !c.once.Load() {
		if err := d.poll(); err != nil {
			if c.once.Load() {
				break
			}
			return Result{}, err
		}
	}
	return c.res, c.err
}

// poll runs one loop round, unless the Drive's context ended or Close was
// called.
func (d *Driver) poll() error {
	if d.closed {
		return ErrClosed
	}
	select {
	case <-d.done:
		return d.ctx.Err()
	default:
	}
	if d.lp.round() {
		d.closed = true
		return ErrClosed
	}
	return nil
}

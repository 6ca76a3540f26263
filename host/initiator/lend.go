package initiator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// Lend is the loan of an AppendLent's payload: the initiator sends
// straight from the caller's buffer, with no copy, and the Lend says when
// the buffer is the caller's again. That is when UCX completed the send
// (the worker has the bytes, or the send failed), not when the append took
// effect: an ack or a FLUSH says that, as for Append. A Lend is the
// caller's, reusable once returned; the zero Lend is ready.
type Lend struct {
	err error
	// lent is set while the initiator holds the buffer; cleared (after
	// err) by whichever path gives it back, exactly once.
	lent atomic.Bool
	mu   sync.Mutex
	// done is made on demand (Done, and Wait once it parks), so a stream
	// of loans whose callers poll Busy allocates nothing per append.
	done     chan struct{}
	returned bool // under mu, as done
	// pool is the LendPool the buffer lies in, told of the return.
	pool *LendPool
}

// ErrLendOutstanding is returned by AppendLent given a Lend whose buffer
// is still lent: the buffer may not be written, let alone lent again,
// before it is returned.
var ErrLendOutstanding = errors.New("initiator: AppendLent with a Lend whose buffer is still lent")

// Busy reports whether the initiator still holds the buffer.
func (l *Lend) Busy() bool { return l.lent.Load() }

// Done is closed when the buffer was returned.
func (l *Lend) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
		if !l.lent.Load() {
			close(l.done)
		}
	}
	return l.done
}

// Err is the send's error once the buffer was returned: nil when UCX sent
// it, else why not (ErrClosed, a *PeerFailedError, ...); a failed send's
// request failed too.
func (l *Lend) Err() error {
	if l.lent.Load() {
		return nil
	}
	return l.err
}

// Wait waits until the buffer is the caller's again, or ctx ends (nil: no
// limit), and returns Err. It polls for a short while before it parks, as
// the wait for an answer does, since a send completes within a round trip.
func (l *Lend) Wait(ctx context.Context) error {
	if !l.lent.Load() {
		return l.err
	}
	spinWhile(l.lent.Load)
	if !l.lent.Load() {
		return l.err
	}
	done := l.Done()
	if ctx == nil {
		<-done
		return l.err
	}
	select {
	case <-done:
		return l.err
	case <-ctx.Done():
		if !l.lent.Load() {
			return l.err
		}
		return ctx.Err()
	}
}

// take marks the buffer lent, from pool p (nil: not a pool's); false if
// it still is.
func (l *Lend) take(p *LendPool) bool {
	if !l.lent.CompareAndSwap(false, true) {
		return false
	}
	l.mu.Lock()
	l.err, l.done, l.returned, l.pool = nil, nil, false, p
	l.mu.Unlock()
	return true
}

// giveBack returns the buffer (with the send's error); nil-safe, so the
// loop calls it for every entry.
func (l *Lend) giveBack(err error) {
	if l == nil {
		return
	}
	l.mu.Lock()
	if l.returned {
		l.mu.Unlock()
		return
	}
	l.returned = true
	l.err = err
	p := l.pool
	l.pool = nil
	l.lent.Store(false)
	if l.done != nil {
		close(l.done)
	}
	l.mu.Unlock()
	if p != nil {
		p.returned()
	}
}

// AppendLent is Append without the copy: data is lent to the initiator
// until l says it was returned (Lend.Wait, Done, Busy). The caller must
// not write data meanwhile; a request the initiator refuses (the error
// return) never took it. l must not be lent already (ErrLendOutstanding).
// For payloads of a few KiB and more, where Append's copy costs as much
// as the send.
func (in *Initiator) AppendLent(ptrAddr, ptrRkey, dataRkey uint64, data []byte, l *Lend) error {
	_, err := Sender{in: in, flags: in.defFlags}.AppendLent(ptrAddr, ptrRkey, dataRkey, data, l)
	return err
}

// AppendLent is Initiator.AppendLent with the Sender's flags and context.
// It returns the request's sequence number, which its ack carries.
func (s Sender) AppendLent(ptrAddr, ptrRkey, dataRkey uint64, data []byte, l *Lend) (uint64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if l == nil {
		return 0, errors.New("initiator: AppendLent without a Lend")
	}
	if len(data) == 0 {
		return 0, fmt.Errorf("initiator: append: %w", rdmo.ErrEmptyAppend)
	}
	return s.lent(&request{
		op:    rdmo.OpAppend,
		flags: s.flags,
		app:   rdmo.AppendHeader{PtrAddr: ptrAddr, PtrRkey: rdmo.RegionID(ptrRkey), DataRkey: rdmo.RegionID(dataRkey)},
	}, data, l)
}

// UserLent is User without the copy: payload is lent to the initiator
// until l says it was returned, exactly as for AppendLent (a payload in a
// LendPool the worker maps, above the rendezvous threshold, is read by
// the worker in place, and the handler sees it as its Request.Payload).
// For plugin ops that carry large payloads.
func (in *Initiator) UserLent(op uint32, sub, payload []byte, l *Lend) error {
	_, err := Sender{in: in, flags: in.defFlags}.UserLent(op, sub, payload, l)
	return err
}

// UserLent is Initiator.UserLent with the Sender's flags and context. It
// returns the request's sequence number, which its ack carries. sub is
// copied.
func (s Sender) UserLent(op uint32, sub, payload []byte, l *Lend) (uint64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if l == nil {
		return 0, errors.New("initiator: UserLent without a Lend")
	}
	if err := checkUser(op, sub); err != nil {
		return 0, err
	}
	if len(payload) == 0 {
		return s.user(op, sub, nil, nil) // nothing to lend
	}
	return s.lent(&request{op: op, flags: s.flags, sub: sub}, payload, l)
}

// UserLent is Initiator.UserLent from inside fn (see Driver.AppendLent).
func (s DriverSender) UserLent(op uint32, sub, payload []byte, l *Lend) (uint64, error) {
	d := s.d
	if err := d.usable(); err != nil {
		return 0, err
	}
	return Sender{in: d.lp.in, ctx: d.ctx, flags: s.flags, poll: d.pollFn}.UserLent(op, sub, payload, l)
}

// lent queues r with the lent payload data: by reference when data lies in
// a LendPool the worker maps and is longer than the rendezvous threshold,
// else from where it is. l is returned when the worker's ack says it read
// the bytes, or the send completed.
func (s Sender) lent(r *request, data []byte, l *Lend) (uint64, error) {
	pool, off := s.in.poolOf(data)
	if pool != nil && !pool.lend() {
		return 0, ErrPoolClosed
	}
	if !l.take(pool) {
		if pool != nil {
			pool.returned()
		}
		return 0, ErrLendOutstanding
	}
	r.data, r.plen, r.lend, r.poll = data, len(data), l, s.poll
	if pool != nil && pool.byRef && len(data) > s.in.byRefMin {
		// The worker reads the bytes in the pool: the ack says when.
		r.byRef, r.ref = true, wire.PoolRef{Pool: pool.id, Offset: off, Len: uint64(len(data))}
		r.flags |= rdmo.FlagAck | rdmo.FlagByRef
		r.plen = wire.PoolRefLen
	}
	seq, err := s.in.enqueue(s.ctx, r)
	if err != nil {
		// Never queued: the buffer was not taken.
		l.giveBack(err)
	}
	return seq, err
}

// AppendLent is Initiator.AppendLent from inside fn: it runs the loop
// while the window or the credits are full, so a caller streaming lent
// buffers on the loop's thread makes no thread hand-off per append.
func (d *Driver) AppendLent(ptrAddr, ptrRkey, dataRkey uint64, data []byte, l *Lend) error {
	_, err := d.With(0).AppendLent(ptrAddr, ptrRkey, dataRkey, data, l)
	return err
}

// AppendLent is Driver.AppendLent with the DriverSender's flags (an
// append gets rdmo.FlagAck only when they have it). It returns the
// request's sequence number, which its ack carries.
func (s DriverSender) AppendLent(ptrAddr, ptrRkey, dataRkey uint64, data []byte, l *Lend) (uint64, error) {
	d := s.d
	if err := d.usable(); err != nil {
		return 0, err
	}
	return Sender{in: d.lp.in, ctx: d.ctx, flags: s.flags, poll: d.pollFn}.AppendLent(ptrAddr, ptrRkey, dataRkey, data, l)
}

// Append is Initiator.Append from inside fn (the payload is copied, as
// there): it runs the loop while the window or the credits are full, and
// once every driveRoundEvery appends, so a stream of small appends made on
// the loop's thread is sent while it is made, with no thread hand-off and
// no other thread polling for it. At saturation that is the cheapest way
// to append: the producer is the loop.
func (d *Driver) Append(ptrAddr, ptrRkey, dataRkey uint64, data []byte) error {
	_, err := d.With(0).Append(ptrAddr, ptrRkey, dataRkey, data)
	return err
}

// driveRoundEvery is how many appends a Driver queues before it runs a
// loop round to send them (one round takes, packs and sends the whole
// run): a round per append would cost a UCX progress call each, a round
// only when the window is full would hold the first appends back for a
// whole window.
const driveRoundEvery = 64

// Append is Driver.Append with the DriverSender's flags (an append gets
// rdmo.FlagAck only when they have it). It returns the request's sequence
// number, which its ack carries.
func (s DriverSender) Append(ptrAddr, ptrRkey, dataRkey uint64, data []byte) (uint64, error) {
	d := s.d
	if err := d.usable(); err != nil {
		return 0, err
	}
	seq, err := Sender{in: d.lp.in, ctx: d.ctx, flags: s.flags, poll: d.pollFn}.Append(ptrAddr, ptrRkey, dataRkey, data)
	if err != nil {
		return 0, err
	}
	if d.queued++; d.queued >= driveRoundEvery {
		d.queued = 0
		// The append is queued whatever the round finds: a context
		// that ended or a Close is reported by the Driver's next call.
		_ = d.poll()
	}
	return seq, nil
}

// WaitLend runs the loop until l's buffer was returned (or the Drive's
// context ended, or Close) and returns Lend.Err.
func (d *Driver) WaitLend(l *Lend) error {
	if err := d.usable(); err != nil {
		return err
	}
	for l.lent.Load() {
		if err := d.poll(); err != nil {
			if !l.lent.Load() {
				break
			}
			return err
		}
	}
	return l.err
}

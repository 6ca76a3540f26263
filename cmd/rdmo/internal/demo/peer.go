package demo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/openrdmo/rdmo/host/oob"
)

// Application error codes on the out-of-band channel (oob.Error.Code).
const (
	codeAborted     oob.ErrorCode = 100 // the sender stopped: interrupted, or its side failed
	codeBadWorkload oob.ErrorCode = 101 // the initiator cannot run the workload it was given
	codeBusy        oob.ErrorCode = 102 // the server already serves an initiator
)

// Barrier ids of the demo flow.
const (
	barrierStart      = 1 // target → initiator: the RQ exists, start
	barrierSeedAppend = 2 // initiator → target: the seed append is flushed; target → initiator: checked
)

// RemoteError is an oob.Error the peer sent: it stopped, and says why.
type RemoteError struct {
	Peer string // "initiator" or "server"
	Msg  oob.Error
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("%s stopped: %s", e.Peer, e.Msg.Message)
}

// busyError: the server turned this initiator away because it already
// serves one. It wraps the server's RemoteError (the server said why, so
// nothing more is explained or sent back).
type busyError struct {
	addr string
	re   *RemoteError
}

func (e *busyError) Error() string { return "server at " + e.addr + " is " + e.re.Msg.Message }
func (e *busyError) Unwrap() error { return e.re }

// peer is the out-of-band connection to the other side, read by one
// goroutine. Messages arrive on msgs; when the connection ends (the peer
// closed it, reset it, or sent an Error) done is closed and err says why.
// The connection closing is how each side learns the other is gone.
type peer struct {
	c      *oob.Conn
	name   string // "initiator" or "server", for messages
	msgs   chan oob.Message
	done   chan struct{}
	err    error // set before done is closed
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newPeer(c *oob.Conn, name string) *peer {
	ctx, cancel := context.WithCancel(context.Background())
	p := &peer{c: c, name: name, msgs: make(chan oob.Message, 16), done: make(chan struct{}), cancel: cancel}
	p.wg.Add(1)
	go p.read(ctx)
	return p
}

func (p *peer) read(ctx context.Context) {
	defer p.wg.Done()
	defer close(p.done)
	for {
		// Receive waits until its context's deadline: the caller's
		// own timers bound each wait, so this one only needs to be far.
		rctx, cancel := context.WithTimeout(ctx, 7*24*time.Hour)
		m, err := p.c.Receive(rctx)
		cancel()
		if err != nil {
			p.err = err
			return
		}
		if e, ok := m.(oob.Error); ok {
			p.err = &RemoteError{Peer: p.name, Msg: e}
			return
		}
		select {
		case p.msgs <- m:
		case <-ctx.Done():
			p.err = ctx.Err()
			return
		}
	}
}

// gone explains the end of the connection.
func (p *peer) gone() error {
	var re *RemoteError
	switch {
	case errors.As(p.err, &re):
		return re
	case errors.Is(p.err, oob.ErrPeerGone), errors.Is(p.err, oob.ErrTruncated):
		return fmt.Errorf("%s went away (out-of-band connection closed): %w", p.name, p.err)
	}
	return fmt.Errorf("out-of-band connection to the %s failed: %w", p.name, p.err)
}

// explainWait is how long a side that saw the other one go away waits for
// an explanation of its own (or from the peer) before it reports the bare
// fact. The wait ends as soon as the peer explains or its connection
// closes, so it only runs out against a peer that is alive and silent. It
// is long because the explanation can trail the failure by seconds on a
// busy machine: a killed worker's initiator saw its endpoint fail 1.6 s
// before the server learned from the UROM service that the worker died
// (1 s was too short, and the client reported a bare endpoint timeout).
const explainWait = 10 * time.Second

// explain adds the peer's side to an error that happened here: if the
// peer stops within explainWait (it sent its reason, or its connection
// closed), that comes first; otherwise err alone.
func (p *peer) explain(err error) error {
	var re *RemoteError
	if err == nil || errors.As(err, &re) {
		return err
	}
	select {
	case <-p.done:
	case <-time.After(explainWait):
		return err
	}
	if errors.Is(p.err, context.Canceled) || errors.Is(p.err, oob.ErrClosed) {
		return err // this side closed it
	}
	if errors.Is(err, p.err) {
		// The error here is the peer's departure already (the initiator
		// was told, PeerFailed): say it once.
		return err
	}
	return fmt.Errorf("%w (here: %v)", p.gone(), err)
}

// next waits for the next message, at most timeout; fail and ctx also end
// the wait, and so does the connection's end (p.gone's error, at once).
func (p *peer) next(ctx context.Context, fail <-chan struct{}, failErr func() error, what string, timeout time.Duration) (oob.Message, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case m := <-p.msgs:
		return m, nil
	default:
	}
	select {
	case m := <-p.msgs:
		return m, nil
	case <-p.done:
		select {
		case m := <-p.msgs:
			return m, nil
		default:
		}
		// The connection closed: act now. Whether this side has a
		// better explanation is the caller's to find out (server.next
		// asks its worker), not a fixed wait's.
		select {
		case <-fail:
			return nil, failErr()
		default:
		}
		return nil, p.gone()
	case <-fail:
		return nil, failErr()
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, fmt.Errorf("no %s from the %s within %v", what, p.name, timeout)
	}
}

// ended reports whether the connection has ended (done is closed).
func (p *peer) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// send sends m, bounded by the connection's own timeout.
func (p *peer) send(ctx context.Context, m oob.Message) error {
	if err := p.c.Send(ctx, m); err != nil {
		return fmt.Errorf("out-of-band send to the %s: %w", p.name, err)
	}
	return nil
}

// abort tells the peer this side stopped, best effort.
func (p *peer) abort(code oob.ErrorCode, msg string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = p.c.Send(ctx, oob.Error{Code: code, Message: msg})
}

// close closes the connection and waits for the reader.
func (p *peer) close() {
	p.cancel()
	p.c.Close()
	p.wg.Wait()
}

// closeAfterPeer waits (briefly) for the peer to close its end first, so
// that the last message this side sent is not lost to a reset, then closes.
func (p *peer) closeAfterPeer(wait time.Duration) {
	select {
	case <-p.done:
	case <-time.After(wait):
	}
	p.close()
}

// authHint turns an authentication failure into one clear line.
func authHint(err error) error {
	if errors.Is(err, oob.ErrAuth) {
		return fmt.Errorf("out-of-band authentication failed: %w (both sides need the same --secret-file)", err)
	}
	return err
}

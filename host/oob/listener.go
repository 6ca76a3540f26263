package oob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/channel"
)

// Listener accepts out-of-band connections. A background goroutine accepts
// TCP connections and hands each to one Accept call, which runs the
// handshake; it ends when the Listener is closed.
type Listener struct {
	ln    net.Listener
	opts  Options
	conns chan accepted
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

type accepted struct {
	nc  net.Conn
	err error
}

// Listen listens on the TCP address addr ("host:port"; port 0 picks one,
// see Addr). The reference uses port 18515.
func Listen(addr string, opts Options) (*Listener, error) {
	o, err := opts.normalize(RoleTarget)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("oob: listen: %w", err)
	}
	l := &Listener{ln: ln, opts: o, conns: make(chan accepted), done: make(chan struct{})}
	l.wg.Add(1)
	go l.loop()
	o.Logger.Debug("oob: listening", zap.Stringer("addr", ln.Addr()),
		zap.Bool("secret", len(o.Secret) > 0))
	return l, nil
}

func (l *Listener) loop() {
	defer l.wg.Done()
	backoff := time.Duration(0)
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// E.g. out of file descriptors: report it, back off.
			select {
			case l.conns <- accepted{err: err}:
			case <-l.done:
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		select {
		case l.conns <- accepted{nc: nc}:
		case <-l.done:
			nc.Close()
			return
		}
	}
}

// Accept waits for a peer and runs the handshake with it (bounded by
// Options.Timeout and ctx). Errors concerning one peer are a
// *ConnError with the peer's address (the listener is still good: call Accept again); a closed
// listener gives an error matching ErrClosed. Accept is safe for concurrent
// use, so several handshakes can run at once.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("oob: accept: %w", err)
	}
	select {
	case a := <-l.conns:
		if a.err != nil {
			return nil, fmt.Errorf("oob: accept: %w", a.err)
		}
		remote := a.nc.RemoteAddr().String()
		c := newConn(a.nc, l.opts)
		if err := c.handshake(ctx, sideListener); err != nil {
			return nil, channel.Handshake(protoName, remote, err, c.authenticated)
		}
		return c, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("oob: accept: %w", ctx.Err())
	case <-l.done:
		return nil, &ConnError{Proto: protoName, Kind: channel.KindClosed, Op: "accept"}
	}
}

// Addr is the address listened on.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops listening and waits for the background goroutine to end.
// Connections already accepted are not affected.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.ln.Close()
		l.wg.Wait()
	})
	return err
}

// Dial connects to a listener at addr and runs the handshake, all within
// ctx and Options.Timeout. A failure after the TCP connection was made is a
// *ConnError with the peer's address.
func Dial(ctx context.Context, addr string, opts Options) (*Conn, error) {
	o, err := opts.normalize(RoleInitiator)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: o.Timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("oob: dial %s: %w", addr, err)
	}
	c := newConn(nc, o)
	if err := c.handshake(ctx, sideDialer); err != nil {
		return nil, channel.Handshake(protoName, addr, err, c.authenticated)
	}
	return c, nil
}

// AcceptEither is Accept for a port that serves reference initiators too
// (the DOCA demo's client, which speaks the reference exchange, not this
// protocol): it reads the dialer's first DetectLen bytes before sending
// anything (an rdmo dialer sends its Hello first, a reference one its
// first message's length), and then either runs the handshake (c) or reads
// the reference initiator's first message, its worker address (r). Exactly
// one of c and r is set when err is nil.
//
// A listener with a secret refuses reference initiators (they cannot
// authenticate): that, first bytes that are neither protocol, a length over
// RefMaxLen, a peer that closes mid-message or stays silent past
// Options.Timeout are *ConnErrors with the peer's address, PreAuth
// (the listener is still good).
func (l *Listener) AcceptEither(ctx context.Context) (c *Conn, r *RefConn, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("oob: accept: %w", err)
	}
	var a accepted
	select {
	case a = <-l.conns:
		if a.err != nil {
			return nil, nil, fmt.Errorf("oob: accept: %w", a.err)
		}
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("oob: accept: %w", ctx.Err())
	case <-l.done:
		return nil, nil, &ConnError{Proto: protoName, Kind: channel.KindClosed, Op: "accept"}
	}
	remote := a.nc.RemoteAddr().String()
	fail := func(err error) (*Conn, *RefConn, error) {
		a.nc.Close()
		// Debug: the caller logs the error (one line per bad peer).
		l.opts.Logger.Debug("oob: handshake failed", zap.String("remote", remote), zap.Error(err))
		return nil, nil, channel.Handshake(protoName, remote, err, false)
	}
	deadline := time.Now().Add(l.opts.Timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	first := make([]byte, DetectLen)
	stop := context.AfterFunc(ctx, func() { a.nc.SetReadDeadline(aLongTimeAgo) })
	a.nc.SetReadDeadline(deadline)
	n, rerr := io.ReadFull(a.nc, first)
	stop()
	if rerr != nil {
		switch {
		case ctx.Err() != nil:
			return fail(ctx.Err())
		case errors.Is(rerr, os.ErrDeadlineExceeded):
			return fail(errTimeout("handshake: the peer sent nothing", l.opts.Timeout))
		case n > 0:
			return fail(&ConnError{Proto: protoName, Kind: channel.KindTruncated, Got: n, Want: DetectLen, Err: rerr})
		}
		return fail(format(Version).IOError("handshake", rerr, 0, DetectLen))
	}
	detected, err := Detect(first)
	if err != nil {
		return fail(err)
	}
	if detected == ProtocolReference {
		rc, err := acceptRef(ctx, a.nc, first, l.opts, deadline)
		if err != nil {
			return fail(err)
		}
		if len(l.opts.Secret) > 0 {
			// Its first message was read whole (at most RefMaxLen
			// bytes, within the deadline), so the close is a clean
			// end of stream, not a reset: the peer reads that it was
			// turned away.
			rc.Close()
			return fail(&RefError{Reason: "a reference (DOCA) initiator cannot authenticate, and this side requires a shared secret"})
		}
		l.opts.Logger.Debug("oob: reference initiator accepted", zap.String("remote", remote), zap.Int("address_len", len(rc.first)))
		return nil, rc, nil
	}
	a.nc.SetReadDeadline(time.Time{})
	conn := newConn(a.nc, l.opts)
	conn.fr.R = io.MultiReader(bytes.NewReader(first), a.nc)
	if err := conn.handshake(ctx, sideListener); err != nil {
		return nil, nil, channel.Handshake(protoName, remote, err, conn.authenticated)
	}
	conn.fr.R = a.nc // the detected bytes are consumed: read the socket directly
	return conn, nil, nil
}

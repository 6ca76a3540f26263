package oob

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/channel"
)

// Conn is an established (handshaken and, with a secret, authenticated)
// out-of-band connection. One goroutine may Send while another Receives;
// concurrent Sends (or Receives) are serialized. Close may be called at any
// time and unblocks both.
//
// Errors: a Send rejected before writing (nil, unregistered, handshake-only
// or oversize message) leaves the connection usable, and so does a Receive
// that returns an error matching ErrUnexpected or ErrMalformed (the frame was
// consumed whole) or that timed out or was cancelled before the first byte
// of a frame arrived (nothing was consumed). Every other error leaves the
// connection closed; later calls return an error matching the same
// sentinel.
type Conn struct {
	nc   net.Conn
	opts Options
	log  *zap.Logger

	peerRole      Role
	authenticated bool
	hsDeadline    time.Time // non-zero during the handshake: one deadline for all of it

	rmu sync.Mutex // serializes reads
	fr  channel.Reader
	wmu sync.Mutex // serializes writes

	mu     sync.Mutex
	broken error // first fatal error
	closed bool  // Close was called
}

func newConn(nc net.Conn, opts Options) *Conn {
	c := &Conn{nc: nc, opts: opts}
	c.log = opts.Logger.With(
		zap.String("local", nc.LocalAddr().String()),
		zap.String("remote", nc.RemoteAddr().String()),
		zap.Stringer("role", opts.Role))
	c.fr = channel.Reader{R: nc, Format: format(opts.version)}
	return c
}

// Send writes one application message, within Options.Timeout (or the
// context's deadline if earlier). Cancelling ctx unblocks it.
func (c *Conn) Send(ctx context.Context, msg Message) error {
	b, err := encodeFrame(c.opts.version, msg, c.opts.MaxBody)
	if err != nil {
		return err
	}
	if handshakeType(msg.MessageType()) {
		return fmt.Errorf("oob: send: %v is a handshake message", msg.MessageType())
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.write(ctx, "send", b); err != nil {
		return err
	}
	if ce := c.log.Check(zap.DebugLevel, "oob: sent"); ce != nil {
		ce.Write(zap.Stringer("type", msg.MessageType()), zap.Int("bytes", len(b)))
	}
	return nil
}

// Receive reads the next application message. It returns the message as a
// value of its struct type (WorkerInfo, Done, ...); use a type switch, or
// Expect. An Error message from the peer is returned as a message, not as
// an error.
//
// It waits for the message until the context's deadline if it has one,
// else for Options.Timeout; once a frame has started, the rest must arrive
// within Options.Timeout. Cancelling ctx unblocks it.
func (c *Conn) Receive(ctx context.Context) (Message, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	f, err := c.read(ctx, "receive", uint32(c.opts.MaxBody))
	if err != nil {
		return nil, err
	}
	if handshakeType(frameType(f)) {
		return nil, errUnexpected(frameType(f), 0)
	}
	msg, err := decodeBody(frameType(f), f.Body)
	if err != nil {
		c.log.Debug("oob: bad frame", zap.Error(err))
		return nil, err
	}
	if ce := c.log.Check(zap.DebugLevel, "oob: received"); ce != nil {
		ce.Write(zap.Stringer("type", frameType(f)), zap.Int("bytes", len(f.Raw)))
	}
	return msg, nil
}

// Expect receives the next message and requires it to be a T. If the peer
// sent an Error instead (and T is not Error), the Error is returned as the
// error; any other type is an error matching ErrUnexpected.
func Expect[T Message](ctx context.Context, c *Conn) (T, error) {
	var zero T
	msg, err := c.Receive(ctx)
	if err != nil {
		return zero, err
	}
	if m, ok := msg.(T); ok {
		return m, nil
	}
	if e, ok := msg.(Error); ok {
		return zero, e
	}
	return zero, errUnexpected(msg.MessageType(), zero.MessageType())
}

// Close closes the connection. It unblocks Send and Receive, which return
// an error matching ErrClosed. Close the connection after the peer's last
// message has been received: closing with unread data makes TCP reset the
// connection, and the peer may then lose what was sent last.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	broken := c.broken != nil
	c.mu.Unlock()
	err := c.nc.Close()
	if broken {
		return nil // already closed by fail
	}
	return err
}

// PeerRole is the role the peer announced in its Hello.
func (c *Conn) PeerRole() Role { return c.peerRole }

// Authenticated reports whether the mutual authentication ran (and, since
// the connection exists, succeeded).
func (c *Conn) Authenticated() bool { return c.authenticated }

// LocalAddr is the local TCP address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// RemoteAddr is the peer's TCP address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// usable returns the reason the connection cannot be used, or nil.
func (c *Conn) usable(op string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return &ConnError{Proto: protoName, Kind: channel.KindClosed, Op: op}
	}
	if c.broken != nil {
		return fmt.Errorf("oob: %s: connection unusable after an earlier error: %w", op, c.broken)
	}
	return nil
}

// fail records a fatal error and closes the socket.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	first := c.broken == nil && !c.closed
	if c.broken == nil {
		c.broken = err
	}
	c.mu.Unlock()
	if first {
		c.nc.Close()
	}
}

var aLongTimeAgo = time.Unix(1, 0)

// opDeadline arms the socket deadline of one operation and makes context
// cancellation move it into the past, without racing a later extension.
type opDeadline struct {
	set       func(time.Time) error
	mu        sync.Mutex
	cancelled bool
	stop      func() bool
	fired     chan struct{}
}

func armDeadline(ctx context.Context, set func(time.Time) error, at time.Time) *opDeadline {
	d := &opDeadline{set: set, fired: make(chan struct{})}
	set(at)
	d.stop = context.AfterFunc(ctx, func() {
		d.mu.Lock()
		d.cancelled = true
		d.set(aLongTimeAgo)
		d.mu.Unlock()
		close(d.fired)
	})
	return d
}

// extend moves the deadline unless the context was cancelled.
func (d *opDeadline) extend(at time.Time) {
	d.mu.Lock()
	if !d.cancelled {
		d.set(at)
	}
	d.mu.Unlock()
}

// done disarms the cancellation and reports whether it fired.
func (d *opDeadline) done() bool {
	if !d.stop() {
		<-d.fired
	}
	return d.cancelled
}

// deadlines returns the deadline for the first byte of a frame and the
// function giving the deadline for the rest of it (and for a write). During
// the handshake both are the handshake's single deadline. Otherwise a frame
// must complete within Timeout of its first byte (or by the context's
// deadline if earlier), and the wait for the first byte ends at the
// context's deadline if it has one, else after Timeout.
func (c *Conn) deadlines(ctx context.Context) (wait time.Time, frame func() time.Time) {
	if !c.hsDeadline.IsZero() {
		return c.hsDeadline, func() time.Time { return c.hsDeadline }
	}
	ctxDL, hasCtxDL := ctx.Deadline()
	frame = func() time.Time {
		t := time.Now().Add(c.opts.Timeout)
		if hasCtxDL && ctxDL.Before(t) {
			t = ctxDL
		}
		return t
	}
	if hasCtxDL {
		return ctxDL, frame
	}
	return frame(), frame
}

// read reads one frame with the body limit given. Outside the handshake a
// failure fails the connection, unless nothing of the frame was consumed
// (timeout or cancellation before its first byte). During the handshake
// the caller fails the connection (it may first drain the body of a hello
// of another version). On a prefix-level error (magic, version, size) the
// returned frame holds the prefix.
func (c *Conn) read(ctx context.Context, op string, limit uint32) (*channel.Frame, error) {
	if err := c.usable(op); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("oob: %s: %w", op, err)
	}
	inHandshake := !c.hsDeadline.IsZero()
	wait, frameDL := c.deadlines(ctx)
	d := armDeadline(ctx, c.nc.SetReadDeadline, wait)
	c.fr.OnFirst = nil
	if !inHandshake {
		c.fr.OnFirst = func() { d.extend(frameDL()) }
	}
	f, err := c.fr.Read(limit)
	cancelled := d.done()
	c.fr.OnFirst = nil
	if err == nil {
		return f, nil
	}
	if !(errors.Is(err, ErrBadMagic) || errors.Is(err, ErrVersion) || errors.Is(err, ErrOversize)) {
		err = c.ioError(ctx, op, err, cancelled, c.fr.Got, c.fr.Want)
		if c.fr.Got == 0 && recoverable(err) && !inHandshake {
			return nil, err
		}
	}
	if !inHandshake {
		c.fail(err)
	}
	return f, err
}

// write writes b whole. A timeout or cancellation before any byte was
// written leaves the connection usable; any other failure fails it.
func (c *Conn) write(ctx context.Context, op string, b []byte) error {
	if err := c.usable(op); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("oob: %s: %w", op, err)
	}
	_, frameDL := c.deadlines(ctx)
	d := armDeadline(ctx, c.nc.SetWriteDeadline, frameDL())
	n, err := c.nc.Write(b)
	cancelled := d.done()
	if err == nil {
		return nil
	}
	err = c.ioError(ctx, op, err, cancelled, n, len(b))
	if n == 0 && recoverable(err) && c.hsDeadline.IsZero() {
		return err
	}
	c.fail(err)
	return err
}

// recoverable errors consumed nothing of a frame when they happen before
// its first byte.
func recoverable(err error) bool {
	return errors.Is(err, ErrTimeout) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded)
}

// ioError classifies a read or write error.
func (c *Conn) ioError(ctx context.Context, op string, err error, cancelled bool, got, want int) error {
	if cancelled {
		return fmt.Errorf("oob: %s: %w", op, ctx.Err())
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			return fmt.Errorf("oob: %s: %w", op, context.DeadlineExceeded)
		}
		return errTimeout(op, c.opts.Timeout)
	}
	if errors.Is(err, net.ErrClosed) {
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return &ConnError{Proto: protoName, Kind: channel.KindClosed, Op: op}
		}
	}
	if e := c.fr.Format.IOError(op, err, got, want); e != err {
		return e
	}
	return fmt.Errorf("oob: %s: %w", op, err)
}

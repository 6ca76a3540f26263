package oob

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/channel"
)

// The reference's out-of-band exchange (NVIDIA DOCA 3.0's urom_rdmo demo;
// docs/PROTOCOL.md, "The reference out-of-band exchange"): one TCP
// connection, a sequence of exchanges; in each, a side writes an 8-byte
// little-endian length (a C size_t on x86-64 and Arm64) and that many
// bytes, then reads the peer's. Length 0 is no data; over RefMaxLen is
// refused. There is no greeting, version or authentication.
const (
	// RefLenSize is the size of a reference message's length prefix.
	RefLenSize = 8
	// RefMaxLen is the largest reference message accepted (or sent).
	RefMaxLen = 1024
	// DetectLen is how many bytes Detect needs.
	DetectLen = RefLenSize
)

// Protocol is what a peer speaks on the out-of-band port.
type Protocol uint8

const (
	// ProtocolRDMO is this package's framed protocol (it starts with Magic).
	ProtocolRDMO Protocol = 1
	// ProtocolReference is the reference's length-prefixed exchange.
	ProtocolReference Protocol = 2
)

func (p Protocol) String() string {
	switch p {
	case ProtocolRDMO:
		return "rdmo"
	case ProtocolReference:
		return "reference"
	}
	return fmt.Sprintf("Protocol(%d)", uint8(p))
}

// ErrReference matches every failure of the reference exchange: a length
// over RefMaxLen, first bytes that are neither protocol, a truncated
// message. (A peer that closed or went silent matches ErrPeerGone or
// ErrTimeout instead.)
var ErrReference = errors.New("oob: bad reference exchange")

// RefError is a failure of the reference exchange (see ErrReference).
type RefError struct {
	Reason string
}

func (e *RefError) Error() string        { return "oob: reference exchange: " + e.Reason }
func (e *RefError) Is(target error) bool { return target == ErrReference }

// Detect tells from the first DetectLen bytes a dialer sent which protocol
// it speaks. An rdmo peer's first frame starts with Magic; a reference
// initiator writes its first message's length first, a little-endian u64
// of at most RefMaxLen (so its first four bytes are never Magic). Anything
// else is a *RefError.
func Detect(first []byte) (Protocol, error) {
	if len(first) < DetectLen {
		return 0, &RefError{Reason: fmt.Sprintf("%d bytes are too few to tell the protocol (%d needed)", len(first), DetectLen)}
	}
	if string(first[:len(Magic)]) == Magic {
		return ProtocolRDMO, nil
	}
	n := binary.LittleEndian.Uint64(first)
	if n > RefMaxLen {
		return 0, &RefError{Reason: fmt.Sprintf("first bytes % x: neither the rdmo magic nor a reference length (%d > %d)", first[:DetectLen], n, RefMaxLen)}
	}
	return ProtocolReference, nil
}

// readRef reads one reference message from r: the length, checked before
// anything is allocated, then the bytes. An EOF before the first byte is
// io.EOF; a short message is a *RefError.
func readRef(r io.Reader) ([]byte, error) {
	var lb [RefLenSize]byte
	n, err := io.ReadFull(r, lb[:])
	if err != nil {
		if err == io.ErrUnexpectedEOF {
			return nil, &RefError{Reason: fmt.Sprintf("the peer closed the connection after %d of the %d bytes of a length", n, RefLenSize)}
		}
		return nil, err
	}
	l := binary.LittleEndian.Uint64(lb[:])
	if l > RefMaxLen {
		return nil, &RefError{Reason: fmt.Sprintf("message length %d exceeds %d", l, RefMaxLen)}
	}
	if l == 0 {
		return nil, nil
	}
	b := make([]byte, l)
	if n, err := io.ReadFull(r, b); err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return nil, &RefError{Reason: fmt.Sprintf("the peer closed the connection after %d of the %d bytes of a message", n, l)}
		}
		return nil, err
	}
	return b, nil
}

// appendRef appends the encoding of one reference message to dst.
func appendRef(dst, msg []byte) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(len(msg)))
	return append(dst, msg...)
}

// decodeRef decodes exactly one reference message from b; the unit the
// fuzz target exercises.
func decodeRef(b []byte) ([]byte, error) {
	r := bytes.NewReader(b)
	m, err := readRef(r)
	if err != nil {
		return nil, err
	}
	if r.Len() != 0 {
		return nil, &RefError{Reason: fmt.Sprintf("%d bytes after the message", r.Len())}
	}
	return m, nil
}

// RefConn is a connection speaking the reference exchange. Exchange is
// what both reference programs do at every step; Send and Receive are its
// halves, for a side whose reply depends on what it received. Every read
// and write has a deadline (the context's, else Options.Timeout). Any
// failure closes the connection. Not for concurrent use, except Close.
type RefConn struct {
	nc      net.Conn
	r       io.Reader
	timeout time.Duration
	log     *zap.Logger
	first   []byte // the dialer's first message (accepted connections)

	mu     sync.Mutex
	closed bool
}

// First is the first message of an accepted reference initiator: its UCP
// worker address (Accept read it whole before returning the connection).
func (c *RefConn) First() []byte { return c.first }

// RemoteAddr is the peer's TCP address.
func (c *RefConn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Close closes the connection.
func (c *RefConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.nc.Close()
}

func (c *RefConn) deadline(ctx context.Context) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(c.timeout)
}

// Send writes one message (nil or empty: length 0).
func (c *RefConn) Send(ctx context.Context, msg []byte) error {
	if len(msg) > RefMaxLen {
		return &RefError{Reason: fmt.Sprintf("message of %d bytes exceeds %d", len(msg), RefMaxLen)}
	}
	stop := context.AfterFunc(ctx, func() { c.nc.SetWriteDeadline(aLongTimeAgo) })
	defer stop()
	c.nc.SetWriteDeadline(c.deadline(ctx))
	if _, err := c.nc.Write(appendRef(make([]byte, 0, RefLenSize+len(msg)), msg)); err != nil {
		c.Close()
		return c.ioErr(ctx, "send", err)
	}
	return nil
}

// Receive reads one message (nil for length 0).
func (c *RefConn) Receive(ctx context.Context) ([]byte, error) {
	stop := context.AfterFunc(ctx, func() { c.nc.SetReadDeadline(aLongTimeAgo) })
	defer stop()
	c.nc.SetReadDeadline(c.deadline(ctx))
	m, err := readRef(c.r)
	if err != nil {
		c.Close()
		return nil, c.ioErr(ctx, "receive", err)
	}
	return m, nil
}

// Exchange sends msg, then receives the peer's message.
func (c *RefConn) Exchange(ctx context.Context, msg []byte) ([]byte, error) {
	if err := c.Send(ctx, msg); err != nil {
		return nil, err
	}
	return c.Receive(ctx)
}

func (c *RefConn) ioErr(ctx context.Context, op string, err error) error {
	var re *RefError
	switch {
	case errors.As(err, &re):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("oob: reference %s: %w", op, ctx.Err())
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			return fmt.Errorf("oob: reference %s: %w", op, context.DeadlineExceeded)
		}
		return errTimeout("reference "+op, c.timeout)
	}
	if errors.Is(err, io.EOF) || channel.IsReset(err) {
		return &ConnError{Proto: protoName, Kind: channel.KindPeerGone, Op: "reference " + op, Err: err}
	}
	return fmt.Errorf("oob: reference %s: %w", op, err)
}

// DialReference connects to a reference target (a DOCA urom_rdmo server,
// or rdmo's, which detects the protocol) at addr. Nothing is exchanged
// yet: the first Exchange sends the initiator's worker address.
func DialReference(ctx context.Context, addr string, opts Options) (*RefConn, error) {
	o, err := opts.normalize(RoleInitiator)
	if err != nil {
		return nil, err
	}
	if len(o.Secret) > 0 {
		return nil, errors.New("oob: the reference exchange has no authentication: no secret can be used with it")
	}
	d := net.Dialer{Timeout: o.Timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("oob: dial %s: %w", addr, err)
	}
	return &RefConn{nc: nc, r: nc, timeout: o.Timeout, log: o.Logger}, nil
}

// acceptRef finishes accepting a reference initiator whose first DetectLen
// bytes (its first message's length) were read already: it reads the rest
// of that message, its UCP worker address, which must not be empty.
func acceptRef(ctx context.Context, nc net.Conn, first []byte, o Options, deadline time.Time) (*RefConn, error) {
	c := &RefConn{nc: nc, r: io.MultiReader(bytes.NewReader(first), nc), timeout: o.Timeout, log: o.Logger}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	m, err := c.Receive(rctx)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = errTimeout("reference handshake: receive the initiator's address", o.Timeout)
		}
		return nil, err
	}
	if len(m) == 0 {
		c.Close()
		return nil, &RefError{Reason: "the initiator sent an empty worker address"}
	}
	c.first = m
	c.r = nc
	return c, nil
}

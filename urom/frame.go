package urom

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/openrdmo/rdmo/internal/msgpackcheck"
)

// Frame prefix: magic "UROM", protocol version, body length.
const (
	frameMagic      = "UROM"
	ProtocolVersion = 1
	framePrefixLen  = 4 + 2 + 4
	// MaxFrame bounds a frame body; larger ones are refused before any
	// allocation.
	MaxFrame = 1 << 20
	// maxNesting bounds how deep containers in a frame may nest.
	maxNesting = 32
)

var (
	// ErrBadMagic reports a peer that does not speak the UROM protocol.
	ErrBadMagic = errors.New("urom: peer does not speak the UROM protocol (bad magic)")
	// ErrFrameTooLarge reports a frame over MaxFrame.
	ErrFrameTooLarge = errors.New("urom: frame too large")
)

// VersionError reports a peer speaking another protocol version.
type VersionError struct{ Ours, Theirs uint16 }

func (e *VersionError) Error() string {
	return fmt.Sprintf("urom: protocol version mismatch: we speak %d, peer speaks %d", e.Ours, e.Theirs)
}

// envelope is what every frame carries.
type envelope struct {
	Cookie uint64             `msgpack:"c"`
	Kind   string             `msgpack:"k"`
	Status string             `msgpack:"s,omitempty"` // empty: OK; otherwise an error text
	Code   string             `msgpack:"e,omitempty"` // error class, see errorCode
	Body   msgpack.RawMessage `msgpack:"b,omitempty"`
}

// conn frames envelopes over a stream. Writes are serialised; reads belong
// to one goroutine.
type conn struct {
	c       net.Conn
	r       *bufio.Reader
	wmu     sync.Mutex
	timeout time.Duration
}

func newConn(c net.Conn, timeout time.Duration) *conn {
	return &conn{c: c, r: bufio.NewReader(c), timeout: timeout}
}

func (c *conn) write(env *envelope) error {
	body, err := msgpack.Marshal(env)
	if err != nil {
		return fmt.Errorf("urom: encode %s: %w", env.Kind, err)
	}
	if len(body) > MaxFrame {
		return fmt.Errorf("%w: %d bytes (limit %d)", ErrFrameTooLarge, len(body), MaxFrame)
	}
	buf := make([]byte, framePrefixLen, framePrefixLen+len(body))
	copy(buf, frameMagic)
	binary.BigEndian.PutUint16(buf[4:], ProtocolVersion)
	binary.BigEndian.PutUint32(buf[6:], uint32(len(body)))
	buf = append(buf, body...)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.timeout > 0 {
		c.c.SetWriteDeadline(time.Now().Add(c.timeout))
	}
	_, err = c.c.Write(buf)
	return err
}

// read returns the next envelope. idle bounds the wait for the frame's
// first byte (zero: no bound); once a frame started, the rest must arrive
// within the connection's timeout.
func (c *conn) read(idle time.Duration) (*envelope, error) {
	var first time.Time
	if idle > 0 {
		first = time.Now().Add(idle)
	}
	return c.readFrame(first, time.Time{}, MaxFrame)
}

// readFrame returns the next envelope of at most limit body bytes. first
// bounds the wait for the frame's first byte (zero: no bound); by, when
// set, bounds the whole frame, otherwise the rest of a started frame must
// arrive within the connection's timeout.
func (c *conn) readFrame(first, by time.Time, limit uint32) (*envelope, error) {
	c.c.SetReadDeadline(first)
	var prefix [framePrefixLen]byte
	if _, err := io.ReadFull(c.r, prefix[:1]); err != nil {
		return nil, err
	}
	if by.IsZero() && c.timeout > 0 {
		by = time.Now().Add(c.timeout)
	}
	c.c.SetReadDeadline(by)
	if _, err := io.ReadFull(c.r, prefix[1:]); err != nil {
		return nil, fmt.Errorf("urom: truncated frame: %w", err)
	}
	if string(prefix[:4]) != frameMagic {
		return nil, ErrBadMagic
	}
	if v := binary.BigEndian.Uint16(prefix[4:]); v != ProtocolVersion {
		return nil, &VersionError{Ours: ProtocolVersion, Theirs: v}
	}
	n := binary.BigEndian.Uint32(prefix[6:])
	if n > limit {
		return nil, fmt.Errorf("%w: %d bytes (limit %d)", ErrFrameTooLarge, n, limit)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return nil, fmt.Errorf("urom: truncated frame: %w", err)
	}
	// The decoder trusts counts; check them against the bytes first so a
	// hostile frame cannot make us allocate more than its size.
	if err := msgpackcheck.Value(body, maxNesting); err != nil {
		return nil, fmt.Errorf("urom: malformed frame: %w", err)
	}
	env := &envelope{}
	if err := msgpack.Unmarshal(body, env); err != nil {
		return nil, fmt.Errorf("urom: malformed frame: %w", err)
	}
	return env, nil
}

func (c *conn) Close() error { return c.c.Close() }

func encodeBody(v any) (msgpack.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	return msgpack.Marshal(v)
}

func decodeBody(raw msgpack.RawMessage, v any) error {
	if v == nil || len(raw) == 0 {
		return nil
	}
	return msgpack.Unmarshal(raw, v)
}

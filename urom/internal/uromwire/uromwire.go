// Package uromwire is the UROM protocol's framing, shared by the host's
// client (urom) and the service (urom/service): the Envelope every frame
// carries, the message kinds and error codes, and a connection that frames
// envelopes over a stream.
package uromwire

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/openrdmo/rdmo/internal/channel"
)

// Frame prefix: magic "UROM" (FrameMagic), protocol version, body length
// (internal/channel, untyped).
const (
	FrameMagic      = "UROM"
	ProtocolVersion = 1
	// MaxFrame bounds a frame body; larger ones are refused before any
	// allocation.
	MaxFrame = 1 << 20
	// MaxNesting bounds how deep containers in a frame may nest.
	MaxNesting = 32
)

// format is the frame prefix of this protocol.
var format = channel.Format{Proto: "urom", Magic: FrameMagic, Version: ProtocolVersion}

// Failures of the framing: each is a *channel.Error that matches one of
// these (errors.Is).
var (
	// ErrBadMagic reports a peer that does not speak the UROM protocol.
	ErrBadMagic = channel.Sentinel("urom", channel.KindBadMagic)
	// ErrVersion reports a peer speaking another protocol version.
	ErrVersion = channel.Sentinel("urom", channel.KindVersion)
	// ErrFrameTooLarge reports a frame over its limit (MaxFrame).
	ErrFrameTooLarge = channel.Sentinel("urom", channel.KindOversize)
)

// Envelope is what every frame carries.
type Envelope struct {
	Cookie uint64             `msgpack:"c"`
	Kind   string             `msgpack:"k"`
	Status string             `msgpack:"s,omitempty"` // empty: OK; otherwise an error text
	Code   string             `msgpack:"e,omitempty"` // error class, one of the Code* constants
	Body   msgpack.RawMessage `msgpack:"b,omitempty"`
}

// Conn frames envelopes over a stream. Writes are serialised; reads belong
// to one goroutine.
type Conn struct {
	C       net.Conn // the stream, for its addresses and Close
	r       *bufio.Reader
	wmu     sync.Mutex
	timeout time.Duration
}

func NewConn(c net.Conn, timeout time.Duration) *Conn {
	return &Conn{C: c, r: bufio.NewReader(c), timeout: timeout}
}

func (c *Conn) Write(env *Envelope) error {
	body, err := msgpack.Marshal(env)
	if err != nil {
		return fmt.Errorf("urom: encode %s: %w", env.Kind, err)
	}
	if len(body) > MaxFrame {
		return &channel.Error{Proto: "urom", Kind: channel.KindOversize, Op: "send " + env.Kind, Size: uint64(len(body)), Limit: MaxFrame}
	}
	buf := make([]byte, format.PrefixLen(), format.PrefixLen()+len(body))
	format.PutPrefix(buf, 0, len(body))
	buf = append(buf, body...)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.timeout > 0 {
		c.C.SetWriteDeadline(time.Now().Add(c.timeout))
	}
	_, err = c.C.Write(buf)
	return err
}

// Read returns the next Envelope. idle bounds the wait for the frame's
// first byte (zero: no bound); once a frame started, the rest must arrive
// within the connection's timeout.
func (c *Conn) Read(idle time.Duration) (*Envelope, error) {
	var first time.Time
	if idle > 0 {
		first = time.Now().Add(idle)
	}
	return c.ReadFrame(first, time.Time{}, MaxFrame)
}

// ReadFrame returns the next Envelope of at most limit body bytes. first
// bounds the wait for the frame's first byte (zero: no bound); by, when
// set, bounds the whole frame, otherwise the rest of a started frame must
// arrive within the connection's timeout.
func (c *Conn) ReadFrame(first, by time.Time, limit uint32) (*Envelope, error) {
	c.C.SetReadDeadline(first)
	r := channel.Reader{R: c.r, Format: format}
	if by.IsZero() && c.timeout > 0 {
		r.OnFirst = func() { c.C.SetReadDeadline(time.Now().Add(c.timeout)) }
	} else {
		r.OnFirst = func() { c.C.SetReadDeadline(by) }
	}
	f, err := r.Read(limit)
	if err != nil {
		if r.Got > 0 && !errors.Is(err, ErrBadMagic) && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrFrameTooLarge) {
			return nil, fmt.Errorf("urom: truncated frame: %w", err)
		}
		return nil, err
	}
	// The decoder trusts counts; they are checked against the bytes
	// first so a hostile frame cannot make us allocate more than its size.
	env := &Envelope{}
	if err := format.Decode(f.Body, MaxNesting, env); err != nil {
		return nil, err
	}
	return env, nil
}

func (c *Conn) Close() error { return c.C.Close() }

func EncodeBody(v any) (msgpack.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	return msgpack.Marshal(v)
}

func DecodeBody(raw msgpack.RawMessage, v any) error {
	if v == nil || len(raw) == 0 {
		return nil
	}
	return msgpack.Unmarshal(raw, v)
}

// RawBody keeps a msgpack body undecoded.
type RawBody []byte

// UnmarshalMsgpack keeps the bytes.
func (r *RawBody) UnmarshalMsgpack(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}

// Message kinds between hosts, the service and worker processes.
const (
	KindHello      = "hello"
	KindAuth       = "auth" // the host's proof, with a shared secret
	KindPlugins    = "plugins"
	KindSpawn      = "spawn"
	KindStop       = "stop"
	KindWorkers    = "workers"
	KindCommand    = "cmd"
	KindWorkerDied = "worker-died" // event, cookie 0
	KindShutdown   = "shutdown"    // event, cookie 0: ShutdownNotice
	KindEvent      = "event"       // worker process -> service, cookie 0
	KindReady      = "ready"       // worker process -> service, at start
	KindSpec       = "spec"        // service -> worker process, its first frame
)

// Error classes carried in envelopes (Envelope.Code); urom's *Error values
// match their sentinels by them.
const (
	CodeVersion       = "version"
	CodeAuth          = "auth"
	CodeLimit         = "limit"
	CodeUnknownWorker = "unknown-worker"
	CodeWorkerDied    = "worker-died"
	CodeBadRequest    = "bad-request"
	CodeTimeout       = "timeout"
	CodeNotFound      = "not-found"
	CodeCommand       = "command"
	CodeInternal      = "internal"
	CodeShuttingDown  = "shutting-down"
)

// CommandRequest carries one worker command through the service.
type CommandRequest struct {
	Worker uint64             `msgpack:"worker"`
	Kind   string             `msgpack:"kind"`
	Body   msgpack.RawMessage `msgpack:"body"`
}

// AuthProof is the host's proof of the shared secret.
type AuthProof struct {
	MAC []byte `msgpack:"mac"`
}

// AuthLabel separates the handshake's MACs from any other use of the
// secret (the OOB channel's among them).
const AuthLabel = "rdmo-urom v1 host auth proof"

// HandshakeMaxFrame bounds every frame of the handshake, so that a host
// that has not authenticated can make the service allocate at most this.
const HandshakeMaxFrame = 4096

// ServiceName is what a service calls itself in its hello reply.
const ServiceName = "rdmo-urom"

// Error is an error the service or a worker answered with.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return "urom: " + e.Message }

// Is matches the sentinel of the same class.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// Errorf is an error of class code.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorOf is the error an answer carries, nil for none.
func ErrorOf(env *Envelope) error {
	if env.Status == "" {
		return nil
	}
	return &Error{Code: env.Code, Message: env.Status}
}

// SetError puts err into an answer's envelope: an *Error keeps its class,
// anything else is CodeInternal.
func SetError(env *Envelope, err error) {
	var ue *Error
	if errors.As(err, &ue) {
		env.Code, env.Status = ue.Code, ue.Message
		return
	}
	env.Code, env.Status = CodeInternal, err.Error()
}

package channel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Kind is what failed on a channel.
type Kind uint8

// Kinds of failures.
const (
	// KindPeerGone: the peer closed the connection at a frame boundary,
	// or reset it.
	KindPeerGone Kind = iota + 1
	// KindTruncated: the peer closed the connection in the middle of a
	// frame.
	KindTruncated
	// KindBadMagic: the frame does not start with the protocol's magic;
	// the peer does not speak it (or the stream is out of sync).
	KindBadMagic
	// KindVersion: the peer speaks another version of the protocol.
	KindVersion
	// KindOversize: a body over the limit; on receive it was neither read
	// nor allocated, on send nothing was written.
	KindOversize
	// KindUnexpected: a message of a type not expected there.
	KindUnexpected
	// KindMalformed: a body that is not a valid encoding of its type.
	KindMalformed
	// KindTimeout: the peer was silent past the channel's timeout.
	KindTimeout
	// KindAuth: the mutual authentication failed, or one side has a
	// secret and the other none.
	KindAuth
	// KindRole: both ends claim the same role.
	KindRole
	// KindClosed: this side closed the connection.
	KindClosed
	// KindHandshake: the handshake failed for a cause that is not a
	// channel failure (Err says which: a context's end, a local error, an
	// error message from the peer).
	KindHandshake
)

var kindText = [...]string{
	KindPeerGone:   "peer closed or reset the connection",
	KindTruncated:  "truncated frame",
	KindBadMagic:   "bad magic",
	KindVersion:    "protocol version mismatch",
	KindOversize:   "message too large",
	KindUnexpected: "unexpected message type",
	KindMalformed:  "malformed message body",
	KindTimeout:    "deadline exceeded",
	KindAuth:       "authentication failed",
	KindRole:       "role conflict",
	KindClosed:     "connection closed",
	KindHandshake:  "handshake failed",
}

func (k Kind) String() string {
	if int(k) < len(kindText) && kindText[k] != "" {
		return kindText[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Error is every failure of a channel: Kind says what failed, the other
// fields the details a kind has. It matches the sentinel of its kind
// (Sentinel; errors.Is), and its cause (Err) through Unwrap.
type Error struct {
	Proto string // the protocol ("urom", "oob"), the text's prefix
	Kind  Kind
	Op    string // what was being done ("receive", "handshake: send hello", ...)
	// Detail says more, in words (a malformed body's reason, an
	// authentication failure's, the types of an unexpected message).
	Detail string
	// Remote is the peer's address, set on a failed handshake.
	Remote string
	// PreAuth: the failure happened before the peer proved the shared
	// secret (or, without one, before the handshake completed): whatever
	// caused it came from a peer nobody vouched for. See IsPreAuth.
	PreAuth bool

	Local, Peer uint16        // KindVersion: this side's and the peer's version
	Size, Limit uint64        // KindOversize: the body's size and the limit
	Got, Want   int           // KindTruncated: frame bytes that arrived of those needed
	Magic       [4]byte       // KindBadMagic: what came instead
	Wait        time.Duration // KindTimeout: how long the peer was silent
	Err         error         // the cause, if any

	sentinel bool
}

// Sentinel is the error errors.Is matches every Error of kind k with.
func Sentinel(proto string, k Kind) *Error {
	return &Error{Proto: proto, Kind: k, sentinel: true}
}

func (e *Error) Error() string {
	p := e.Proto + ": "
	if e.sentinel {
		return p + e.Kind.String()
	}
	if e.Remote != "" {
		p += "handshake with " + e.Remote + ": "
	}
	op := ""
	if e.Op != "" {
		op = e.Op + ": "
	}
	switch e.Kind {
	case KindPeerGone:
		return fmt.Sprintf("%s%speer closed or reset the connection: %v", p, op, e.Err)
	case KindTruncated:
		return fmt.Sprintf("%struncated frame: peer closed the connection after %d of %d bytes", p, e.Got, e.Want)
	case KindBadMagic:
		return fmt.Sprintf("%sbad magic %q (% x): the peer does not speak this protocol", p, e.Magic[:], e.Magic[:])
	case KindVersion:
		return fmt.Sprintf("%sprotocol version mismatch: this side speaks version %d, the peer speaks version %d", p, e.Local, e.Peer)
	case KindOversize:
		return fmt.Sprintf("%s%smessage body of %d bytes exceeds the limit of %d bytes", p, op, e.Size, e.Limit)
	case KindTimeout:
		return fmt.Sprintf("%s%sdeadline exceeded: the peer was silent for %v", p, op, e.Wait)
	case KindClosed:
		return p + op + "connection closed"
	case KindHandshake:
		return p + op + e.Err.Error()
	}
	s := p + op + e.Kind.String()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is matches the sentinel of the same kind; a KindTimeout also matches
// os.ErrDeadlineExceeded, as a socket's timeout does.
func (e *Error) Is(target error) bool {
	if t, ok := target.(*Error); ok {
		return t.sentinel && t.Kind == e.Kind
	}
	return e.Kind == KindTimeout && target == os.ErrDeadlineExceeded
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Timeout reports whether the peer was silent too long, as net.Error does.
func (e *Error) Timeout() bool { return e.Kind == KindTimeout }

// Handshake marks err as a failure of the handshake with remote: a
// channel *Error gets the peer's address and, unless authenticated (the
// secret was proved), PreAuth; any other cause becomes an Error of
// KindHandshake wrapping it. A context's end is this side's doing, never
// PreAuth.
func Handshake(proto, remote string, err error, authenticated bool) *Error {
	var e *Error
	if !errors.As(err, &e) || e.sentinel {
		e = &Error{Proto: proto, Kind: KindHandshake, Err: err}
	}
	e.Remote = remote
	e.PreAuth = !authenticated && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	return e
}

// IsPreAuth reports whether err is a channel failure that happened before
// the peer authenticated: framing, version, role, a wrong or missing
// secret, a peer that went silent or away mid-handshake. A listener
// treats such a failure as a stranger's: one log line, a counter, and it
// keeps waiting; it never ends the listener's run.
func IsPreAuth(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.PreAuth
}

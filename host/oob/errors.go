package oob

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Sentinel errors. Every error this package returns for a failure of the
// connection matches exactly one of them with errors.Is; the typed errors
// below carry the details (errors.As).
var (
	ErrPeerGone   = errors.New("oob: peer closed or reset the connection")
	ErrTruncated  = errors.New("oob: truncated frame")
	ErrBadMagic   = errors.New("oob: bad magic")
	ErrVersion    = errors.New("oob: protocol version mismatch")
	ErrOversize   = errors.New("oob: message too large")
	ErrUnexpected = errors.New("oob: unexpected message type")
	ErrMalformed  = errors.New("oob: malformed message body")
	ErrTimeout    = errors.New("oob: deadline exceeded")
	ErrAuth       = errors.New("oob: authentication failed")
	ErrRole       = errors.New("oob: role conflict")
	ErrClosed     = errors.New("oob: connection closed")
)

// PeerGoneError: the peer closed the connection at a frame boundary, or
// reset it (at any point). Err is the underlying io.EOF or syscall error.
type PeerGoneError struct {
	Op  string
	Err error
}

func (e *PeerGoneError) Error() string {
	return fmt.Sprintf("oob: %s: peer closed or reset the connection: %v", e.Op, e.Err)
}
func (e *PeerGoneError) Is(target error) bool { return target == ErrPeerGone }
func (e *PeerGoneError) Unwrap() error        { return e.Err }

// TruncatedError: the peer closed the connection cleanly in the middle of a
// frame; Got of Want frame bytes (prefix and body) had arrived.
type TruncatedError struct {
	Got, Want int
}

func (e *TruncatedError) Error() string {
	return fmt.Sprintf("oob: truncated frame: peer closed the connection after %d of %d bytes", e.Got, e.Want)
}
func (e *TruncatedError) Is(target error) bool { return target == ErrTruncated }

// BadMagicError: the first four bytes of a frame are not the magic; the peer
// does not speak this protocol (or the stream is out of sync).
type BadMagicError struct {
	Got [4]byte
}

func (e *BadMagicError) Error() string {
	return fmt.Sprintf("oob: bad magic %q (% x), want %q: the peer does not speak the rdmo out-of-band protocol", e.Got[:], e.Got[:], Magic)
}
func (e *BadMagicError) Is(target error) bool { return target == ErrBadMagic }

// VersionError: the peer speaks another version of the protocol.
type VersionError struct {
	Local, Peer uint16
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("oob: protocol version mismatch: this side speaks version %d, the peer speaks version %d", e.Local, e.Peer)
}
func (e *VersionError) Is(target error) bool { return target == ErrVersion }

// OversizeError: a message body is larger than the limit (Options.MaxBody).
// On receive the body is neither read nor allocated; on send nothing is
// written and the connection stays usable.
type OversizeError struct {
	Op          string
	Size, Limit uint64
}

func (e *OversizeError) Error() string {
	return fmt.Sprintf("oob: %s: message body of %d bytes exceeds the limit of %d bytes (Options.MaxBody)", e.Op, e.Size, e.Limit)
}
func (e *OversizeError) Is(target error) bool { return target == ErrOversize }

// UnexpectedTypeError: a frame of type Got arrived where Want was expected
// (Want is 0 when any application message would do and Got is unknown or a
// handshake type).
type UnexpectedTypeError struct {
	Got, Want Type
}

func (e *UnexpectedTypeError) Error() string {
	if e.Want == 0 {
		return fmt.Sprintf("oob: unexpected message type %v", e.Got)
	}
	return fmt.Sprintf("oob: unexpected message type %v, want %v", e.Got, e.Want)
}
func (e *UnexpectedTypeError) Is(target error) bool { return target == ErrUnexpected }

// MalformedError: the body of a frame of a known type is not a valid
// msgpack encoding of that type.
type MalformedError struct {
	Type   Type
	Reason string
}

func (e *MalformedError) Error() string {
	return fmt.Sprintf("oob: malformed %v message body: %s", e.Type, e.Reason)
}
func (e *MalformedError) Is(target error) bool { return target == ErrMalformed }

// TimeoutError: the operation did not complete within Options.Timeout (a
// silent or stalled peer). A deadline of the caller's context is reported
// as context.DeadlineExceeded instead.
type TimeoutError struct {
	Op    string
	Limit time.Duration // Options.Timeout
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("oob: %s: deadline exceeded: the peer was silent for %v (Options.Timeout)", e.Op, e.Limit)
}
func (e *TimeoutError) Is(target error) bool {
	return target == ErrTimeout || target == os.ErrDeadlineExceeded
}

// Timeout reports true, as net.Error does.
func (e *TimeoutError) Timeout() bool { return true }

// AuthError: mutual authentication failed, or one side has a secret and the
// other has none. Nothing but the handshake was exchanged.
type AuthError struct {
	Reason string
}

func (e *AuthError) Error() string { return "oob: authentication failed: " + e.Reason }
func (e *AuthError) Is(target error) bool {
	return target == ErrAuth
}

// RoleError: both peers claim the same Role.
type RoleError struct {
	Local, Peer Role
}

func (e *RoleError) Error() string {
	return fmt.Sprintf("oob: role conflict: this side is the %v and so is the peer", e.Local)
}
func (e *RoleError) Is(target error) bool { return target == ErrRole }

// HandshakeError wraps any failure of Dial or Accept after the TCP
// connection was made, with the peer's address. The connection has been
// closed. Use errors.Is / errors.As for the cause.
type HandshakeError struct {
	Remote string
	Err    error
}

func (e *HandshakeError) Error() string {
	return fmt.Sprintf("oob: handshake with %s: %s", e.Remote, strings.TrimPrefix(e.Err.Error(), "oob: "))
}
func (e *HandshakeError) Unwrap() error { return e.Err }

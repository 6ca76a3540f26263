package oob

import (
	"fmt"
	"time"

	"github.com/openrdmo/rdmo/internal/channel"
)

// ConnError is every failure of a connection, its handshake included: its
// Kind says what failed, its other fields the details (a version
// mismatch's versions, an oversize body's size and limit, the peer's
// address for a failed handshake, ...). It matches exactly one of the
// sentinels below with errors.Is; errors.As gives the details. PreAuth
// (IsPreAuth) says that it happened before the peer authenticated.
type ConnError = channel.Error

// Sentinel errors, one per kind of ConnError.
var (
	ErrPeerGone   = channel.Sentinel(protoName, channel.KindPeerGone)   // the peer closed at a frame boundary, or reset the connection
	ErrTruncated  = channel.Sentinel(protoName, channel.KindTruncated)  // the peer closed mid-frame (Got of Want bytes)
	ErrBadMagic   = channel.Sentinel(protoName, channel.KindBadMagic)   // the peer does not speak this protocol
	ErrVersion    = channel.Sentinel(protoName, channel.KindVersion)    // the peer speaks another version (Local, Peer)
	ErrOversize   = channel.Sentinel(protoName, channel.KindOversize)   // a body over Options.MaxBody (Size, Limit)
	ErrUnexpected = channel.Sentinel(protoName, channel.KindUnexpected) // a message of a type not expected there
	ErrMalformed  = channel.Sentinel(protoName, channel.KindMalformed)  // a body that is not its type's encoding
	ErrTimeout    = channel.Sentinel(protoName, channel.KindTimeout)    // the peer was silent past Options.Timeout (Wait)
	ErrAuth       = channel.Sentinel(protoName, channel.KindAuth)       // the authentication failed, or a secret on one side only
	ErrRole       = channel.Sentinel(protoName, channel.KindRole)       // both peers claim the same Role
	ErrClosed     = channel.Sentinel(protoName, channel.KindClosed)     // this side closed the connection
	ErrHandshake  = channel.Sentinel(protoName, channel.KindHandshake)  // the handshake failed for another cause (Err)
)

// IsPreAuth reports whether err is a failure that happened before the peer
// authenticated (or, without a secret, before the handshake completed):
// framing, version, role, a wrong or missing secret, a peer silent or gone
// mid-handshake. Whatever caused it came from a peer nobody vouched for:
// a listener logs it once, counts it and keeps waiting. A context's end
// is never PreAuth.
func IsPreAuth(err error) bool { return channel.IsPreAuth(err) }

// protoName prefixes this package's error texts.
const protoName = "oob"

func errUnexpected(got, want Type) *ConnError {
	d := got.String()
	if want != 0 {
		d += ", want " + want.String()
	}
	return &ConnError{Proto: protoName, Kind: channel.KindUnexpected, Detail: d}
}

func errMalformed(t Type, reason string) *ConnError {
	return &ConnError{Proto: protoName, Kind: channel.KindMalformed, Detail: fmt.Sprintf("%v message body: %s", t, reason)}
}

func errAuth(reason string) *ConnError {
	return &ConnError{Proto: protoName, Kind: channel.KindAuth, Detail: reason}
}

func errTimeout(op string, wait time.Duration) *ConnError {
	return &ConnError{Proto: protoName, Kind: channel.KindTimeout, Op: op, Wait: wait}
}

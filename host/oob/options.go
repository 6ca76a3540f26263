package oob

import (
	"bytes"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/hmacauth"
)

// DefaultTimeout is the default Options.Timeout.
const DefaultTimeout = 10 * time.Second

// MinSecretLen is the shortest accepted Options.Secret. The secret is an
// HMAC key, not a password: use random bytes (e.g. `openssl rand -hex 32`).
const MinSecretLen = hmacauth.MinSecretLen

// handshakeMaxBody bounds every frame of the handshake, whatever MaxBody
// is, so that an unauthenticated peer can make us allocate at most this.
const handshakeMaxBody = 1024

// Options configure a Listener or a Dial. The zero value is valid: no
// secret, 64 KiB bodies, 10 s timeout, no logging, default role.
type Options struct {
	// Secret, if set, requires mutual HMAC-SHA256 authentication before
	// any application message; the peer must have the same secret. At
	// least MinSecretLen random bytes.
	Secret []byte
	// MaxBody bounds the msgpack body of one application message, on send
	// and on receive. 0 means DefaultMaxBody; at most MaxBodyLimit.
	MaxBody int
	// Timeout bounds the whole handshake, every write, and every read of a
	// frame once it has started. It also bounds the wait for the next
	// message in Receive, unless the context has a deadline: then that
	// deadline governs the wait (pass one to wait longer, e.g. for Done).
	// 0 means DefaultTimeout.
	Timeout time.Duration
	// Logger receives debug logs of the handshake and of each frame, and a
	// warning for each failed handshake. nil means no logging.
	Logger *zap.Logger
	// Role is announced in Hello. 0 means RoleTarget for Listen and
	// RoleInitiator for Dial. Two peers with the same role are refused.
	Role Role

	// version overrides the protocol version spoken; tests only.
	version uint16
}

func (o Options) normalize(defaultRole Role) (Options, error) {
	if err := hmacauth.CheckSecret(o.Secret); err != nil {
		return o, fmt.Errorf("oob: Options.Secret: %w", err)
	}
	o.Secret = bytes.Clone(o.Secret)
	switch {
	case o.MaxBody == 0:
		o.MaxBody = DefaultMaxBody
	case o.MaxBody < 0 || o.MaxBody > MaxBodyLimit:
		return o, fmt.Errorf("oob: Options.MaxBody %d out of range 1..%d", o.MaxBody, MaxBodyLimit)
	}
	switch {
	case o.Timeout == 0:
		o.Timeout = DefaultTimeout
	case o.Timeout < 0:
		return o, fmt.Errorf("oob: Options.Timeout %v is negative", o.Timeout)
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	switch o.Role {
	case 0:
		o.Role = defaultRole
	case RoleTarget, RoleInitiator:
	default:
		return o, fmt.Errorf("oob: Options.Role %v is not a role", o.Role)
	}
	if o.version == 0 {
		o.version = Version
	}
	return o, nil
}

// Package hmacauth holds the pieces of rdmo's mutual HMAC-SHA256
// challenge–response that the out-of-band channel (host/oob) and the UROM
// service's host handshake (urom) share: fresh nonces from crypto/rand,
// their checks, the proof over a handshake transcript, and its
// constant-time comparison. Each protocol keeps its own messages, order
// and errors; both run the same scheme:
//
//  1. each side sends a hello (which says that it requires a secret) and
//     a fresh NonceLen-byte nonce;
//  2. the dialer sends its proof; the listener checks it before it sends
//     its own, so a stranger never receives a MAC to attack offline;
//  3. the dialer checks the listener's proof.
//
// A proof is HMAC-SHA256(secret, label ‖ who ‖ u32 len ‖ dialer's hello ‖
// u32 len ‖ listener's hello ‖ dialer's nonce ‖ listener's nonce), lengths
// big endian. The label separates the protocols, who (the side, and
// whatever else a protocol binds) keeps one side's proof from being
// reflected as the other's, the hellos bind everything each side said
// before the proofs, and the nonces make every proof fresh.
package hmacauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// NonceLen is the size of each side's nonce.
const NonceLen = 32

// MinSecretLen is the shortest accepted secret. The secret is an HMAC key,
// not a password: use random bytes (e.g. `openssl rand -hex 32`).
const MinSecretLen = 16

// Sides of a connection, for Transcript.Proof: fixed by who dialed, so
// they cannot be misconfigured.
const (
	Dialer   byte = 'D'
	Listener byte = 'L'
)

// CheckSecret refuses a secret that is set but shorter than MinSecretLen;
// an empty secret means no authentication and is accepted.
func CheckSecret(secret []byte) error {
	if n := len(secret); n > 0 && n < MinSecretLen {
		return fmt.Errorf("the secret is %d bytes; use at least %d random bytes", n, MinSecretLen)
	}
	return nil
}

// NewNonce returns NonceLen fresh random bytes.
func NewNonce() ([]byte, error) {
	nonce := make([]byte, NonceLen)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("random nonce: %w", err)
	}
	return nonce, nil
}

// CheckPeerNonce checks the peer's nonce: NonceLen bytes, and not an echo
// of this side's.
func CheckPeerNonce(peer, mine []byte) error {
	if len(peer) != NonceLen {
		return fmt.Errorf("the peer's nonce is %d bytes, want %d", len(peer), NonceLen)
	}
	if hmac.Equal(peer, mine) {
		return errors.New("the peer echoed this side's nonce")
	}
	return nil
}

// Transcript is what both proofs of one handshake cover.
type Transcript struct {
	// Label names the protocol and its version.
	Label string
	// DialerHello and ListenerHello are the hellos as sent (raw bytes).
	DialerHello, ListenerHello []byte
	// DialerNonce and ListenerNonce are the two nonces.
	DialerNonce, ListenerNonce []byte
}

// Proof is the MAC the side described by who (Dialer or Listener, then
// anything else the protocol binds, such as a role) sends.
func (t *Transcript) Proof(secret []byte, who ...byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(t.Label))
	m.Write(who)
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(t.DialerHello)))
	m.Write(n[:])
	m.Write(t.DialerHello)
	binary.BigEndian.PutUint32(n[:], uint32(len(t.ListenerHello)))
	m.Write(n[:])
	m.Write(t.ListenerHello)
	m.Write(t.DialerNonce)
	m.Write(t.ListenerNonce)
	return m.Sum(nil)
}

// Valid reports, in constant time, whether got is the proof want.
func Valid(got, want []byte) bool { return hmac.Equal(got, want) }

package oob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/channel"
	"github.com/openrdmo/rdmo/internal/hmacauth"
)

// side is which end of the TCP connection a Conn is. It is fixed by who
// dialed, so unlike Role it cannot be misconfigured; the proofs are bound
// to it so that neither side's proof can be reflected back as the other's.
type side byte

const (
	sideDialer   = side(hmacauth.Dialer)
	sideListener = side(hmacauth.Listener)
)

// NonceLen is the size of each side's authentication nonce.
const NonceLen = hmacauth.NonceLen

// proofLabel separates these MACs from any other use of the secret.
const proofLabel = "rdmo-oob v1 auth proof"

// handshake runs the version hello and, when a secret is configured, the
// mutual authentication. It sends nothing but handshake frames, and
// nothing after a failure except an Error rejecting a wrong proof. On
// failure the connection is closed.
func (c *Conn) handshake(ctx context.Context, s side) (err error) {
	start := time.Now()
	c.hsDeadline = start.Add(c.opts.Timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(c.hsDeadline) {
		c.hsDeadline = dl
	}
	defer func() {
		c.hsDeadline = time.Time{}
		if err != nil {
			c.fail(err)
			lvl := zap.WarnLevel
			if errors.Is(err, context.Canceled) || s == sideListener {
				// A listener's caller gets the ConnError and logs
				// it: one line per bad peer, not two.
				lvl = zap.DebugLevel
			}
			c.log.Check(lvl, "oob: handshake failed").Write(zap.Error(err))
			return
		}
		c.log.Debug("oob: handshake complete",
			zap.Stringer("peer_role", c.peerRole),
			zap.Bool("authenticated", c.authenticated),
			zap.Duration("took", time.Since(start)))
	}()

	local := Hello{Role: c.opts.Role, Version: c.opts.version, Auth: len(c.opts.Secret) > 0}
	myHello, err := encodeFrame(c.opts.version, local, handshakeMaxBody)
	if err != nil {
		return err
	}
	if err := c.write(ctx, "handshake: send hello", myHello); err != nil {
		return err
	}
	hf, err := c.read(ctx, "handshake: receive hello", handshakeMaxBody)
	if err != nil {
		if errors.Is(err, ErrVersion) && hf != nil && hf.Length <= handshakeMaxBody {
			// Consume the peer's hello so that closing sends FIN, not
			// RST: the peer then surely reads our hello and reports
			// the mismatch too.
			io.CopyN(io.Discard, c.nc, int64(hf.Length))
		}
		return err
	}
	if frameType(hf) != TypeHello {
		return errUnexpected(frameType(hf), TypeHello)
	}
	m, err := decodeBody(frameType(hf), hf.Body)
	if err != nil {
		return err
	}
	peer := m.(Hello)
	switch {
	case peer.Version != hf.Version:
		return errMalformed(TypeHello, fmt.Sprintf("hello says version %d in a version %d frame", peer.Version, hf.Version))
	case peer.Role != RoleTarget && peer.Role != RoleInitiator:
		return errMalformed(TypeHello, fmt.Sprintf("unknown role %d", uint8(peer.Role)))
	case peer.Role == local.Role:
		return &ConnError{Proto: protoName, Kind: channel.KindRole, Detail: fmt.Sprintf("this side is the %v and so is the peer", local.Role)}
	}
	c.peerRole = peer.Role
	switch {
	case local.Auth && !peer.Auth:
		return errAuth("this side requires a shared secret (Options.Secret) but the peer has none configured")
	case !local.Auth && peer.Auth:
		return errAuth("the peer requires a shared secret but none is configured on this side (Options.Secret)")
	case !local.Auth:
		return nil
	}
	if err := c.authenticate(ctx, s, myHello, hf.Raw); err != nil {
		return err
	}
	c.authenticated = true
	return nil
}

// authenticate runs the challenge–response. Both sides send a fresh nonce;
// the dialer proves first; the listener checks that proof before it sends
// its own (so a stranger connecting to a target learns no MAC it could
// attack offline) and rejects a wrong one with an Error frame; the dialer
// then checks the listener's proof.
func (c *Conn) authenticate(ctx context.Context, s side, myHello, peerHello []byte) error {
	nonce, err := hmacauth.NewNonce()
	if err != nil {
		return fmt.Errorf("oob: handshake: %w", err)
	}
	b, err := encodeFrame(c.opts.version, authChallenge{Nonce: nonce}, handshakeMaxBody)
	if err != nil {
		return err
	}
	if err := c.write(ctx, "handshake: send challenge", b); err != nil {
		return err
	}
	f, err := c.read(ctx, "handshake: receive challenge", handshakeMaxBody)
	if err != nil {
		return err
	}
	if frameType(f) != TypeAuthChallenge {
		return errUnexpected(frameType(f), TypeAuthChallenge)
	}
	m, err := decodeBody(frameType(f), f.Body)
	if err != nil {
		return err
	}
	peerNonce := m.(authChallenge).Nonce
	if err := hmacauth.CheckPeerNonce(peerNonce, nonce); err != nil {
		return errAuth(err.Error())
	}

	// The transcript covers both hellos (raw frames, so any tampering
	// with version, role or the auth flag is detected) and both nonces,
	// ordered dialer first; each proof binds its side and role.
	t := hmacauth.Transcript{Label: proofLabel, DialerNonce: nonce, ListenerNonce: peerNonce, DialerHello: myHello, ListenerHello: peerHello}
	peerSide, peerRole := sideListener, c.peerRole
	if s == sideListener {
		t = hmacauth.Transcript{Label: proofLabel, DialerNonce: peerNonce, ListenerNonce: nonce, DialerHello: peerHello, ListenerHello: myHello}
		peerSide = sideDialer
	}
	mine := t.Proof(c.opts.Secret, byte(s), byte(c.opts.Role))
	want := t.Proof(c.opts.Secret, byte(peerSide), byte(peerRole))

	sendProof := func() error {
		b, err := encodeFrame(c.opts.version, authProof{MAC: mine}, handshakeMaxBody)
		if err != nil {
			return err
		}
		return c.write(ctx, "handshake: send proof", b)
	}
	if s == sideDialer {
		if err := sendProof(); err != nil {
			return err
		}
	}
	f, err = c.read(ctx, "handshake: receive proof", handshakeMaxBody)
	if err != nil {
		return err
	}
	m, err = decodeBody(frameType(f), f.Body)
	if err != nil {
		return err
	}
	switch m := m.(type) {
	case authProof:
		if !hmacauth.Valid(m.MAC, want) {
			if s == sideListener {
				// Best effort: tell the dialer why, then close.
				if b, err := encodeFrame(c.opts.version, Error{Code: CodeAuth, Message: "authentication failed"}, handshakeMaxBody); err == nil {
					c.write(ctx, "handshake: send rejection", b)
				}
			}
			return errAuth("the peer's proof does not match: the shared secrets differ (or the handshake was tampered with)")
		}
	case Error:
		if m.Code == CodeAuth && s == sideDialer {
			return errAuth("the peer rejected this side's proof: the shared secrets differ (or the handshake was tampered with)")
		}
		return m
	default:
		return errUnexpected(frameType(f), TypeAuthProof)
	}
	if s == sideListener {
		return sendProof()
	}
	return nil
}

package urom

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/openrdmo/rdmo/internal/hmacauth"
	"github.com/openrdmo/rdmo/urom/internal/uromwire"
)

// The version handshake, and with a shared secret the mutual
// authentication of host and service (the scheme of internal/hmacauth,
// which host/oob runs too):
//
//	host → service   hello  {component, version, auth: true, nonce: Nh}
//	service → host   hello  {service, auth: true, nonce: Ns}          (challenge)
//	host → service   auth   {mac: proof(secret, 'D')}
//	service → host   auth   {service, version, mac: proof(secret, 'L')} or an ErrAuth answer
//
// proof = HMAC-SHA256(secret, uromwire.AuthLabel ‖ side ‖ u32 len ‖ hello body ‖
// u32 len ‖ challenge body ‖ Nh ‖ Ns). The service checks the host's proof
// before it sends its own, so a stranger gets no MAC to attack offline,
// and answers nothing else — no plugin list, no spawn, not even its
// component version — before. The hello and challenge bodies are covered
// as sent, so stripping the auth flag or changing a nonce or a version
// fails the proofs. A secret on one side only fails on both sides with
// ErrAuth: the service refuses a hello whose auth flag differs from its
// own configuration, and a host with a secret refuses a service that does
// not authenticate itself (an older service, or one without a secret).
// Without a secret on either side the handshake is the hello and its
// answer, as before.
//
// The secret authenticates the two ends of the connection when it opens;
// it does not encrypt the channel or protect its integrity afterwards
// (docs/SECURITY.md).

// handshake runs the hello (and authentication) on the host side, before
// the read loop starts. It ends by the context's deadline, or within
// CallTimeout; cancelling ctx ends it at once. On failure the connection
// is closed.
func (c *Client) handshake(ctx context.Context) (reply HelloReply, err error) {
	deadline, fromCtx := ctx.Deadline()
	if !fromCtx {
		deadline = time.Now().Add(c.opts.CallTimeout)
	}
	// Closing is the one way to interrupt a read whose deadline the
	// reader sets itself.
	stop := context.AfterFunc(ctx, func() { c.c.Close() })
	defer func() {
		if !stop() && ctx.Err() != nil {
			err = ctx.Err()
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			if fromCtx {
				err = context.DeadlineExceeded
			} else {
				err = errorf(uromwire.CodeTimeout, "hello: no answer from the service within %v", c.opts.CallTimeout)
			}
		}
		if err != nil {
			c.c.Close()
		}
	}()
	secret := c.opts.Secret
	exchange := func(cookie uint64, kind string, body []byte) (*uromwire.Envelope, error) {
		if err := c.c.Write(&uromwire.Envelope{Cookie: cookie, Kind: kind, Body: body}); err != nil {
			return nil, fmt.Errorf("urom: send %s: %w", kind, err)
		}
		env, err := c.c.ReadFrame(deadline, deadline, uromwire.HandshakeMaxFrame)
		if err != nil {
			return nil, fmt.Errorf("urom: %s: %w", kind, err)
		}
		if env.Cookie != cookie || env.Kind != kind {
			return nil, errorf(uromwire.CodeBadRequest, "%s: the service answered with a %q frame (cookie %d)", kind, env.Kind, env.Cookie)
		}
		return env, uromwire.ErrorOf(env)
	}

	hello := Hello{Component: c.opts.Component, ComponentVersion: c.opts.ComponentVersion}
	if len(secret) > 0 {
		if hello.Nonce, err = hmacauth.NewNonce(); err != nil {
			return reply, fmt.Errorf("urom: %w", err)
		}
		hello.Auth = true
	}
	helloBody, err := uromwire.EncodeBody(hello)
	if err != nil {
		return reply, err
	}
	env, err := exchange(1, uromwire.KindHello, helloBody)
	if err != nil {
		return reply, err
	}
	if err := uromwire.DecodeBody(env.Body, &reply); err != nil {
		return reply, errorf(uromwire.CodeBadRequest, "malformed hello answer: %v", err)
	}
	switch {
	case len(secret) == 0 && reply.Auth:
		return reply, errorf(uromwire.CodeAuth, "authentication failed: the UROM service requires a shared secret and the host has none configured")
	case len(secret) == 0:
		return reply, nil
	case !reply.Auth:
		return reply, errorf(uromwire.CodeAuth, "authentication failed: the host requires the UROM service to prove a shared secret "+
			"and the service did not (it has no secret configured, or does not support authentication)")
	}
	if err := hmacauth.CheckPeerNonce(reply.Nonce, hello.Nonce); err != nil {
		return reply, errorf(uromwire.CodeAuth, "authentication failed: %v", err)
	}
	t := hmacauth.Transcript{Label: uromwire.AuthLabel, DialerHello: helloBody, ListenerHello: env.Body, DialerNonce: hello.Nonce, ListenerNonce: reply.Nonce}
	proof, err := uromwire.EncodeBody(uromwire.AuthProof{MAC: t.Proof(secret, hmacauth.Dialer)})
	if err != nil {
		return reply, err
	}
	if env, err = exchange(2, uromwire.KindAuth, proof); err != nil {
		return reply, err
	}
	reply = HelloReply{}
	if err := uromwire.DecodeBody(env.Body, &reply); err != nil {
		return reply, errorf(uromwire.CodeBadRequest, "malformed authentication answer: %v", err)
	}
	if !hmacauth.Valid(reply.MAC, t.Proof(secret, hmacauth.Listener)) {
		return reply, errorf(uromwire.CodeAuth, "authentication failed: the UROM service's proof does not match: "+
			"the host and the service have different secrets (or the handshake was tampered with)")
	}
	return reply, nil
}

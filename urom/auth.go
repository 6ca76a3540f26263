package urom

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/hmacauth"
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
// proof = HMAC-SHA256(secret, authLabel ‖ side ‖ u32 len ‖ hello body ‖
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

// authLabel separates these MACs from any other use of the secret (the
// OOB channel's among them).
const authLabel = "rdmo-urom v1 host auth proof"

// DefaultHandshakeTimeout is the default Config.HandshakeTimeout.
const DefaultHandshakeTimeout = 10 * time.Second

// handshakeMaxFrame bounds every frame of the handshake, so that a host
// that has not authenticated can make the service allocate at most this.
const handshakeMaxFrame = 4096

// handshake runs a host's hello (and authentication) on the service side.
// It returns nil when the session may start; otherwise it has answered the
// host with the reason when it could, and logged one line with the host's
// address.
func (ss *session) handshake() error {
	s := ss.s
	peer := zap.String("peer", ss.c.c.RemoteAddr().String())
	deadline := time.Now().Add(s.cfg.HandshakeTimeout)
	read := func(kind string) (*envelope, error) {
		env, err := ss.c.readFrame(deadline, deadline, handshakeMaxFrame)
		if err != nil {
			var ne net.Error
			switch {
			case errors.Is(err, net.ErrClosed):
				return nil, err // the service is closing
			case errors.As(err, &ne) && ne.Timeout():
				err = fmt.Errorf("no %s message within the handshake deadline (%v)", kind, s.cfg.HandshakeTimeout)
			}
			s.stats.inc(s.stats.refused, "dropped")
			s.hsLog.Warn("host dropped during the handshake", peer, zap.Error(err))
		}
		return env, err
	}
	refuse := func(req *envelope, e *Error) error {
		msg, why := "host refused", "bad_request"
		switch e.Code {
		case codeAuth:
			msg, why = "host refused: authentication failed", "auth"
		case codeVersion:
			msg, why = "host refused: incompatible version", "version"
		}
		s.stats.inc(s.stats.refused, why)
		// Logged before the answer, so that the line is there when the
		// host learns of its refusal.
		s.hsLog.Warn(msg, peer, zap.String("reason", e.Message))
		ss.c.write(&envelope{Cookie: req.Cookie, Kind: req.Kind, Code: e.Code, Status: e.Message})
		return e
	}

	// next reads the next message, which must be of kind and decode into
	// v; anything else is refused with code, its message after prefix.
	next := func(kind string, v any, code, prefix string) (*envelope, error) {
		env, err := read(kind)
		if err != nil {
			return nil, err
		}
		if env.Kind != kind {
			return nil, refuse(env, errorf(code, "%sexpected %s, got %q (nothing is served before)", prefix, kind, env.Kind))
		}
		if err := decodeBody(env.Body, v); err != nil {
			return nil, refuse(env, errorf(code, "%smalformed %s: %v", prefix, kind, err))
		}
		return env, nil
	}

	var hello Hello
	env, err := next(kindHello, &hello, codeBadRequest, "")
	if err != nil {
		return err
	}
	secret := s.cfg.Secret
	switch {
	case len(secret) > 0 && !hello.Auth:
		return refuse(env, errorf(codeAuth, "authentication failed: this UROM service requires hosts to prove its shared secret "+
			"(rdmo dpu --secret-file) and the host has no secret configured"))
	case len(secret) == 0 && hello.Auth:
		return refuse(env, errorf(codeAuth, "authentication failed: the host requires the UROM service to prove a shared secret "+
			"and this service has none configured (rdmo dpu --secret-file)"))
	case len(secret) == 0:
		return ss.welcome(env, hello, nil, refuse)
	}

	nonce, err := hmacauth.NewNonce()
	if err != nil {
		return refuse(env, errorf(codeInternal, "%v", err))
	}
	if err := hmacauth.CheckPeerNonce(hello.Nonce, nonce); err != nil {
		return refuse(env, errorf(codeAuth, "authentication failed: %v", err))
	}
	challenge, _ := encodeBody(HelloReply{Service: serviceName, Auth: true, Nonce: nonce})
	if err := ss.c.write(&envelope{Cookie: env.Cookie, Kind: kindHello, Body: challenge}); err != nil {
		return err
	}
	var proof authProof
	penv, err := next(kindAuth, &proof, codeAuth, "authentication failed: ")
	if err != nil {
		return err
	}
	t := hmacauth.Transcript{Label: authLabel, DialerHello: env.Body, ListenerHello: challenge, DialerNonce: hello.Nonce, ListenerNonce: nonce}
	if !hmacauth.Valid(proof.MAC, t.Proof(secret, hmacauth.Dialer)) {
		return refuse(penv, errorf(codeAuth, "authentication failed: the host's proof does not match: "+
			"the host and the UROM service have different secrets (or the handshake was tampered with)"))
	}
	return ss.welcome(penv, hello, t.Proof(secret, hmacauth.Listener), refuse)
}

// welcome ends a host's handshake: it answers req with the service's
// version and, for an authenticated host, the service's proof (mac), or
// refuses a host whose component it cannot serve.
func (ss *session) welcome(req *envelope, hello Hello, mac []byte, refuse func(*envelope, *Error) error) error {
	s := ss.s
	if err := s.checkVersion(hello); err != nil {
		return refuse(req, err)
	}
	body, _ := encodeBody(HelloReply{Service: serviceName, ComponentVersion: s.cfg.ComponentVersion, MAC: mac})
	if err := ss.c.write(&envelope{Cookie: req.Cookie, Kind: req.Kind, Body: body}); err != nil {
		return err
	}
	s.log.Debug("host connected", zap.String("peer", ss.c.c.RemoteAddr().String()), zap.Bool("authenticated", mac != nil))
	return nil
}

// serviceName is what a service calls itself in HelloReply.
const serviceName = "rdmo-urom"

// checkVersion refuses a host whose component the service cannot serve.
func (s *Service) checkVersion(h Hello) *Error {
	if h.Component != s.cfg.Component || !compatible(h.ComponentVersion, s.cfg.ComponentVersion) {
		return errorf(codeVersion, "host wants %s %s; this service has %s %s", h.Component, h.ComponentVersion, s.cfg.Component, s.cfg.ComponentVersion)
	}
	return nil
}

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
				err = errorf(codeTimeout, "hello: no answer from the service within %v", c.opts.CallTimeout)
			}
		}
		if err != nil {
			c.c.Close()
		}
	}()
	secret := c.opts.Secret
	exchange := func(cookie uint64, kind string, body []byte) (*envelope, error) {
		if err := c.c.write(&envelope{Cookie: cookie, Kind: kind, Body: body}); err != nil {
			return nil, fmt.Errorf("urom: send %s: %w", kind, err)
		}
		env, err := c.c.readFrame(deadline, deadline, handshakeMaxFrame)
		if err != nil {
			return nil, fmt.Errorf("urom: %s: %w", kind, err)
		}
		if env.Cookie != cookie || env.Kind != kind {
			return nil, errorf(codeBadRequest, "%s: the service answered with a %q frame (cookie %d)", kind, env.Kind, env.Cookie)
		}
		return env, errorFromEnvelope(env)
	}

	hello := Hello{Component: c.opts.Component, ComponentVersion: c.opts.ComponentVersion}
	if len(secret) > 0 {
		if hello.Nonce, err = hmacauth.NewNonce(); err != nil {
			return reply, fmt.Errorf("urom: %w", err)
		}
		hello.Auth = true
	}
	helloBody, err := encodeBody(hello)
	if err != nil {
		return reply, err
	}
	env, err := exchange(1, kindHello, helloBody)
	if err != nil {
		return reply, err
	}
	if err := decodeBody(env.Body, &reply); err != nil {
		return reply, errorf(codeBadRequest, "malformed hello answer: %v", err)
	}
	switch {
	case len(secret) == 0 && reply.Auth:
		return reply, errorf(codeAuth, "authentication failed: the UROM service requires a shared secret and the host has none configured")
	case len(secret) == 0:
		return reply, nil
	case !reply.Auth:
		return reply, errorf(codeAuth, "authentication failed: the host requires the UROM service to prove a shared secret "+
			"and the service did not (it has no secret configured, or does not support authentication)")
	}
	if err := hmacauth.CheckPeerNonce(reply.Nonce, hello.Nonce); err != nil {
		return reply, errorf(codeAuth, "authentication failed: %v", err)
	}
	t := hmacauth.Transcript{Label: authLabel, DialerHello: helloBody, ListenerHello: env.Body, DialerNonce: hello.Nonce, ListenerNonce: reply.Nonce}
	proof, err := encodeBody(authProof{MAC: t.Proof(secret, hmacauth.Dialer)})
	if err != nil {
		return reply, err
	}
	if env, err = exchange(2, kindAuth, proof); err != nil {
		return reply, err
	}
	reply = HelloReply{}
	if err := decodeBody(env.Body, &reply); err != nil {
		return reply, errorf(codeBadRequest, "malformed authentication answer: %v", err)
	}
	if !hmacauth.Valid(reply.MAC, t.Proof(secret, hmacauth.Listener)) {
		return reply, errorf(codeAuth, "authentication failed: the UROM service's proof does not match: "+
			"the host and the service have different secrets (or the handshake was tampered with)")
	}
	return reply, nil
}

package service

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/hmacauth"
	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/internal/uromwire"
)

// DefaultHandshakeTimeout is the default Config.HandshakeTimeout.
const DefaultHandshakeTimeout = 10 * time.Second

// handshake runs a host's hello (and authentication) on the service side.
// It returns nil when the session may start; otherwise it has answered the
// host with the reason when it could, and logged one line with the host's
// address.
func (ss *session) handshake() error {
	s := ss.s
	peer := zap.String("peer", ss.c.C.RemoteAddr().String())
	deadline := time.Now().Add(s.cfg.HandshakeTimeout)
	read := func(kind string) (*uromwire.Envelope, error) {
		env, err := ss.c.ReadFrame(deadline, deadline, uromwire.HandshakeMaxFrame)
		if err != nil {
			var ne net.Error
			switch {
			case errors.Is(err, net.ErrClosed):
				return nil, err // the service is closing
			case errors.As(err, &ne) && ne.Timeout():
				err = fmt.Errorf("no %s message within the handshake deadline (%v)", kind, s.cfg.HandshakeTimeout)
			}
			// A frame of another protocol version is a refusal for
			// its version (the host cannot read an answer in ours),
			// not a host that went silent or broke off.
			if errors.Is(err, uromwire.ErrVersion) {
				s.stats.inc(s.stats.refused, "version")
				s.hsLog.Warn("host refused: incompatible protocol version", peer, zap.Error(err))
				return env, err
			}
			s.stats.inc(s.stats.refused, "dropped")
			s.hsLog.Warn("host dropped during the handshake", peer, zap.Error(err))
		}
		return env, err
	}
	refuse := func(req *uromwire.Envelope, e *urom.Error) error {
		msg, why := "host refused", "bad_request"
		switch e.Code {
		case uromwire.CodeAuth:
			msg, why = "host refused: authentication failed", "auth"
		case uromwire.CodeVersion:
			msg, why = "host refused: incompatible version", "version"
		}
		s.stats.inc(s.stats.refused, why)
		// Logged before the answer, so that the line is there when the
		// host learns of its refusal.
		s.hsLog.Warn(msg, peer, zap.String("reason", e.Message))
		ss.c.Write(&uromwire.Envelope{Cookie: req.Cookie, Kind: req.Kind, Code: e.Code, Status: e.Message})
		return e
	}

	// next reads the next message, which must be of kind and decode into
	// v; anything else is refused with code, its message after prefix.
	next := func(kind string, v any, code, prefix string) (*uromwire.Envelope, error) {
		env, err := read(kind)
		if err != nil {
			return nil, err
		}
		if env.Kind != kind {
			return nil, refuse(env, errorf(code, "%sexpected %s, got %q (nothing is served before)", prefix, kind, env.Kind))
		}
		if err := uromwire.DecodeBody(env.Body, v); err != nil {
			return nil, refuse(env, errorf(code, "%smalformed %s: %v", prefix, kind, err))
		}
		return env, nil
	}

	var hello urom.Hello
	env, err := next(uromwire.KindHello, &hello, uromwire.CodeBadRequest, "")
	if err != nil {
		return err
	}
	secret := s.cfg.Secret
	switch {
	case len(secret) > 0 && !hello.Auth:
		return refuse(env, errorf(uromwire.CodeAuth, "authentication failed: this UROM service requires hosts to prove its shared secret "+
			"(rdmo dpu --secret-file) and the host has no secret configured"))
	case len(secret) == 0 && hello.Auth:
		return refuse(env, errorf(uromwire.CodeAuth, "authentication failed: the host requires the UROM service to prove a shared secret "+
			"and this service has none configured (rdmo dpu --secret-file)"))
	case len(secret) == 0:
		return ss.welcome(env, hello, nil, refuse)
	}

	nonce, err := hmacauth.NewNonce()
	if err != nil {
		return refuse(env, errorf(uromwire.CodeInternal, "%v", err))
	}
	if err := hmacauth.CheckPeerNonce(hello.Nonce, nonce); err != nil {
		return refuse(env, errorf(uromwire.CodeAuth, "authentication failed: %v", err))
	}
	challenge, _ := uromwire.EncodeBody(urom.HelloReply{Service: uromwire.ServiceName, Auth: true, Nonce: nonce})
	if err := ss.c.Write(&uromwire.Envelope{Cookie: env.Cookie, Kind: uromwire.KindHello, Body: challenge}); err != nil {
		return err
	}
	var proof uromwire.AuthProof
	penv, err := next(uromwire.KindAuth, &proof, uromwire.CodeAuth, "authentication failed: ")
	if err != nil {
		return err
	}
	t := hmacauth.Transcript{Label: uromwire.AuthLabel, DialerHello: env.Body, ListenerHello: challenge, DialerNonce: hello.Nonce, ListenerNonce: nonce}
	if !hmacauth.Valid(proof.MAC, t.Proof(secret, hmacauth.Dialer)) {
		return refuse(penv, errorf(uromwire.CodeAuth, "authentication failed: the host's proof does not match: "+
			"the host and the UROM service have different secrets (or the handshake was tampered with)"))
	}
	return ss.welcome(penv, hello, t.Proof(secret, hmacauth.Listener), refuse)
}

// welcome ends a host's handshake: it answers req with the service's
// version and, for an authenticated host, the service's proof (mac), or
// refuses a host whose component it cannot serve.
func (ss *session) welcome(req *uromwire.Envelope, hello urom.Hello, mac []byte, refuse func(*uromwire.Envelope, *urom.Error) error) error {
	s := ss.s
	if err := s.checkVersion(hello); err != nil {
		return refuse(req, err)
	}
	body, _ := uromwire.EncodeBody(urom.HelloReply{Service: uromwire.ServiceName, ComponentVersion: s.cfg.ComponentVersion, MAC: mac})
	if err := ss.c.Write(&uromwire.Envelope{Cookie: req.Cookie, Kind: req.Kind, Body: body}); err != nil {
		return err
	}
	s.log.Debug("host connected", zap.String("peer", ss.c.C.RemoteAddr().String()), zap.Bool("authenticated", mac != nil))
	return nil
}

// checkVersion refuses a host whose component the service cannot serve.
func (s *Service) checkVersion(h urom.Hello) *urom.Error {
	if h.Component != s.cfg.Component || !compatible(h.ComponentVersion, s.cfg.ComponentVersion) {
		return errorf(uromwire.CodeVersion, "host wants %s %s; this service has %s %s", h.Component, h.ComponentVersion, s.cfg.Component, s.cfg.ComponentVersion)
	}
	return nil
}

// compatible reports whether a host asking for version want can use a
// component of version have: same major version, have at least want.
func compatible(want, have string) bool {
	wm, wn, ok1 := majorMinor(want)
	hm, hn, ok2 := majorMinor(have)
	return ok1 && ok2 && wm == hm && hn >= wn
}

func majorMinor(v string) (int, int, bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

func errorf(code, format string, args ...any) *urom.Error {
	return uromwire.Errorf(code, format, args...)
}

// Package urom is the UROM protocol and its host side: the messages and
// typed errors between a host and a UROM service, the host's client (Dial,
// Client, WorkerProcess), and StartEmbedded, which starts a service as the
// host's own child. The service itself (a daemon that lists the op-handler
// plugins it has, runs RDMO workers as separate OS processes with a chosen
// plugin set, and carries commands from hosts to those workers and their
// answers back) is urom/service; a host links neither it nor its metrics.
//
// # Command channel
//
// Hosts reach the service over TCP; the service reaches each worker process
// over a socket pair it hands the worker at start. Both links carry the same
// frames: a fixed prefix (magic, version, length) and a msgpack body. TCP
// rather than UCX for this low-rate control path because a connection's end
// is a reliable sign that the peer is gone (UCX 1.13's shared-memory
// transports cannot detect a dead peer), because it does not depend on which
// UCX transports a deployment enables, and because every read and write can
// carry a deadline. The RDMO data path stays on UCX.
//
// Every request carries a cookie; its answer carries the same cookie; every
// request gets an answer or a typed error when its deadline passes.
//
// # Authentication
//
// A service with a secret (service.Config.Secret, rdmo dpu --secret-file) serves a
// host only after the two proved the secret to each other in the hello
// (ClientOptions.Secret on the host side): a mutual HMAC-SHA256
// challenge–response with fresh nonces, the host's proof checked before
// the service sends its own or anything else, the whole handshake bounded
// by service.Config.HandshakeTimeout (auth.go here, handshake.go there). A wrong or missing secret, or a
// secret on one side only, fails with ErrAuth on the host's side. The
// secret authenticates the connection's ends; it does not encrypt the
// channel or protect it once open (docs/SECURITY.md).
package urom

// Package urom is the UROM service: a daemon that lists the op-handler
// plugins it has, runs RDMO workers as separate OS processes with a chosen
// plugin set, and carries commands from hosts to those workers and their
// answers back.
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
package urom

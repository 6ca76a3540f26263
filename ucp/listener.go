package ucp

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Listener accepts client-server connections on a socket address.
type Listener struct {
	h      *handle
	w      *Worker
	l      C.ucp_listener_h
	ctx    unsafe.Pointer
	token  uint64
	port   uint16
	accept func(*ConnRequest)
}

// ConnRequest is a pending connection; answer it with Accept or Reject.
type ConnRequest struct {
	l   *Listener
	req unsafe.Pointer
}

// Listen listens on "host:port" (port 0 picks a free port). accept is called
// on the worker's goroutine, inside Progress, for each connection request;
// it must call Accept or Reject.
func (w *Worker) Listen(addr string, accept func(*ConnRequest)) (*Listener, error) {
	if err := w.guard(); err != nil {
		return nil, err
	}
	if accept == nil {
		return nil, fmt.Errorf("ucp: listen without an accept function")
	}
	host, port, err := splitHostPort(addr)
	if err != nil {
		return nil, err
	}
	chost := C.CString(host)
	defer C.free(unsafe.Pointer(chost))
	w.nextLn++
	l := &Listener{w: w, token: w.nextLn, accept: accept}
	var bound C.uint16_t
	if st := C.shim_listener_create(w.sw, chost, C.uint16_t(port), C.uint64_t(l.token), &l.l, &bound, &l.ctx); st != C.UCS_OK {
		return nil, fmt.Errorf("ucp: listen on %s: %w", addr, Status(st))
	}
	l.port = uint16(bound)
	l.h = newHandle(l, "ucp.Listener")
	w.lns[l.token] = l
	return l, nil
}

// Port is the port the listener is bound to.
func (l *Listener) Port() int { return int(l.port) }

// Close stops listening.
func (l *Listener) Close() error {
	if l.h.closed.Load() {
		return nil
	}
	if err := l.w.onThread("ucp.Listener"); err != nil {
		return err
	}
	if !l.h.markClosed() {
		return nil
	}
	delete(l.w.lns, l.token)
	C.ucp_listener_destroy(l.l)
	C.free(l.ctx)
	return nil
}

func (w *Worker) connRequest(token uint64, req unsafe.Pointer) {
	l, ok := w.lns[token]
	if !ok {
		return
	}
	l.accept(&ConnRequest{l: l, req: req})
}

// Accept makes an endpoint for the connection.
func (r *ConnRequest) Accept(opts EndpointOptions) (*Endpoint, error) {
	w := r.l.w
	if err := w.guard(); err != nil {
		return nil, err
	}
	var ep C.ucp_ep_h
	if st := C.shim_ep_create_conn(w.sw, r.req, 1, &ep); st != C.UCS_OK {
		return nil, fmt.Errorf("ucp: accept: %w", Status(st))
	}
	e := w.newEndpoint(ep, nameOr(opts.Name, "accepted"), true, opts.OnError)
	e.detect = true
	return e, nil
}

// Reject refuses the connection.
func (r *ConnRequest) Reject() error {
	if err := r.l.h.check(); err != nil {
		return err
	}
	if err := r.l.w.onThread("ucp.Listener"); err != nil {
		return err
	}
	return statusErr(C.ucp_listener_reject(r.l.l, C.ucp_conn_request_h(r.req)))
}

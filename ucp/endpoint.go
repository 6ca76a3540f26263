package ucp

/*
#include <stdlib.h>
#include <string.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"time"
	"unsafe"
)

// EndpointOptions configure a new endpoint.
type EndpointOptions struct {
	// Name identifies the endpoint in errors and logs.
	Name string
	// OnError is called (on the worker's goroutine) once when UCX reports
	// the endpoint failed. Every operation pending on it completes with an
	// error and later operations return the same error.
	OnError func(ep *Endpoint, err error)
	// ErrorHandling selects peer-failure detection for endpoints made
	// from a worker address. Sockaddr endpoints always detect failures.
	ErrorHandling ErrorHandling
}

// ErrorHandling is the peer-failure detection an endpoint asks UCX for.
type ErrorHandling int

const (
	// ErrorHandlingPrefer detects peer failure when a transport to the
	// peer can, and otherwise connects without detection.
	ErrorHandlingPrefer ErrorHandling = 0
	// ErrorHandlingNone never asks for detection (it narrows no transport
	// choice).
	ErrorHandlingNone ErrorHandling = 1
	// ErrorHandlingRequire fails Connect unless detection is possible.
	ErrorHandlingRequire ErrorHandling = 2
)

// UCX 1.13's shared-memory transports detect a failed peer only with their
// error handling turned on (NewContext does, see shmErrorHandling); without
// it an endpoint that asks for detection finds no transport at all. By
// default (ErrorHandlingPrefer) Connect asks for detection first and, when
// that leaves the peer unreachable, connects without it;
// PeerFailureDetection tells which one the endpoint got. Both ends of a
// connection must agree: UCX refuses an endpoint whose peer's endpoint has
// another error-handling mode ("asymmetric endpoint configuration"). Without detection a dead peer is noticed by the layer above
// (its control connection closes) and the endpoint is closed with
// CloseForce, which fails everything pending on it.

func (m ErrorHandling) shimMode() C.int {
	switch m {
	case ErrorHandlingNone:
		return 0
	case ErrorHandlingRequire:
		return 2
	default:
		return 1
	}
}

// Endpoint is a connection from a worker to a remote worker.
type Endpoint struct {
	h       *handle
	w       *Worker
	ep      C.ucp_ep_h
	name    string
	owned   bool // made by us (not UCX's reply endpoint)
	err     error
	onError func(*Endpoint, error)
	rkeys   map[*RemoteKey]struct{}
	detect  bool
	// Value is free for the owner's use, e.g. to find its connection state
	// from Message.Reply without a map lookup.
	Value any
}

// SendFlags select the active message protocol.
type SendFlags uint32

const (
	// SendReply passes the sender's endpoint to the receiver (Message.Reply).
	SendReply SendFlags = C.UCP_AM_SEND_FLAG_REPLY
	// SendEager forces the eager protocol.
	SendEager SendFlags = C.UCP_AM_SEND_FLAG_EAGER
	// SendRendezvous forces the rendezvous protocol.
	SendRendezvous SendFlags = C.UCP_AM_SEND_FLAG_RNDV
)

// AtomicOp is a 64-bit remote atomic operation.
type AtomicOp uint32

const (
	AtomicAdd         AtomicOp = C.SHIM_AMO_ADD   // add, no result
	AtomicFetchAdd    AtomicOp = C.SHIM_AMO_FADD  // add, result: old value
	AtomicSwap        AtomicOp = C.SHIM_AMO_SWAP  // store, result: old value
	AtomicCompareSwap AtomicOp = C.SHIM_AMO_CSWAP // store if equal, result: old value
	// DefaultCloseTimeout bounds a graceful Close waiting for UCX.
	DefaultCloseTimeout = 10 * time.Second
)

func (w *Worker) newEndpoint(ep C.ucp_ep_h, name string, owned bool, onError func(*Endpoint, error)) *Endpoint {
	e := &Endpoint{w: w, ep: ep, name: name, owned: owned, onError: onError}
	if owned {
		e.h = newHandle(e, "ucp.Endpoint")
	} else {
		// UCX owns reply endpoints: nothing to leak, Close only forgets it.
		e.h = &handle{kind: "ucp.Endpoint (reply)"}
	}
	w.eps[ep] = e
	return e
}

// Connect makes an endpoint to the worker whose Address is addr.
func (w *Worker) Connect(addr []byte, opts EndpointOptions) (*Endpoint, error) {
	if err := w.guard(); err != nil {
		return nil, err
	}
	if len(addr) == 0 {
		return nil, fmt.Errorf("ucp: connect: empty worker address")
	}
	caddr := C.CBytes(addr)
	defer C.free(caddr)
	var ep C.ucp_ep_h
	var detect C.int
	if st := C.shim_ep_create_addr(w.sw, caddr, opts.ErrorHandling.shimMode(), &ep, &detect); st != C.UCS_OK {
		if opts.ErrorHandling == ErrorHandlingRequire && st == C.UCS_ERR_UNREACHABLE {
			// No transport to the peer offers detection (e.g. shared
			// memory with UCX's error handling turned off).
			return nil, fmt.Errorf("ucp: connect %s: peer-failure detection: %w (%w)", opts.Name, ErrNotSupported, Status(st))
		}
		return nil, fmt.Errorf("ucp: connect %s: %w", opts.Name, Status(st))
	}
	e := w.newEndpoint(ep, nameOr(opts.Name, "addr"), true, opts.OnError)
	e.detect = detect != 0
	return e, nil
}

// Dial makes a client-server endpoint to a Listener at "host:port".
func (w *Worker) Dial(addr string, opts EndpointOptions) (*Endpoint, error) {
	if err := w.guard(); err != nil {
		return nil, err
	}
	host, port, err := splitHostPort(addr)
	if err != nil {
		return nil, err
	}
	chost := C.CString(host)
	defer C.free(unsafe.Pointer(chost))
	var ep C.ucp_ep_h
	if st := C.shim_ep_create_sockaddr(w.sw, chost, C.uint16_t(port), 1, &ep); st != C.UCS_OK {
		return nil, fmt.Errorf("ucp: dial %s: %w", addr, Status(st))
	}
	e := w.newEndpoint(ep, nameOr(opts.Name, addr), true, opts.OnError)
	e.detect = true
	return e, nil
}

// PeerFailureDetection reports whether UCX detects the failure of this
// endpoint's peer (see Connect).
func (e *Endpoint) PeerFailureDetection() bool { return e.detect }

func splitHostPort(addr string) (string, uint16, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("ucp: address %q: %w", addr, err)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("ucp: address %q: bad port", addr)
	}
	return host, uint16(port), nil
}

func nameOr(name, def string) string {
	if name != "" {
		return name
	}
	return def
}

// replyEndpoint maps a reply endpoint handle to its Endpoint, wrapping
// endpoints UCX made on its own (unowned) on first sight.
func (w *Worker) replyEndpoint(h C.ucp_ep_h) *Endpoint {
	if e := w.lastEP; e != nil && e.ep == h {
		return e
	}
	e, ok := w.eps[h]
	if !ok {
		e = w.newEndpoint(h, "reply", false, nil)
	}
	w.lastEP = e
	return e
}

func (w *Worker) endpointFailed(h C.ucp_ep_h, st Status) {
	e, ok := w.eps[h]
	if !ok || e.err != nil {
		return
	}
	e.err = &EndpointError{Endpoint: e.name, Status: st}
	if e.onError != nil {
		e.onError(e, e.err)
	}
}

// Name is the endpoint's name.
func (e *Endpoint) Name() string { return e.name }

// Worker is the worker the endpoint belongs to.
func (e *Endpoint) Worker() *Worker { return e.w }

// Err is the endpoint's failure, or nil while it is healthy.
func (e *Endpoint) Err() error { return e.err }

// usable is the check every operation makes before queueing.
func (e *Endpoint) usable() error {
	if e.err != nil {
		return e.err
	}
	if e.owned {
		return e.h.check()
	}
	if _, ok := e.w.eps[e.ep]; !ok {
		return fmt.Errorf("ucp.Endpoint (reply): %w", ErrClosed)
	}
	return e.w.h.check()
}

// Info returns UCX's description of the endpoint: its lanes and transports.
func (e *Endpoint) Info() string {
	if e.usable() != nil {
		return ""
	}
	e.w.mustOnThread("ucp.Endpoint")
	return goStringAndFree(C.shim_ep_info(e.ep))
}

var laneTransport = regexp.MustCompile(`lane\[\d+\]:\s+\d+:(\w+)/`)

// Transports lists the transports of the endpoint's lanes, e.g. ["posix",
// "cma"] on shared memory or ["tcp"] across the network.
func (e *Endpoint) Transports() []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range laneTransport.FindAllStringSubmatch(e.Info(), -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			out = append(out, m[1])
		}
	}
	return out
}

// InlineLen is how many bytes of an active message SendAM copies at once
// into the send's own C memory: a header and payload that fit together
// are free for reuse when SendAM returns, and need no completion.
const InlineLen = C.SHIM_INLINE

// SendAM queues an active message with a header and a payload. The payload
// must stay untouched until the completion; the header, and a payload that
// fits with it in the slot's inline bytes (InlineLen), are copied at once.
func (e *Endpoint) SendAM(id uint16, header, data []byte, flags SendFlags, c Completer, tag uint64) error {
	if err := e.usable(); err != nil {
		return err
	}
	tok, op, err := e.w.acquire(c, tag)
	if err != nil {
		return err
	}
	op.kind = C.SHIM_OP_AM_SEND
	op.ep = unsafe.Pointer(e.ep)
	op.am_id = C.uint32_t(id)
	op.flags = C.uint32_t(flags)
	op.header_len = C.uint64_t(len(header))
	op.length = C.uint64_t(len(data))
	if len(header)+len(data) <= C.SHIM_INLINE && flags&SendRendezvous == 0 {
		inl := e.w.inline(tok)
		copy(inl, header)
		copy(inl[len(header):], data)
		if len(header) > 0 {
			op.header = unsafe.Pointer(&inl[0])
		}
		if len(data) > 0 {
			op.buffer = unsafe.Pointer(&inl[len(header)])
		}
	} else if len(header) <= C.SHIM_INLINE {
		// The header goes in the slot's own C memory, which stays the
		// slot's until the completion: a header lives in Go memory
		// (the initiator's queue), and pinning it takes a lock of the
		// runtime's, a tenth of a 4 KiB send's cost in the initiator.
		// The data is pinned, which costs nothing when it is not Go
		// memory (a lend pool's).
		inl := e.w.inline(tok)
		copy(inl, header)
		if len(header) > 0 {
			op.header = unsafe.Pointer(&inl[0])
		}
		op.buffer = e.w.pinned(tok, data)
	} else {
		op.header = e.w.pinned(tok, header)
		op.buffer = e.w.pinned(tok, data)
	}
	if c != nil {
		e.w.slots[tok].ep = e
	}
	return nil
}

// SendAMSync sends an active message and waits for local completion.
func (e *Endpoint) SendAMSync(id uint16, header, data []byte, flags SendFlags, timeout time.Duration) error {
	return e.w.runSync(timeout, func(c Completer) error { return e.SendAM(id, header, data, flags, c, 0) })
}

func (e *Endpoint) rma(kind C.uint32_t, local []byte, raddr uint64, rkey *RemoteKey, c Completer, tag uint64) error {
	if err := e.usable(); err != nil {
		return err
	}
	if err := rkey.usableOn(e); err != nil {
		return err
	}
	tok, op, err := e.w.acquire(c, tag)
	if err != nil {
		return err
	}
	op.kind = kind
	op.ep = unsafe.Pointer(e.ep)
	op.raddr = C.uint64_t(raddr)
	op.rkey = unsafe.Pointer(rkey.rkey)
	op.length = C.uint64_t(len(local))
	if kind == C.SHIM_OP_PUT && len(local) <= C.SHIM_INLINE {
		inl := e.w.inline(tok)
		copy(inl, local)
		op.buffer = unsafe.Pointer(&inl[0])
	} else {
		op.buffer = e.w.pinned(tok, local)
	}
	if c != nil {
		e.w.slots[tok].ep = e
	}
	return nil
}

// Put queues a write of local to raddr in the remote region of rkey.
func (e *Endpoint) Put(local []byte, raddr uint64, rkey *RemoteKey, c Completer, tag uint64) error {
	return e.rma(C.SHIM_OP_PUT, local, raddr, rkey, c, tag)
}

// Get queues a read from raddr in the remote region of rkey into local.
func (e *Endpoint) Get(local []byte, raddr uint64, rkey *RemoteKey, c Completer, tag uint64) error {
	return e.rma(C.SHIM_OP_GET, local, raddr, rkey, c, tag)
}

// Atomic queues a 64-bit atomic at raddr (8-byte aligned). For
// AtomicCompareSwap, value is stored if the remote word equals compare.
// Fetching operations deliver the old value in Completion.Value.
func (e *Endpoint) Atomic(op AtomicOp, value, compare, raddr uint64, rkey *RemoteKey, c Completer, tag uint64) error {
	if err := e.usable(); err != nil {
		return err
	}
	if err := rkey.usableOn(e); err != nil {
		return err
	}
	if raddr%8 != 0 {
		return fmt.Errorf("ucp: atomic at unaligned address %#x", raddr)
	}
	tok, cop, err := e.w.acquire(c, tag)
	if err != nil {
		return err
	}
	cop.kind = C.SHIM_OP_ATOMIC
	cop.atomic_op = C.uint32_t(op)
	cop.ep = unsafe.Pointer(e.ep)
	cop.raddr = C.uint64_t(raddr)
	cop.rkey = unsafe.Pointer(rkey.rkey)
	cop.value = C.uint64_t(value)
	cop.compare = C.uint64_t(compare)
	if op != AtomicAdd {
		e.w.slots[tok].kind = slotAtomic
	}
	e.w.slots[tok].ep = e
	return nil
}

// Flush queues an endpoint flush: it completes when every RMA and atomic
// issued on the endpoint before it has completed at the remote side.
func (e *Endpoint) Flush(c Completer, tag uint64) error {
	if err := e.usable(); err != nil {
		return err
	}
	tok, op, err := e.w.acquire(c, tag)
	if err != nil {
		return err
	}
	op.kind = C.SHIM_OP_EP_FLUSH
	op.ep = unsafe.Pointer(e.ep)
	e.w.slots[tok].ep = e
	return nil
}

// PutSync writes and waits for local completion.
func (e *Endpoint) PutSync(local []byte, raddr uint64, rkey *RemoteKey, timeout time.Duration) error {
	return e.w.runSync(timeout, func(c Completer) error { return e.Put(local, raddr, rkey, c, 0) })
}

// GetSync reads and waits for the data.
func (e *Endpoint) GetSync(local []byte, raddr uint64, rkey *RemoteKey, timeout time.Duration) error {
	return e.w.runSync(timeout, func(c Completer) error { return e.Get(local, raddr, rkey, c, 0) })
}

// AtomicSync runs an atomic and returns the old value (for fetching ops).
func (e *Endpoint) AtomicSync(op AtomicOp, value, compare, raddr uint64, rkey *RemoteKey, timeout time.Duration) (uint64, error) {
	c, err := e.w.runSyncValue(timeout, func(c Completer) error { return e.Atomic(op, value, compare, raddr, rkey, c, 0) })
	return c.Value, err
}

// FlushSync flushes the endpoint and waits for it.
func (e *Endpoint) FlushSync(timeout time.Duration) error {
	return e.w.runSync(timeout, func(c Completer) error { return e.Flush(c, 0) })
}

// Close closes the endpoint: gracefully (flushing outstanding operations)
// while it is healthy, forcibly once it failed. Outside Progress it waits for
// the close to finish, at most DefaultCloseTimeout (ErrTimeout); from a
// handler or completer it only starts it.
func (e *Endpoint) Close() error { return e.closeWith(e.err != nil, DefaultCloseTimeout) }

// CloseWithin is Close with its own bound on the wait. A graceful close
// waits for the peer to take what was sent, which over a cut network UCX
// may not give up on for a long time: a caller with a deadline of its own
// passes what is left of it. When the time is up CloseWithin returns
// ErrTimeout; the close stays pending in UCX until Worker.Close, which
// releases it (UCX allows one close per endpoint, so it cannot be forced
// on top).
func (e *Endpoint) CloseWithin(timeout time.Duration) error {
	return e.closeWith(e.err != nil, timeout)
}

// CloseForce closes the endpoint at once, failing its outstanding operations.
func (e *Endpoint) CloseForce() error { return e.closeWith(true, DefaultCloseTimeout) }

// StartClose queues a close of the endpoint, graceful unless force is set or
// the endpoint failed, and returns at once; c is called with the outcome from
// a later Progress (a graceful close fails when the peer cannot be flushed).
// It is for a goroutine that must keep progressing something else while the
// close runs: two workers on one thread that talk to each other cannot block
// in Close, as each needs the other's progress. For UCX's reply endpoints
// StartClose only forgets the endpoint (c is still called). An endpoint
// already closed, or whose worker is closed, returns ErrClosed and c is not
// called.
func (e *Endpoint) StartClose(force bool, c Completer, tag uint64) error {
	if err := e.w.onThread("ucp.Endpoint"); err != nil {
		return err
	}
	w := e.w
	if err := w.h.check(); err != nil {
		return err
	}
	if !e.owned {
		w.forget(e)
		_, op, err := w.acquire(c, tag)
		if err != nil {
			return err
		}
		op.kind = C.SHIM_OP_NOP
		return nil
	}
	if err := e.h.check(); err != nil {
		return err
	}
	force = force || e.err != nil
	tok, op, err := w.acquire(CompleterFunc(func(comp Completion) {
		e.dropRkeys()
		w.forget(e)
		if c != nil {
			if force {
				comp.Err = nil
			}
			c.Complete(comp)
		}
	}), tag)
	if err != nil {
		return err
	}
	e.h.markClosed()
	op.kind = C.SHIM_OP_EP_CLOSE
	op.ep = unsafe.Pointer(e.ep)
	if force {
		op.flags = C.UCP_EP_CLOSE_FLAG_FORCE
	}
	w.slots[tok].ep = e
	return nil
}

func (e *Endpoint) closeWith(force bool, timeout time.Duration) error {
	if err := e.w.onThread("ucp.Endpoint"); err != nil {
		return err
	}
	if !e.owned {
		delete(e.w.eps, e.ep)
		if e.w.lastEP == e {
			e.w.lastEP = nil
		}
		return nil
	}
	if !e.h.markClosed() {
		return nil
	}
	w := e.w
	if w.h.check() != nil {
		e.dropRkeys()
		return nil
	}
	var flags C.uint32_t
	if force {
		flags = C.UCP_EP_CLOSE_FLAG_FORCE
	}
	sw := &syncWaiter{}
	tok, op, err := w.acquire(sw, 0)
	if err == ErrTooManyOutstanding && !w.inProgress {
		if perr := w.progressUntil(func() bool { return len(w.free) > 0 }, timeout); perr == nil {
			tok, op, err = w.acquire(sw, 0)
		}
	}
	if err != nil {
		return fmt.Errorf("ucp: close endpoint %s: %w", e.name, err)
	}
	op.kind = C.SHIM_OP_EP_CLOSE
	op.ep = unsafe.Pointer(e.ep)
	op.flags = flags
	w.slots[tok].ep = e
	if w.inProgress {
		// Remote keys may be used by operations queued before the close,
		// so they go when the close completes.
		w.slots[tok].c = CompleterFunc(func(Completion) {
			e.dropRkeys()
			w.forget(e)
		})
		return nil
	}
	err = w.progressUntil(func() bool { return sw.done }, timeout)
	if err != nil {
		return fmt.Errorf("ucp: close endpoint %s: %w", e.name, err)
	}
	e.dropRkeys()
	w.forget(e)
	if sw.c.Err != nil && !force {
		return fmt.Errorf("ucp: close endpoint %s: %w", e.name, sw.c.Err)
	}
	return nil
}

func (e *Endpoint) dropRkeys() {
	for k := range e.rkeys {
		k.Close()
	}
}

func (w *Worker) forget(e *Endpoint) {
	if w.eps[e.ep] == e {
		delete(w.eps, e.ep)
	}
	if w.lastEP == e {
		w.lastEP = nil
	}
}

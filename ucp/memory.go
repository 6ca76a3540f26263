package ucp

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Memory is a region mapped with UCX so remote peers can reach it.
type Memory struct {
	h         *handle
	ctx       *Context
	memh      C.ucp_mem_h
	addr      unsafe.Pointer
	length    int
	allocated bool
	pin       *runtime.Pinner
}

// Allocate asks UCX to allocate and map n bytes. Shared-memory transports
// (posix, sysv) reach memory UCX allocated directly; prefer it for regions
// that a worker on the same host writes into.
func (c *Context) Allocate(n int) (*Memory, error) {
	if err := c.h.check(); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("ucp: allocate %d bytes", n)
	}
	m := &Memory{ctx: c, allocated: true}
	var addr unsafe.Pointer
	var length C.size_t
	if st := C.shim_mem_map(c.ctx, nil, C.size_t(n), 1, &m.memh, &addr, &length); st != C.UCS_OK {
		return nil, fmt.Errorf("ucp: allocate %d bytes: %w", n, Status(st))
	}
	m.addr, m.length = addr, n
	m.h = newHandle(m, "ucp.Memory")
	return m, nil
}

// Map registers existing memory with UCX. Go memory is pinned until Close.
// Peers on the same host reach user memory through CMA (process_vm_writev),
// which needs ptrace permission between the processes.
func (c *Context) Map(buf []byte) (*Memory, error) {
	if err := c.h.check(); err != nil {
		return nil, err
	}
	if len(buf) == 0 {
		return nil, fmt.Errorf("ucp: map of an empty buffer")
	}
	m := &Memory{ctx: c, pin: new(runtime.Pinner)}
	p := unsafe.Pointer(unsafe.SliceData(buf))
	m.pin.Pin(p)
	var addr unsafe.Pointer
	var length C.size_t
	if st := C.shim_mem_map(c.ctx, p, C.size_t(len(buf)), 0, &m.memh, &addr, &length); st != C.UCS_OK {
		m.pin.Unpin()
		return nil, fmt.Errorf("ucp: map %d bytes: %w", len(buf), Status(st))
	}
	m.addr, m.length = p, len(buf)
	m.h = newHandle(m, "ucp.Memory")
	m.h.keep = [2]any{m.pin, buf}
	return m, nil
}

// Bytes is the mapped memory. For Allocate'd memory it is C memory, valid
// until Close.
func (m *Memory) Bytes() []byte {
	if m.h.check() != nil {
		return nil
	}
	return unsafe.Slice((*byte)(m.addr), m.length)
}

// Address is the region's virtual address, as remote peers name it.
func (m *Memory) Address() uint64 { return uint64(uintptr(m.addr)) }

// Len is the region's length in bytes.
func (m *Memory) Len() int { return m.length }

// PackRkey returns the region's remote key in the form peers unpack.
func (m *Memory) PackRkey() ([]byte, error) {
	if err := m.h.check(); err != nil {
		return nil, err
	}
	var buf unsafe.Pointer
	var n C.size_t
	if st := C.shim_rkey_pack(m.ctx.ctx, m.memh, &buf, &n); st != C.UCS_OK {
		return nil, fmt.Errorf("ucp: pack rkey: %w", Status(st))
	}
	defer C.ucp_rkey_buffer_release(buf)
	return C.GoBytes(buf, C.int(n)), nil
}

// PackExported returns the region's memory handle packed for export (so
// another process can import it and move data into it directly). It returns
// ErrNotSupported when the UCX headers predate exported handles (UCX < 1.14)
// or the transports cannot export.
func (m *Memory) PackExported() ([]byte, error) {
	if err := m.h.check(); err != nil {
		return nil, err
	}
	var buf unsafe.Pointer
	var n C.size_t
	if st := C.shim_memh_pack(m.ctx.ctx, m.memh, &buf, &n); st != C.UCS_OK {
		return nil, fmt.Errorf("ucp: pack exported memory handle: %w", Status(st))
	}
	defer C.shim_memh_buffer_release(buf)
	return C.GoBytes(buf, C.int(n)), nil
}

// Close unmaps the region (and frees it if UCX allocated it).
func (m *Memory) Close() error {
	if !m.h.markClosed() {
		return nil
	}
	st := C.ucp_mem_unmap(m.ctx.ctx, m.memh)
	if m.pin != nil {
		m.pin.Unpin()
	}
	return statusErr(st)
}

// RemoteKey is a peer's region key unpacked on one endpoint.
type RemoteKey struct {
	h    *handle
	ep   *Endpoint
	rkey C.ucp_rkey_h
}

// UnpackRkey unpacks a peer's packed remote key for use on this endpoint.
// It is closed with the endpoint if not before.
func (e *Endpoint) UnpackRkey(packed []byte) (*RemoteKey, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	if err := e.w.onThread("ucp.Endpoint"); err != nil {
		return nil, err
	}
	if len(packed) == 0 {
		return nil, fmt.Errorf("ucp: unpack of an empty rkey")
	}
	buf := C.CBytes(packed)
	defer C.free(buf)
	k := &RemoteKey{ep: e}
	if st := C.ucp_ep_rkey_unpack(e.ep, buf, &k.rkey); st != C.UCS_OK {
		return nil, fmt.Errorf("ucp: unpack rkey: %w", Status(st))
	}
	k.h = newHandle(k, "ucp.RemoteKey")
	if e.rkeys == nil {
		e.rkeys = map[*RemoteKey]struct{}{}
	}
	e.rkeys[k] = struct{}{}
	return k, nil
}

func (k *RemoteKey) usableOn(e *Endpoint) error {
	if k == nil {
		return fmt.Errorf("ucp: nil remote key")
	}
	if err := k.h.check(); err != nil {
		return err
	}
	if k.ep != e {
		return fmt.Errorf("ucp: remote key unpacked on endpoint %s used on %s", k.ep.name, e.name)
	}
	return nil
}

// Ptr maps n bytes at raddr of the remote region into this process, when the
// transport allows it (shared memory). Otherwise it returns an error that
// matches ErrNotSupported. The caller keeps raddr..raddr+n inside the region.
func (k *RemoteKey) Ptr(raddr uint64, n int) ([]byte, error) {
	if err := k.h.check(); err != nil {
		return nil, err
	}
	if err := k.ep.w.onThread("ucp.RemoteKey"); err != nil {
		return nil, err
	}
	var p unsafe.Pointer
	st := C.ucp_rkey_ptr(k.rkey, C.uint64_t(raddr), &p)
	switch st {
	case C.UCS_OK:
		return unsafe.Slice((*byte)(p), n), nil
	case C.UCS_ERR_UNREACHABLE, C.UCS_ERR_UNSUPPORTED:
		return nil, fmt.Errorf("ucp: rkey_ptr: no transport maps this region here: %w", ErrNotSupported)
	default:
		return nil, fmt.Errorf("ucp: rkey_ptr: %w", Status(st))
	}
}

// Detach makes k outlive its endpoint: the endpoint's close no longer
// destroys it, so memory mapped through it (Ptr) stays mapped until its
// owner calls Close, on the worker's thread, while the worker lives. For a
// mapping something may still read when the endpoint goes.
func (k *RemoteKey) Detach() error {
	if err := k.h.check(); err != nil {
		return err
	}
	if err := k.ep.w.onThread("ucp.RemoteKey"); err != nil {
		return err
	}
	delete(k.ep.rkeys, k)
	return nil
}

// Close destroys the remote key.
func (k *RemoteKey) Close() error {
	if k.h.closed.Load() {
		return nil
	}
	if err := k.ep.w.onThread("ucp.RemoteKey"); err != nil {
		return err
	}
	if !k.h.markClosed() {
		return nil
	}
	delete(k.ep.rkeys, k)
	C.ucp_rkey_destroy(k.rkey)
	return nil
}

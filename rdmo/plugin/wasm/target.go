//go:build wasip1

package wasm

import (
	"unsafe"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin/internal/wasmabi"
)

// Host functions of the worker (wasmabi.Import*). Pointers are offsets in
// linear memory; each returns 0 or a status.

//go:wasmimport rdmo region
func hostRegion(id uint64, out unsafe.Pointer) uint32

//go:wasmimport rdmo put
func hostPut(region, addr uint64, p unsafe.Pointer, n uint32) uint32

//go:wasmimport rdmo sync
func hostSync(ops unsafe.Pointer, n uint32) uint32

//go:wasmimport rdmo place
func hostPlace(req uint32, region, addr uint64) uint32

//go:wasmimport rdmo fetch
func hostFetch(req uint32, dst unsafe.Pointer, n uint32) uint32

//go:wasmimport rdmo flush
func hostFlush() uint32

//go:wasmimport rdmo write_back_all
func hostWriteBackAll() uint32

//go:wasmimport rdmo last_error
func hostLastError(dst unsafe.Pointer, n uint32) uint32

// target is the rdmo.Target of a module: every call is a host function
// call into the worker, which checks it as for a built-in handler.
type target struct {
	client rdmo.ClientID
	live   bool
	ops    []byte // remote op records of Sync
	slab   []byte // Buffer's memory, reset per call
	region [16]byte
	detail []byte
	// The last region Region answered in this call: a batch's requests
	// mostly name one region, and each host call crosses into the worker,
	// which checks every access against its own regions again anyway.
	last    rdmo.Region
	hasLast bool
}

var errDone = &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: "rdmo/plugin/wasm: Target used after its call returned"}

func (t *target) begin(c rdmo.ClientID) {
	t.client, t.live, t.slab, t.hasLast = c, true, nil, false
}
func (t *target) end() { t.live = false }

// err turns a host function's status into the worker's error, detail
// included. The calls a batch makes most test st themselves first: a call
// costs a module tens of nanoseconds.
func (t *target) err(st uint32) error {
	if st == 0 {
		return nil
	}
	if cap(t.detail) < 256 {
		t.detail = make([]byte, 256)
	}
	n := hostLastError(unsafe.Pointer(&t.detail[:1][0]), uint32(cap(t.detail)))
	if int(n) > cap(t.detail) {
		t.detail = make([]byte, n)
		n = hostLastError(unsafe.Pointer(&t.detail[:1][0]), uint32(cap(t.detail)))
	}
	return &rdmo.WireError{Status: rdmo.Status(st), Detail: string(t.detail[:min(int(n), cap(t.detail))])}
}

func (t *target) ClientID() rdmo.ClientID { return t.client }

func (t *target) Region(id rdmo.RegionID) (rdmo.Region, error) {
	if !t.live {
		return rdmo.Region{}, errDone
	}
	if t.hasLast && t.last.ID == id {
		return t.last, nil
	}
	if st := hostRegion(uint64(id), unsafe.Pointer(&t.region[0])); st != 0 {
		return rdmo.Region{}, t.err(st)
	}
	t.last = rdmo.Region{ID: id, Base: le.Uint64(t.region[0:]), Len: le.Uint64(t.region[8:])}
	t.hasLast = true
	return t.last, nil
}

func (t *target) Put(region rdmo.RegionID, addr uint64, data []byte) error {
	if !t.live {
		return errDone
	}
	var p unsafe.Pointer
	if len(data) > 0 {
		p = unsafe.Pointer(&data[0])
	}
	return t.err(hostPut(uint64(region), addr, p, uint32(len(data))))
}

func (t *target) Sync(ops []rdmo.RemoteOp) error {
	if !t.live {
		return errDone
	}
	if len(ops) == 0 {
		return nil
	}
	need := len(ops) * wasmabi.OpSize
	if cap(t.ops) < need {
		t.ops = make([]byte, need)
	}
	rec := unsafe.Slice((*wasmabi.OpRecord)(unsafe.Pointer(&t.ops[:1][0])), len(ops))
	for i := range ops {
		o, r := &ops[i], &rec[i]
		*r = wasmabi.OpRecord{Kind: uint32(o.Kind), Region: uint64(o.Region), Addr: o.Addr, Operand: o.Operand, Compare: o.Compare,
			BufPtr: ptrOf(o.Buf), BufLen: uint32(len(o.Buf))}
	}
	if st := hostSync(unsafe.Pointer(&rec[0]), uint32(len(ops))); st != 0 {
		return t.err(st)
	}
	for i := range ops {
		ops[i].Status, ops[i].Result = rdmo.Status(rec[i].Status), rec[i].Result
	}
	return nil
}

// Buffer carves n bytes out of a slab that lives until the call's end (the
// worker copies what is Put from it before put returns).
func (t *target) Buffer(n int) []byte {
	if n <= 0 {
		return nil
	}
	if cap(t.slab)-len(t.slab) < n {
		t.slab = make([]byte, 0, max(n, 64<<10))
	}
	b := t.slab[len(t.slab) : len(t.slab)+n : len(t.slab)+n]
	t.slab = t.slab[:len(t.slab)+n]
	clear(b)
	return b
}

var errNotInBatch = &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: "rdmo/plugin/wasm: the request is not one of the current batch"}

// index finds req in the current batch (Place and Fetch name it by index).
func index(req *rdmo.Request) (uint32, error) {
	for i := range reqs {
		if &reqs[i] == req {
			return uint32(i), nil
		}
	}
	return 0, errNotInBatch
}

func (t *target) Place(req *rdmo.Request, region rdmo.RegionID, addr uint64) error {
	if !t.live {
		return errDone
	}
	i, err := index(req)
	if err != nil {
		return err
	}
	return t.err(hostPlace(i, uint64(region), addr))
}

func (t *target) Fetch(req *rdmo.Request) ([]byte, error) {
	if !t.live {
		return nil, errDone
	}
	i, err := index(req)
	if err != nil {
		return nil, err
	}
	if req.Length > 1<<31 {
		return nil, &rdmo.WireError{Status: rdmo.StatusRendezvousRefused, Detail: "payload too large for a module's memory"}
	}
	buf := make([]byte, req.Length)
	var p unsafe.Pointer
	if len(buf) > 0 {
		p = unsafe.Pointer(&buf[0])
	}
	if err := t.err(hostFetch(i, p, uint32(len(buf)))); err != nil {
		return nil, err
	}
	return buf, nil
}

func (t *target) Flush() error {
	if !t.live {
		return errDone
	}
	return t.err(hostFlush())
}

func (t *target) WriteBackAll() error {
	if !t.live {
		return errDone
	}
	return t.err(hostWriteBackAll())
}

var _ rdmo.Target = (*target)(nil)

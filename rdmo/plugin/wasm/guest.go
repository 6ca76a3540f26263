//go:build wasip1

package wasm

import (
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"unsafe"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin/internal/wasmabi"
)

var le = binary.LittleEndian

// The module's one handler and the state of the call in progress. A module
// instance runs one call at a time (the worker never enters it twice), so
// plain globals are enough.
var (
	handler rdmo.Handler
	info    []byte
	batch   []byte         // the batch buffer the worker writes into
	reqs    []rdmo.Request // the current batch, decoded
	results []rdmo.Result
	tgt     target
	hookErr []byte // detail of the last hook's error (rdmo_error)
)

// Register makes h the module's handler. Call it from an init function of
// the module's main package; a second call panics.
func Register(h rdmo.Handler) {
	if handler != nil {
		panic("rdmo/plugin/wasm: Register called twice")
	}
	handler = h
}

//go:wasmexport rdmo_abi_version
func abiVersion() int32 { return wasmabi.Version }

//go:wasmexport rdmo_info
func infoExport() int64 {
	if handler == nil {
		return 0
	}
	hi := handler.Info()
	in := wasmabi.Info{Name: hi.Name, Version: hi.Version, Ops: hi.Ops, NoCachedState: hi.NoCachedState, Inline: hi.Inline}
	for _, op := range hi.Ops {
		if !rdmo.IsUserOp(op) {
			continue
		}
		n, ok := hi.OpNames[op]
		if !ok {
			n, ok = rdmo.DefinedOpName(op)
		}
		if ok {
			in.OpNames = append(in.OpNames, wasmabi.OpName{Op: op, Name: n})
		}
	}
	for _, st := range rdmo.UserStatuses() {
		in.Statuses = append(in.Statuses, wasmabi.Status{Code: uint32(st.Code), Name: st.Name, Text: st.Text})
	}
	info = wasmabi.EncodeInfo(info[:0], in)
	return packSlice(info)
}

//go:wasmexport rdmo_batch_buf
func batchBuf(size int32) int32 {
	if size < 0 {
		return 0
	}
	if cap(batch) < int(size) || batch == nil {
		// Linear memory never moves, so the worker keeps this pointer
		// until it needs more.
		batch = make([]byte, max(int(size), 64<<10))
	}
	batch = batch[:cap(batch)]
	return int32(uintptr(unsafe.Pointer(&batch[0])))
}

//go:wasmexport rdmo_handle_batch
func handleBatch(n int32, client int64) (code int32) {
	if n < 0 || int(n)*(wasmabi.ReqSize+wasmabi.ResSize) > len(batch) {
		return int32(rdmo.StatusInternal)
	}
	if cap(reqs) < int(n) {
		reqs = make([]rdmo.Request, n)
		results = make([]rdmo.Result, n)
	}
	reqs, results = reqs[:n], results[:n]
	for i := range reqs {
		reqs[i] = decodeRequest(batch[i*wasmabi.ReqSize:])
		results[i] = rdmo.Result{}
	}
	tgt.begin(rdmo.ClientID(client))
	defer tgt.end()
	defer func() {
		if r := recover(); r != nil {
			res := rdmo.Result{Status: rdmo.StatusHandlerFailed, Detail: fmt.Sprintf("handler panicked in HandleBatch: %v\n%s", r, debug.Stack())}
			for i := range results {
				results[i] = res
			}
			code = wasmabi.CodePanicked
		}
		writeResults()
	}()
	handler.HandleBatch(&tgt, reqs, results)
	return 0
}

func decodeRequest(r []byte) rdmo.Request {
	q := rdmo.Request{
		Seq:        le.Uint64(r[wasmabi.ReqSeq:]),
		Client:     rdmo.ClientID(le.Uint64(r[wasmabi.ReqClient:])),
		Op:         le.Uint32(r[wasmabi.ReqOp:]),
		Flags:      le.Uint32(r[wasmabi.ReqFlags:]),
		Length:     le.Uint64(r[wasmabi.ReqLength:]),
		Rendezvous: le.Uint32(r[wasmabi.ReqRndv:]) == 1,
	}
	h0, h1, h2 := le.Uint64(r[wasmabi.ReqH0:]), le.Uint64(r[wasmabi.ReqH1:]), le.Uint64(r[wasmabi.ReqH2:])
	switch q.Op {
	case rdmo.OpFlush:
		q.Flush = rdmo.FlushHeader{FlushID: h0}
	case rdmo.OpAppend:
		q.Append = rdmo.AppendHeader{PtrAddr: h0, PtrRkey: rdmo.RegionID(h1), DataRkey: rdmo.RegionID(h2)}
	case rdmo.OpScatter:
		q.Scatter = rdmo.ScatterHeader{Count: h0}
	}
	q.Sub = span(le.Uint32(r[wasmabi.ReqSubOff:]), le.Uint32(r[wasmabi.ReqSubLen:]))
	if le.Uint32(r[wasmabi.ReqHasPay:]) == 1 {
		q.Payload = span(le.Uint32(r[wasmabi.ReqPayOff:]), le.Uint32(r[wasmabi.ReqPayLen:]))
		if q.Payload == nil {
			q.Payload = []byte{}
		}
	}
	return q
}

// span is batch[off:off+n], empty if the worker's offsets were wrong
// (they never are; a module must not trust them to be, though).
func span(off, n uint32) []byte {
	end := uint64(off) + uint64(n)
	if n == 0 || end > uint64(len(batch)) {
		return nil
	}
	return batch[off:end:end]
}

// writeResults fills the result records. Data and details stay referenced
// by results until the next batch, so the pointers stay valid while the
// worker copies them.
func writeResults() {
	base, _ := wasmabi.BatchLayout(len(reqs))
	for i, res := range results {
		r := batch[base+i*wasmabi.ResSize:]
		le.PutUint32(r[wasmabi.ResStatus:], uint32(res.Status))
		le.PutUint64(r[wasmabi.ResValue:], res.Value)
		le.PutUint32(r[wasmabi.ResDataLen:], uint32(len(res.Data)))
		le.PutUint32(r[wasmabi.ResDataPtr:], ptrOf(res.Data))
		le.PutUint32(r[wasmabi.ResDetLen:], uint32(len(res.Detail)))
		le.PutUint32(r[wasmabi.ResDetPtr:], uint32(uintptr(unsafe.Pointer(unsafe.StringData(res.Detail)))))
	}
}

//go:wasmexport rdmo_write_back
func writeBack(client int64) int32 {
	return hook(client, func() error { return handler.WriteBack(&tgt) })
}

//go:wasmexport rdmo_region_removed
func regionRemoved(client, region int64) int32 {
	return hook(client, func() error { return handler.RegionRemoved(&tgt, rdmo.RegionID(region)) })
}

//go:wasmexport rdmo_client_removed
func clientRemoved(client int64) {
	hook(client, func() error { handler.ClientRemoved(rdmo.ClientID(client)); return nil })
}

//go:wasmexport rdmo_error
func errorExport() int64 { return packSlice(hookErr) }

func hook(client int64, f func() error) (code int32) {
	tgt.begin(rdmo.ClientID(client))
	defer tgt.end()
	hookErr = hookErr[:0]
	defer func() {
		if r := recover(); r != nil {
			hookErr = fmt.Appendf(hookErr[:0], "handler panicked in a hook: %v", r)
			code = wasmabi.CodePanicked
		}
	}()
	err := f()
	if err == nil {
		return 0
	}
	hookErr = append(hookErr[:0], err.Error()...)
	return int32(rdmo.ResultOf(err).Status)
}

func ptrOf(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

func packSlice(b []byte) int64 {
	return int64(uint64(ptrOf(b))<<32 | uint64(len(b)))
}

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
	in := wasmabi.Info{Name: hi.Name, Version: hi.Version, Ops: hi.Ops, NoCachedState: hi.NoCachedState, Inline: hi.Inline, InlineRendezvous: hi.InlineRendezvous}
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
	// One clear, not a store per field: a module pays a write-barrier
	// check for each pointer it stores.
	clear(results)
	recs := records[wasmabi.ReqRecord](0, int(n))
	for i := range reqs {
		// Decoded here, not in a function: a call per request costs a module
		// tens of nanoseconds.
		q, r := &reqs[i], &recs[i]
		q.Seq, q.Client, q.Op, q.Flags = r.Seq, rdmo.ClientID(r.Client), r.Op, r.Flags
		q.Length, q.Rendezvous = r.Length, r.Rendezvous == 1
		q.Flush, q.Append, q.Scatter = rdmo.FlushHeader{}, rdmo.AppendHeader{}, rdmo.ScatterHeader{}
		if q.Op < rdmo.OpUserBase {
			decodeHeaders(q, r)
		}
		q.Sub, q.Payload = span(r.SubOff, r.SubLen), nil
		if r.HasPayload == 1 {
			if q.Payload = span(r.PayOff, r.PayLen); q.Payload == nil {
				q.Payload = []byte{}
			}
		}
	}
	tgt.begin(rdmo.ClientID(client))
	defer batchDone(&code)
	handler.HandleBatch(&tgt, reqs, results)
	return 0
}

// batchDone ends a batch call: a panic of the handler fails every request
// of the batch (and tells the worker to replace the instance), and the
// results go to the result records either way.
func batchDone(code *int32) {
	tgt.end()
	if r := recover(); r != nil {
		res := rdmo.Result{Status: rdmo.StatusHandlerFailed, Detail: fmt.Sprintf("handler panicked in HandleBatch: %v\n%s", r, debug.Stack())}
		for i := range results {
			results[i] = res
		}
		*code = wasmabi.CodePanicked
	}
	writeResults()
}

// records views n records of type T at byte offset off of the batch
// buffer (its caller checked they fit; make aligns the buffer to 8). A
// module is little-endian like the ABI, so it reads and writes the records
// in place: field by field through encoding/binary costs several times more
// in compiled WebAssembly.
func records[T any](off, n int) []T {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&batch[off])), n)
}

// decodeHeaders sets the decoded sub-header of a reference op.
func decodeHeaders(q *rdmo.Request, r *wasmabi.ReqRecord) {
	switch q.Op {
	case rdmo.OpFlush:
		q.Flush.FlushID = r.H0
	case rdmo.OpAppend:
		q.Append = rdmo.AppendHeader{PtrAddr: r.H0, PtrRkey: rdmo.RegionID(r.H1), DataRkey: rdmo.RegionID(r.H2)}
	case rdmo.OpScatter:
		q.Scatter.Count = r.H0
	}
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
	recs := records[wasmabi.ResRecord](base, len(results))
	for i := range results {
		res, r := &results[i], &recs[i]
		r.Status, r.Value = uint32(res.Status), res.Value
		r.DataLen, r.DataPtr = uint32(len(res.Data)), ptrOf(res.Data)
		r.DetLen, r.DetPtr = uint32(len(res.Detail)), uint32(uintptr(unsafe.Pointer(unsafe.StringData(res.Detail))))
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

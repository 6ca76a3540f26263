package wasmhost

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin/internal/wasmabi"
)

// The host functions a module imports (wasmabi.Import*). Each finds its
// instance through the call's context, checks every pointer against the
// module's linear memory (a range outside it is OutOfBounds, nothing is
// touched), and hands the rest to the worker's Target, which checks
// regions and addresses as for a built-in handler.

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

func (h *Handler) hostModule() wazero.HostModuleBuilder {
	b := h.rt.NewHostModuleBuilder(wasmabi.ImportModule)
	fn := func(name string, f api.GoModuleFunc, params, results []api.ValueType) {
		b.NewFunctionBuilder().WithGoModuleFunction(f, params, results).Export(name)
	}
	one := []api.ValueType{i32}
	fn(wasmabi.ImportRegion, hostFunc(hRegion), []api.ValueType{i64, i32}, one)
	fn(wasmabi.ImportPut, hostFunc(hPut), []api.ValueType{i64, i64, i32, i32}, one)
	fn(wasmabi.ImportSync, hostFunc(waits(hSync)), []api.ValueType{i32, i32}, one)
	fn(wasmabi.ImportPlace, hostFunc(hPlace), []api.ValueType{i32, i64, i64}, one)
	fn(wasmabi.ImportFetch, hostFunc(waits(hFetch)), []api.ValueType{i32, i32, i32}, one)
	fn(wasmabi.ImportFlush, hostFunc(waits(func(in *instance, _ []uint64) error { return in.t.Flush() })), nil, one)
	fn(wasmabi.ImportWriteBackAll, hostFunc(waits(func(in *instance, _ []uint64) error { return in.t.WriteBackAll() })), nil, one)
	fn(wasmabi.ImportLastError, api.GoModuleFunc(hLastError), []api.ValueType{i32, i32}, one)
	return b
}

var (
	errNoCall  = &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: "Target call outside a batch or hook"}
	errPointer = &rdmo.WireError{Status: rdmo.StatusOutOfBounds, Detail: "pointer outside the module's linear memory"}
)

// hostFunc wraps a host function that returns an error into one that
// returns its status (and keeps the detail for last_error).
func hostFunc(f func(in *instance, stack []uint64) error) api.GoModuleFunc {
	return func(ctx context.Context, _ api.Module, stack []uint64) {
		c, ok := ctx.(*callCtx)
		if !ok {
			panic("rdmo wasm host function called outside an rdmo call")
		}
		in := c.inst
		var err error
		if in.t == nil {
			err = errNoCall
		} else {
			err = f(in, stack)
		}
		stack[0] = uint64(in.status(err))
	}
}

// waits wraps a host function that may wait for the network (a Sync's
// remote ops, a rendezvous Fetch, a Flush): its time is the worker's, not
// the module's, and does not count against the call's own time bound (a
// tick of instance.onTimer that finds the call in one counts the interval
// as the worker's). The others return at once and are not marked.
func waits(f func(in *instance, stack []uint64) error) func(in *instance, stack []uint64) error {
	return func(in *instance, stack []uint64) error {
		in.inHost.Store(true)
		err := f(in, stack)
		in.inHost.Store(false)
		return err
	}
}

// status returns err's wire status, keeping its text for last_error.
func (in *instance) status(err error) uint32 {
	if err == nil {
		return 0
	}
	in.lastErr = err.Error()
	var we *rdmo.WireError
	if errors.As(err, &we) {
		if we.Detail != "" {
			in.lastErr = we.Detail
		}
		if we.Status != rdmo.StatusOK {
			return uint32(we.Status)
		}
	}
	return uint32(rdmo.StatusOf(err))
}

func hRegion(in *instance, s []uint64) error {
	out, ok := in.mem.Read(api.DecodeU32(s[1]), 16)
	if !ok {
		return errPointer
	}
	r, err := in.t.Region(rdmo.RegionID(s[0]))
	if err != nil {
		return err
	}
	le.PutUint64(out[0:], r.Base)
	le.PutUint64(out[8:], r.Len)
	return nil
}

func hPut(in *instance, s []uint64) error {
	n := api.DecodeU32(s[3])
	src, ok := in.mem.Read(api.DecodeU32(s[2]), n)
	if !ok {
		return errPointer
	}
	// A copy in worker memory: the module's memory may move (grow) or go
	// (its instance replaced) before the write completes.
	var data []byte
	if n > 0 {
		data = in.t.Buffer(int(n))
		copy(data, src)
	}
	return in.t.Put(rdmo.RegionID(s[0]), s[1], data)
}

func hSync(in *instance, s []uint64) error {
	n := api.DecodeU32(s[1])
	if n == 0 {
		return nil
	}
	if n > MaxSyncOps {
		return &rdmo.WireError{Status: rdmo.StatusLengthOverflow, Detail: fmt.Sprintf("Sync of %d ops, at most %d", n, MaxSyncOps)}
	}
	rec, ok := in.mem.Read(api.DecodeU32(s[0]), n*wasmabi.OpSize)
	if !ok {
		return errPointer
	}
	if cap(in.ops) < int(n) {
		in.ops = make([]rdmo.RemoteOp, n)
	}
	ops := in.ops[:n]
	for i := range ops {
		r := rec[i*wasmabi.OpSize:]
		ops[i] = rdmo.RemoteOp{
			Kind:    rdmo.RemoteOpKind(le.Uint32(r[wasmabi.OpKind:])),
			Region:  rdmo.RegionID(le.Uint64(r[wasmabi.OpRegion:])),
			Addr:    le.Uint64(r[wasmabi.OpAddr:]),
			Operand: le.Uint64(r[wasmabi.OpOperand:]),
			Compare: le.Uint64(r[wasmabi.OpCompare:]),
		}
		if bl := le.Uint32(r[wasmabi.OpBufLen:]); bl > 0 {
			// A Get reads straight into the module's memory: the call
			// waits, and nothing runs in the module meanwhile.
			buf, ok := in.mem.Read(le.Uint32(r[wasmabi.OpBufPtr:]), bl)
			if !ok {
				return errPointer
			}
			ops[i].Buf = buf
		}
	}
	err := in.t.Sync(ops)
	for i := range ops {
		r := rec[i*wasmabi.OpSize:]
		le.PutUint32(r[wasmabi.OpStatus:], uint32(ops[i].Status))
		le.PutUint64(r[wasmabi.OpResult:], ops[i].Result)
		ops[i].Buf = nil
	}
	return err
}

func (in *instance) request(i uint32) (*rdmo.Request, error) {
	if uint64(i) >= uint64(len(in.reqs)) {
		return nil, &rdmo.WireError{Status: rdmo.StatusHandlerFailed, Detail: fmt.Sprintf("request %d is not in the batch of %d", i, len(in.reqs))}
	}
	return &in.reqs[i], nil
}

func hPlace(in *instance, s []uint64) error {
	req, err := in.request(api.DecodeU32(s[0]))
	if err != nil {
		return err
	}
	return in.t.Place(req, rdmo.RegionID(s[1]), s[2])
}

func hFetch(in *instance, s []uint64) error {
	req, err := in.request(api.DecodeU32(s[0]))
	if err != nil {
		return err
	}
	dst, ok := in.mem.Read(api.DecodeU32(s[1]), api.DecodeU32(s[2]))
	if !ok {
		return errPointer
	}
	data, err := in.t.Fetch(req)
	if err != nil {
		return err
	}
	if len(data) != len(dst) {
		return &rdmo.WireError{Status: rdmo.StatusPayloadMismatch, Detail: fmt.Sprintf("fetched %d bytes into a buffer of %d", len(data), len(dst))}
	}
	copy(dst, data)
	return nil
}

func hLastError(ctx context.Context, _ api.Module, s []uint64) {
	c, ok := ctx.(*callCtx)
	if !ok {
		panic("rdmo wasm host function called outside an rdmo call")
	}
	in := c.inst
	n := min(api.DecodeU32(s[1]), uint32(len(in.lastErr)))
	dst, ok := in.mem.Read(api.DecodeU32(s[0]), n)
	if !ok {
		s[0] = 0
		return
	}
	copy(dst, in.lastErr)
	s[0] = uint64(len(in.lastErr))
}

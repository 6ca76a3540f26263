// Package testwasm is the handler of the WebAssembly test module
// (cmd/rdmo-plugin-testwasm): ops that put, add, panic, loop forever, eat
// memory and forge pointers, so that rdmo/plugin/wasmhost's tests prove
// the sandbox with a real module.
package testwasm

import (
	"encoding/binary"

	"github.com/openrdmo/rdmo/rdmo"
)

// Ops of the test module. Sub-headers: region u64, addr u64[, delta u64].
const (
	OpPut   = rdmo.OpUserBase + iota // Put the payload at addr; Value = its length
	OpAdd                            // fetch-add delta at addr; Value = old value
	OpPanic                          // panic
	OpLoop                           // never return
	OpGrow                           // allocate until the memory limit
	OpForge                          // call put with a pointer outside linear memory
	OpGet                            // read 8 bytes at addr into Data
)

// Forge is called by OpForge; the module's main sets it to a function that
// calls the host's put with a forged pointer, returning its status.
var Forge func(region, addr uint64) uint32

// New returns the handler.
func New() rdmo.Handler { return handler{} }

type handler struct{ rdmo.BaseHandler }

func (handler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: "testwasm", Version: "0.1.0", NoCachedState: true,
		Ops:     []uint32{OpPut, OpAdd, OpPanic, OpLoop, OpGrow, OpForge, OpGet},
		OpNames: map[uint32]string{OpPut: "t-put", OpAdd: "t-add"}}
}

var hog [][]byte

func (handler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	for i, q := range reqs {
		if len(q.Sub) < 16 {
			results[i] = rdmo.Fail(rdmo.StatusShortHeader, "sub-header %d bytes", len(q.Sub))
			continue
		}
		region := rdmo.RegionID(binary.LittleEndian.Uint64(q.Sub))
		addr := binary.LittleEndian.Uint64(q.Sub[8:])
		switch q.Op {
		case OpPut:
			if err := t.Put(region, addr, q.Payload); err != nil {
				results[i] = rdmo.ResultOf(err)
				continue
			}
			results[i].Value = uint64(len(q.Payload))
		case OpAdd:
			old, err := rdmo.FetchAdd(t, region, addr, binary.LittleEndian.Uint64(q.Sub[16:]))
			if err != nil {
				results[i] = rdmo.ResultOf(err)
				continue
			}
			results[i].Value = old
		case OpGet:
			buf := t.Buffer(8)
			if err := rdmo.Get(t, region, addr, buf); err != nil {
				results[i] = rdmo.ResultOf(err)
				continue
			}
			results[i].Data = buf
		case OpPanic:
			panic("testwasm: asked to panic")
		case OpLoop:
			for n := 0; ; n++ {
				if n < 0 {
					break
				}
			}
		case OpGrow:
			for {
				hog = append(hog, make([]byte, 1<<20))
			}
		case OpForge:
			if st := Forge(uint64(region), addr); st != 0 {
				results[i] = rdmo.Result{Status: rdmo.Status(st), Detail: "forged pointer refused"}
			}
		}
	}
}

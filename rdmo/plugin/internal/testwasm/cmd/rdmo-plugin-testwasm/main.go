//go:build wasip1

// Command rdmo-plugin-testwasm is the WebAssembly test module (package
// testwasm), built by rdmo/plugin/wasmhost's tests with GOOS=wasip1.
package main

import (
	"github.com/openrdmo/rdmo/rdmo/plugin/internal/testwasm"
	"github.com/openrdmo/rdmo/rdmo/plugin/wasm"
)

// put is the host's put, imported directly (the pointer as a plain i32) to
// forge a pointer.
//
//go:wasmimport rdmo put
func put(region, addr uint64, p uint32, n uint32) uint32

func init() {
	testwasm.Forge = func(region, addr uint64) uint32 {
		// 16 bytes from the last byte of a 4 GiB address space: outside
		// any linear memory the module can have.
		return put(region, addr, 0xFFFF_FFF8, 16)
	}
	wasm.Register(testwasm.New())
}

func main() {}

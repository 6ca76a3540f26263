// Package wasm serves an rdmo.Handler from a WebAssembly module that the
// worker runs in its own process (rdmo/plugin/wasmhost): what plugin.Serve
// is to a go-plugin process, Register is to a module built with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o rdmo-plugin-NAME.wasm ./cmd/NAME-wasm
//
// from a main package such as
//
//	//go:build wasip1
//
//	package main
//
//	import (
//		"github.com/openrdmo/rdmo/examples/counter"
//		"github.com/openrdmo/rdmo/rdmo/plugin/wasm"
//	)
//
//	func init() { wasm.Register(counter.New()) }
//
//	func main() {}
//
// (a c-shared module runs its package initializers, not main). The package
// exports the batch entry point and the hooks (//go:wasmexport) and gives
// the handler an rdmo.Target whose calls are host functions of the worker
// (//go:wasmimport), checked there as for a built-in handler.
// docs/PLUGINS.md, "WebAssembly modules", documents the ABI.
//
// Outside GOOS=wasip1 the package is empty.
package wasm

//go:build wasip1

// Command rdmo-plugin-counter-wasm is the counter operation as a
// WebAssembly module the worker runs in its own process:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o rdmo-plugin-counter.wasm ./examples/counter/cmd/rdmo-plugin-counter-wasm
package main

import (
	"github.com/openrdmo/rdmo/examples/counter"
	"github.com/openrdmo/rdmo/rdmo/plugin/wasm"
)

func init() { wasm.Register(counter.New()) }

func main() {}

//go:build wasip1

// Command rdmo-plugin-fetch-add-wasm is the fetch-add operation of the
// operation pack (plugins/ops) as a WebAssembly module the worker runs in
// its own process: build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o rdmo-plugin-fetch-add.wasm ./plugins/ops/cmd/rdmo-plugin-fetch-add-wasm
//
// put it on a UROM service's plugin path and spawn a worker with
// "wasm:fetch-add".
package main

import (
	"github.com/openrdmo/rdmo/plugins/ops"
	"github.com/openrdmo/rdmo/rdmo/plugin/wasm"
)

func init() { wasm.Register(ops.ByName("fetch-add")) }

func main() {}

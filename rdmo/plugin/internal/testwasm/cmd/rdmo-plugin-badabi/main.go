//go:build wasip1

// Command rdmo-plugin-badabi is a module that speaks another ABI version;
// rdmo/plugin/wasmhost's tests check that the worker refuses it.
package main

//go:wasmexport rdmo_abi_version
func abiVersion() int32 { return 99 }

func main() {}

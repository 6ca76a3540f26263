// Package cli is the command-line layer of rdmo: the DOCA-compatible flags of
// doca_urom_rdmo (numeric log levels, -j/--json params files as NVIDIA ships
// them, with comments and trailing commas), rdmo's own flags, the precedence
// rules (command line over params file over defaults), logger construction,
// and the App value through which the packages that implement the modes
// plug into the rdmo binary.
//
// The package is pure Go: it does not import ucp or anything that needs cgo.
// Where it needs the UCX layer (device names, the UCX version, the SDK log
// level) it calls the functions of the UCX value the binary passes in; see
// app.go.
package cli

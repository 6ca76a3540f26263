//go:build !rdmo_nohost

package main

import (
	"os"

	"github.com/openrdmo/rdmo/internal/bench"
	"github.com/openrdmo/rdmo/internal/cli"
)

// `rdmo bench` (package bench): the benchmark's processes are this binary
// re-executed in a hidden role named by the environment, so RoleMain runs
// first and never returns for them. The bench command's own flags
// (--topology, --size, --json, --plot, --short, ...) are not cli.Config
// flags: TakeArgs keeps them for bench.RunCLI and hands the rest of the
// command line to the flag parser.
func init() {
	if code, ok := bench.RoleMain(); ok {
		os.Exit(code)
	}
	os.Args = bench.TakeArgs(os.Args, os.Stdout)
	cli.RunBench = bench.RunCLI
}

//go:build !rdmo_nohost

package main

import (
	"github.com/openrdmo/rdmo/host"
	"github.com/openrdmo/rdmo/internal/cli"
)

// The host application: server and client modes, the UROM service daemon
// and its plugin listing, and the UCX hooks (-d, --sdk-log-level, -v).
//
// Building with -tags rdmo_nohost leaves all of it out (wire_nohost.go): a
// binary of the flag layer alone, with every mode "not built", which is
// what main_test.go's TestBinary checks. host/'s tests run the full binary.
func init() {
	cli.RunServer = host.RunServer
	cli.RunClient = host.RunClient
	cli.RunDPU = host.RunDPU
	cli.RunPlugins = host.RunPlugins
	cli.ValidateDevice = host.ValidateDevice
	cli.ApplySDKLogLevel = host.ApplySDKLogLevel
	cli.UCXVersion = host.UCXVersion
}

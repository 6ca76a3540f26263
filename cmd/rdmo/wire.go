package main

// Wiring: the packages that implement rdmo's modes plug into this binary by
// setting the hooks of package internal/cli, never by editing the flag code.
// Add one small file per package next to this one, for example
//
//	// wire_host.go
//	package main
//
//	import (
//		"github.com/openrdmo/rdmo/host"
//		"github.com/openrdmo/rdmo/internal/cli"
//	)
//
//	func init() {
//		cli.RunServer = host.RunServer // func(ctx context.Context, cfg cli.Config) error
//		cli.RunClient = host.RunClient
//	}
//
// The hooks (see internal/cli/hooks.go):
//
//	cli.RunServer, cli.RunClient, cli.RunBench  func(context.Context, cli.Config) error
//	cli.RunDPU                                  func(context.Context, cli.DPUConfig) error
//	cli.RunPlugins                              func(context.Context, cli.PluginsConfig) error
//	cli.ValidateDevice                          func(name string) error   // -d/--device
//	cli.ApplySDKLogLevel                        func(ucxLevel string) error // --sdk-log-level
//	cli.UCXVersion                              func() string             // -v/--version
//
// While a Run hook is nil its command prints "<mode>: not built into this
// binary yet" and exits with status 3.

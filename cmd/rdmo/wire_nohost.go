//go:build rdmo_nohost

package main

import (
	"github.com/spf13/cobra"

	"github.com/openrdmo/rdmo/internal/cli"
)

// Built with -tags rdmo_nohost: no host application (see wire_host.go). The
// hidden worker subcommand exists but is not built.
func (a *app) uromWorkerCommand() *cobra.Command {
	const name = "__urom-worker"
	return &cobra.Command{
		Use:    name,
		Hidden: true,
		Args:   noArgs,
		RunE:   func(*cobra.Command, []string) error { return cli.NotBuilt(name) },
	}
}

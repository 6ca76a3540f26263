//go:build !rdmo_nohost

package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/openrdmo/rdmo/host"
	"github.com/openrdmo/rdmo/internal/cli"
	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/rdmoworker"
)

// uromWorkerCommand is the hidden `rdmo __urom-worker`: the body of an RDMO
// worker process that a UROM service (rdmo dpu) starts, with its control
// socket on file descriptor urom.ControlFD. It is not for people to run.
func (a *app) uromWorkerCommand() *cobra.Command {
	return &cobra.Command{
		Use:    host.WorkerSubcommand,
		Short:  "Run an RDMO worker process (started by the UROM service)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := cli.SetupLogging(a.log, a.stderr)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			ctl := os.NewFile(urom.ControlFD, "urom-control")
			if ctl == nil {
				return cli.Usagef("%s runs only as a worker process of `rdmo dpu` (no control socket on fd %d)", host.WorkerSubcommand, urom.ControlFD)
			}
			return urom.ServeWorker(cmd.Context(), ctl, rdmoworker.Factory, log.Named("worker"))
		},
	}
}

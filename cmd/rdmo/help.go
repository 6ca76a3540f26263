package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/cli"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// groupOrder is the order of the help headings, DOCA's first.
var groupOrder = []string{
	cli.GroupDOCAFlags,
	cli.GroupProgramFlags,
	cli.GroupRDMOFlags,
	cli.GroupServiceFlags,
	cli.GroupWorkerFlags,
	cli.GroupFlags,
}

// flagOrder puts flags in the order DOCA's usage text lists them; flags not
// named here follow in registration order.
var flagOrder = []string{
	"help", "version", "log-level", "sdk-log-level", "json",
	"device", "server-name", "mode",
	"oob-port", "oob-protocol", "urom", "append-strategy", "ops",
	"config", "listen", "plugin-path", "max-workers", "metrics-addr",
	"secret-file", "output", "log-format",
	"worker-max-in-flight-per-rq", "worker-max-clients", "worker-max-rqs-per-client",
	"worker-max-regions-per-client", "worker-max-rendezvous-fetch", "worker-max-eager-payload",
	"worker-max-batch", "worker-drain-timeout",
}

// helpText renders the usage of cmd in the layout of DOCA's usage text:
//
//	Usage: rdmo [DOCA Flags] [Program Flags] [rdmo Flags]
//
//	DOCA Flags:
//	  -h, --help    Print a help synopsis
//	  ...
//
//	Program Flags:
//	  -d, --device <IB device name>    IB device name.
func helpText(cmd *cobra.Command) string {
	var b strings.Builder
	isRoot := !cmd.HasParent()
	if isRoot {
		fmt.Fprintf(&b, "Usage: %s [DOCA Flags] [Program Flags] [%s]\n", cli.ProgramName, cli.GroupRDMOFlags)
		fmt.Fprintf(&b, "       %s <command> [flags]\n\n", cli.ProgramName)
	} else {
		fmt.Fprintf(&b, "Usage: %s [flags]\n\n", cmd.CommandPath())
	}
	if cmd.Long != "" {
		b.WriteString(cmd.Long + "\n\n")
	} else if cmd.Short != "" {
		b.WriteString(cmd.Short + "\n\n")
	}

	groups := map[string][]*pflag.Flag{}
	seen := map[string]bool{}
	collect := func(f *pflag.Flag) {
		if f.Hidden || seen[f.Name] {
			return
		}
		seen[f.Name] = true
		g := cli.GroupFlags
		if v := f.Annotations[cli.AnnotationGroup]; len(v) > 0 {
			g = v[0]
		}
		groups[g] = append(groups[g], f)
	}
	cmd.LocalFlags().VisitAll(collect)
	cmd.InheritedFlags().VisitAll(collect)

	rows := map[string][][2]string{}
	width := 0
	for _, g := range groupOrder {
		fl := groups[g]
		sort.SliceStable(fl, func(i, j int) bool { return rank(fl[i].Name) < rank(fl[j].Name) })
		for _, f := range fl {
			left, right := flagRow(f)
			rows[g] = append(rows[g], [2]string{left, right})
			width = max(width, len(left))
		}
	}
	width = min(width, 40)
	for _, g := range groupOrder {
		if len(rows[g]) == 0 {
			continue
		}
		heading := g
		if !isRoot && g == cli.GroupDOCAFlags {
			heading = "DOCA Flags (all commands)"
		}
		fmt.Fprintf(&b, "%s:\n", heading)
		for _, r := range rows[g] {
			if len(r[0]) > width {
				fmt.Fprintf(&b, "%s\n%s    %s\n", r[0], strings.Repeat(" ", width), r[1])
			} else {
				fmt.Fprintf(&b, "%-*s    %s\n", width, r[0], r[1])
			}
		}
		b.WriteString("\n")
	}

	// DOCA's descriptions of -l and --sdk-log-level stay word for word;
	// that the names work too is said here.
	b.WriteString("Log levels (-l, --sdk-log-level) are DOCA's numbers, or their names in any\ncase: -l debug is -l 60.\n\n")
	if isRoot {
		b.WriteString("Commands:\n")
		for _, c := range cmd.Commands() {
			if c.Hidden || c.Name() == "help" || !c.IsAvailableCommand() {
				continue
			}
			fmt.Fprintf(&b, "  %-10s %s\n", c.Name(), c.Short)
		}
		b.WriteString("\nExamples:\n")
		fmt.Fprintf(&b, "  %s -d mlx5_0 -m server\n", cli.ProgramName)
		fmt.Fprintf(&b, "  %s -m client -s <server_host_name>\n", cli.ProgramName)
		fmt.Fprintf(&b, "  %s --json ./urom_rdmo_params.json\n", cli.ProgramName)
		b.WriteString("\nA params file (-j) holds the long flag names as keys, grouped under\n")
		b.WriteString("\"doca_general_flags\" and \"doca_program_flags\" or at the top level;\n")
		b.WriteString("flags given on the command line override it. Comments and trailing commas\n")
		b.WriteString("are accepted; every key and value rule: docs/CLI.md.\n")
		fmt.Fprintf(&b, "Run '%s <command> -h' for the flags of a command.\n", cli.ProgramName)
	}
	return b.String()
}

func rank(name string) int {
	for i, n := range flagOrder {
		if n == name {
			return i
		}
	}
	return len(flagOrder)
}

// flagRow renders a flag's two columns.
func flagRow(f *pflag.Flag) (string, string) {
	left := "      --" + f.Name
	if f.Shorthand != "" {
		left = "  -" + f.Shorthand + ", --" + f.Name
	}
	if v := f.Annotations[cli.AnnotationArg]; len(v) > 0 {
		left += " " + v[0]
	}
	right := f.Usage
	switch f.DefValue {
	case "", "false", "[]":
	default:
		right += fmt.Sprintf(" (default %s)", f.DefValue)
	}
	return left, right
}

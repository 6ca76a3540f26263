package bench

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/cli"
)

// The rdmo binary's `bench` command registers only the common flags of
// cli.Config. Until cli.App has a place for a mode's own flags, cmd/rdmo
// takes the benchmark's flags (FlagSet) out of the command line before the
// command parser sees it (TakeArgs), and the mode TakeArgs returns parses
// them.

// rootValueFlags are the flags of the rdmo binary that take a value as the
// next argument; SplitArgs skips those values when it looks for the
// subcommand.
var rootValueFlags = map[string]bool{
	"-l": true, "--log-level": true, "--sdk-log-level": true, "--log-format": true,
	"-j": true, "--json": true, "-d": true, "--device": true, "-s": true, "--server-name": true,
	"-m": true, "--mode": true, "--oob-port": true, "--urom": true, "--append-strategy": true,
	"--ops": true, "--secret-file": true,
}

// SplitArgs splits an rdmo command line (without the program name) whose
// subcommand is `bench` into the benchmark's own flags and the rest. ok is
// false when the subcommand is not bench; rest is then args. -j/--json is
// never a benchmark flag: it is the DOCA params file everywhere (the
// results file is --results).
func SplitArgs(args []string) (benchArgs, rest []string, ok bool) {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return nil, args, false
		}
		if strings.HasPrefix(a, "-") {
			if rootValueFlags[a] {
				i++
			}
			continue
		}
		break
	}
	if i >= len(args) || args[i] != "bench" {
		return nil, args, false
	}
	fs := FlagSet(new(Options))
	rest = append(rest, args[:i+1]...)
	for j := i + 1; j < len(args); j++ {
		a := args[j]
		if a == "--" {
			rest = append(rest, args[j:]...)
			break
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || fs.Lookup(name) == nil {
			rest = append(rest, a)
			continue
		}
		f := fs.Lookup(name)
		switch {
		case hasValue:
			benchArgs = append(benchArgs, a)
		case f.NoOptDefVal != "":
			benchArgs = append(benchArgs, a)
		case j+1 < len(args):
			benchArgs = append(benchArgs, a, args[j+1])
			j++
		default:
			benchArgs = append(benchArgs, a) // missing value: Parse reports it
		}
	}
	return benchArgs, rest, true
}

// Help is the part of `rdmo bench --help` that describes the benchmark:
// what it runs and its own flags (cmd/rdmo puts it after the usage line).
func Help() string {
	o := DefaultOptions()
	return "Runs a target, an RDMO worker and initiators as separate processes of this\n" +
		"host, interleaves every row (RDMO operations, the ways to do the same work\n" +
		"without RDMO, and ucx_perftest at the same size and transport) round by round,\n" +
		"checks every round's data in target memory, and prints each row's rate, CPU time\n" +
		"per operation and ratios to the baselines of the same run.\n\n" +
		"Benchmark flags:\n" + FlagSet(&o).FlagUsages()
}

// TakeArgs is called by cmd/rdmo before the command line is parsed: it
// returns argv without the benchmark's own flags of `rdmo bench`, and the
// bench mode (cli.App.Bench) that runs with them.
func TakeArgs(argv []string, _ io.Writer) (rest []string, mode func(context.Context, cli.Config) error) {
	mode = func(ctx context.Context, cfg cli.Config) error { return runCLI(ctx, cfg, nil) }
	if len(argv) < 2 {
		return argv, mode
	}
	ba, rest, ok := SplitArgs(argv[1:])
	if !ok {
		return argv, mode
	}
	mode = func(ctx context.Context, cfg cli.Config) error { return runCLI(ctx, cfg, ba) }
	return append([]string{argv[0]}, rest...), mode
}

// notForBench reports the first common flag set in cfg that `rdmo bench`
// has no use for: it starts both sides itself, on this host.
func notForBench(cfg cli.Config) string {
	d := cli.DefaultConfig()
	switch {
	case cfg.Mode != "":
		return "-m/--mode (rdmo bench starts its target, worker and initiator processes itself)"
	case cfg.ServerName != "":
		return "-s/--server-name (every process runs on this host)"
	case cfg.Device != "":
		return "-d/--device (set UCX_NET_DEVICES to pick the network device)"
	case cfg.OOBPort != d.OOBPort:
		return "--oob-port (the processes exchange addresses through their parent)"
	case cfg.AppendStrategy != d.AppendStrategy:
		return "--append-strategy (the rows rdmo-append/owned and rdmo-append/shared measure both)"
	case cfg.SecretFile != "":
		return "--secret-file (the embedded UROM service listens on loopback for this run only)"
	}
	return ""
}

// runCLI is `rdmo bench` with the benchmark's flags args: it runs a target,
// an RDMO worker and initiators as processes of this host and reports the
// rows.
func runCLI(ctx context.Context, cfg cli.Config, args []string) error {
	if f := notForBench(cfg); f != "" {
		return cli.Usagef("rdmo bench: %s does not apply", f)
	}
	o := DefaultOptions()
	if err := FlagSet(&o).Parse(args); err != nil {
		return cli.FlagError(err) // "--duration: invalid duration ...", as for the common flags
	}
	if cfg.Ops != cli.DefaultOps && o.MaxOps == 0 {
		o.MaxOps = cfg.Ops
	}
	o.UROMAddress = cfg.UROMAddress
	if len(o.PluginPath) == 0 {
		o.PluginPath = cfg.PluginPath // the config file's plugin-path
	}
	o.Logger = cfg.Logger
	if err := o.validate(); err != nil {
		return cli.Usagef("%v", err)
	}
	rep, err := Run(ctx, o)
	if err != nil {
		return err
	}
	if rep.Failed() {
		return fmt.Errorf("bench: %d row(s) failed their data check (see above)", rep.failures())
	}
	return nil
}

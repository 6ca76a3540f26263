// Command rdmo runs Remote Direct Memory Operations over UCX.
//
// The root command is compatible with NVIDIA DOCA 3.0's doca_urom_rdmo: the
// same flags (-h, -v, -l, --sdk-log-level, -j, -d, -s, -m), the same numeric
// log levels and the same JSON params files, comments and trailing commas
// included. rdmo adds its own flags and the subcommands dpu (the UROM
// service daemon), plugins and bench.
//
// The behaviour of each mode is a value of cli.App that main builds
// (rdmoApp): the demo (cmd/rdmo/internal/demo), the UROM service (cmd/rdmo/internal/dpucmd),
// the benchmark (cmd/rdmo/internal/bench) and the UCX flags (cmd/rdmo/internal/ucxflag). The
// flag layer (cmd/rdmo/internal/cli and this file) never changes when a mode does.
//
// Exit status: 0 success (and -h, -v), 1 the command failed, 2 usage error
// (flags, params file, values), 3 the mode is not built into this binary,
// 128+n stopped by signal n.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/bench"
	"github.com/openrdmo/rdmo/cmd/rdmo/internal/callcmd"
	"github.com/openrdmo/rdmo/cmd/rdmo/internal/cli"
	"github.com/openrdmo/rdmo/cmd/rdmo/internal/demo"
	"github.com/openrdmo/rdmo/cmd/rdmo/internal/dpucmd"
	"github.com/openrdmo/rdmo/cmd/rdmo/internal/ucxflag"
)

func main() {
	// The benchmark's processes are this binary re-executed in a hidden
	// role named by the environment: RoleMain runs them and never returns
	// for them.
	if code, ok := bench.RoleMain(); ok {
		os.Exit(code)
	}
	// The bench command's own flags (--topology, --size, --results, --plot,
	// --short, ...) are not cli.Config flags: TakeArgs keeps them for the
	// bench mode it returns and hands the rest of the command line to the
	// parser.
	args, benchMode := bench.TakeArgs(os.Args, os.Stdout)
	os.Exit(run(context.Background(), args[1:], os.Stdout, os.Stderr, rdmoApp(benchMode)))
}

// rdmoApp is every mode of the rdmo binary.
func rdmoApp(benchMode func(context.Context, cli.Config) error) cli.App {
	return cli.App{
		Server:  demo.RunServer,
		Client:  demo.RunClient,
		Bench:   benchMode,
		DPU:     dpucmd.RunDPU,
		Plugins: dpucmd.RunPlugins,
		Workers: dpucmd.RunWorkers,
		Worker:  dpucmd.RunWorker,
		UCX: cli.UCX{
			ValidateDevice: ucxflag.ValidateDevice,
			ApplyLogLevel:  ucxflag.ApplySDKLogLevel,
			Version:        ucxflag.UCXVersion,
		},
	}
}

// run executes the rdmo command line args with the modes of modes and
// returns the exit status. It writes help and version output to stdout
// and errors to stderr, one line each: "rdmo: error: ...".
func run(ctx context.Context, args []string, stdout, stderr io.Writer, modes cli.App) int {
	a := newApp(stdout, stderr, modes)
	ctx, caught, stop := withSignals(ctx, a.secondSignal)
	defer stop()

	root := a.rootCommand()
	root.SetArgs(cli.BareUROM(helpFirst(args)))
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return cli.ExitOK
	}
	if sig := caught(); sig != nil && errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "%s: stopped by signal (%v)\n", cli.ProgramName, sig)
		if s, ok := sig.(syscall.Signal); ok {
			return 128 + int(s)
		}
		return cli.ExitFailure
	}
	fmt.Fprintf(stderr, "%s: error: %s\n", cli.ProgramName, oneLine(err.Error()))
	return cli.ExitCode(err)
}

// withSignals returns a context cancelled by the first SIGINT or SIGTERM,
// a function reporting that signal (nil if none), and a stop function. A
// second signal stops the process at once, as the default handling would
// (killed by that signal: 128+n), after second has said so: a draining
// `rdmo dpu`, or any mode that does not stop on its own, ends on the second
// Ctrl-C or SIGTERM, with a log line.
func withSignals(parent context.Context, second func(os.Signal)) (context.Context, func() os.Signal, func()) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	var (
		mu    sync.Mutex
		first os.Signal
		done  = make(chan struct{})
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case s := <-ch:
			mu.Lock()
			first = s
			mu.Unlock()
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-ch:
			second(s)
			// Die of the signal, as without a handler.
			signal.Reset(syscall.SIGINT, syscall.SIGTERM)
			if sig, ok := s.(syscall.Signal); ok {
				_ = syscall.Kill(os.Getpid(), sig)
			}
		case <-done:
		}
	}()
	caught := func() os.Signal {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			wg.Wait()
			cancel()
		})
	}
	return ctx, caught, stop
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// helpFirst makes -h/--help win over every other flag and its errors
// (`rdmo -h -m foo` prints the help): when the command line asks for help,
// it becomes "[command] -h", the command being the first argument if it
// names one.
func helpFirst(args []string) []string {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "--help" || a == "--help=true" {
			if len(args) > 0 && (slices.Contains(commandNames, args[0]) || args[0] == "help") {
				if args[0] == "help" {
					return []string{"-h"}
				}
				return []string{args[0], "-h"}
			}
			return []string{"-h"}
		}
	}
	return args
}

// ignoredFlags lists the flags given on the command line that the root
// command's mode does not use.
func ignoredFlags(fs *pflag.FlagSet, given map[string]bool, mode cli.Mode) []string {
	var names []string
	switch mode {
	case cli.ModeClient:
		// The client reaches the worker the server started; the server
		// chooses the workload.
		names = []string{"urom", "append-strategy", "ops"}
	case cli.ModeServer:
		names = []string{"server-name"}
	}
	var out []string
	for _, n := range names {
		if f := fs.Lookup(n); f != nil && given[n] {
			out = append(out, cli.FlagName(f))
		}
	}
	return out
}

// app holds the configuration the flags are bound to.
type app struct {
	stdout, stderr io.Writer
	modes          cli.App

	showVersion bool
	log         cli.LogConfig
	cfg         cli.Config // root command: server and client modes
	bench       cli.Config
	dpu         cli.DPUConfig
	plugins     cli.PluginsConfig
	workers     cli.WorkersConfig

	// logger is the running command's logger, for the second signal's
	// line (nil before a command built one).
	logger atomic.Pointer[zap.Logger]
}

func newApp(stdout, stderr io.Writer, modes cli.App) *app {
	return &app{
		stdout:  stdout,
		stderr:  stderr,
		modes:   modes,
		log:     cli.DefaultLogConfig(),
		cfg:     cli.DefaultConfig(),
		bench:   cli.DefaultConfig(),
		dpu:     cli.DefaultDPUConfig(),
		plugins: cli.DefaultPluginsConfig(),
		workers: cli.DefaultWorkersConfig(),
	}
}

// setupLogging builds the command's logger (cli.SetupLogging) and keeps it
// for secondSignal.
func (a *app) setupLogging(c cli.LogConfig) (*zap.Logger, error) {
	log, err := cli.SetupLogging(c, a.stderr, a.modes.UCX)
	if err == nil {
		a.logger.Store(log)
	}
	return log, err
}

// secondSignal says, in the command's log, that a second signal stops the
// process now (withSignals), before it dies of it.
func (a *app) secondSignal(s os.Signal) {
	if log := a.logger.Load(); log != nil {
		log.Warn("second signal: stopping now", zap.Stringer("signal", s))
		_ = log.Sync()
		return
	}
	fmt.Fprintf(a.stderr, "%s: second signal (%v): stopping now\n", cli.ProgramName, s)
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   cli.ProgramName,
		Short: "Remote Direct Memory Operations over UCX (doca_urom_rdmo compatible)",
		Long: "Runs one side of the RDMO demo: -m server (the target, which owns the memory and\n" +
			"starts an RDMO worker on the UROM service) or -m client (the initiator, which sends\n" +
			"append, scatter and flush requests to that worker).",
		Args:              rootArgs,
		RunE:              a.runRoot,
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	pf := root.PersistentFlags()
	pf.BoolP("help", "h", false, "Print a help synopsis")
	cli.Annotate(pf, "help", cli.GroupDOCAFlags, "")
	pf.BoolVarP(&a.showVersion, "version", "v", false, "Print program version information")
	cli.Annotate(pf, "version", cli.GroupDOCAFlags, "")
	a.log.RegisterFlags(pf)
	a.cfg.RegisterFlags(root.Flags())

	// An unknown flag gets the closest flag of its command (for bench, of
	// its own flags too: TakeArgs took those out before cobra parses).
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		known := []*pflag.FlagSet{c.Flags(), c.InheritedFlags()}
		if c.Name() == "bench" {
			known = append(known, bench.FlagSet(new(bench.Options)))
		}
		return cli.FlagError(err, known...)
	})
	root.SetHelpFunc(func(cmd *cobra.Command, _ []string) { fmt.Fprint(cmd.OutOrStdout(), helpText(cmd)) })
	root.SetUsageFunc(func(cmd *cobra.Command) error { _, err := fmt.Fprint(cmd.OutOrStderr(), helpText(cmd)); return err })
	root.SetHelpCommand(&cobra.Command{
		Use:    "help [command]",
		Short:  "Print the help of a command",
		Hidden: true,
		Args:   cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return cli.Usagef("no help for %q; commands: %s", strings.Join(args, " "), strings.Join(commandNames, ", "))
			}
			_, err = fmt.Fprint(c.OutOrStdout(), helpText(target))
			return err
		},
	})

	root.AddCommand(a.dpuCommand(), a.pluginsCommand(), a.workersCommand(), a.benchCommand(), a.uromWorkerCommand(),
		callcmd.Command(a.stdout, a.stderr, &a.log, a.modes.UCX))
	return root
}

func (a *app) dpuCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dpu",
		Short: "Run the UROM service daemon (the DPU side) that spawns RDMO workers",
		Long: "Runs the UROM service: it finds plugins on the plugin path, accepts hosts on\n" +
			"--listen, and spawns worker processes running the plugins they ask for.\n" +
			"On SIGINT or SIGTERM it drains: it accepts no new host, tells the connected\n" +
			"ones, and lets their workers serve for up to --worker-drain-timeout before it\n" +
			"stops them; a second signal stops it at once (docs/OPERATIONS.md).\n\n" +
			"With --secret-file (at least 16 bytes; `openssl rand -hex 32`), every host must\n" +
			"prove it holds the same secret, and the service proves it back, before anything\n" +
			"is served (rdmo -m server --urom ... --secret-file, rdmo plugins --urom ...\n" +
			"--secret-file). The secret authenticates; it does not encrypt the channel.\n" +
			"Without it, any host that reaches --listen can start and command workers:\n" +
			"bind --listen to loopback or a network only trusted hosts reach.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.showVersion {
				return a.printVersion()
			}
			if err := cli.LoadParams(cmd.Flags(), "config"); err != nil {
				return err
			}
			cfg := a.dpu
			cfg.Log = a.log
			if err := cfg.Validate(); err != nil {
				return err
			}
			if a.modes.DPU == nil {
				return cli.NotBuilt("dpu")
			}
			log, err := a.setupLogging(cfg.Log)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			cfg.Logger = log
			return a.modes.DPU(cmd.Context(), cfg)
		},
	}
	a.dpu.RegisterFlags(cmd.Flags())
	return cmd
}

func (a *app) pluginsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plugins",
		Short: "List the plugins a UROM service offers",
		Long: "Lists the plugins (name, id, version) the UROM service at --urom offers\n(--urom alone: the one at rdmo dpu's default address, " + cli.DefaultDPUListen + "),\nor those of the service embedded in this binary without --urom.\n" +
			"A service started with --secret-file needs the same --secret-file here.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.showVersion {
				return a.printVersion()
			}
			cfg := a.plugins
			cfg.Log = a.log
			if err := cfg.Validate(); err != nil {
				return err
			}
			if a.modes.Plugins == nil {
				return cli.NotBuilt("plugins")
			}
			log, err := a.setupLogging(cfg.Log)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			cfg.Logger = log
			return a.modes.Plugins(cmd.Context(), cfg)
		},
	}
	a.plugins.RegisterFlags(cmd.Flags())
	return cmd
}

func (a *app) workersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List the worker processes a UROM service runs",
		Long: "Lists the worker processes of the UROM service at --urom (default: rdmo dpu's\ndefault address, " + cli.DefaultDPUListen + "): id, pid, state, uptime,\n" +
			"clients and request queues, plugins, and the host that spawned each.\n" +
			"--output json prints one JSON array for scripts.\n" +
			"A service started with --secret-file needs the same --secret-file here.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.showVersion {
				return a.printVersion()
			}
			cfg := a.workers
			cfg.Log = a.log
			if err := cfg.Validate(); err != nil {
				return err
			}
			if a.modes.Workers == nil {
				return cli.NotBuilt("workers")
			}
			log, err := a.setupLogging(cfg.Log)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			cfg.Logger = log
			return a.modes.Workers(cmd.Context(), cfg)
		},
	}
	a.workers.RegisterFlags(cmd.Flags())
	return cmd
}

func (a *app) benchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run the RDMO benchmark workload",
		Long:  bench.Help(),
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.showVersion {
				return a.printVersion()
			}
			if err := cli.LoadParams(cmd.Flags(), "json"); err != nil {
				return err
			}
			cfg := a.bench
			cfg.Log = a.log
			if err := cfg.Validate(false, a.modes.UCX); err != nil {
				return err
			}
			return a.start(cmd.Context(), "bench", a.modes.Bench, cfg)
		},
	}
	a.bench.RegisterFlags(cmd.Flags())
	// Flags of the other modes that bench refuses (one line, exit 2). They
	// stay registered, so a shared params file (-j) still loads; the help
	// says they are refused.
	for _, f := range []string{"device", "server-name", "mode", "oob-port", "append-strategy", "secret-file"} {
		if fl := cmd.Flags().Lookup(f); fl != nil {
			fl.Usage += " (refused by bench)"
		}
	}
	return cmd
}

func (a *app) runRoot(cmd *cobra.Command, _ []string) error {
	if a.showVersion {
		return a.printVersion()
	}
	// Flags given on the command line, before the params file sets more
	// (DOCA's params file holds the flags of both modes: those are not
	// worth a warning).
	given := map[string]bool{}
	cmd.Flags().Visit(func(f *pflag.Flag) { given[f.Name] = true })
	if err := cli.LoadParams(cmd.Flags(), "json"); err != nil {
		return err
	}
	cfg := a.cfg
	cfg.Log = a.log
	if err := cfg.Validate(true, a.modes.UCX); err != nil {
		return err
	}
	mode := a.modes.Server
	if cfg.Mode == cli.ModeClient {
		mode = a.modes.Client
	}
	return a.start(cmd.Context(), string(cfg.Mode), mode, cfg, ignoredFlags(cmd.Flags(), given, cfg.Mode)...)
}

// start runs a mode with a logger, or reports that it is not built. It
// warns about the flags given that the mode ignores (a DOCA params file
// holds the flags of both modes, so they are not refused).
func (a *app) start(ctx context.Context, name string, mode func(context.Context, cli.Config) error, cfg cli.Config, ignored ...string) error {
	if mode == nil {
		return cli.NotBuilt(name)
	}
	log, err := a.setupLogging(cfg.Log)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	if len(ignored) > 0 {
		log.Warn("flags ignored in "+name+" mode", zap.Strings("flags", ignored))
	}
	cfg.Logger = log
	return mode(ctx, cfg)
}

// uromWorkerCommand is the hidden `rdmo __urom-worker`: the body of an RDMO
// worker process that a UROM service (rdmo dpu) starts. It is not for
// people to run.
func (a *app) uromWorkerCommand() *cobra.Command {
	return &cobra.Command{
		Use:    cli.WorkerSubcommand,
		Short:  "Run an RDMO worker process (started by the UROM service)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.modes.Worker == nil {
				return cli.NotBuilt(cli.WorkerSubcommand)
			}
			log, err := a.setupLogging(a.log)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			return a.modes.Worker(cmd.Context(), log)
		},
	}
}

func (a *app) printVersion() error {
	_, err := fmt.Fprint(a.stdout, cli.VersionInfo(a.modes.UCX).String())
	return err
}

var commandNames = []string{"dpu", "plugins", "workers", "bench", "call"}

func rootArgs(_ *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q; commands: %s (the modes are flags: -m server, -m client)", args[0], strings.Join(commandNames, ", "))
	if s := closest(args[0], commandNames); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	return cli.Usagef("%s", msg)
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return cli.Usagef("%s takes no arguments, got %q", cmd.CommandPath(), args[0])
	}
	return nil
}

// closest returns the candidate sharing the longest prefix with s, if any
// share at least two characters.
func closest(s string, candidates []string) string {
	best, bestN := "", 1
	for _, c := range candidates {
		n := 0
		for n < len(s) && n < len(c) && s[n] == c[n] {
			n++
		}
		if n > bestN {
			best, bestN = c, n
		}
	}
	return best
}

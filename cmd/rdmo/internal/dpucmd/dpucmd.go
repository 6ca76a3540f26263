// Package dpucmd is the rdmo binary's `rdmo dpu` (the UROM service daemon
// with the RDMO component), `rdmo plugins` and `rdmo workers` (its plugin
// and worker tables), and how the other commands explain a UROM service's
// errors.
package dpucmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/cli"
	"github.com/openrdmo/rdmo/cmd/rdmo/internal/ucxflag"
	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/rdmoworker"
	"github.com/openrdmo/rdmo/urom/service"
)

// Stdout is where `rdmo dpu` and `rdmo plugins` print (the announce line,
// the plugin table). Tests may replace it.
var Stdout io.Writer = os.Stdout

func executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("cannot find this program's executable (to start worker processes): %w", err)
	}
	return exe, nil
}

func serviceConfig(listen string, pluginPath []string, maxWorkers int, log cli.LogConfig, logger *zap.Logger) (service.Config, error) {
	exe, err := executable()
	if err != nil {
		return service.Config{}, err
	}
	bi := cli.VersionInfo(cli.UCX{Version: ucxflag.UCXVersion})
	return service.Config{
		Build:            service.BuildInfo{Version: bi.Version, Commit: bi.Commit, UCX: bi.UCX},
		Listen:           listen,
		PluginPath:       pluginPath,
		Builtins:         rdmoworker.Builtins(),
		Metrics:          rdmoworker.Metrics(),
		Probe:            rdmoworker.Probe,
		MaxWorkers:       maxWorkers,
		WorkerCommand:    append([]string{exe, cli.WorkerSubcommand}, log.ChildArgs()...),
		ComponentVersion: command.ComponentVersion,
		Logger:           logger,
	}, nil
}

// RunWorker is the body of a worker process that `rdmo dpu` started
// (`rdmo __urom-worker`, cli.WorkerSubcommand): it serves the RDMO
// component (rdmoworker.Factory) on the control socket the service handed
// it on file descriptor service.ControlFD. It is not for people to run.
func RunWorker(ctx context.Context, log *zap.Logger) error {
	ctl := os.NewFile(service.ControlFD, "urom-control")
	if ctl == nil {
		return cli.Usagef("%s runs only as a worker process of `rdmo dpu` (no control socket on fd %d)", cli.WorkerSubcommand, service.ControlFD)
	}
	return service.ServeWorker(ctx, ctl, rdmoworker.Factory, log.Named("worker"))
}

// RunDPU runs `rdmo dpu`, the UROM service daemon, until ctx ends. Once it
// listens it prints the announce line (urom.Announce, or urom.AnnounceJSON
// with --log-format json) on standard output, so a host that started it as
// its embedded service finds its address. With --secret-file every host must
// prove the secret (service.Config.Secret) before it is served.
func RunDPU(ctx context.Context, cfg cli.DPUConfig) error {
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	secret, err := cli.LoadSecret(cfg.SecretFile)
	if err != nil {
		return err
	}
	if w := cli.SecretWarning(cfg.SecretFile); w != "" {
		log.Warn(w)
	}
	uc, err := serviceConfig(cfg.Listen, cfg.PluginPath, cfg.MaxWorkers, cfg.Log, log.Named("urom"))
	if err != nil {
		return err
	}
	uc.Secret = secret
	uc.WorkerSettings = cfg.Worker.Settings() // the operator's worker limits, for every worker
	// On SIGTERM/SIGINT the service drains for as long as a worker may
	// take to drain a request queue (--worker-drain-timeout).
	uc.DrainTimeout = cfg.Worker.DrainTimeout
	if uc.DrainTimeout <= 0 {
		uc.DrainTimeout = cli.DefaultWorkerDrainTimeout
	}
	svc, err := service.New(ctx, uc)
	if err != nil {
		return err
	}
	logPlugins(log, svc.Plugins())
	if cfg.MetricsAddr != "" {
		if _, err := service.ServeMetrics(ctx, svc, cfg.MetricsAddr, log.Named("metrics")); err != nil {
			svc.Close()
			return err
		}
	}
	addr, err := svc.Listen()
	if err != nil {
		svc.Close()
		return err
	}
	if len(secret) == 0 && !Loopback(addr) {
		log.Warn("UROM service listens beyond loopback without --secret-file: any host that reaches this address can start and command workers",
			zap.String("addr", addr))
	}
	log.Info("worker limits", zap.Any("worker", uc.WorkerSettings))
	// Standard output holds only the announce line: a parent that started
	// this service reads its address there (docs/OPERATIONS.md); in JSON
	// mode it is a JSON object like every other line.
	if cfg.Log.Format == cli.LogJSON {
		urom.AnnounceJSON(Stdout, addr)
	} else {
		urom.Announce(Stdout, addr)
	}
	err = svc.Serve(ctx)
	if ctx.Err() != nil {
		log.Info("UROM service stopped")
		return nil
	}
	return err
}

// logPlugins logs, once at start, the handlers workers can load besides
// the built-in ones: form:name@version (ops) and where it was found.
func logPlugins(log *zap.Logger, plugins []urom.PluginInfo) {
	var found []string
	builtins := 0
	for _, p := range plugins {
		if p.Builtin {
			builtins++
			continue
		}
		var ops []string
		for _, op := range p.Ops {
			ops = append(ops, dpu.OpLabel(op, p.Name, p.OpNames))
		}
		found = append(found, fmt.Sprintf("%s:%s@%s %s %s", p.Form(), p.Name, p.Version, strings.Join(ops, ","), p.Path))
	}
	log.Info("plugins", zap.Int("builtin", builtins), zap.Strings("found", found))
}

// Loopback reports whether a listen address (host:port) is reachable only
// from this machine.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// RunWorkers runs `rdmo workers`: it lists the worker processes of the
// UROM service at cfg.UROMAddress as a table, or as a JSON array with
// --output json.
func RunWorkers(ctx context.Context, cfg cli.WorkersConfig) error {
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	secret, err := cli.LoadSecret(cfg.SecretFile)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c, err := urom.Dial(dctx, cfg.UROMAddress, urom.ClientOptions{ComponentVersion: command.ComponentVersion, Secret: secret, Logger: log.Named("urom")})
	if err != nil {
		return UROMError(cfg.UROMAddress, err)
	}
	defer c.Close()
	ws, err := c.Workers(dctx)
	if err != nil {
		return fmt.Errorf("UROM service at %s: listing workers: %w", cfg.UROMAddress, err)
	}
	if cfg.Output == "json" {
		if ws == nil {
			ws = []urom.WorkerInfo{}
		}
		enc := json.NewEncoder(Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(ws)
	}
	tw := tabwriter.NewWriter(Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPID\tSTATE\tUPTIME\tCLIENTS\tRQS\tPLUGINS\tHOST")
	count := func(n int) string {
		if n < 0 {
			return "?"
		}
		return strconv.Itoa(n)
	}
	for _, w := range ws {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", w.ID, w.PID, w.State, w.Uptime.Truncate(time.Second),
			count(w.Clients), count(w.RequestQueues), strings.Join(w.Plugins, ","), w.Host)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(ws) == 0 {
		fmt.Fprintf(Stdout, "(no workers on the UROM service at %s)\n", cfg.UROMAddress)
	}
	return nil
}

// RunPlugins runs `rdmo plugins`: it lists the plugins of the UROM service at cfg.UROMAddress, or of the service built
// into this binary when it is empty, as a table on standard output.
func RunPlugins(ctx context.Context, cfg cli.PluginsConfig) error {
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	var plugins []urom.PluginInfo
	source := "built into this binary"
	if cfg.UROMAddress == "" {
		uc, err := serviceConfig("127.0.0.1:0", nil, 1, cfg.Log, log.Named("urom"))
		if err != nil {
			return err
		}
		svc, err := service.New(ctx, uc)
		if err != nil {
			return err
		}
		plugins = svc.Plugins()
		svc.Close()
	} else {
		source = "of the UROM service at " + cfg.UROMAddress
		dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		secret, err := cli.LoadSecret(cfg.SecretFile)
		if err != nil {
			return err
		}
		c, err := urom.Dial(dctx, cfg.UROMAddress, urom.ClientOptions{ComponentVersion: command.ComponentVersion, Secret: secret, Logger: log.Named("urom")})
		if err != nil {
			return UROMError(cfg.UROMAddress, err)
		}
		defer c.Close()
		if plugins, err = c.Plugins(dctx); err != nil {
			return fmt.Errorf("UROM service at %s: listing plugins: %w", cfg.UROMAddress, err)
		}
	}
	fmt.Fprintf(Stdout, "Plugins %s (RDMO component %s):\n", source, command.ComponentVersion)
	tw := tabwriter.NewWriter(Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tVERSION\tKIND\tOPS\tPATH")
	for _, p := range plugins {
		kind, path := p.Form(), "-"
		if !p.Builtin {
			path = p.Path
		}
		var ops []string
		for _, op := range p.Ops {
			if rdmo.IsUserOp(op) {
				ops = append(ops, dpu.OpLabel(op, p.Name, p.OpNames)) // "counter(16)", not "user(16)(16)"
			} else {
				ops = append(ops, fmt.Sprintf("%s(%d)", rdmo.OpName(op), op))
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Name, p.Version, kind, strings.Join(ops, ","), path)
	}
	return tw.Flush()
}

// UROMError explains a failure to reach or use a UROM service.
func UROMError(addr string, err error) error {
	switch {
	case errors.Is(err, urom.ErrAuth):
		return fmt.Errorf("UROM service at %s: %w (the host's --secret-file and rdmo dpu --secret-file must hold the same secret)", addr, err)
	case errors.Is(err, urom.ErrVersion):
		return fmt.Errorf("UROM service at %s is incompatible with this host (RDMO component %s): %w", addr, command.ComponentVersion, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("UROM service at %s did not answer in time: %w", addr, err)
	}
	return fmt.Errorf("UROM service at %s: %w", addr, err)
}

package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"go.uber.org/zap"
)

// App is what the rdmo binary runs, its modes: the binary builds one value
// in main() and hands it to its commands, so flag handling never changes when
// a mode is added. A nil mode makes its command print "<mode>: not built
// into this binary yet" and exit with status 3 (ExitNotBuilt).
//
// Each mode gets a context that is cancelled on SIGINT or SIGTERM and a
// validated configuration whose Logger is set. Returning an error makes the
// binary print it on one line and exit with status 1, or with the code of an
// *ExitError.
type App struct {
	// Server runs -m server: the target of the DOCA demo.
	Server func(ctx context.Context, cfg Config) error
	// Client runs -m client: the initiator of the DOCA demo.
	Client func(ctx context.Context, cfg Config) error
	// Bench runs `rdmo bench`. cfg.Mode may be "" (both sides in one
	// process), ModeServer or ModeClient.
	Bench func(ctx context.Context, cfg Config) error
	// DPU runs `rdmo dpu`, the UROM service daemon, until ctx ends.
	DPU func(ctx context.Context, cfg DPUConfig) error
	// Plugins runs `rdmo plugins`: it lists the plugins a UROM service
	// offers (cfg.UROMAddress, or the embedded service) on stdout.
	Plugins func(ctx context.Context, cfg PluginsConfig) error
	// Workers runs `rdmo workers`: it lists the worker processes of the
	// UROM service at cfg.UROMAddress on stdout.
	Workers func(ctx context.Context, cfg WorkersConfig) error
	// Worker runs the hidden WorkerSubcommand: the body of a worker
	// process a UROM service started.
	Worker func(ctx context.Context, log *zap.Logger) error

	// UCX is the UCX layer the flags need.
	UCX UCX
}

// WorkerSubcommand is the hidden rdmo subcommand a UROM service starts its
// worker processes with (App.Worker).
const WorkerSubcommand = "__urom-worker"

// UCX is what the flag layer needs from the UCX layer, which this package
// does not import (it needs cgo). Nil fields are "no UCX": any device name
// is accepted, the SDK log level is only recorded, and the version output
// shows UCXVersionPlaceholder.
type UCX struct {
	// ValidateDevice checks a -d/--device name and lists the valid
	// device names in its error.
	ValidateDevice func(name string) error
	// ApplyLogLevel applies --sdk-log-level; ucxLevel is
	// LogLevel.UCXLevel() ("fatal", "error", "warn", "info", "debug",
	// "trace").
	ApplyLogLevel func(ucxLevel string) error
	// Version reports the UCX library the binary runs against, for
	// -v/--version.
	Version func() string
}

// UCXVersionPlaceholder is what -v/--version shows for UCX without
// UCX.Version.
const UCXVersionPlaceholder = "unknown (UCX is not linked into this binary yet)"

// Build information, set at link time, for example:
//
//	go build -ldflags "-X github.com/openrdmo/rdmo/cmd/rdmo/internal/cli.Version=1.2.0 \
//	    -X github.com/openrdmo/rdmo/cmd/rdmo/internal/cli.Commit=$(git rev-parse --short HEAD) \
//	    -X github.com/openrdmo/rdmo/cmd/rdmo/internal/cli.BuildDate=$(date -u +%Y-%m-%d)" ./cmd/rdmo
//
// When they are left empty, VersionInfo falls back to what the Go toolchain
// recorded in the binary (module version, VCS revision and time).
var (
	Version   = ""
	Commit    = ""
	BuildDate = ""
)

// ProgramName is the binary's name in usage and version output.
const ProgramName = "rdmo"

// DOCACompat names the reference application rdmo's root command mirrors.
const DOCACompat = "doca_urom_rdmo (NVIDIA DOCA 3.0)"

// BuildInfo is what -v/--version prints.
type BuildInfo struct {
	Program   string
	Version   string
	Commit    string
	BuildDate string
	GoVersion string // runtime.Version()
	Platform  string // GOOS/GOARCH
	UCX       string // UCX.Version(), or UCXVersionPlaceholder
}

// VersionInfo collects the build information, the UCX version from ucx.
func VersionInfo(ucx UCX) BuildInfo {
	bi := BuildInfo{
		Program:   ProgramName,
		Version:   Version,
		Commit:    Commit,
		BuildDate: BuildDate,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
		UCX:       UCXVersionPlaceholder,
	}
	info, _ := debug.ReadBuildInfo()
	bi = bi.withBuildInfo(info)
	if ucx.Version != nil {
		if v := strings.TrimSpace(ucx.Version()); v != "" {
			bi.UCX = v
		}
	}
	return bi
}

// withBuildInfo fills what the link-time stamp (Version, Commit,
// BuildDate) left empty from what the Go toolchain recorded in the binary:
// the module version (`go install ...@v1.2.0`; "(devel)" for a build in a
// checkout, which Go 1.24 and later replace by a pseudo-version), the VCS
// revision (12 hex digits, "-dirty" when the tree had changes) and the
// commit time. A stamp always wins over the recorded facts. The version is
// "devel" when neither says one (info may be nil).
func (b BuildInfo) withBuildInfo(info *debug.BuildInfo) BuildInfo {
	if info == nil {
		info = &debug.BuildInfo{}
	}
	if b.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		b.Version = info.Main.Version
	}
	stamped := b.Commit != ""
	var modified bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			if !stamped {
				b.Commit = s.Value[:min(len(s.Value), 12)]
			}
		case "vcs.time":
			if b.BuildDate == "" {
				b.BuildDate = s.Value
			}
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && !stamped && b.Commit != "" {
		b.Commit += "-dirty"
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	return b
}

// String renders the version output, one fact per line:
//
//	rdmo version 1.2.0 (commit abc123, built 2025-01-01)
//	compatible with doca_urom_rdmo (NVIDIA DOCA 3.0)
//	go: go1.26.0 linux/amd64
//	ucx: 1.16.0
func (b BuildInfo) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s version %s", b.Program, b.Version)
	var extra []string
	if b.Commit != "" {
		extra = append(extra, "commit "+b.Commit)
	}
	if b.BuildDate != "" {
		extra = append(extra, "built "+b.BuildDate)
	}
	if len(extra) > 0 {
		fmt.Fprintf(&sb, " (%s)", strings.Join(extra, ", "))
	}
	fmt.Fprintf(&sb, "\ncompatible with %s\ngo: %s %s\nucx: %s\n", DOCACompat, b.GoVersion, b.Platform, b.UCX)
	return sb.String()
}

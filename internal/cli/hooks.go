package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// The registry: the rdmo binary's commands call these hooks, and the packages
// that implement the modes set them (typically from a small file in
// cmd/rdmo, or from an init function of a package the binary imports), so
// flag handling never changes when a mode is added. A nil Run hook makes the
// command print "<mode>: not built into this binary yet" and exit with
// status 3 (ExitNotBuilt).
//
// Each Run hook gets a context that is cancelled on SIGINT or SIGTERM and a
// validated configuration whose Logger is set. Returning an error makes the
// binary print it on one line and exit with status 1, or with the code of an
// *ExitError.
//
// Set hooks before the binary parses its command line; they are not safe to
// change concurrently with a running command.
var (
	// RunServer runs -m server: the target of the DOCA demo.
	RunServer func(ctx context.Context, cfg Config) error
	// RunClient runs -m client: the initiator of the DOCA demo.
	RunClient func(ctx context.Context, cfg Config) error
	// RunBench runs `rdmo bench`. cfg.Mode may be "" (both sides in one
	// process), ModeServer or ModeClient.
	RunBench func(ctx context.Context, cfg Config) error
	// RunDPU runs `rdmo dpu`, the UROM service daemon, until ctx ends.
	RunDPU func(ctx context.Context, cfg DPUConfig) error
	// RunPlugins runs `rdmo plugins`: it lists the plugins a UROM service
	// offers (cfg.UROMAddress, or the embedded service) on stdout.
	RunPlugins func(ctx context.Context, cfg PluginsConfig) error

	// ValidateDevice checks a -d/--device name; the UCX layer sets it and
	// lists the valid device names in its error. While nil, any non-empty
	// name is accepted.
	ValidateDevice func(name string) error

	// ApplySDKLogLevel applies --sdk-log-level; ucxLevel is LogLevel.UCXLevel()
	// ("fatal", "error", "warn", "info", "debug", "trace"). The UCX layer sets
	// it (mapping the name onto ucp.SetLogLevel); while nil the SDK level is
	// only recorded in the configuration.
	ApplySDKLogLevel func(ucxLevel string) error

	// UCXVersion reports the UCX library the binary runs against, for
	// -v/--version. The UCX layer sets it; while nil the version output shows
	// UCXVersionPlaceholder.
	UCXVersion func() string
)

// UCXVersionPlaceholder is what -v/--version shows for UCX while the
// UCXVersion hook is not set.
const UCXVersionPlaceholder = "unknown (UCX is not linked into this binary yet)"

// Build information, set at link time, for example:
//
//	go build -ldflags "-X github.com/openrdmo/rdmo/internal/cli.Version=1.2.0 \
//	    -X github.com/openrdmo/rdmo/internal/cli.Commit=$(git rev-parse --short HEAD) \
//	    -X github.com/openrdmo/rdmo/internal/cli.BuildDate=$(date -u +%Y-%m-%d)" ./cmd/rdmo
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
	UCX       string // UCXVersion(), or UCXVersionPlaceholder
}

// VersionInfo collects the build information.
func VersionInfo() BuildInfo {
	bi := BuildInfo{
		Program:   ProgramName,
		Version:   Version,
		Commit:    Commit,
		BuildDate: BuildDate,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
		UCX:       UCXVersionPlaceholder,
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		if bi.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			bi.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				if bi.Commit == "" {
					bi.Commit = s.Value
					if len(bi.Commit) > 12 {
						bi.Commit = bi.Commit[:12]
					}
				}
			case "vcs.time":
				if bi.BuildDate == "" {
					bi.BuildDate = s.Value
				}
			case "vcs.modified":
				if s.Value == "true" && bi.Commit != "" && Commit == "" && !strings.HasSuffix(bi.Commit, "-dirty") {
					bi.Commit += "-dirty"
				}
			}
		}
	}
	if bi.Version == "" {
		bi.Version = "devel"
	}
	if UCXVersion != nil {
		if v := strings.TrimSpace(UCXVersion()); v != "" {
			bi.UCX = v
		}
	}
	return bi
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

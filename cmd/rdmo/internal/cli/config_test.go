package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// Every DOCA flag, short and long, parses into the configuration.
func TestDOCAFlagsShortAndLong(t *testing.T) {
	tests := []struct {
		args  []string
		check func(*Config) bool
	}{
		{[]string{"-l", "60"}, func(c *Config) bool { return c.Log.Level == LogDebug }},
		{[]string{"--log-level", "70"}, func(c *Config) bool { return c.Log.Level == LogTrace }},
		{[]string{"--log-level=20"}, func(c *Config) bool { return c.Log.Level == LogCritical }},
		{[]string{"-l10"}, func(c *Config) bool { return c.Log.Level == LogDisable }},
		{[]string{"--sdk-log-level", "30"}, func(c *Config) bool { return c.Log.SDKLevel == LogError }},
		{[]string{"-j", shipped}, func(c *Config) bool { return c.ParamsFile == shipped }},
		{[]string{"--json", shipped}, func(c *Config) bool { return c.ParamsFile == shipped }},
		{[]string{"-d", "mlx5_1"}, func(c *Config) bool { return c.Device == "mlx5_1" }},
		{[]string{"--device", "mlx5_2"}, func(c *Config) bool { return c.Device == "mlx5_2" }},
		{[]string{"-s", "host-a"}, func(c *Config) bool { return c.ServerName == "host-a" }},
		{[]string{"--server-name", "host-b"}, func(c *Config) bool { return c.ServerName == "host-b" }},
		{[]string{"-m", "server"}, func(c *Config) bool { return c.Mode == ModeServer }},
		{[]string{"--mode", "client"}, func(c *Config) bool { return c.Mode == ModeClient }},
		{[]string{"--mode=server"}, func(c *Config) bool { return c.Mode == ModeServer }},
		{[]string{"--oob-port", "20000"}, func(c *Config) bool { return c.OOBPort == 20000 }},
		{[]string{"--urom", "dpu:18516"}, func(c *Config) bool { return c.UROMAddress == "dpu:18516" }},
		{[]string{"--append-strategy", "shared"}, func(c *Config) bool { return c.AppendStrategy == AppendShared }},
		{[]string{"--ops", "5"}, func(c *Config) bool { return c.Ops == 5 }},
		{[]string{"--secret-file", "/s"}, func(c *Config) bool { return c.SecretFile == "/s" }},
		{[]string{"--log-format", "json"}, func(c *Config) bool { return c.Log.Format == LogJSON }},
	}
	for _, tc := range tests {
		fs, cfg := newRootFlags(t)
		if err := fs.Parse(tc.args); err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if !tc.check(cfg) {
			t.Errorf("%v: config %+v", tc.args, *cfg)
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-v"}, {"--version"}} {
		fs, _ := newRootFlags(t)
		if err := fs.Parse(args); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	c := DefaultConfig()
	if c.Log != (LogConfig{Level: LogInfo, SDKLevel: LogWarning, Format: LogConsole}) || c.OOBPort != 18515 ||
		c.Ops != 100000 || c.AppendStrategy != AppendOwned || c.Mode != "" || c.UROMAddress != "" {
		t.Errorf("DefaultConfig = %+v", c)
	}
	fs, _ := newRootFlags(t)
	for name, def := range map[string]string{"log-level": "50", "sdk-log-level": "40", "oob-port": "18515", "ops": "100000", "append-strategy": "owned", "log-format": "console", "mode": ""} {
		if got := fs.Lookup(name).DefValue; got != def {
			t.Errorf("--%s default %q, want %q", name, got, def)
		}
	}
	d := DefaultDPUConfig()
	if d.Listen != DefaultDPUListen || d.MaxWorkers != DefaultMaxWorkers || len(d.PluginPath) != 0 || d.MetricsAddr != "" {
		t.Errorf("DefaultDPUConfig = %+v", d)
	}
}

func TestFlagValueErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-m", "clinet"}, `-m/--mode: invalid mode "clinet"; valid modes: server, client (did you mean "client"?)`},
		{[]string{"-m", "both"}, `-m/--mode: invalid mode "both"; valid modes: server, client`},
		{[]string{"--mode", "Server"}, `-m/--mode: invalid mode "Server"; valid modes: server, client (did you mean "server"?)`},
		{[]string{"-m", ""}, `-m/--mode: empty mode; valid modes: server, client`},
		{[]string{"-l", "15"}, `-l/--log-level: invalid log level "15"; valid levels: 10 (DISABLE), 20 (CRITICAL), 30 (ERROR), 40 (WARNING), 50 (INFO), 60 (DEBUG), 70 (TRACE)`},
		{[]string{"--sdk-log-level", "x"}, `--sdk-log-level: invalid log level "x"; valid levels: 10 (DISABLE)`},
		{[]string{"--oob-port", "0"}, `--oob-port: invalid port "0"; want a number from 1 to 65535`},
		{[]string{"--oob-port", "65536"}, `--oob-port: invalid port "65536"`},
		{[]string{"--ops", "0"}, `--ops: invalid count "0"; want a whole number of at least 1`},
		{[]string{"--ops", "1e5"}, `--ops: invalid count "1e5"`},
		{[]string{"--append-strategy", "owend"}, `--append-strategy: invalid append strategy "owend"; valid strategies: owned, shared (did you mean "owned"?)`},
		{[]string{"--log-format", "text"}, `--log-format: invalid log format "text"; valid formats: console, json`},
		{[]string{"-d", ""}, `-d/--device: empty name`},
		{[]string{"-s", " "}, `-s/--server-name: empty name`},
		{[]string{"-j"}, `-j/--json needs a value`},
		{[]string{"--bogus"}, `unknown flag: --bogus`},
	}
	for _, tc := range tests {
		fs, _ := newRootFlags(t)
		err := FlagError(fs.Parse(tc.args))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: error\n got %v\nwant prefix %q", tc.args, err, tc.want)
		}
		if ExitCode(err) != ExitUsage {
			t.Errorf("%q: exit %d", tc.args, ExitCode(err))
		}
	}
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := func() Config { c := DefaultConfig(); c.Mode = ModeServer; return c }
	tests := []struct {
		name   string
		mutate func(*Config)
		bench  bool
		want   string
	}{
		{"server", func(*Config) {}, false, ""},
		{"client", func(c *Config) { c.Mode, c.ServerName = ModeClient, "h" }, false, ""},
		{"no mode", func(c *Config) { c.Mode = "" }, false, "no mode given: use -m/--mode {server, client}"},
		{"bench no mode", func(c *Config) { c.Mode = "" }, true, ""},
		{"bad mode", func(c *Config) { c.Mode = "x" }, true, `invalid mode "x"`},
		{"client needs server", func(c *Config) { c.Mode = ModeClient }, false, "client mode needs -s/--server-name"},
		{"long device", func(c *Config) { c.Device = strings.Repeat("m", 64) }, false, "-d/--device: IB device name longer than 63 bytes"},
		{"blank device", func(c *Config) { c.Device = " " }, false, "-d/--device: empty IB device name"},
		{"urom", func(c *Config) { c.UROMAddress = "dpu:18516" }, false, ""},
		{"urom ipv6", func(c *Config) { c.UROMAddress = "[::1]:18516" }, false, ""},
		{"urom no port", func(c *Config) { c.UROMAddress = "dpu" }, false, `--urom: invalid address "dpu"; want host:port`},
		{"urom bad port", func(c *Config) { c.UROMAddress = "dpu:x" }, false, `--urom: invalid port in "dpu:x"`},
		{"secret", func(c *Config) { c.SecretFile = secret }, false, ""},
		{"secret missing", func(c *Config) { c.SecretFile = filepath.Join(dir, "nope") }, false, "--secret-file: " + filepath.Join(dir, "nope") + ": no such file or directory"},
		{"secret dir", func(c *Config) { c.SecretFile = dir }, false, "--secret-file: " + dir + " is a directory"},
		{"ops", func(c *Config) { c.Ops = 0 }, false, "--ops: want a whole number"},
		{"port", func(c *Config) { c.OOBPort = 0 }, false, "--oob-port: want a number"},
		{"strategy", func(c *Config) { c.AppendStrategy = "" }, false, `empty append strategy`},
		{"level", func(c *Config) { c.Log.Level = 15 }, false, "invalid log level"},
	}
	for _, tc := range tests {
		c := ok()
		tc.mutate(&c)
		err := c.Validate(!tc.bench, UCX{})
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || ExitCode(err) != ExitUsage {
			t.Errorf("%s: error %v (exit %d), want prefix %q", tc.name, err, ExitCode(err), tc.want)
		}
	}
}

func TestValidateDeviceHook(t *testing.T) {
	c := DefaultConfig()
	c.Mode, c.Device = ModeServer, "mlx5_9"
	if err := c.Validate(true, UCX{}); err != nil {
		t.Fatalf("any name accepted while the hook is nil: %v", err)
	}
	var asked string
	ucx := UCX{ValidateDevice: func(name string) error {
		asked = name
		return fmt.Errorf("no IB device %q; devices: mlx5_0, mlx5_1", name)
	}}
	err := c.Validate(true, ucx)
	if asked != "mlx5_9" || err == nil || err.Error() != `-d/--device: no IB device "mlx5_9"; devices: mlx5_0, mlx5_1` {
		t.Errorf("err = %v, asked %q", err, asked)
	}
	c.Device = ""
	asked = ""
	if err := c.Validate(true, ucx); err != nil || asked != "" {
		t.Errorf("no -d: err %v, hook asked %q", err, asked)
	}
}

func TestDPUConfig(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	cfg := DefaultDPUConfig()
	fs := pflag.NewFlagSet("dpu", pflag.ContinueOnError)
	cfg.RegisterFlags(fs)
	err := fs.Parse([]string{"--listen", "0.0.0.0:1", "--plugin-path", a + string(filepath.ListSeparator) + b,
		"--plugin-path", a, "--max-workers", "3", "--metrics-addr", "127.0.0.1:9100", "--config", "c.json"})
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultDPUConfig()
	want.Listen, want.PluginPath, want.MaxWorkers, want.MetricsAddr, want.ConfigFile = "0.0.0.0:1", PathList{a, b, a}, 3, "127.0.0.1:9100", "c.json"
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got %+v\nwant %+v", cfg, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := fs.Lookup("plugin-path").Value.String(); got != strings.Join([]string{a, b, a}, string(filepath.ListSeparator)) {
		t.Errorf("String() = %q", got)
	}
	for _, tc := range []struct {
		mutate func(*DPUConfig)
		want   string
	}{
		{func(c *DPUConfig) { c.Listen = "nope" }, `--listen: invalid address "nope"`},
		{func(c *DPUConfig) { c.MetricsAddr = ":70000" }, `--metrics-addr: invalid port in ":70000"`},
		{func(c *DPUConfig) { c.MaxWorkers = 0 }, "--max-workers: want a whole number"},
		{func(c *DPUConfig) { c.PluginPath = PathList{filepath.Join(a, "none")} }, "--plugin-path: " + filepath.Join(a, "none") + ": no such file or directory"},
		{func(c *DPUConfig) { c.SecretFile = a }, "--secret-file: " + a + " is a directory"},
		{func(c *DPUConfig) { c.Log.SDKLevel = 1 }, "invalid log level"},
	} {
		c := DefaultDPUConfig()
		tc.mutate(&c)
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("error %v, want prefix %q", err, tc.want)
		}
	}
	fs = pflag.NewFlagSet("dpu", pflag.ContinueOnError)
	cfg = DefaultDPUConfig()
	cfg.RegisterFlags(fs)
	if err := FlagError(fs.Parse([]string{"--plugin-path", ":"})); err == nil || err.Error() != "--plugin-path: empty search path" {
		t.Errorf("err = %v", err)
	}
	// A plugin dir that is a file.
	f := filepath.Join(a, "file")
	_ = os.WriteFile(f, nil, 0o600)
	c := DefaultDPUConfig()
	c.PluginPath = PathList{f}
	if err := c.Validate(); err == nil || err.Error() != "--plugin-path: "+f+" is not a directory" {
		t.Errorf("err = %v", err)
	}
}

func TestPluginsConfig(t *testing.T) {
	cfg := DefaultPluginsConfig()
	fs := pflag.NewFlagSet("plugins", pflag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--urom", "dpu:18516"}); err != nil || cfg.UROMAddress != "dpu:18516" {
		t.Fatalf("%v %+v", err, cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.UROMAddress = "dpu"
	if err := cfg.Validate(); ExitCode(err) != ExitUsage {
		t.Errorf("err = %v", err)
	}
}

func TestAnnotations(t *testing.T) {
	fs, _ := newRootFlags(t)
	for name, want := range map[string][2]string{
		"log-level":       {GroupDOCAFlags, ""},
		"sdk-log-level":   {GroupDOCAFlags, ""},
		"json":            {GroupDOCAFlags, "<path>"},
		"device":          {GroupProgramFlags, "<IB device name>"},
		"server-name":     {GroupProgramFlags, "<server name>"},
		"mode":            {GroupProgramFlags, "{server, client}"},
		"oob-port":        {GroupRDMOFlags, "<port>"},
		"append-strategy": {GroupRDMOFlags, "{owned, shared}"},
	} {
		f := fs.Lookup(name)
		g, a := f.Annotations[AnnotationGroup], f.Annotations[AnnotationArg]
		if len(g) != 1 || g[0] != want[0] || (want[1] == "" && len(a) != 0) || (want[1] != "" && (len(a) != 1 || a[0] != want[1])) {
			t.Errorf("--%s annotations %v", name, f.Annotations)
		}
	}
	// The DOCA descriptions, word for word.
	for name, usage := range map[string]string{
		"json":        "Parse all command flags from an input json file",
		"device":      "IB device name.",
		"server-name": "server name.",
		"mode":        "Set mode type {server, client}",
		"log-level":   "Set the (numeric) log level for the program <10=DISABLE, 20=CRITICAL, 30=ERROR, 40=WARNING, 50=INFO, 60=DEBUG, 70=TRACE>",
	} {
		if got := fs.Lookup(name).Usage; got != usage {
			t.Errorf("--%s usage %q", name, got)
		}
	}
	if s := fs.Lookup("l"); s != nil {
		t.Errorf("Lookup by shorthand should fail")
	}
	if fs.ShorthandLookup("l").Name != "log-level" || fs.ShorthandLookup("j").Name != "json" ||
		fs.ShorthandLookup("d").Name != "device" || fs.ShorthandLookup("s").Name != "server-name" || fs.ShorthandLookup("m").Name != "mode" {
		t.Error("short names")
	}
}

func TestExitCodes(t *testing.T) {
	if ExitCode(nil) != 0 || ExitCode(errors.New("x")) != 1 || ExitCode(Usagef("x")) != 2 || ExitCode(NotBuilt("server")) != 3 {
		t.Error("exit codes")
	}
	wrapped := fmt.Errorf("outer: %w", &ExitError{Code: 7, Err: errors.New("inner")})
	if ExitCode(wrapped) != 7 {
		t.Error("wrapped ExitError")
	}
	if err := NotBuilt("server"); err.Error() != "server: not built into this binary yet" || !errors.Is(err, ErrNotBuilt) {
		t.Errorf("NotBuilt = %v", err)
	}
	if UsageError(nil) != nil {
		t.Error("UsageError(nil)")
	}
	nb := NotBuilt("x")
	if UsageError(nb) != nb {
		t.Error("UsageError must keep an existing exit code")
	}
	if FlagError(nil) != nil {
		t.Error("FlagError(nil)")
	}
	if FlagName(nil) != "flag" {
		t.Error("FlagName(nil)")
	}
}

func TestSuggest(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"clinet", "client"}, {"sever", "server"}, {"client", "client"}, {"SERVER", "server"},
		{"x", ""}, {"both", ""}, {"serverclient", ""},
	} {
		if got := suggest(tc.in, "server", "client"); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if editDistance("clinet", "client") != 1 || editDistance("", "abc") != 3 || editDistance("kitten", "sitting") != 3 {
		t.Error("editDistance")
	}
}

func TestVersionInfo(t *testing.T) {
	savedV, savedC, savedD := Version, Commit, BuildDate
	t.Cleanup(func() { Version, Commit, BuildDate = savedV, savedC, savedD })
	Version, Commit, BuildDate = "1.2.3", "abc123", "2025-01-02"
	bi := VersionInfo(UCX{})
	want := "rdmo version 1.2.3 (commit abc123, built 2025-01-02)\ncompatible with doca_urom_rdmo (NVIDIA DOCA 3.0)\n" +
		"go: " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\nucx: " + UCXVersionPlaceholder + "\n"
	if bi.String() != want {
		t.Errorf("version\n got %q\nwant %q", bi.String(), want)
	}
	if got := VersionInfo(UCX{Version: func() string { return "1.16.0" }}).UCX; got != "1.16.0" {
		t.Errorf("UCX = %q", got)
	}
	if got := VersionInfo(UCX{Version: func() string { return "  " }}).UCX; got != UCXVersionPlaceholder {
		t.Errorf("blank hook: UCX = %q", got)
	}
	Version, Commit, BuildDate = "", "", ""
	if v := VersionInfo(UCX{}); v.Version == "" || !strings.HasPrefix(v.String(), "rdmo version ") {
		t.Errorf("fallback version %+v", v)
	}
}

// Without a link-time stamp, -v shows what the Go toolchain recorded: the
// module version of `go install ...@v1.2.0`, the pseudo-version and VCS
// revision of a build in a checkout ("-dirty" with local changes), the
// commit time. A stamp wins over each of them.
func TestVersionFromBuildInfo(t *testing.T) {
	const rev = "4982c19abcdef0123456789abcdef0123456789a"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-11-26T20:16:51Z"}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		name  string
		stamp BuildInfo
		info  debug.BuildInfo
		want  string // the first line of -v
	}{
		{"go install @version", BuildInfo{}, debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}},
			"rdmo version v1.2.0"},
		{"go build in a clean checkout", BuildInfo{}, debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261126201651-4982c19abcde"}, Settings: vcs("false")},
			"rdmo version v0.0.0-20261126201651-4982c19abcde (commit 4982c19abcde, built 2026-11-26T20:16:51Z)"},
		{"go build with local changes", BuildInfo{}, debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("true")},
			"rdmo version devel (commit 4982c19abcde-dirty, built 2026-11-26T20:16:51Z)"},
		{"no VCS information (-buildvcs=false)", BuildInfo{}, debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			"rdmo version devel"},
		{"the stamp wins", BuildInfo{Version: "1.2.3", Commit: "feedbeef", BuildDate: "2030-01-02"},
			debug.BuildInfo{Main: debug.Module{Version: "v9.9.9"}, Settings: vcs("true")},
			"rdmo version 1.2.3 (commit feedbeef, built 2030-01-02)"},
	} {
		bi := tc.stamp
		bi.Program = ProgramName
		bi = bi.withBuildInfo(&tc.info)
		if got, _, _ := strings.Cut(bi.String(), "\n"); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

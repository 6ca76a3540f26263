package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/cli"
	"github.com/openrdmo/rdmo/ucp/ucptest"
	"go.uber.org/zap"
)

// shipped is the params file as DOCA ships it (comments, trailing commas).
const shipped = "internal/cli/testdata/urom_rdmo_params.json"

const cliPkg = "github.com/openrdmo/rdmo/cmd/rdmo/internal/cli"

// bareEnv makes the test binary run as rdmo with no modes at all (an empty
// cli.App): the flag layer alone, every mode "not built", as TestBinary
// checks it in a real process.
const bareEnv = "RDMO_TEST_BARE_BINARY"

func TestMain(m *testing.M) {
	if os.Getenv(bareEnv) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, cli.App{}))
	}
	os.Exit(m.Run())
}

func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		// CI must build and run the binary: no silent skip there.
		ucptest.SkipOrFail(t, "no go tool to build the binary")
	}
	return p
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

type result struct {
	stdout, stderr string
	code           int
}

func runBinary(t *testing.T, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), bareEnv+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("run %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return result{out.String(), errb.String(), code}
}

// TestBinary builds rdmo into a temporary directory and runs it as a real
// process: exit statuses, stdout and stderr. The binary is this package's
// test binary, built with the link-time build information, which runs as
// rdmo with an empty cli.App (bareEnv): the flag layer alone, every mode
// "not built"; cmd/rdmo/internal/demo's tests run the binary with the modes.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "rdmo")
	build := exec.Command(goTool(t), "test", "-c", "-o", bin,
		"-ldflags", "-X "+cliPkg+".Version=9.9.9-test -X "+cliPkg+".Commit=feedbeef -X "+cliPkg+".BuildDate=2030-01-02",
		".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	t.Run("help", func(t *testing.T) {
		for _, arg := range []string{"-h", "--help"} {
			r := runBinary(t, bin, arg)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("%s: exit %d, stderr %q", arg, r.code, r.stderr)
			}
			checkRootHelp(t, r.stdout)
		}
		// -h wins over everything else on the line, as in DOCA.
		if r := runBinary(t, bin, "-m", "server", "-h"); r.code != 0 || !strings.Contains(r.stdout, "DOCA Flags:") {
			t.Errorf("-m server -h: exit %d", r.code)
		}
	})

	t.Run("version", func(t *testing.T) {
		for _, args := range [][]string{{"-v"}, {"--version"}, {"dpu", "-v"}, {"-v", "-m", "server"}} {
			r := runBinary(t, bin, args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("%v: exit %d, stderr %q", args, r.code, r.stderr)
			}
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			want := []string{
				"rdmo version 9.9.9-test (commit feedbeef, built 2030-01-02)",
				"compatible with doca_urom_rdmo (NVIDIA DOCA 3.0)",
				"go: " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
				"ucx: " + cli.UCXVersionPlaceholder,
			}
			if strings.Join(lines, "\n") != strings.Join(want, "\n") {
				t.Errorf("%v: version output\n%s", args, r.stdout)
			}
		}
	})

	t.Run("DOCA flags short and long", func(t *testing.T) {
		for _, args := range [][]string{
			{"-l", "60", "--sdk-log-level", "40", "-d", "mlx5_0", "-s", "host1", "-m", "client"},
			{"--log-level", "60", "--sdk-log-level", "40", "--device", "mlx5_0", "--server-name", "host1", "--mode", "client"},
			{"--log-level=70", "--sdk-log-level=10", "--device=mlx5_0", "--server-name=host1", "--mode=client"},
			{"-j", shipped, "-m", "client", "-s", "host1"},
			{"--json", shipped, "--mode", "client", "--server-name", "host1"},
			{"-m", "client", "-s", "h", "--oob-port", "20000", "--urom", "dpu:18516", "--append-strategy", "shared", "--ops", "10", "--log-format", "json"},
			{"-m", "client", "-s", "h", "--oob-protocol", "doca"},
		} {
			r := runBinary(t, bin, args...)
			if r.code != cli.ExitNotBuilt || r.stderr != "rdmo: error: client: not built into this binary yet\n" || r.stdout != "" {
				t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
			}
		}
	})

	t.Run("params file as shipped", func(t *testing.T) {
		// The file says server.
		r := runBinary(t, bin, "-j", shipped)
		if r.code != cli.ExitNotBuilt || r.stderr != "rdmo: error: server: not built into this binary yet\n" {
			t.Errorf("exit %d, stderr %q", r.code, r.stderr)
		}
		// The file says server, the flag says client: client.
		r = runBinary(t, bin, "--json", shipped, "-m", "client")
		if r.code != cli.ExitNotBuilt || r.stderr != "rdmo: error: client: not built into this binary yet\n" {
			t.Errorf("override: exit %d, stderr %q", r.code, r.stderr)
		}
		flat := writeFile(t, dir, "flat.json", `{"mode": "client", "server-name": "h", "log-level": 50, // flat
  "oob-port": 18600, "urom-address": "dpu:18516", "append-strategy": "owned", "ops": 5,}`)
		r = runBinary(t, bin, "-j", flat)
		if r.code != cli.ExitNotBuilt || !strings.Contains(r.stderr, "client: not built") {
			t.Errorf("flat: exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("not built", func(t *testing.T) {
		for args, want := range map[string]string{
			"-m server":          "server",
			"-m client -s h":     "client",
			"dpu":                "dpu",
			"plugins":            "plugins",
			"plugins --urom a:1": "plugins",
			"bench":              "bench",
			"bench -m server":    "bench",
		} {
			r := runBinary(t, bin, strings.Fields(args)...)
			if r.code != 3 || r.stderr != "rdmo: error: "+want+": not built into this binary yet\n" || r.stdout != "" {
				t.Errorf("%s: exit %d, stderr %q", args, r.code, r.stderr)
			}
		}
	})

	unknownKey := writeFile(t, dir, "unknown.json", "{\n  \"doca_program_flags\": {\n    \"devcie\": \"mlx5_0\",\n  }\n}\n")
	malformed := writeFile(t, dir, "bad.json", "{\n  \"mode\": \"server\"\n  \"device\": \"mlx5_0\"\n}\n")
	badLevel := writeFile(t, dir, "level.json", "{\"doca_general_flags\": {\n  // log level\n  \"log-level\": 15,\n}}")
	dpuBad := writeFile(t, dir, "dpu.json", `{"mode": "server"}`)
	t.Run("usage errors", func(t *testing.T) {
		tests := []struct {
			args []string
			want string
		}{
			{[]string{"-m", "clinet", "-s", "h"}, `-m/--mode: invalid mode "clinet"; valid modes: server, client (did you mean "client"?)`},
			{[]string{"--mode", "both"}, `-m/--mode: invalid mode "both"; valid modes: server, client`},
			{[]string{"-l", "15", "-m", "server"}, `-l/--log-level: invalid log level "15"; valid levels: 10 (DISABLE), 20 (CRITICAL), 30 (ERROR), 40 (WARNING), 50 (INFO), 60 (DEBUG), 70 (TRACE)`},
			{[]string{"--sdk-log-level", "15", "-m", "server"}, `--sdk-log-level: invalid log level "15"`},
			{[]string{"-j", filepath.Join(dir, "missing.json")}, "params file " + filepath.Join(dir, "missing.json") + ": no such file or directory"},
			{[]string{"-j", unknownKey}, unknownKey + `:3:5: unknown key "devcie" (did you mean "device"?); valid keys: append-strategy, device,`},
			{[]string{"-j", malformed}, malformed + `:3:3: invalid character '"' after object key:value pair`},
			{[]string{"-j", badLevel}, badLevel + `:3:3: key "log-level": invalid log level "15"`},
			{[]string{}, "no mode given: use -m/--mode {server, client}"},
			{[]string{"-m", "client"}, "client mode needs -s/--server-name"},
			{[]string{"-m", "client", "-s", "h", "--oob-protocol", "urom"}, `--oob-protocol: invalid out-of-band protocol "urom"; valid protocols: rdmo, doca`},
			{[]string{"-m", "server", "--oob-protocol", "doca"}, "--oob-protocol doca is for -m client"},
			{[]string{"-m", "server", "-d", ""}, "-d/--device: empty name"},
			{[]string{"-m", "server", "--oob-port", "0"}, `--oob-port: invalid port "0"`},
			{[]string{"-m", "server", "--urom", "nohost"}, `--urom: invalid address "nohost"; want host:port`},
			{[]string{"-m", "server", "--secret-file", filepath.Join(dir, "none")}, "--secret-file: "},
			{[]string{"-m", "server", "--bogus"}, "unknown flag: --bogus\n"},
			{[]string{"-m", "server", "--oops"}, "unknown flag: --oops (did you mean --ops?)"},
			{[]string{"-m", "server", "--log_level", "60"}, "unknown flag: --log_level (did you mean --log-level?)"},
			{[]string{"dpu", "--metrics_addr", "127.0.0.1:9100"}, "unknown flag: --metrics_addr (did you mean --metrics-addr?)"},
			{[]string{"workers", "-urom", "127.0.0.1:1"}, `unknown shorthand flag: 'u' in -urom (did you mean --urom?)`},
			{[]string{"workers", "--ouptut", "json"}, "unknown flag: --ouptut (did you mean --output?)"},
			{[]string{"bench", "--duratoin", "1"}, "unknown flag: --duratoin (did you mean --duration?)"},
			{[]string{"call", "--op", "fetch-add", "--timeout", "soon"}, `--timeout: invalid duration "soon"; want a duration such as 5s`},
			{[]string{"dpu", "--worker-drain-timeout", "soon"}, `--worker-drain-timeout: invalid duration "soon"; want a duration such as 5s`},
			{[]string{"-x"}, `unknown shorthand flag: 'x' in -x`},
			{[]string{"-j"}, "-j/--json needs a value"},
			{[]string{"serve"}, `unknown command "serve"; commands: dpu, plugins, workers, bench`},
			{[]string{"dpu", "extra"}, `rdmo dpu takes no arguments, got "extra"`},
			{[]string{"dpu", "--max-workers", "0"}, `--max-workers: invalid count "0"`},
			{[]string{"dpu", "--config", dpuBad}, dpuBad + `:1:2: unknown key "mode"`},
			{[]string{"dpu", "-m", "server"}, `unknown shorthand flag: 'm' in -m`},
			{[]string{"plugins", "--urom", "x"}, `--urom: invalid address "x"`},
			{[]string{"plugins", "--urom", "a:1", "--secret-file", filepath.Join(dir, "none")}, "--secret-file: " + filepath.Join(dir, "none") + ": no such file or directory"},
			{[]string{"dpu", "--secret-file", dir}, "--secret-file: " + dir + " is a directory"},
			{[]string{"bench", "-m", "clinet"}, `-m/--mode: invalid mode "clinet"`},
			{[]string{"help", "nope"}, `no help for "nope"; commands: dpu, plugins, workers, bench`},
		}
		for _, tc := range tests {
			r := runBinary(t, bin, tc.args...)
			if r.code != cli.ExitUsage {
				t.Errorf("%q: exit %d, want 2 (stderr %q)", tc.args, r.code, r.stderr)
			}
			if !strings.HasPrefix(r.stderr, "rdmo: error: "+tc.want) || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
				t.Errorf("%q: stderr\n got %q\nwant one line starting %q", tc.args, r.stderr, "rdmo: error: "+tc.want)
			}
			if r.stdout != "" {
				t.Errorf("%q: stdout %q", tc.args, r.stdout)
			}
		}
	})

	t.Run("subcommand help", func(t *testing.T) {
		for cmd, wants := range map[string][]string{
			"dpu": {"Usage: rdmo dpu [flags]", "--config <path>", "--listen <host:port>", "--plugin-path <dir[:dir...]>", "--max-workers <N>", "--metrics-addr <host:port>", "-l, --log-level", "Service Flags:",
				"--secret-file <path>", "every host must\nprove it holds the same secret", "it does not encrypt"},
			"plugins": {"Usage: rdmo plugins [flags]", "--urom <host:port>", "--secret-file <path>"},
			"bench":   {"Usage: rdmo bench [flags]", "-m, --mode {server, client}", "--ops <N>", "-j, --json <path>"},
		} {
			for _, args := range [][]string{{cmd, "-h"}, {cmd, "--help"}, {"help", cmd}} {
				r := runBinary(t, bin, args...)
				if r.code != 0 || r.stderr != "" {
					t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
				}
				for _, w := range wants {
					if !strings.Contains(r.stdout, w) {
						t.Errorf("%v: help lacks %q:\n%s", args, w, r.stdout)
					}
				}
			}
		}
	})
}

// checkRootHelp checks the layout of DOCA's usage text.
func checkRootHelp(t *testing.T, out string) {
	t.Helper()
	if !strings.HasPrefix(out, "Usage: rdmo [DOCA Flags] [Program Flags]") {
		t.Errorf("help starts %q", strings.SplitN(out, "\n", 2)[0])
	}
	// Each DOCA flag line, in DOCA's order, under its heading.
	order := []string{
		"DOCA Flags:",
		"  -h, --help ", "Print a help synopsis",
		"  -v, --version ", "Print program version information",
		"  -l, --log-level ", "Set the (numeric) log level for the program <10=DISABLE, 20=CRITICAL, 30=ERROR, 40=WARNING, 50=INFO, 60=DEBUG, 70=TRACE>",
		"      --sdk-log-level ", "Set the SDK (numeric) log level for the program <10=DISABLE",
		"  -j, --json <path> ", "Parse all command flags from an input json file",
		"Program Flags:",
		"  -d, --device <IB device name> ", "IB device name.",
		"  -s, --server-name <server name> ", "server name.",
		"  -m, --mode {server, client} ", "Set mode type {server, client}",
		"rdmo Flags:",
		"--oob-port <port>", "(default 18515)",
		"--urom <host:port>", "Params file key: urom or urom-address",
		"--append-strategy {owned, shared}",
		"--ops <N>", "(default 100000)",
		"--secret-file <path>",
		"--log-format {console, json}",
		"Log levels (-l, --sdk-log-level) are DOCA's numbers, or their names in any\ncase: -l debug is -l 60.",
		"Commands:", "bench", "dpu", "plugins",
		"Comments and trailing commas\nare accepted; every key and value rule: docs/CLI.md.",
	}
	rest := out
	for _, w := range order {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Errorf("help lacks %q (in order):\n%s", w, out)
			return
		}
		rest = rest[i+len(w):]
	}
}

// runInProcess runs the command line with modes; the tests
// start from an empty cli.App and set the modes they check.
func runInProcess(modes cli.App, args ...string) result {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb, modes)
	return result{out.String(), errb.String(), code}
}

func TestRunHooksGetConfig(t *testing.T) {
	var modes cli.App
	var got cli.Config
	modes.Client = func(ctx context.Context, cfg cli.Config) error {
		got = cfg
		if cfg.Logger == nil || ctx == nil {
			t.Error("nil logger or context")
		}
		return nil
	}
	modes.Server = func(context.Context, cli.Config) error { t.Error("server ran"); return nil }
	var sdk string
	modes.UCX.ApplyLogLevel = func(l string) error { sdk = l; return nil }
	r := runInProcess(modes, "-j", shipped, "-m", "client", "--ops", "12", "--sdk-log-level", "70")
	// The client takes its workload from the server: --ops is only
	// warned about (the shipped file's server-name is not).
	if r.code != 0 || !strings.Contains(r.stderr, `WARN  rdmo  flags ignored in client mode  {"flags": ["--ops"]}`) ||
		strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if got.Mode != cli.ModeClient || got.Device != "mlx5_0" || got.ServerName != "bf2-host-01" ||
		got.Log.Level != cli.LogDebug || got.Log.SDKLevel != cli.LogTrace || got.Ops != 12 ||
		got.OOBPort != cli.DefaultOOBPort || got.ParamsFile != shipped {
		t.Errorf("config %+v", got)
	}
	if sdk != "trace" {
		t.Errorf("SDK level %q, want trace", sdk)
	}
}

func TestRunErrors(t *testing.T) {
	var modes cli.App
	modes.Server = func(context.Context, cli.Config) error { return errors.New("worker failed:\n  details") }
	r := runInProcess(modes, "-m", "server")
	if r.code != 1 || r.stderr != "rdmo: error: worker failed: details\n" {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	modes.Server = func(context.Context, cli.Config) error {
		return &cli.ExitError{Code: 4, Err: errors.New("peer gone")}
	}
	if r := runInProcess(modes, "-m", "server"); r.code != 4 || r.stderr != "rdmo: error: peer gone\n" {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	modes.UCX.ApplyLogLevel = func(string) error { return errors.New("UCX refused") }
	if r := runInProcess(modes, "-m", "server"); r.code != 1 || r.stderr != "rdmo: error: --sdk-log-level: UCX refused\n" {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestValidateDeviceHook(t *testing.T) {
	var modes cli.App
	modes.Server = func(context.Context, cli.Config) error { return nil }
	modes.UCX.ValidateDevice = func(name string) error {
		if name == "mlx5_0" {
			return nil
		}
		return errors.New(`no IB device "` + name + `"; devices: mlx5_0`)
	}
	if r := runInProcess(modes, "-m", "server", "-d", "mlx5_0"); r.code != 0 {
		t.Errorf("valid device: exit %d %q", r.code, r.stderr)
	}
	r := runInProcess(modes, "-m", "server", "-d", "mlx9")
	if r.code != 2 || r.stderr != "rdmo: error: -d/--device: no IB device \"mlx9\"; devices: mlx5_0\n" {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestVersionHook(t *testing.T) {
	var modes cli.App
	modes.UCX.Version = func() string { return "1.16.0" }
	r := runInProcess(modes, "--version")
	if r.code != 0 || !strings.HasSuffix(r.stdout, "\nucx: 1.16.0\n") {
		t.Errorf("exit %d, stdout %q", r.code, r.stdout)
	}
}

func TestLogging(t *testing.T) {
	var modes cli.App
	modes.Server = func(_ context.Context, cfg cli.Config) error {
		cfg.Logger.Info("ready", zap.String("device", cfg.Device))
		cfg.Logger.Debug("detail")
		return nil
	}
	r := runInProcess(modes, "-m", "server", "-d", "mlx5_0", "--log-format", "json")
	if r.code != 0 {
		t.Fatalf("exit %d %q", r.code, r.stderr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stderr), &m); err != nil || m["msg"] != "ready" || m["device"] != "mlx5_0" || m["level"] != "info" {
		t.Errorf("json log %q: %v", r.stderr, err)
	}
	r = runInProcess(modes, "-m", "server", "-l", "60")
	if r.code != 0 || !strings.Contains(r.stderr, "INFO  rdmo  ready") || !strings.Contains(r.stderr, "DEBUG  rdmo  detail") {
		t.Errorf("console log %q", r.stderr)
	}
	r = runInProcess(modes, "-m", "server", "-l", "10")
	if r.code != 0 || r.stderr != "" {
		t.Errorf("DISABLE logged %q", r.stderr)
	}
}

func TestSubcommandHooks(t *testing.T) {
	var modes cli.App
	plugins := t.TempDir()
	secret := writeFile(t, t.TempDir(), "secret", "0123456789abcdef0123456789abcdef\n")
	other := writeFile(t, t.TempDir(), "other", "fedcba9876543210fedcba9876543210\n")
	conf := writeFile(t, t.TempDir(), "dpu.json", `{
	"doca_general_flags": {"log-level": 60,},
	// service
	"doca_program_flags": {"listen": "0.0.0.0:18600", "plugin-path": ["`+plugins+`"], "max-workers": 8, "secret-file": "`+secret+`",},
}`)
	var dpu cli.DPUConfig
	modes.DPU = func(_ context.Context, cfg cli.DPUConfig) error { dpu = cfg; return nil }
	if r := runInProcess(modes, "dpu", "--config", conf, "--max-workers", "2"); r.code != 0 {
		t.Fatalf("dpu: exit %d %q", r.code, r.stderr)
	}
	if dpu.Listen != "0.0.0.0:18600" || len(dpu.PluginPath) != 1 || dpu.PluginPath[0] != plugins || dpu.MaxWorkers != 2 ||
		dpu.Log.Level != cli.LogDebug || dpu.Logger == nil || dpu.ConfigFile != conf || dpu.SecretFile != secret {
		t.Errorf("dpu config %+v", dpu)
	}
	// The flag overrides the file's key.
	if r := runInProcess(modes, "dpu", "--config", conf, "--secret-file", other); r.code != 0 || dpu.SecretFile != other {
		t.Errorf("dpu --secret-file: exit %d %q %+v", r.code, r.stderr, dpu)
	}
	var pl cli.PluginsConfig
	modes.Plugins = func(_ context.Context, cfg cli.PluginsConfig) error { pl = cfg; return nil }
	if r := runInProcess(modes, "plugins", "--urom", "dpu:18516", "-l", "30"); r.code != 0 || pl.UROMAddress != "dpu:18516" || pl.Log.Level != cli.LogError || pl.Logger == nil || pl.SecretFile != "" {
		t.Errorf("plugins: exit %d %q %+v", r.code, r.stderr, pl)
	}
	if r := runInProcess(modes, "plugins", "--urom", "dpu:18516", "--secret-file", secret); r.code != 0 || pl.SecretFile != secret {
		t.Errorf("plugins --secret-file: exit %d %q %+v", r.code, r.stderr, pl)
	}
	// --urom alone, and rdmo workers without it, mean the address rdmo dpu
	// listens on by default.
	if r := runInProcess(modes, "plugins", "--urom"); r.code != 0 || pl.UROMAddress != cli.DefaultDPUConfig().Listen {
		t.Errorf("plugins --urom: exit %d %q %+v", r.code, r.stderr, pl)
	}
	if r := runInProcess(modes, "plugins", "--urom", "-l", "30"); r.code != 0 || pl.UROMAddress != cli.DefaultDPUConfig().Listen || pl.Log.Level != cli.LogError {
		t.Errorf("plugins --urom -l 30: exit %d %q %+v", r.code, r.stderr, pl)
	}
	if r := runInProcess(modes, "plugins"); r.code != 0 || pl.UROMAddress != "" {
		t.Errorf("plugins: exit %d %q %+v", r.code, r.stderr, pl)
	}
	var ws cli.WorkersConfig
	modes.Workers = func(_ context.Context, cfg cli.WorkersConfig) error { ws = cfg; return nil }
	if r := runInProcess(modes, "workers"); r.code != 0 || ws.UROMAddress != cli.DefaultDPUConfig().Listen || ws.UROMAddress != "127.0.0.1:18516" {
		t.Errorf("workers: exit %d %q %+v", r.code, r.stderr, ws)
	}
	if r := runInProcess(modes, "workers", "--urom", "dpu:1", "-o", "json"); r.code != 0 || ws.UROMAddress != "dpu:1" || ws.Output != "json" {
		t.Errorf("workers --urom dpu:1: exit %d %q %+v", r.code, r.stderr, ws)
	}
	var bench cli.Config
	modes.Bench = func(_ context.Context, cfg cli.Config) error { bench = cfg; return nil }
	if r := runInProcess(modes, "bench", "--ops", "1000", "--append-strategy", "shared"); r.code != 0 || bench.Mode != "" || bench.Ops != 1000 || bench.AppendStrategy != cli.AppendShared {
		t.Errorf("bench: exit %d %q %+v", r.code, r.stderr, bench)
	}
	if r := runInProcess(modes, "bench", "-j", shipped); r.code != 0 || bench.Mode != cli.ModeServer || bench.Device != "mlx5_0" {
		t.Errorf("bench -j: exit %d %q %+v", r.code, r.stderr, bench)
	}
}

func TestSignalsCancelContext(t *testing.T) {
	var modes cli.App
	for _, tc := range []struct {
		sig      syscall.Signal
		retErr   bool
		wantCode int
	}{
		{syscall.SIGINT, true, 128 + int(syscall.SIGINT)},
		{syscall.SIGTERM, true, 128 + int(syscall.SIGTERM)},
		{syscall.SIGTERM, false, 0}, // a clean shutdown after the signal
	} {
		ready := make(chan struct{})
		modes.DPU = func(ctx context.Context, _ cli.DPUConfig) error {
			close(ready)
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Second):
				return errors.New("context not cancelled")
			}
			if tc.retErr {
				return ctx.Err()
			}
			return nil
		}
		done := make(chan result, 1)
		go func() { done <- runInProcess(modes, "dpu", "-l", "10") }()
		<-ready
		if err := syscall.Kill(os.Getpid(), tc.sig); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.code != tc.wantCode {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.sig, r.code, tc.wantCode, r.stderr)
		}
		if tc.retErr && !strings.HasPrefix(r.stderr, "rdmo: stopped by signal") {
			t.Errorf("%v: stderr %q", tc.sig, r.stderr)
		}
	}
}

func TestClosest(t *testing.T) {
	for in, want := range map[string]string{"serve": "", "dp": "dpu", "plugin": "plugins", "benchmark": "bench", "x": ""} {
		if got := closest(in, commandNames); got != want {
			t.Errorf("closest(%q) = %q, want %q", in, got, want)
		}
	}
	r := runInProcess(cli.App{}, "plugin")
	if r.code != 2 || !strings.Contains(r.stderr, `did you mean "plugins"?`) {
		t.Errorf("exit %d %q", r.code, r.stderr)
	}
}

// The exit codes an operator relies on: 2 for every bad flag, params file
// or secret file (read by the modes themselves), -h before any other
// error, and a warning for flags the mode does not use.
func TestExitCodesAndHelpFirst(t *testing.T) {
	modes := rdmoApp(nil)
	short := writeFile(t, t.TempDir(), "short", "12345\n")
	for _, args := range [][]string{
		{"plugins", "--urom", "127.0.0.1:1", "--secret-file", short},
		{"workers", "--urom", "127.0.0.1:1", "--secret-file", short},
		{"dpu", "--listen", "127.0.0.1:0", "--secret-file", short},
		{"-m", "server", "--secret-file", short},
		{"-m", "client", "-s", "127.0.0.1", "--secret-file", short},
		{"workers", "--urom", ""},
		{"workers", "--urom", "127.0.0.1:1", "--output", "yaml"},
	} {
		r := runInProcess(modes, args...)
		if r.code != cli.ExitUsage || !strings.HasPrefix(r.stderr, "rdmo: error: ") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%q: exit %d, want 2; stderr %q", args, r.code, r.stderr)
		}
	}
	for args, want := range map[string]string{
		"-h -m foo":              "Usage: rdmo [DOCA Flags]",
		"-m foo --help":          "Usage: rdmo [DOCA Flags]",
		"dpu --bogus -h":         "Usage: rdmo dpu [flags]",
		"workers -h":             "Usage: rdmo workers [flags]",
		"help workers --nope -h": "Usage: rdmo [DOCA Flags]",
	} {
		r := runInProcess(cli.App{}, strings.Fields(args)...)
		if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, want) {
			t.Errorf("%s: exit %d, stderr %q, stdout starts %q", args, r.code, r.stderr, strings.SplitN(r.stdout, "\n", 2)[0])
		}
	}
	var server cli.Config
	r := runInProcess(cli.App{Server: func(_ context.Context, cfg cli.Config) error { server = cfg; return nil }},
		"-m", "server", "-s", "host1")
	if r.code != 0 || !strings.Contains(r.stderr, `flags ignored in server mode  {"flags": ["-s/--server-name"]}`) || server.Mode != cli.ModeServer {
		t.Errorf("server -s: exit %d, stderr %q", r.code, r.stderr)
	}
}

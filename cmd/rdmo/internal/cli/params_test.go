package cli

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

const shipped = "testdata/urom_rdmo_params.json"

func TestParseShippedParamsFile(t *testing.T) {
	pf, err := ReadParamsFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	want := []Param{
		{Key: "log-level", Group: GroupGeneral, Value: "60", Kind: "number", Line: 4, Col: 3},
		{Key: "sdk-log-level", Group: GroupGeneral, Value: "40", Kind: "number", Line: 6, Col: 3},
		{Key: "device", Group: GroupProgram, Value: "mlx5_0", Kind: "string", Line: 10, Col: 3},
		{Key: "mode", Group: GroupProgram, Value: "server", Kind: "string", Line: 12, Col: 3},
		{Key: "server-name", Group: GroupProgram, Value: "bf2-host-01", Kind: "string", Line: 14, Col: 3},
	}
	if !reflect.DeepEqual(pf.Params, want) {
		t.Errorf("params:\n got %+v\nwant %+v", pf.Params, want)
	}
	if p, ok := pf.Get("mode"); !ok || p.Value != "server" {
		t.Errorf("Get(mode) = %+v, %v", p, ok)
	}
	if _, ok := pf.Get("ops"); ok {
		t.Error("Get(ops) found a key that is not there")
	}
}

func TestParseFlatAndOwnKeys(t *testing.T) {
	in := `{
  "mode": "client", "log-level": 50, // flat keys
  "oob-port": 18600,
  "urom-address": "dpu:18516",
  "append-strategy": "shared",
  "ops": 1000,
  "secret-file": "/etc/rdmo/secret",
  "plugin-path": ["/a", "/b",],
}`
	pf, err := ParseParams("flat.json", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range pf.Params {
		if p.Group != "" {
			t.Errorf("%s: group %q", p.Key, p.Group)
		}
		got[p.Key] = p.Value
	}
	want := map[string]string{
		"mode": "client", "log-level": "50", "oob-port": "18600", "urom-address": "dpu:18516",
		"append-strategy": "shared", "ops": "1000", "secret-file": "/etc/rdmo/secret", "plugin-path": "",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if p, _ := pf.Get("plugin-path"); !p.IsList() || !reflect.DeepEqual(p.List, []string{"/a", "/b"}) {
		t.Errorf("plugin-path = %+v", p)
	}
	if p, ok := pf.Get("urom"); !ok || p.Key != "urom-address" {
		t.Errorf("Get(urom) via alias = %+v, %v", p, ok)
	}
}

func TestParseParamsErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "  // nothing\n", "x.json: empty params file"},
		{"not an object", `["mode"]`, "x.json:1:1: a params file must be a JSON object"},
		{"malformed", "{\n  \"mode\": \"server\"\n  \"device\": \"mlx5_0\"\n}", "x.json:3:3: invalid character '\"' after object key:value pair"},
		{"unterminated string", "{\"mode\": \"server}", "x.json:1:18: unexpected end of file"},
		{"unterminated comment", "{\n /* x\n}", "x.json:2:2: unterminated /* comment"},
		{"trailing data", "{}\n{}", "x.json:2:1: invalid character '{' after top-level value"},
		{"trailing garbage", "{} x", "x.json:1:4: invalid character 'x'"},
		{"unknown group", "{\"doca_dpdk_flags\": {}}", `x.json:1:2: unknown group "doca_dpdk_flags"; the groups are`},
		{"group typo", `{"doca_program_flag": {}}`, `x.json:1:2: unknown group "doca_program_flag" (did you mean "doca_program_flags"?); the groups are`},
		{"nested object", "{\"doca_program_flags\": {\"device\": {\"a\": 1}}}", `x.json:1:35: key "device": nested objects are not allowed`},
		{"null", "{\"mode\": null}", `x.json:1:10: key "mode": null is not a value`},
		{"duplicate", "{\"mode\": \"server\",\n \"doca_program_flags\": {\"mode\": \"client\"}}", `x.json:2:25: key "mode": given twice (first at 1:2)`},
		{"duplicate group", "{\"doca_program_flags\": {}, \"doca_program_flags\": {}}", `x.json:1:28: group "doca_program_flags" appears twice`},
		{"list of objects", `{"plugin-path": [{}]}`, `x.json:1:18: key "plugin-path": list elements must be strings`},
		{"double comma", `{"a": 1,, "b": 2}`, `x.json:1:9: invalid character ','`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseParams("x.json", []byte(tc.in))
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error\n got %q\nwant prefix %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestReadParamsFileMissing(t *testing.T) {
	_, err := ReadParamsFile("testdata/no-such-file.json")
	if err == nil || err.Error() != "params file testdata/no-such-file.json: no such file or directory" {
		t.Fatalf("err = %v", err)
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Error("error does not wrap os.ErrNotExist")
	}
}

// newRootFlags is the flag set the rdmo root command has.
func newRootFlags(t *testing.T) (*pflag.FlagSet, *Config) {
	t.Helper()
	cfg := DefaultConfig()
	fs := pflag.NewFlagSet("rdmo", pflag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	fs.BoolP("help", "h", false, "")
	fs.BoolP("version", "v", false, "")
	cfg.Log.RegisterFlags(fs)
	cfg.RegisterFlags(fs)
	return fs, &cfg
}

func TestApplyShippedFile(t *testing.T) {
	fs, cfg := newRootFlags(t)
	if err := fs.Parse([]string{"-j", shipped}); err != nil {
		t.Fatal(err)
	}
	if err := LoadParams(fs, "json"); err != nil {
		t.Fatal(err)
	}
	if cfg.Log.Level != LogDebug || cfg.Log.SDKLevel != LogWarning || cfg.Device != "mlx5_0" ||
		cfg.Mode != ModeServer || cfg.ServerName != "bf2-host-01" {
		t.Errorf("config = %+v", cfg)
	}
	if cfg.OOBPort != DefaultOOBPort || cfg.Ops != DefaultOps || cfg.AppendStrategy != AppendOwned {
		t.Errorf("defaults lost: %+v", cfg)
	}
	if err := cfg.Validate(true, UCX{}); err != nil {
		t.Fatal(err)
	}
}

func TestApplyPrecedence(t *testing.T) {
	// Flag over file over default.
	fs, cfg := newRootFlags(t)
	if err := fs.Parse([]string{"-m", "client", "--json", shipped, "-l", "30"}); err != nil {
		t.Fatal(err)
	}
	if err := LoadParams(fs, "json"); err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != ModeClient {
		t.Errorf("mode = %q, want client (flag beats file)", cfg.Mode)
	}
	if cfg.Log.Level != LogError {
		t.Errorf("log level = %v, want 30 (flag beats file)", cfg.Log.Level)
	}
	if cfg.Device != "mlx5_0" || cfg.Log.SDKLevel != LogWarning {
		t.Errorf("file values not applied: %+v", cfg)
	}
	if cfg.Ops != DefaultOps {
		t.Errorf("ops = %d, want default", cfg.Ops)
	}
}

func TestApplyOwnKeys(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "p.json")
	body := `{"mode": "client", "server-name": "h", "oob-port": 20000, "urom-address": "dpu:18516",
	  "append-strategy": "shared", "ops": 7, "secret-file": "` + secret + `", "log-format": "json",}`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	fs, cfg := newRootFlags(t)
	if err := fs.Parse([]string{"-j", path, "--ops", "9"}); err != nil {
		t.Fatal(err)
	}
	if err := LoadParams(fs, "json"); err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Log.Format = LogJSON
	want.ParamsFile = path
	want.Mode, want.ServerName, want.OOBPort, want.UROMAddress = ModeClient, "h", 20000, "dpu:18516"
	want.AppendStrategy, want.Ops, want.SecretFile = AppendShared, 9, secret
	if !reflect.DeepEqual(*cfg, want) {
		t.Errorf("config\n got %+v\nwant %+v", *cfg, want)
	}
	if err := cfg.Validate(true, UCX{}); err != nil {
		t.Fatal(err)
	}
}

func TestApplyErrors(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"unknown key", "{\n  \"doca_program_flags\": {\n    \"devcie\": \"mlx5_0\",\n  }\n}",
			`p.json:3:5: unknown key "devcie" (did you mean "device"?); valid keys: append-strategy, device, log-format, log-level, mode, oob-port, oob-protocol, ops, plugin-path, plugins, sdk-log-level, secret-file, server-name, urom, urom-address`},
		{"typo", `{"opss": 2000}`, `p.json:1:2: unknown key "opss" (did you mean "ops"?); valid keys: `},
		{"underscores", `{"doca_program_flags": {"server_name": "h"}}`, `p.json:1:25: unknown key "server_name" (did you mean "server-name"?); valid keys: `},
		{"nothing close", `{"speed": 1}`, `p.json:1:2: unknown key "speed"; valid keys: `},
		{"json key", `{"json": "other.json"}`, `p.json:1:2: unknown key "json"`},
		{"help key", `{"help": true}`, `p.json:1:2: unknown key "help"`},
		{"bad level", "{\"doca_general_flags\": {\n\"log-level\": 15}}", `p.json:2:1: key "log-level": invalid log level "15"; valid levels: 10 (DISABLE), 20 (CRITICAL), 30 (ERROR), 40 (WARNING), 50 (INFO), 60 (DEBUG), 70 (TRACE)`},
		{"bad mode", `{"mode": "clinet"}`, `p.json:1:2: key "mode": invalid mode "clinet"; valid modes: server, client (did you mean "client"?)`},
		{"float level", `{"log-level": 60.0}`, `p.json:1:2: key "log-level": invalid log level "60.0"`},
		{"bad port", `{"oob-port": 70000}`, `p.json:1:2: key "oob-port": invalid port "70000"; want a number from 1 to 65535`},
		{"list for scalar", `{"device": ["a", "b"]}`, `p.json:1:2: key "device": takes a single value, not a list`},
		{"alias and name", `{"urom": "a:1", "urom-address": "b:2"}`, `p.json:1:17: key "urom-address": sets --urom, already set by "urom" at 1:2`},
		{"empty device", `{"device": ""}`, `p.json:1:2: key "device": empty name`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs, _ := newRootFlags(t)
			pf, err := ParseParams("p.json", []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			err = pf.Apply(fs)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error\n got %v\nwant prefix %q", err, tc.want)
			}
		})
	}
}

func TestLoadParamsUsageErrors(t *testing.T) {
	fs, _ := newRootFlags(t)
	if err := fs.Parse([]string{"-j", "testdata/missing.json"}); err != nil {
		t.Fatal(err)
	}
	err := LoadParams(fs, "json")
	if ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "missing.json: no such file") {
		t.Errorf("err = %v (exit %d)", err, ExitCode(err))
	}
	fs, _ = newRootFlags(t)
	if err := fs.Parse([]string{"-j", ""}); err != nil {
		t.Fatal(err)
	}
	if err := LoadParams(fs, "json"); ExitCode(err) != ExitUsage {
		t.Errorf("empty -j: %v", err)
	}
	fs, _ = newRootFlags(t)
	if err := LoadParams(fs, "json"); err != nil {
		t.Errorf("no -j: %v", err)
	}
	if err := LoadParams(fs, "nonexistent-flag"); err != nil {
		t.Errorf("no such flag: %v", err)
	}
}

func TestApplyDPUPluginPath(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	cfg := DefaultDPUConfig()
	fs := pflag.NewFlagSet("dpu", pflag.ContinueOnError)
	cfg.Log.RegisterFlags(fs)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--config", "x"}); err != nil {
		t.Fatal(err)
	}
	body := `{"doca_program_flags": {"plugin-path": ["` + dirA + `", "` + dirB + `"], "max-workers": 4,
	  "listen": "0.0.0.0:9000", "metrics-addr": ":9100",},
	  "doca_general_flags": {"log-level": 70}}`
	pf, err := ParseParams("dpu.json", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Apply(fs); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual([]string(cfg.PluginPath), []string{dirA, dirB}) || cfg.MaxWorkers != 4 ||
		cfg.Listen != "0.0.0.0:9000" || cfg.MetricsAddr != ":9100" || cfg.Log.Level != LogTrace {
		t.Errorf("config = %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// A scalar sets a single path; the command-line wins over the file.
	cfg = DefaultDPUConfig()
	fs = pflag.NewFlagSet("dpu", pflag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--max-workers", "2"}); err != nil {
		t.Fatal(err)
	}
	pf, err = ParseParams("dpu.json", []byte(`{"plugin-path": "`+dirA+`:`+dirB+`", "max-workers": 8}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Apply(fs); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual([]string(cfg.PluginPath), []string{dirA, dirB}) || cfg.MaxWorkers != 2 {
		t.Errorf("config = %+v", cfg)
	}
	// rdmo keys are unknown to the service.
	pf, _ = ParseParams("dpu.json", []byte(`{"mode": "server"}`))
	if err := pf.Apply(fs); err == nil || !strings.Contains(err.Error(), `unknown key "mode"; valid keys: listen, max-workers, metrics-addr, plugin-path, secret-file`) {
		t.Errorf("err = %v", err)
	}
}

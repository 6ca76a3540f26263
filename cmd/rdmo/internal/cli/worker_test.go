package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func newDPUFlags(t *testing.T) (*pflag.FlagSet, *DPUConfig) {
	t.Helper()
	cfg := DefaultDPUConfig()
	fs := pflag.NewFlagSet("dpu", pflag.ContinueOnError)
	cfg.RegisterFlags(fs)
	return fs, &cfg
}

// applyDPUFile writes body as an `rdmo dpu --config` file and applies it
// after the command line args, as the rdmo binary does.
func applyDPUFile(t *testing.T, body string, args ...string) (*DPUConfig, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dpu.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	fs, cfg := newDPUFlags(t)
	if err := fs.Parse(append(args, "--config", path)); err != nil {
		return cfg, FlagError(err)
	}
	if err := LoadParams(fs, "config"); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

func TestWorkerLimitsDefaults(t *testing.T) {
	d := DefaultDPUConfig().Worker
	want := WorkerLimits{1024, 64, 64, 1024, 1 << 20, 1 << 20, 1024, 5 * time.Second, 128 << 20}
	if d != want {
		t.Errorf("DefaultDPUConfig().Worker = %+v, want %+v", d, want)
	}
	fs, _ := newDPUFlags(t)
	for name, def := range map[string]string{
		"worker-max-in-flight-per-rq": "1024", "worker-max-clients": "64", "worker-max-rqs-per-client": "64",
		"worker-max-regions-per-client": "1024", "worker-max-rendezvous-fetch": "1048576",
		"worker-max-eager-payload": "1048576", "worker-max-batch": "1024", "worker-drain-timeout": "5s",
		"worker-max-wasm-memory": "134217728",
	} {
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("no --%s", name)
			continue
		}
		if f.DefValue != def {
			t.Errorf("--%s default %q, want %q", name, f.DefValue, def)
		}
	}
	got := d.Settings()
	wantSettings := map[string]string{
		"max-in-flight-per-rq": "1024", "max-clients": "64", "max-rqs-per-client": "64",
		"max-regions-per-client": "1024", "max-rendezvous-fetch": "1048576", "max-eager-payload": "1048576",
		"max-batch": "1024", "drain-timeout": "5s", "max-wasm-memory": "134217728",
	}
	if !reflect.DeepEqual(got, wantSettings) {
		t.Errorf("Settings() = %v, want %v", got, wantSettings)
	}
	if keys := WorkerSettingKeys(); len(keys) != len(wantSettings) {
		t.Errorf("WorkerSettingKeys() = %v", keys)
	}
}

// The "worker" group of an `rdmo dpu --config` file sets the worker
// limits; so do the flat keys and the --worker-* flags (which win over the
// file).
func TestWorkerLimitsFromConfigFile(t *testing.T) {
	cfg, err := applyDPUFile(t, `{
		// the service
		"listen": "127.0.0.1:0",
		"worker": {
			"max-in-flight-per-rq": 64,
			"max-clients": 8,
			"max-rqs-per-client": 4,
			"max-regions-per-client": 16,
			"max-rendezvous-fetch": 65536,
			"max-eager-payload": 131072,
			"max-batch": 32,
			"drain-timeout": "250ms",
			"max-wasm-memory": 33554432,
		},
	}`)
	if err != nil {
		t.Fatal(err)
	}
	want := WorkerLimits{64, 8, 4, 16, 65536, 131072, 32, 250 * time.Millisecond, 32 << 20}
	if cfg.Worker != want || cfg.Listen != "127.0.0.1:0" {
		t.Errorf("worker %+v listen %q, want %+v", cfg.Worker, cfg.Listen, want)
	}
	if s := cfg.Worker.Settings(); s["max-in-flight-per-rq"] != "64" || s["drain-timeout"] != "250ms" {
		t.Errorf("Settings() = %v", s)
	}

	// A partial group keeps the other defaults; a number of seconds is a
	// drain timeout; 0 is allowed (the worker's default).
	cfg, err = applyDPUFile(t, `{"worker": {"max-in-flight-per-rq": 8, "drain-timeout": 2, "max-batch": 0}}`)
	if err != nil {
		t.Fatal(err)
	}
	want = DefaultWorkerLimits()
	want.MaxInFlightPerRQ, want.DrainTimeout, want.MaxBatch = 8, 2*time.Second, 0
	if cfg.Worker != want {
		t.Errorf("partial group: %+v, want %+v", cfg.Worker, want)
	}

	// Flat keys; the command line overrides the file.
	cfg, err = applyDPUFile(t, `{"worker-max-clients": 3, "worker": {"max-in-flight-per-rq": 100}}`, "--worker-max-in-flight-per-rq", "200")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Worker.MaxClients != 3 || cfg.Worker.MaxInFlightPerRQ != 200 {
		t.Errorf("flat key and flag: %+v", cfg.Worker)
	}
}

// Every bad worker limit is one line naming the key, and a usage error
// (exit status 2).
func TestWorkerLimitsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		args       []string
		want       string
	}{
		{"negative", `{"worker": {"max-in-flight-per-rq": -1}}`, nil,
			`dpu.json:1:13: key "worker.max-in-flight-per-rq": invalid limit "-1"; want a whole number of at least 0`},
		{"negative clients", `{"worker": {"max-clients": -64}}`, nil, `key "worker.max-clients": invalid limit "-64"`},
		{"not a number", `{"worker": {"max-batch": "many"}}`, nil, `key "worker.max-batch": invalid limit "many"`},
		{"fraction", `{"worker": {"max-batch": 1.5}}`, nil, `key "worker.max-batch": invalid limit "1.5"`},
		{"negative drain", `{"worker": {"drain-timeout": "-1s"}}`, nil, `key "worker.drain-timeout": invalid duration "-1s"`},
		{"bad drain", `{"worker": {"drain-timeout": "soon"}}`, nil, `key "worker.drain-timeout": invalid duration "soon"`},
		{"unknown key", `{"worker": {"max-inflight": 3}}`, nil,
			`dpu.json:1:13: unknown key "max-inflight" in group "worker"; valid keys there: drain-timeout, max-batch, max-clients, max-eager-payload, max-in-flight-per-rq, max-regions-per-client, max-rendezvous-fetch, max-rqs-per-client`},
		{"typo in the group", `{"worker": {"max-bacth": 3}}`, nil, `unknown key "max-bacth" in group "worker" (did you mean "max-batch"?); valid keys there: `},
		{"service key typo", `{"metrics_addr": "127.0.0.1:9100"}`, nil, `dpu.json:1:2: unknown key "metrics_addr" (did you mean "metrics-addr"?); valid keys: `},
		{"limit outside its group", `{"max-clients": 3}`, nil, `dpu.json:1:2: unknown key "max-clients" (did you mean "max-clients" in group "worker", or "worker-max-clients"?); valid keys: `},
		{"service key in the group", `{"worker": {"listen": "127.0.0.1:1"}}`, nil, `unknown key "listen" in group "worker"`},
		{"nested", `{"worker": {"max-batch": {"a": 1}}}`, nil, `key "max-batch": nested objects are not allowed`},
		{"twice", `{"worker": {"max-batch": 1, "max-batch": 2}}`, nil, `key "max-batch": given twice`},
		{"flat and grouped", `{"worker-max-batch": 1, "worker": {"max-batch": 2}}`, nil, `key "max-batch": sets --worker-max-batch, already set by "worker-max-batch"`},
		{"negative flag", `{}`, []string{"--worker-max-in-flight-per-rq", "-5"}, `--worker-max-in-flight-per-rq: invalid limit "-5"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := applyDPUFile(t, tc.body, tc.args...)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q, want one line containing %q", err, tc.want)
			}
			if code := ExitCode(err); code != ExitUsage {
				t.Errorf("exit code %d, want %d", code, ExitUsage)
			}
		})
	}
	// Limits set in code are checked by Validate.
	c := DefaultDPUConfig()
	c.Worker.MaxRQsPerClient = -1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `worker limit "max-rqs-per-client"`) || ExitCode(err) != ExitUsage {
		t.Errorf("Validate of a negative limit: %v", err)
	}
}

// The root command's -j params file has no worker limits: a "worker"
// group there is refused, saying where they belong.
func TestWorkerGroupOnlyForDPU(t *testing.T) {
	cfg := DefaultConfig()
	fs := pflag.NewFlagSet("rdmo", pflag.ContinueOnError)
	cfg.RegisterFlags(fs)
	pf, err := ParseParams("x.json", []byte(`{"mode": "server", "worker": {"max-batch": 3}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Apply(fs); err == nil || !strings.Contains(err.Error(), `worker limits are set in the rdmo dpu --config file`) {
		t.Errorf("err = %v", err)
	}
}

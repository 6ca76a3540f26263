package service_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/rdmoworker"
	"github.com/openrdmo/rdmo/urom/service"
)

// startRDMOService runs a service whose workers are real RDMO worker
// processes (this test binary in the rdmo-worker role of metrics_test.go)
// with the operator's settings, and dials it.
func startRDMOService(t *testing.T, ctx context.Context, tr ucptest.Transport, settings map[string]string) *urom.Client {
	t.Helper()
	addr, _ := service.StartForTest(t, service.Config{
		Listen:           "127.0.0.1:0",
		Builtins:         rdmoworker.Builtins(),
		MaxWorkers:       4,
		WorkerCommand:    []string{os.Args[0], "-test.run=^$"},
		WorkerEnv:        append([]string{"UROM_METRICS_ROLE=rdmo-worker"}, tr.Env()...),
		WorkerSettings:   settings,
		ComponentVersion: command.ComponentVersion,
		CallTimeout:      10 * time.Second,
	})
	c, err := urom.Dial(ctx, addr, urom.ClientOptions{ComponentVersion: command.ComponentVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The operator's worker settings (service.Config.WorkerSettings, `rdmo dpu`'s
// "worker" group) reach every worker process the service spawns: its
// CLIENT_INIT answer carries the configured in-flight limit, its client
// limit is enforced, and a host cannot override them through its own
// spawn configuration.
func TestWorkerSettingsReachTheWorkerProcess(t *testing.T) {
	tr := ucptest.Transports[0] // shared memory
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startRDMOService(t, ctx, tr, map[string]string{
		rdmoworker.SettingMaxInFlightPerRQ: "8",
		rdmoworker.SettingMaxClients:       "2",
	})

	uctx := ucptest.NewContext(t, tr)
	tw, err := uctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Close()
	taddr, err := tw.Address()
	if err != nil {
		t.Fatal(err)
	}

	for _, opts := range []urom.SpawnOptions{
		{},
		// A host's spawn configuration is not the operator's: the same
		// keys there change nothing.
		{Config: map[string]string{rdmoworker.SettingMaxInFlightPerRQ: "100000", rdmoworker.SettingMaxClients: "100"}},
	} {
		w, err := c.Spawn(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		r := command.Remote{W: w}
		n, err := r.Do(ctx, dpu.ClientInit{ID: 1, Addr: taddr})
		if err != nil {
			t.Fatal(err)
		}
		if n.MaxInFlightPerRQ != 8 {
			t.Errorf("spawn %+v: CLIENT_INIT answers max-in-flight-per-rq %d, want the configured 8", opts, n.MaxInFlightPerRQ)
		}
		if _, err := r.Do(ctx, dpu.ClientInit{ID: 2, Addr: taddr}); err != nil {
			t.Fatal(err)
		}
		n, err = r.Do(ctx, dpu.ClientInit{ID: 3, Addr: taddr})
		if !errors.Is(err, rdmo.ErrTooManyInFlight) || !strings.Contains(n.Detail, "too many clients") || !strings.Contains(n.Detail, "limit 2") {
			t.Errorf("spawn %+v: third CLIENT_INIT: %+v, %v; want too many clients (limit 2)", opts, n, err)
		}
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Without settings a worker has the dpu defaults, and says so.
func TestWorkerSettingsDefault(t *testing.T) {
	tr := ucptest.Transports[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startRDMOService(t, ctx, tr, nil)
	uctx := ucptest.NewContext(t, tr)
	tw, err := uctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Close()
	taddr, err := tw.Address()
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Spawn(ctx, urom.SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	n, err := command.Remote{W: w}.Do(ctx, dpu.ClientInit{ID: 1, Addr: taddr})
	if err != nil {
		t.Fatal(err)
	}
	if n.MaxInFlightPerRQ != dpu.DefaultMaxInFlightPerRQ {
		t.Errorf("CLIENT_INIT answers max-in-flight-per-rq %d, want the default %d", n.MaxInFlightPerRQ, dpu.DefaultMaxInFlightPerRQ)
	}
}

// A setting the worker refuses (negative, unknown) fails the spawn with an
// error naming it, and leaves no worker behind.
func TestWorkerSettingsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, tc := range []struct {
		settings map[string]string
		want     string
	}{
		{map[string]string{rdmoworker.SettingMaxInFlightPerRQ: "-1"}, `worker setting max-in-flight-per-rq: invalid limit "-1"`},
		{map[string]string{rdmoworker.SettingDrainTimeout: "later"}, `worker setting drain-timeout: invalid duration "later"`},
		{map[string]string{"max-inflight": "3"}, `unknown worker setting "max-inflight"`},
	} {
		checkSettingRefused(t, ctx, tc.settings, tc.want)
	}
}

// A worker refuses its settings and exits at once: the service may notice
// the exit before it reads the refusal (as a loaded machine made it do).
// The refusal still reaches the host intact, not a closed connection.
func TestWorkerSettingsRefusedReadAfterExit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	service.ReadSpecAnswerAfterExit(t)
	checkSettingRefused(t, ctx, map[string]string{"max-inflight": "3"}, `unknown worker setting "max-inflight"`)
}

func checkSettingRefused(t *testing.T, ctx context.Context, settings map[string]string, want string) {
	t.Helper()
	c := startRDMOService(t, ctx, ucptest.Transports[0], settings)
	w, err := c.Spawn(ctx, urom.SpawnOptions{})
	if err == nil {
		w.Stop(ctx)
		t.Errorf("settings %v: spawn succeeded", settings)
		return
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("settings %v: %v, want it to say %q", settings, err, want)
	}
	if ws, err := c.Workers(ctx); err != nil || len(ws) != 0 {
		t.Errorf("settings %v: workers %v, %v after a refused spawn", settings, ws, err)
	}
}

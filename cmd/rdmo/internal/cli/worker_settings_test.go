package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/cli"
	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/urom/rdmoworker"
)

// `rdmo dpu`'s worker limits (cmd/rdmo/internal/cli) become a worker's dpu.Config:
// every key of the "worker" group is a setting the worker knows, its
// defaults are the dpu defaults, and configured values arrive as set.
func TestApplySettingsFromCLI(t *testing.T) {
	var cfg dpu.Config
	if err := rdmoworker.ApplySettings(&cfg, cli.DefaultWorkerLimits().Settings()); err != nil {
		t.Fatal(err)
	}
	want := dpu.Config{
		MaxInFlightPerRQ:    dpu.DefaultMaxInFlightPerRQ,
		MaxClients:          dpu.DefaultMaxClients,
		MaxRQsPerClient:     dpu.DefaultMaxRQsPerClient,
		MaxRegionsPerClient: dpu.DefaultMaxRegionsPerClient,
		MaxRendezvousFetch:  dpu.DefaultMaxRendezvousFetch,
		MaxEagerPayload:     dpu.DefaultMaxEagerPayload,
		MaxBatch:            dpu.DefaultMaxBatch,
		DrainTimeout:        dpu.DefaultDrainTimeout,
	}
	if !sameLimits(cfg, want) {
		t.Errorf("the CLI's default worker limits give %+v, want the dpu defaults %+v", limits(cfg), limits(want))
	}

	l := cli.WorkerLimits{MaxInFlightPerRQ: 8, MaxClients: 2, MaxRQsPerClient: 3, MaxRegionsPerClient: 4,
		MaxRendezvousFetch: 5, MaxEagerPayload: 6, MaxBatch: 7, DrainTimeout: 1500 * time.Millisecond}
	cfg = dpu.Config{}
	if err := rdmoworker.ApplySettings(&cfg, l.Settings()); err != nil {
		t.Fatal(err)
	}
	want = dpu.Config{MaxInFlightPerRQ: 8, MaxClients: 2, MaxRQsPerClient: 3, MaxRegionsPerClient: 4,
		MaxRendezvousFetch: 5, MaxEagerPayload: 6, MaxBatch: 7, DrainTimeout: 1500 * time.Millisecond}
	if !sameLimits(cfg, want) {
		t.Errorf("got %+v, want %+v", limits(cfg), limits(want))
	}
	for _, k := range cli.WorkerSettingKeys() {
		if err := rdmoworker.ApplySettings(&dpu.Config{}, map[string]string{k: "-1"}); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("setting %s = -1: %v, want an error naming it", k, err)
		}
	}
	if err := rdmoworker.ApplySettings(&dpu.Config{}, map[string]string{"max-workers": "1"}); err == nil {
		t.Error("an unknown setting was accepted")
	}
	// No settings: the zero values, which dpu.New turns into its defaults.
	cfg = dpu.Config{}
	if err := rdmoworker.ApplySettings(&cfg, nil); err != nil || !sameLimits(cfg, dpu.Config{}) {
		t.Errorf("nil settings: %+v, %v", limits(cfg), err)
	}
}

func limits(c dpu.Config) [8]int64 {
	return [8]int64{int64(c.MaxInFlightPerRQ), int64(c.MaxClients), int64(c.MaxRQsPerClient), int64(c.MaxRegionsPerClient),
		int64(c.MaxRendezvousFetch), int64(c.MaxEagerPayload), int64(c.MaxBatch), int64(c.DrainTimeout)}
}

func sameLimits(a, b dpu.Config) bool { return limits(a) == limits(b) }

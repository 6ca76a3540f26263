package rdmoworker_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/internal/cli"
	"github.com/openrdmo/rdmo/urom/rdmoworker"
)

// `rdmo dpu`'s worker limits (internal/cli) become a worker's dpu.Config:
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

// The in-flight limit in the CLIENT_INIT answer is additive on the wire:
// an answer without it (an older worker) decodes as 0, which hosts take
// for the default, a 0 is not sent at all, and an older host that does
// not know the key ignores it.
func TestNotificationInFlightLimitCompatible(t *testing.T) {
	type oldNotification struct {
		Type   dpu.CommandType `msgpack:"type"`
		Status uint16          `msgpack:"status"`
		Client uint64          `msgpack:"client"`
		Addr   []byte          `msgpack:"addr,omitempty"`
	}
	old, err := msgpack.Marshal(oldNotification{Client: 7, Addr: []byte{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	var n dpu.Notification
	if err := msgpack.Unmarshal(old, &n); err != nil || n.MaxInFlightPerRQ != 0 || n.Client != 7 {
		t.Errorf("an older worker's answer: %+v, %v", n, err)
	}
	b, err := msgpack.Marshal(dpu.Notification{Client: 7})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("max_in_flight_per_rq")) {
		t.Errorf("a zero limit is on the wire: %q", b)
	}
	b, err = msgpack.Marshal(dpu.Notification{Client: 7, Addr: []byte{1}, MaxInFlightPerRQ: 64})
	if err != nil {
		t.Fatal(err)
	}
	var o oldNotification
	if err := msgpack.Unmarshal(b, &o); err != nil || o.Client != 7 {
		t.Errorf("an older host reading a new answer: %+v, %v", o, err)
	}
	if err := msgpack.Unmarshal(b, &n); err != nil || n.MaxInFlightPerRQ != 64 {
		t.Errorf("round trip: %+v, %v", n, err)
	}
}

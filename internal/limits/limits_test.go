package limits

import (
	"strings"
	"testing"
	"time"
)

// engine has the fields of the limits dpu.Config has (not the NotEngine
// ones); fields has every limit under its Field name, as the CLI's
// WorkerLimits does.
type engine struct {
	MaxInFlightPerRQ    int
	MaxClients          int
	MaxRQsPerClient     int
	MaxRegionsPerClient int
	MaxRendezvousFetch  int
	MaxEagerPayload     int
	MaxBatch            int
	DrainTimeout        time.Duration
}

type fields struct {
	engine
	MaxWasmMemory int
}

func TestTable(t *testing.T) {
	keys, names := map[string]bool{}, map[string]bool{}
	for _, l := range Table {
		if keys[l.Key] || names[l.Field] {
			t.Errorf("limit %s (%s) listed twice", l.Field, l.Key)
		}
		keys[l.Key], names[l.Field] = true, true
		if l.Default <= 0 || l.Help == "" {
			t.Errorf("limit %s: default %d, help %q", l.Key, l.Default, l.Help)
		}
		// The key spells the field: MaxRQsPerClient is max-rqs-per-client.
		if got := strings.ReplaceAll(l.Key, "-", ""); got != strings.ToLower(l.Field) {
			t.Errorf("key %q does not spell field %s", l.Key, l.Field)
		}
		if _, isDur := l.Addr(&fields{}).(*time.Duration); isDur != (l.Unit == Duration) {
			t.Errorf("limit %s: unit %v, field %T", l.Key, l.Unit, l.Addr(&fields{}))
		}
		if got, ok := Lookup(l.Key); !ok || got.Field != l.Field {
			t.Errorf("Lookup(%q) = %+v, %v", l.Key, got, ok)
		}
	}
	want := fields{engine{1024, 64, 64, 1024, 1 << 20, 1 << 20, 1024, 5 * time.Second}, 128 << 20}
	var got fields
	for _, l := range Table {
		l.Set(&got, l.Default)
	}
	if got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
}

// Settings and Apply are inverses: what the CLI spells, a worker reads.
func TestSettingsApply(t *testing.T) {
	in := fields{engine{8, 2, 3, 4, 5, 6, 7, 1500 * time.Millisecond}, 9}
	s := Settings(&in)
	if s[KeyDrainTimeout] != "1.5s" || s[KeyMaxBatch] != "7" || len(s) != len(Table) {
		t.Errorf("Settings = %v", s)
	}
	var out fields
	if err := Apply(&out, s); err != nil || out != in {
		t.Errorf("Apply(Settings(%+v)) = %+v, %v", in, out, err)
	}
	// No settings: the fields stay as they were (0: the default).
	out = fields{}
	if err := Apply(&out, nil); err != nil || out != (fields{}) {
		t.Errorf("nil settings: %+v, %v", out, err)
	}
	for _, l := range Table {
		if err := Apply(&fields{}, map[string]string{l.Key: "-1"}); err == nil ||
			!strings.Contains(err.Error(), "worker setting "+l.Key+": invalid") {
			t.Errorf("setting %s = -1: %v, want an error naming it", l.Key, err)
		}
	}
	if err := Apply(&fields{}, map[string]string{"max-workers": "1"}); err == nil ||
		!strings.Contains(err.Error(), `unknown worker setting "max-workers"`) {
		t.Errorf("an unknown setting: %v", err)
	}
}

// A limit marked NotEngine is checked but not applied where the struct has
// no field for it (dpu.Config and the WebAssembly memory cap), and is not
// spelled from such a struct.
func TestNotEngine(t *testing.T) {
	var e engine
	if err := Apply(&e, map[string]string{KeyMaxWasmMemory: "4096", KeyMaxBatch: "3"}); err != nil || e.MaxBatch != 3 {
		t.Errorf("Apply to an engine config: %+v, %v", e, err)
	}
	if err := Apply(&e, map[string]string{KeyMaxWasmMemory: "-1"}); err == nil || !strings.Contains(err.Error(), KeyMaxWasmMemory) {
		t.Errorf("a bad value of a NotEngine limit: %v, want an error naming it", err)
	}
	if s := Settings(&e); len(s) != len(Table)-1 || s[KeyMaxWasmMemory] != "" {
		t.Errorf("Settings of an engine config = %v", s)
	}
}

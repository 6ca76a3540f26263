package dpu_test

import (
	"strings"
	"testing"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/internal/limits"
)

// Every limit of the worker limits table is a field of Config: a zero
// field gets the table's default, a negative one is refused by name.
func TestConfigLimitsFromTable(t *testing.T) {
	var c dpu.Config
	if err := c.SetDefaults(); err != nil {
		t.Fatal(err)
	}
	for _, l := range limits.Table {
		if l.NotEngine {
			if l.In(&c) {
				t.Errorf("Config has a field %s for a limit marked NotEngine", l.Field)
			}
			continue
		}
		if got := l.Get(&c); got != l.Default {
			t.Errorf("Config.%s defaults to %d, want the table's %d", l.Field, got, l.Default)
		}
		var bad dpu.Config
		l.Set(&bad, -1)
		if err := bad.SetDefaults(); err == nil || !strings.Contains(err.Error(), "Config."+l.Field) {
			t.Errorf("Config.%s = -1: %v, want an error naming it", l.Field, err)
		}
	}
	if c.MaxInFlightPerRQ != dpu.DefaultMaxInFlightPerRQ || c.DrainTimeout != dpu.DefaultDrainTimeout {
		t.Errorf("defaults %d, %v; want the Default constants", c.MaxInFlightPerRQ, c.DrainTimeout)
	}
}

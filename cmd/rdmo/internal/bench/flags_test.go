package bench

import (
	"testing"
	"time"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/cli"
)

// The bench's duration flags follow the rule of every duration flag of
// rdmo (cli.ParseDuration): a bare number is seconds, and a bad value gets
// the same message as --worker-drain-timeout.
func TestDurationFlags(t *testing.T) {
	o := DefaultOptions()
	if err := FlagSet(&o).Parse([]string{"--duration", "1", "--interval", "0.5"}); err != nil {
		t.Fatal(err)
	}
	if o.Duration != time.Second || o.Interval != 500*time.Millisecond {
		t.Errorf("--duration 1 --interval 0.5: %v, %v", o.Duration, o.Interval)
	}
	err := runCLI(t.Context(), cli.DefaultConfig(), []string{"--duration", "soon"})
	want := `--duration: invalid duration "soon"; want ` + cli.DurationHelp
	if err == nil || err.Error() != want || cli.ExitCode(err) != cli.ExitUsage {
		t.Errorf("--duration soon: %v (exit %d), want %q (exit 2)", err, cli.ExitCode(err), want)
	}
}

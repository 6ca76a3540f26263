package bench

import (
	"os"
	"path/filepath"
	"slices"
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

// --plugin-path follows the rule of the root command's: ':'-separated,
// repeatable; unset, the plugins directory beside the executable when there
// is one.
func TestPluginPathFlag(t *testing.T) {
	o := DefaultOptions()
	if err := FlagSet(&o).Parse([]string{"--plugin-path", "/a:/b", "--plugin-path", "/c"}); err != nil {
		t.Fatal(err)
	}
	if got := o.pluginPath("/x/rdmo"); !slices.Equal(got, []string{"/a", "/b", "/c"}) {
		t.Errorf("--plugin-path /a:/b --plugin-path /c: %v", got)
	}
	dir := t.TempDir()
	o = DefaultOptions()
	if got := o.pluginPath(filepath.Join(dir, "rdmo")); got != nil {
		t.Errorf("no plugins directory: %v", got)
	}
	if err := os.Mkdir(filepath.Join(dir, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := o.pluginPath(filepath.Join(dir, "rdmo")); !slices.Equal(got, []string{filepath.Join(dir, "plugins")}) {
		t.Errorf("beside the executable: %v", got)
	}
}

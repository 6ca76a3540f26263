package cli

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// One rule for every duration: a Go duration or a bare number of seconds;
// anything else, or a negative duration, is refused with one message.
func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"5s": 5 * time.Second, "250ms": 250 * time.Millisecond, "1m30s": 90 * time.Second,
		"1": time.Second, " 5 ": 5 * time.Second, "0.5": 500 * time.Millisecond, "0": 0,
	} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"soon": `invalid duration "soon"; want ` + DurationHelp,
		"5x":   `invalid duration "5x"; want ` + DurationHelp,
		"":     `invalid duration ""; want ` + DurationHelp,
		"NaN":  `invalid duration "NaN"; want ` + DurationHelp,
		"1e30": `invalid duration "1e30"; want ` + DurationHelp,
		"-1s":  `invalid duration "-1s"; want a duration of at least 0`,
		"-2":   `invalid duration "-2"; want a duration of at least 0`,
	} {
		if _, err := ParseDuration(in); err == nil || err.Error() != want {
			t.Errorf("ParseDuration(%q): error %v, want %q", in, err, want)
		}
	}
}

// A flag made with DurationVar takes a bare number as seconds and says so
// in its errors, like --worker-drain-timeout.
func TestDurationFlags(t *testing.T) {
	var d time.Duration = time.Second
	var limits WorkerLimits
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	DurationVar(fs, &d, "duration", "")
	limits.RegisterFlags(fs)
	if f := fs.Lookup("duration"); f.DefValue != "1s" || f.Value.Type() != "duration" {
		t.Errorf("default %q type %q", f.DefValue, f.Value.Type())
	}
	if err := fs.Parse([]string{"--duration", "2", "--worker-drain-timeout", "3"}); err != nil {
		t.Fatal(err)
	}
	if d != 2*time.Second || limits.DrainTimeout != 3*time.Second {
		t.Errorf("--duration 2 → %v, --worker-drain-timeout 3 → %v", d, limits.DrainTimeout)
	}
	var msgs []string
	for _, name := range []string{"duration", "worker-drain-timeout"} {
		err := FlagError(fs.Parse([]string{"--" + name, "soon"}))
		msgs = append(msgs, err.Error())
	}
	want := []string{`--duration: invalid duration "soon"; want ` + DurationHelp, `--worker-drain-timeout: invalid duration "soon"; want ` + DurationHelp}
	for i := range want {
		if msgs[i] != want[i] {
			t.Errorf("error\n got %q\nwant %q", msgs[i], want[i])
		}
	}
}

package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// DurationHelp is how every duration flag's help says what it takes.
const DurationHelp = "a duration such as 5s, 250ms or 1m30s, or a bare number of seconds"

// ParseDuration reads the value of a duration flag or params-file key, by
// the one rule every duration of the rdmo binary follows: a Go duration
// ("5s", "250ms", "1m30s") or a bare number, which is seconds ("5", "0.5";
// a params file may write it as a JSON number). Negative durations are
// refused.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	d, err := time.ParseDuration(t)
	if err != nil {
		f, ferr := strconv.ParseFloat(t, 64)
		if ferr != nil || f != f || f > float64(1<<62)/float64(time.Second) || f < -float64(1<<62)/float64(time.Second) {
			return 0, fmt.Errorf("invalid duration %q; want %s", s, DurationHelp)
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d < 0 {
		return 0, fmt.Errorf("invalid duration %q; want a duration of at least 0", s)
	}
	return d, nil
}

// durationValue is a time.Duration flag that follows ParseDuration.
type durationValue time.Duration

func (v durationValue) String() string { return time.Duration(v).String() }
func (v *durationValue) Type() string  { return "duration" }
func (v *durationValue) Set(s string) error {
	d, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*v = durationValue(d)
	return nil
}

// DurationVar defines a duration flag on fs, bound to p (whose value is the
// default), that takes what ParseDuration reads: use it for every duration
// flag, so that `--x 5` means five seconds everywhere.
func DurationVar(fs *pflag.FlagSet, p *time.Duration, name, usage string) {
	fs.Var((*durationValue)(p), name, usage)
}

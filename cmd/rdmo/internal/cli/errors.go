package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// Exit statuses of the rdmo binary.
const (
	ExitOK       = 0 // success, -h, -v
	ExitFailure  = 1 // the command ran and failed
	ExitUsage    = 2 // bad flags, bad params file, bad values
	ExitNotBuilt = 3 // the mode's implementation is not linked into this binary
)

// ExitError is an error that carries the process exit status.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// UsageError wraps err as a usage error (exit status 2). nil stays nil.
func UsageError(err error) error {
	if err == nil {
		return nil
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return err
	}
	return &ExitError{Code: ExitUsage, Err: err}
}

// Usagef formats a usage error (exit status 2).
func Usagef(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// ErrNotBuilt is returned (wrapped, with the mode's name) when the
// implementation of a mode is not linked into the binary.
var ErrNotBuilt = errors.New("not built into this binary yet")

// NotBuilt is the error for a mode that is nil in App:
// "<mode>: not built into this binary yet", exit status 3.
func NotBuilt(mode string) error {
	return &ExitError{Code: ExitNotBuilt, Err: fmt.Errorf("%s: %w", mode, ErrNotBuilt)}
}

// ExitCode is the exit status for err: 0 for nil, the code of an ExitError,
// and ExitFailure otherwise.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return ExitFailure
}

// FlagError rewrites a pflag parse error into one clear line naming the flag
// ("-m/--mode: invalid mode ..."), as a usage error. An unknown flag gets
// the likeliest of the flags of known, if one is close enough ("unknown
// flag: --oops (did you mean --ops?)").
func FlagError(err error, known ...*pflag.FlagSet) error {
	if err == nil {
		return nil
	}
	var nee *pflag.NotExistError
	if errors.As(err, &nee) {
		if s := suggestFlag(nee, known); s != "" {
			return Usagef("%s (did you mean %s?)", oneLine(err), s)
		}
	}
	var ive *pflag.InvalidValueError
	if errors.As(err, &ive) {
		return Usagef("%s: %v", FlagName(ive.GetFlag()), oneLine(ive.Unwrap()))
	}
	var vre *pflag.ValueRequiredError
	if errors.As(err, &vre) {
		return Usagef("%s needs a value", FlagName(vre.GetFlag()))
	}
	return UsageError(errors.New(oneLine(err)))
}

// FlagName spells a flag as "-m/--mode" or "--oob-port".
func FlagName(f *pflag.Flag) string {
	if f == nil {
		return "flag"
	}
	if f.Shorthand != "" {
		return "-" + f.Shorthand + "/--" + f.Name
	}
	return "--" + f.Name
}

func oneLine(err error) string {
	if err == nil {
		return "invalid value"
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}

// suggestFlag spells the flag of known an unknown flag most likely meant:
// "--ops" for --oops, "--listen" for -listen (one dash), or "".
func suggestFlag(nee *pflag.NotExistError, known []*pflag.FlagSet) string {
	var names []string
	for _, fs := range known {
		fs.VisitAll(func(f *pflag.Flag) {
			if !f.Hidden {
				names = append(names, f.Name)
			}
		})
	}
	name := nee.GetSpecifiedName()
	if short := nee.GetSpecifiedShortnames(); short != "" {
		// -listen: a long name with one dash, read as shorthands.
		if len(short) < 2 {
			return ""
		}
		name = short
	}
	if s := suggest(name, names...); s != "" {
		return "--" + s
	}
	return ""
}

// didYouMean is ` (did you mean "x"?)` for the candidate closest to s, or
// "" when none is close: the hint of an unknown key, group or value.
func didYouMean(s string, candidates []string) string {
	if c := suggest(s, candidates...); c != "" {
		return fmt.Sprintf(" (did you mean %q?)", c)
	}
	return ""
}

// suggest returns the candidate closest to s if it is a likely typo
// (edit distance at most 2, and less than half of s), or "". Case and '_'
// for '-' do not count ("metrics_addr" is "metrics-addr").
func suggest(s string, candidates ...string) string {
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "_", "-") }
	s = norm(s)
	best, bestD := "", 3
	for _, c := range candidates {
		d := editDistance(s, norm(c))
		if d < bestD && d*2 < len(c) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Damerau–Levenshtein distance (optimal string
// alignment), so "clinet" is one edit from "client".
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

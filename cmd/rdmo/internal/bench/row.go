package bench

import (
	"fmt"
	"slices"
	"strings"
)

// A row is one way of doing the work a run measures, named on --modes
// (those names are read by tools: never rename one). Everything the
// benchmark does differently for a row is in its rowDef: the driver, the
// target and the initiators look the row up by name (rowByName) and call
// its functions; no code elsewhere tests a row's name.
//
// # Adding a row
//
//  1. Write the initiator's side: a roundFunc (initiator_*.go) that does
//     the round's operations within roundSpec's budget (newBudget) and
//     returns what it did. Check every answer it gets there.
//  2. Pick the target's preparation and check, or write them: Setup runs in
//     the driver before each round (setupQueue, setupScatter, setupOps,
//     setupWorkload ask the target for fresh memory through its line
//     protocol); Check runs in the target after the round and returns an
//     error when its memory is not exactly what the initiators say they did
//     (checkQueueRow, checkScatterRow, checkSinkRow, checkOpsRow,
//     checkWorkloadRow).
//  3. Add a rowDef to the registry (rows.go), where its place in the list
//     is its place in a run; a row with a parameter in its name
//     ("scatter/<iovs>") is a rowFamily.
//  4. Add its test to rowCheckTests (row_test.go): the test feeds the row's
//     Check (or its answer checks) good data and each kind of bad data.
//     TestEveryRowHasCheckTest fails until the row has one.
type rowDef struct {
	// Name is the row's --modes name; Pattern the family's for a row of
	// a family ("scatter/<iovs>"), else Name.
	Name, Pattern string
	// Groups are the --modes groups that select the row besides "all" and
	// its own name.
	Groups []string
	// Default: measured when --modes is not given.
	Default bool
	// Baseline is the row this one is compared with in its ×native and
	// p50×native columns ("": only the run's common baselines, Report.finish),
	// and Goal what that comparison should show.
	Baseline string
	Goal     *rowGoal
	// MadeOf names the rows whose operations this one mixes: the report
	// prints it beside them.
	MadeOf []string

	// Strategy is the append strategy of the RDMO worker the row uses ("":
	// none; the target then spins its progress for the row's rounds).
	Strategy string
	// Plugins is the form of the worker's handler the row measures, as
	// `--plugins` names it ("wasm:fetch-add", "plugin:fetch-add"; "": the
	// built-in handlers): such a row has a worker of its own, spawned with
	// that name, found on the run's --plugin-path.
	Plugins string
	// RoundTrip: the row's p50 is read against am-pingpong's.
	RoundTrip bool
	// Load: the row's operations are flushes while a load of appends
	// streams; the appends are what its queue holds and its worker counts.
	Load bool
	// SingleWriter: one initiator owns the queue (--initiators 1 only).
	SingleWriter bool
	// NoData: the row moves no data the benchmark can check (never
	// "verified").
	NoData bool
	// IOVs is a scatter row's chunks per request.
	IOVs int
	// Sizeless: the row chooses its own sizes; it runs once per run (at
	// the first --size) and reports size 0.
	Sizeless bool

	// Capacity is the row's operations per initiator in one round for a
	// run's options (nil: no bound).
	Capacity func(o *Options, size int) int
	// Setup prepares target memory for a round (in the driver; nil:
	// nothing to prepare).
	Setup func(d *driver, rs *rowState, spec *roundSpec) error
	// Round is one initiator's round.
	Round roundFunc
	// Check runs in the target after every round (nil: nothing lands in
	// target memory; the round's own answers are its check).
	Check func(t *benchTarget, req targetReq) error
	// Drive replaces the driver's round (perftest rows run another program).
	Drive func(d *driver, rs *rowState, warm bool) error
}

// worker names the row's RDMO worker among the run's (the driver's,
// target's and initiators' key for it): its append strategy, and the
// plugin form after a "+" when it has one.
func (r *rowDef) worker() string {
	if r.Strategy == "" || r.Plugins == "" {
		return r.Strategy
	}
	return r.Strategy + "+" + r.Plugins
}

// splitWorker is worker's inverse: the append strategy and the plugin
// names a worker is spawned with.
func splitWorker(key string) (strategy string, plugins []string) {
	strategy, p, ok := strings.Cut(key, "+")
	if ok {
		plugins = []string{p}
	}
	return strategy, plugins
}

// roundFunc is one initiator's round of a row.
type roundFunc func(p *initProc, s roundSpec) (roundResult, error)

// rowGoal is what a row's ratio to its Baseline should be
// (docs/BENCHMARKS.md): the rate ratio (Rate) or the p50 ratio, ">=" or
// "<=" Want; Kind "" is no goal.
type rowGoal struct {
	Rate bool
	Kind string
	Want float64
	Note string // printed instead of a verdict
}

// rowFamily is rows whose names carry a parameter. rows lists the
// family's rows for a run in run order: its default parameters plus any
// that names ask for; a name with the family's prefix that does not parse
// is an error. parse makes the row a name denotes.
type rowFamily struct {
	rows  func(names []string, iovs []int) ([]rowDef, error)
	parse func(name string) (rowDef, bool)
}

// fixed is a family of one row.
func fixed(r rowDef) rowFamily {
	if r.Pattern == "" {
		r.Pattern = r.Name
	}
	return rowFamily{
		rows:  func([]string, []int) ([]rowDef, error) { return []rowDef{r}, nil },
		parse: func(n string) (rowDef, bool) { return r, n == r.Name },
	}
}

// rowByName returns the row of a --modes name.
func rowByName(name string) (*rowDef, bool) {
	for _, f := range registry {
		if r, ok := f.parse(name); ok {
			return &r, true
		}
	}
	return nil, false
}

// mustRow is rowByName for names the code itself uses.
func mustRow(name string) *rowDef {
	r, ok := rowByName(name)
	if !ok {
		panic("bench: no row " + name)
	}
	return r
}

// hasGroup reports whether a row is in a --modes group.
func (r *rowDef) hasGroup(g string) bool { return slices.Contains(r.Groups, g) }

// modeGroups are the group names --modes accepts besides row names.
var modeGroups = []string{"perftest", "rdmo-append", "native-append", "scatter", "flush", "baselines", "ops", "forms", "all"}

// expandModes resolves names and group names to rows, in run order,
// without duplicates; no names is the default set.
func expandModes(names []string, iovs []int) ([]string, error) {
	names = slices.Clone(names)
	for i, n := range names {
		names[i] = strings.ToLower(strings.TrimSpace(n))
	}
	var all []rowDef
	for _, f := range registry {
		rs, err := f.rows(names, iovs)
		if err != nil {
			return nil, err
		}
		all = append(all, rs...)
	}
	var out []string
	if len(names) == 0 {
		for _, r := range all {
			if r.Default {
				out = append(out, r.Name)
			}
		}
		return out, nil
	}
	want := map[string]bool{}
	for _, n := range names {
		matched := false
		for _, r := range all {
			if n == "all" || n == r.Name || r.hasGroup(n) {
				want[r.Name] = true
				matched = true
			}
		}
		if !matched {
			var known []string
			for _, r := range all {
				known = append(known, r.Name)
			}
			return nil, fmt.Errorf("unknown mode %q; modes: %s (or the groups %s)", n, strings.Join(known, ", "), strings.Join(modeGroups, ", "))
		}
	}
	for _, r := range all {
		if want[r.Name] && !slices.Contains(out, r.Name) {
			out = append(out, r.Name)
		}
	}
	return out, nil
}

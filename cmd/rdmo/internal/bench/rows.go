package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/openrdmo/rdmo/plugins/ops"
)

// The rows' names. Tools read them (--modes, the JSON's "mode"): never
// rename one.
const (
	ModePerftestAM       = "perftest-am"             // ucx_perftest -t ucp_am_bw at the size and transport: what libucp moves
	ModePerftestPut      = "perftest-put"            // ucx_perftest -t ucp_put_bw: the one-sided limit
	ModeRawAM            = "raw-am"                  // bare UCX AMs to a counting sink: the limit of one message per operation
	ModeNativeOwned      = "native-owned"            // one writer owns the tail and batches its records into large puts
	ModePingPong         = "am-pingpong"             // one AM and its echo at a time: the round-trip baseline
	ModeNativeBlocking   = "native-append/blocking"  // initiator fetch-adds the tail, waits, puts the data
	ModeNativePipelined  = "native-append/pipelined" // the same with many fetch-adds outstanding
	ModeRDMOAppendOwned  = "rdmo-append/owned"       // RDMO APPEND, worker owns the tail
	ModeRDMOAppendCold   = "rdmo-append/owned/cold"  // the same, each round on a fresh registration (first touch)
	ModeRDMOAppendDrive  = "rdmo-append/owned/drive" // the same stream made inside initiator.Drive (Driver.Append)
	ModeRDMOAppendShared = "rdmo-append/shared"      // RDMO APPEND, tail shared (fetch-add per batch)
	modeScatterPrefix    = "scatter/"                // scatter/<iovs>: RDMO SCATTER of <iovs> chunks of `size` bytes
	ModeFlushIdle        = "flush/idle"              // RDMO FLUSH round trip with nothing else in flight
	ModeFlushIdleDrive   = "flush/idle/drive"        // the same, each FLUSH made inside initiator.Drive (on the Initiator's loop thread)
	ModeFlushLoad        = "flush/load"              // the same while the initiator streams appends
	ModeWorkload         = "workload"                // the demo's workload (rdmo -m client), every byte checked
)

// The op-pack rows (initiator_ops.go). chase rows are "chase/<depth>",
// "chase/<depth>/call", "chase/<depth>/pipelined", "native-chase/<depth>"
// and "native-chase/<depth>/pipelined".
const (
	modeChasePrefix       = "chase/"
	modeNativeChasePrefix = "native-chase/"
	ModeKVLookup          = "kv-lookup"
	ModeNativeKVLookup    = "native-kv-lookup"
	ModeFetchAdd          = "fetch-add"
	ModeNativeFetchAdd    = "native-fetch-add"
	// opsCallSuffix marks an RDMO row's twin that calls with
	// Initiator.Call rather than inside a Drive.
	opsCallSuffix = "/call"
	// opsPipeSuffix marks a row that keeps many calls in flight: the
	// rate at saturation, where the other rows measure one call at a
	// time.
	opsPipeSuffix = "/pipelined"
)

// The handler-form rows: the op pack's fetch-add served by each form of
// handler the worker loads (docs/PLUGINS.md), from the same source:
// built in (fetch-add, fetch-add/pipelined), a WebAssembly module in the
// worker (rdmo-plugin-fetch-add.wasm) and a go-plugin process
// (rdmo-plugin-fetch-add), one call at a time and pipelined. The module
// and the binary are found on --plugin-path (`make bench-plugins`).
const (
	ModeFetchAddPipelined    = ModeFetchAdd + opsPipeSuffix
	ModeFetchAddWasm         = ModeFetchAdd + "/wasm"
	ModeFetchAddWasmPipe     = ModeFetchAddWasm + opsPipeSuffix
	ModeFetchAddPlugin       = ModeFetchAdd + "/plugin"
	ModeFetchAddPluginPipe   = ModeFetchAddPlugin + opsPipeSuffix
	fetchAddWasm, fetchAddGo = "wasm:fetch-add", "plugin:fetch-add"
)

// DefaultChaseDepths are the chase depths `--modes ops` measures;
// DefaultPipelinedDepths those it also measures pipelined.
var (
	DefaultChaseDepths     = []int{1, 2, 4, 8}
	DefaultPipelinedDepths = []int{4}
)

// registry is every row, in the order a run measures them.
var registry = []rowFamily{
	fixed(rowDef{Name: ModePerftestAM, Groups: []string{"perftest", "baselines"}, Default: true, NoData: true, Drive: perftestDrive("ucp_am_bw")}),
	fixed(rowDef{Name: ModePerftestPut, Groups: []string{"perftest", "baselines"}, Default: true, NoData: true, Drive: perftestDrive("ucp_put_bw")}),
	fixed(rowDef{Name: ModeRawAM, Groups: []string{"baselines"}, Default: true, Round: native((*initProc).rawAM), Check: checkSinkRow}),
	fixed(rowDef{Name: ModePingPong, Groups: []string{"baselines"}, Default: true, RoundTrip: true, Round: native((*initProc).pingPong), Check: checkSinkRow}),
	fixed(rowDef{Name: ModeNativeOwned, Groups: []string{"baselines"}, Default: true, SingleWriter: true,
		Capacity: queueCapacity, Setup: setupQueue, Round: native((*initProc).nativeOwned), Check: checkQueueRow(true)}),
	fixed(rowDef{Name: ModeNativeBlocking, Groups: []string{"baselines", "native-append"}, Default: true,
		Capacity: queueCapacity, Setup: setupQueue, Round: native(nativeAppend(false)), Check: checkQueueRow(false)}),
	fixed(rowDef{Name: ModeNativePipelined, Groups: []string{"baselines", "native-append"}, Default: true,
		Capacity: queueCapacity, Setup: setupQueue, Round: native(nativeAppend(true)), Check: checkQueueRow(false)}),
	fixed(rowDef{Name: ModeRDMOAppendOwned, Groups: []string{"rdmo-append"}, Default: true, Strategy: "owned",
		Capacity: queueCapacity, Setup: setupQueue, Round: rdmoRound((*initProc).rdmoAppend), Check: checkQueueRow(true)}),
	fixed(rowDef{Name: ModeRDMOAppendCold, Groups: []string{"rdmo-append"}, Default: true, Strategy: "owned",
		Capacity: queueCapacity, Setup: setupColdQueue, Round: rdmoRound((*initProc).rdmoAppend), Check: checkQueueRow(true)}),
	fixed(rowDef{Name: ModeRDMOAppendDrive, Groups: []string{"rdmo-append"}, Default: true, Strategy: "owned",
		Capacity: queueCapacity, Setup: setupQueue, Round: rdmoRound((*initProc).rdmoAppendDrive), Check: checkQueueRow(true)}),
	scatterFamily,
	fixed(rowDef{Name: ModeFlushIdle, Groups: []string{"flush"}, Default: true, Strategy: "owned", RoundTrip: true, Round: rdmoRound(flushIdle(false))}),
	fixed(rowDef{Name: ModeFlushIdleDrive, Groups: []string{"flush"}, Default: true, Strategy: "owned", RoundTrip: true, Round: rdmoRound(flushIdle(true))}),
	fixed(rowDef{Name: ModeFlushLoad, Groups: []string{"flush"}, Default: true, Strategy: "owned", RoundTrip: true, Load: true,
		Capacity: queueCapacity, Setup: setupQueue, Round: rdmoRound((*initProc).flushLoad), Check: checkQueueRow(true)}),
	fixed(rowDef{Name: ModeWorkload, Default: true, Strategy: "owned", Sizeless: true,
		MadeOf: []string{ModeRDMOAppendOwned, modeScatterPrefix + "<iovs>", ModeFlushLoad},
		Setup:  setupWorkload, Round: rdmoRound((*initProc).workload), Check: checkWorkloadRow}),
	fixed(rowDef{Name: ModeRDMOAppendShared, Groups: []string{"rdmo-append"}, Default: true, Strategy: "shared",
		Capacity: queueCapacity, Setup: setupQueue, Round: rdmoRound((*initProc).rdmoAppend), Check: checkQueueRow(true)}),
	chaseFamily,
	fixed(opsRow(ModeKVLookup, "owned", ModeNativeKVLookup, &rowGoal{Kind: "<=", Want: 0.5}, kvCalls(false))),
	fixed(opsRow(ModeKVLookup+opsCallSuffix, "owned", ModeNativeKVLookup, callTwinGoal, kvCalls(true))),
	fixed(opsRow(ModeNativeKVLookup, "", "", nil, native(opsNative(kvNative)))),
	fixed(fetchAdds(opsRow(ModeFetchAdd, "owned", ModeNativeFetchAdd, noGoal, fetchAddCalls(false)))),
	fixed(fetchAdds(opsRow(ModeFetchAdd+opsCallSuffix, "owned", ModeNativeFetchAdd, callTwinGoal, fetchAddCalls(true)))),
	fixed(fetchAdds(opsRow(ModeNativeFetchAdd, "", "", nil, native(opsNative(fetchAddNative))))),
	pipelinedChaseFamily,
	fixed(formRow(ModeFetchAddPipelined, "", "", noGoal, fetchAddPipelined, "ops")),
	fixed(formRow(ModeFetchAddWasm, fetchAddWasm, ModeFetchAdd, &rowGoal{Kind: "<=", Want: 1.2}, fetchAddCalls(false))),
	fixed(formRow(ModeFetchAddWasmPipe, fetchAddWasm, ModeFetchAddPipelined, &rowGoal{Rate: true, Kind: ">=", Want: 0.8}, fetchAddPipelined)),
	fixed(formRow(ModeFetchAddPlugin, fetchAddGo, ModeFetchAdd, noGoal, fetchAddCalls(false))),
	// The goal "the module's rate ≥ 10× the plugin process's", read from
	// the plugin's side.
	fixed(formRow(ModeFetchAddPluginPipe, fetchAddGo, ModeFetchAddWasmPipe, &rowGoal{Rate: true, Kind: "<=", Want: 0.1}, fetchAddPipelined)),
}

// fetchAddPipelined keeps pipeDepth fetch-adds in flight inside one Drive.
var fetchAddPipelined = rdmoRound(opsPipelined(fetchAddCall))

// formRow is a handler-form row (ModeFetchAddWasm's comment): a fetch-add
// row of the group "forms" whose worker serves fetch-add with the plugin
// form named (built in: ""). Only the built-in form's rows are in "ops",
// which needs no --plugin-path.
func formRow(name, plugins, baseline string, goal *rowGoal, round roundFunc, groups ...string) rowDef {
	r := fetchAdds(opsRow(name, "owned", baseline, goal, round))
	r.Groups, r.Plugins = append(groups, "forms"), plugins
	return r
}

var (
	noGoal       = &rowGoal{Note: "(no goal)"}
	callTwinGoal = &rowGoal{Note: "(no goal: the goals compare the Drive rows)"}
)

// native is a round of a row without RDMO: on the command goroutine, which
// owns the raw UCX worker, connected to the target.
func native(f roundFunc) roundFunc {
	return func(p *initProc, s roundSpec) (roundResult, error) {
		if err := p.needTarget(); err != nil {
			return roundResult{}, err
		}
		return f(p, s)
	}
}

// rdmoRound is a round of a row through the RDMO worker, on a goroutine of
// its own (unlocked).
func rdmoRound(f roundFunc) roundFunc {
	return func(p *initProc, s roundSpec) (roundResult, error) {
		if err := p.needRDMO(); err != nil {
			return roundResult{}, err
		}
		return unlocked(func() (roundResult, error) { return f(p, s) })
	}
}

// queueCapacity is the records of one initiator's share of a queue.
func queueCapacity(o *Options, size int) int {
	return (o.QueueBytes - queueSlotBytes) / size / o.Initiators
}

// scatterFamily is scatter/<iovs>: the --iovs counts and any named.
var scatterFamily = rowFamily{
	rows: func(names []string, iovs []int) ([]rowDef, error) {
		iovs = slices.Clone(iovs)
		for _, n := range names {
			if s, ok := strings.CutPrefix(n, modeScatterPrefix); ok {
				k, err := strconv.Atoi(s)
				if err != nil || k < 1 || k > 1024 {
					return nil, fmt.Errorf("mode %q: want scatter/<iov count from 1 to 1024>", n)
				}
				if !slices.Contains(iovs, k) {
					iovs = append(iovs, k)
				}
			}
		}
		var out []rowDef
		for _, k := range iovs {
			out = append(out, scatterRow(k))
		}
		return out, nil
	},
	parse: func(name string) (rowDef, bool) {
		s, ok := strings.CutPrefix(name, modeScatterPrefix)
		k, err := strconv.Atoi(s)
		if !ok || err != nil || k < 1 || k > 1024 {
			return rowDef{}, false
		}
		return scatterRow(k), true
	},
}

func scatterRow(k int) rowDef {
	return rowDef{Name: modeScatterPrefix + strconv.Itoa(k), Pattern: modeScatterPrefix + "<iovs>", Groups: []string{"scatter"}, Default: true, Strategy: "owned", IOVs: k,
		Capacity: func(o *Options, size int) int { return o.QueueBytes / (o.Initiators * k * size) },
		Setup:    setupScatter, Round: rdmoRound((*initProc).scatter), Check: checkScatterRow}
}

// opsRow is an op-pack row: its memory laid out afresh every round, its
// answers checked by the initiator, the target's memory after the round by
// the target.
func opsRow(name, strategy, baseline string, goal *rowGoal, round roundFunc) rowDef {
	r := rowDef{Name: name, Pattern: name, Groups: []string{"ops"}, Strategy: strategy, Baseline: baseline, Goal: goal, RoundTrip: true,
		Setup: setupOps, Round: round, Check: checkOpsRow(false)}
	if g, _, _ := strings.Cut(name, "/"); !strings.HasSuffix(name, opsCallSuffix) {
		r.Groups = append(r.Groups, g) // chase/4/call is not in "chase", fetch-add/call not in "fetch-add"
	}
	return r
}

// fetchAdds is an op-pack row whose operations move its initiator's
// counter: the target's check expects it moved by exactly the operations
// done.
func fetchAdds(r rowDef) rowDef {
	r.Check = checkOpsRow(true)
	return r
}

// chaseDepths lists the depths of a chase family: the defaults and any a
// name of the family asks for.
func chaseDepths(names []string, defaults []int, pipelined bool) ([]int, error) {
	depths := slices.Clone(defaults)
	for _, n := range names {
		if !strings.HasPrefix(n, modeChasePrefix) && !strings.HasPrefix(n, modeNativeChasePrefix) {
			continue
		}
		d, pipe, ok := parseChase(n)
		if !ok {
			return nil, fmt.Errorf("mode %q: want chase/<depth from 1 to %d>[/call|/pipelined] or native-chase/<depth>[/pipelined]", n, ops.MaxDepth)
		}
		if pipe == pipelined && !slices.Contains(depths, d) {
			depths = append(depths, d)
		}
	}
	slices.Sort(depths)
	return depths, nil
}

// parseChase reads the depth of any chase row's name, and whether it is
// a pipelined one.
func parseChase(n string) (depth int, pipelined, ok bool) {
	s, native := strings.CutPrefix(n, modeNativeChasePrefix)
	if !native {
		if s, ok = strings.CutPrefix(n, modeChasePrefix); !ok {
			return 0, false, false
		}
	}
	s, pipelined = strings.CutSuffix(s, opsPipeSuffix)
	s, call := strings.CutSuffix(s, opsCallSuffix)
	if call && (native || pipelined) {
		return 0, false, false
	}
	d, err := strconv.Atoi(s)
	if err != nil || d < 1 || d > ops.MaxDepth {
		return 0, false, false
	}
	return d, pipelined, true
}

// chaseRows are the rows of one depth: chase/D (inside a Drive), its
// /call twin, native-chase/D.
func chaseRows(d int) []rowDef {
	c, nc := modeChasePrefix+strconv.Itoa(d), modeNativeChasePrefix+strconv.Itoa(d)
	goal, twin := noGoal, callTwinGoal
	if d == 4 {
		goal = &rowGoal{Kind: "<=", Want: 1.0 / 3}
	}
	rows := []rowDef{
		opsRow(c, "owned", nc, goal, chaseCalls(d, false)),
		opsRow(c+opsCallSuffix, "owned", nc, twin, chaseCalls(d, true)),
		opsRow(nc, "", "", nil, native(opsNative(chaseNative(d)))),
	}
	for i := range rows {
		rows[i].Pattern = strings.Replace(rows[i].Name, strconv.Itoa(d), "<depth>", 1)
	}
	return rows
}

// pipelinedChaseRows are chase/D/pipelined and its native twin.
func pipelinedChaseRows(d int) []rowDef {
	c, nc := modeChasePrefix+strconv.Itoa(d)+opsPipeSuffix, modeNativeChasePrefix+strconv.Itoa(d)+opsPipeSuffix
	goal := noGoal
	if d == 4 {
		goal = &rowGoal{Rate: true, Kind: ">=", Want: 3}
	}
	rows := []rowDef{
		opsRow(c, "owned", nc, goal, rdmoRound(chasePipelined(d))),
		opsRow(nc, "", "", nil, native(chaseNativePipelined(d))),
	}
	for i := range rows {
		rows[i].Pattern = strings.Replace(rows[i].Name, strconv.Itoa(d), "<depth>", 1)
	}
	return rows
}

var chaseFamily = rowFamily{
	rows: func(names []string, _ []int) ([]rowDef, error) {
		depths, err := chaseDepths(names, DefaultChaseDepths, false)
		var out []rowDef
		for _, d := range depths {
			out = append(out, chaseRows(d)...)
		}
		return out, err
	},
	parse: func(name string) (rowDef, bool) { return parseIn(name, false, chaseRows) },
}

var pipelinedChaseFamily = rowFamily{
	rows: func(names []string, _ []int) ([]rowDef, error) {
		depths, err := chaseDepths(names, DefaultPipelinedDepths, true)
		var out []rowDef
		for _, d := range depths {
			out = append(out, pipelinedChaseRows(d)...)
		}
		return out, err
	},
	parse: func(name string) (rowDef, bool) { return parseIn(name, true, pipelinedChaseRows) },
}

func parseIn(name string, pipelined bool, rows func(int) []rowDef) (rowDef, bool) {
	d, pipe, ok := parseChase(name)
	if !ok || pipe != pipelined {
		return rowDef{}, false
	}
	for _, r := range rows(d) {
		if r.Name == name {
			return r, true
		}
	}
	return rowDef{}, false
}

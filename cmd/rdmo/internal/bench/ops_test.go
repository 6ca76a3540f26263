package bench

import (
	"slices"
	"testing"
)

// TestShortOps runs the op-pack rows in the DPU picture with two
// initiators and two value sizes, RDMO rows inside a Drive and with Call
// (the /call twins): every call's answer and every native
// access's is checked against the layout the target made for the round,
// and the target checks its memory after every round. No timing is
// asserted.
func TestShortOps(t *testing.T) {
	o := DefaultOptions()
	o.Topology = TopologyDPU
	o.Initiators = 2
	o.Sizes = []int{8, 200}
	o.Modes = []string{"chase/1", "chase/4", "chase/4/call", "native-chase/1", "native-chase/4", "kv-lookup", "native-kv-lookup", "fetch-add", "fetch-add/call", "native-fetch-add",
		"chase/4/pipelined", "native-chase/4/pipelined"}
	o.Window = 8             // the pipelined rows keep 8 chases in flight
	o.MaxOps = 2 * kvKeysPer // every key twice; fewer than --short's default, for a loaded machine
	rep := runShort(t, o)
	for _, size := range o.Sizes {
		for _, m := range []string{"chase/1", "chase/4", "chase/4/call", ModeKVLookup, ModeFetchAdd, "fetch-add/call", "chase/4/pipelined"} {
			row := rep.Row(m, size)
			if row == nil || row.XNative == 0 || row.LatXNative == 0 {
				t.Errorf("%s %d B: no ratios to its native row: %+v", m, size, row)
			}
		}
	}
}

func TestOpsModes(t *testing.T) {
	got, err := expandModes([]string{"ops"}, nil)
	want := []string{"chase/1", "chase/1/call", "native-chase/1", "chase/2", "chase/2/call", "native-chase/2",
		"chase/4", "chase/4/call", "native-chase/4", "chase/8", "chase/8/call", "native-chase/8",
		ModeKVLookup, "kv-lookup/call", ModeNativeKVLookup, ModeFetchAdd, "fetch-add/call", ModeNativeFetchAdd,
		"chase/4/pipelined", "native-chase/4/pipelined", ModeFetchAddPipelined}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("ops: got %v %v, want %v", got, err, want)
	}
	got, err = expandModes([]string{"chase/3", "native-chase/16", "fetch-add"}, nil)
	want = []string{"chase/3", "native-chase/16", ModeFetchAdd}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("got %v %v, want %v", got, err, want)
	}
	got, err = expandModes([]string{"chase/3/call", "kv-lookup/call"}, nil)
	want = []string{"chase/3/call", "kv-lookup/call"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("got %v %v, want %v", got, err, want)
	}
	if all, _ := expandModes(nil, []int{1}); slices.ContainsFunc(all, func(m string) bool { return mustRow(m).hasGroup("ops") }) {
		t.Errorf("the default rows include op-pack rows: %v", all)
	}
	got, err = expandModes([]string{"chase/2/pipelined", "native-chase/2/pipelined"}, nil)
	want = []string{"chase/2/pipelined", "native-chase/2/pipelined"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("got %v %v, want %v", got, err, want)
	}
	for m, n := range map[string]string{"chase/4/pipelined": "native-chase/4/pipelined", "chase/4": "native-chase/4", "chase/4/call": "native-chase/4"} {
		if got := mustRow(m).Baseline; got != n {
			t.Errorf("%s's baseline is %q, want %q", m, got, n)
		}
	}
	for _, bad := range []string{"chase/0", "chase/17", "native-chase/x", "native-chase/4/call", "chase/4/call/pipelined", "chase/4/pipelined/call"} {
		if _, err := expandModes([]string{bad}, nil); err == nil {
			t.Errorf("mode %q accepted", bad)
		}
	}
	for m, s := range map[string]string{"chase/4": "owned", "chase/4/call": "owned", "chase/4/pipelined": "owned", "native-chase/4/pipelined": "", "native-chase/4": "", ModeKVLookup: "owned", "fetch-add/call": "owned", ModeNativeFetchAdd: ""} {
		if got := mustRow(m).Strategy; got != s {
			t.Errorf("%s's strategy is %q, want %q", m, got, s)
		}
	}
}

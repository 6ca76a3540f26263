package bench

import (
	"fmt"
	"io"
)

// The report of the rows with a Baseline row (the op-pack rows, read
// against the native accesses that give the same answer) and of the rows
// made of others.

// baselineRatios sets a row's ratios to its Baseline row.
func (r *Report) baselineRatios(row *Row) {
	def, ok := rowByName(row.Mode)
	if !ok || def.Baseline == "" {
		return
	}
	nr := r.Row(def.Baseline, row.Size)
	if nr == nil {
		return
	}
	if nr.Rate > 0 {
		row.XNative = row.Rate / nr.Rate
	}
	if nr.P50 > 0 {
		row.LatXNative = float64(row.P50) / float64(nr.P50)
	}
}

// writeBaselineGoals prints the goals of the rows against their Baseline
// (docs/BENCHMARKS.md), the op-pack notes, and what mixed rows are made of.
func (r *Report) writeBaselineGoals(w io.Writer) {
	isOps := func(d *rowDef) bool { return d.hasGroup("ops") }
	if r.Topology == TopologyDPU && r.hasRow(func(d *rowDef) bool { return d.Name == ModeNativeFetchAdd }) {
		fmt.Fprintf(w, "note: %s over tcp is emulated by the target process's progress (UCX has no tcp atomics): its CPU, where an RDMA NIC does it in hardware.\n", ModeNativeFetchAdd)
	}
	if r.hasRow(func(d *rowDef) bool { return isOps(d) && d.Strategy != "" }) {
		fmt.Fprintf(w, "note: chase/D, %s and %s call inside initiator.Drive (the calls run on the Initiator's progress loop thread, as the native rows progress UCX on the caller's); their %s twins call with Initiator.Call from a goroutine of their own.\n", ModeKVLookup, ModeFetchAdd, opsCallSuffix)
	}
	if r.Topology == TopologySHM && r.hasRow(isOps) {
		fmt.Fprintf(w, "note: on shm a native access is a memory copy by the initiator's own UCX: no round trip for an RDMO call to save.\n")
	}
	for i := range r.Rows {
		row := &r.Rows[i]
		def, ok := rowByName(row.Mode)
		if !ok || row.Error != "" {
			continue
		}
		if len(def.MadeOf) > 0 {
			fmt.Fprintf(w, "%s: made of the operations of %s; a change that speeds those up and slows this row down is a regression.\n", row.Mode, joinRows(def.MadeOf))
		}
		if def.Baseline == "" || def.Goal == nil || row.LatXNative == 0 {
			continue
		}
		nr := r.Row(def.Baseline, row.Size)
		g := def.Goal
		what, v := fmt.Sprintf("%d B: %s p50 / %s p50", row.Size, row.Mode, def.Baseline), row.LatXNative
		if g.Rate {
			what, v = fmt.Sprintf("%d B: %s rate / %s rate", row.Size, row.Mode, def.Baseline), row.XNative
		}
		r.goal(w, what, v, g.Kind, g.Want, g.Note, row, nr)
	}
}

func joinRows(names []string) string {
	s := ""
	for i, n := range names {
		switch {
		case i == 0:
		case i == len(names)-1:
			s += " and "
		default:
			s += ", "
		}
		s += n
	}
	return s
}

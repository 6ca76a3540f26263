package bench

import (
	"errors"
	"github.com/openrdmo/rdmo/cmd/rdmo/internal/demo"
	"slices"
	"time"
)

// The rows' Setup functions: the driver has the target prepare its memory
// for a round (rowDef.Setup) and puts what the initiators need into the
// round's spec.

// setupQueue has the target reset the row's queue (registered with the
// row's worker, if it has one).
func setupQueue(d *driver, rs *rowState, spec *roundSpec) error {
	return queueRound(d, rs, spec, false)
}

// setupColdQueue is setupQueue on a fresh registration
// (rdmo-append/owned/cold, queue.go).
func setupColdQueue(d *driver, rs *rowState, spec *roundSpec) error {
	return queueRound(d, rs, spec, true)
}

func queueRound(d *driver, rs *rowState, spec *roundSpec, cold bool) error {
	err := d.target.call("queue", targetReq{Bytes: d.o.QueueBytes, Strategy: rs.def.worker(), Cold: cold, Populate: d.o.Populate}, "QUEUE", &spec.Queue, time.Minute)
	if err == nil && spec.Queue.Pages != "" {
		rs.row.Pages = spec.Queue.Pages
	}
	return err
}

// setupScatter has the target make the scatter region once (registered
// with the row's worker) and places the round's chunks in it.
func setupScatter(d *driver, rs *rowState, spec *roundSpec) error {
	if rs.scat.Base == 0 {
		req := targetReq{Bytes: int(rs.layout.area()) * d.o.Initiators, Strategy: rs.def.worker()}
		if err := d.target.call("sregion", req, "SREGION", &rs.scat, time.Minute); err != nil {
			return err
		}
	}
	spec.Scatter = rs.scat
	spec.Layout.Base = rs.scat.Base
	return nil
}

// setupOps has the target lay a round of an op-pack row out and puts the
// answers into the round's spec.
func setupOps(d *driver, rs *rowState, spec *roundSpec) error {
	req := opsLayoutReq{Round: spec.Round, Initiators: d.o.Initiators, ValueSize: kvValueSize(spec.Size)}
	if w := rs.def.worker(); d.workers[w] != nil {
		req.Strategy = w
	} else if d.workers["owned"] != nil {
		req.Strategy = "owned"
	}
	for _, s := range d.o.Sizes {
		if vs := kvValueSize(s); !slices.Contains(req.ValueSizes, vs) {
			req.ValueSizes = append(req.ValueSizes, vs)
		}
	}
	var sp opsSpec
	if err := d.target.call("ops-layout", req, "OPS", &sp, time.Minute); err != nil {
		return err
	}
	if rs.def.Strategy != "" && sp.Region == 0 {
		return errors.New("the op-pack region is not registered with the worker")
	}
	spec.Ops = &sp
	return nil
}

// Workload rounds: the first one's operations per initiator, and the bounds
// of the later ones (sized from the last round's rate to last about an
// interval: the target allocates the regions for all of them).
const (
	workloadFirstOps = 32 << 10
	workloadMinOps   = 4 << 10
	workloadMaxOps   = 1 << 20
)

// setupWorkload sizes the round (at most spec.MaxOps operations per
// initiator), gives each initiator its seed, and has the target make and
// register each one's queue and scatter region for that many operations.
func setupWorkload(d *driver, rs *rowState, spec *roundSpec) error {
	if spec.MaxOps == 0 {
		spec.MaxOps = workloadFirstOps
		if rs.last > 0 && spec.Duration > 0 {
			perInit := rs.last / float64(d.o.Initiators)
			spec.MaxOps = min(max(int(perInit*spec.Duration.Seconds()*1.5), workloadMinOps), workloadMaxOps)
		}
	}
	w := &workloadSpec{FlushEvery: demo.DefaultFlushEvery}
	for i := 0; i < d.o.Initiators; i++ {
		w.Seeds = append(w.Seeds, d.o.Seed+uint64(spec.Round)<<8+uint64(i))
	}
	req := workloadReq{Strategy: rs.def.worker(), Ops: uint64(spec.MaxOps), Seeds: w.Seeds, FlushEvery: w.FlushEvery}
	var regs workloadRegions
	if err := d.target.call("workload", req, "WORKLOAD", &regs, 2*time.Minute); err != nil {
		return err
	}
	w.Queues, w.Scatters = regs.Queues, regs.Scatters
	spec.Workload = w
	return nil
}

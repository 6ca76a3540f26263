package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/demo"
	"github.com/openrdmo/rdmo/host/oob"
	"github.com/openrdmo/rdmo/ucp"
)

// The workload row's target side: a queue and a scatter region per
// initiator, sized for the round's operations, made afresh (zeroed, tail
// reset, registered with the worker) every round, and checked byte for
// byte with the demo server's verifier.

// workloadReq asks the target for a workload round's regions.
type workloadReq struct {
	Strategy   string   `json:"strategy"`
	Ops        uint64   `json:"ops"`   // operations per initiator, at most
	Seeds      []uint64 `json:"seeds"` // per initiator
	FlushEvery uint64   `json:"flush_every"`
}

// workloadRegions are the regions of a workload round, per initiator.
type workloadRegions struct {
	Queues   []queueInfo `json:"queues"`
	Scatters []queueInfo `json:"scatters"`
}

// workloadTarget is the target's workload memory.
type workloadTarget struct {
	queues, scats []*ucp.Memory
	regs          []uint64 // region ids with ws
	ws            *workerState
	req           workloadReq
}

func (req workloadReq) workload(i int, ops uint64) oob.Workload {
	return oob.Workload{Kind: demo.WorkloadKind, Ops: ops, Seed: req.Seeds[i], FlushEvery: req.FlushEvery}
}

// workloadSetup deregisters the last round's regions, (re)makes them for
// this round, zeroed with their tails reset, and registers them.
func (t *benchTarget) workloadSetup(ctx context.Context, req workloadReq) (workloadRegions, error) {
	w := &t.wl
	if err := t.workloadDereg(ctx); err != nil {
		return workloadRegions{}, err
	}
	ws := t.workers[req.Strategy]
	if ws == nil {
		return workloadRegions{}, fmt.Errorf("workload: no worker with the %q strategy", req.Strategy)
	}
	if len(req.Seeds) < 1 || len(req.Seeds) > maxInitiators || req.FlushEvery == 0 {
		return workloadRegions{}, fmt.Errorf("workload: %d seeds, a flush every %d", len(req.Seeds), req.FlushEvery)
	}
	grow := func(ms []*ucp.Memory, i, n int) ([]*ucp.Memory, error) {
		for len(ms) <= i {
			ms = append(ms, nil)
		}
		if ms[i] != nil && ms[i].Len() < n {
			ms[i].Close()
			ms[i] = nil
		}
		if ms[i] == nil {
			m, err := t.uctx.Allocate(n)
			if err != nil {
				return ms, fmt.Errorf("workload: allocate %d bytes: %w", n, err)
			}
			ms[i] = m
		}
		clear(ms[i].Bytes())
		return ms, nil
	}
	var out workloadRegions
	w.ws, w.req = ws, req
	for i := range req.Seeds {
		qn, sn := demo.WorkloadRegions(req.workload(i, req.Ops))
		var err error
		if w.queues, err = grow(w.queues, i, qn); err != nil {
			return out, err
		}
		if w.scats, err = grow(w.scats, i, sn); err != nil {
			return out, err
		}
		q := w.queues[i]
		binary.LittleEndian.PutUint64(q.Bytes(), q.Address()+8)
		for _, m := range []*ucp.Memory{q, w.scats[i]} {
			reg, err := ws.tg.Register(ctx, m)
			if err != nil {
				return out, err
			}
			w.regs = append(w.regs, reg.ID)
			info := queueInfo{Region: reg.ID, Base: reg.Base, Len: reg.Len, Rkey: reg.Rkey}
			if m == q {
				out.Queues = append(out.Queues, info)
			} else {
				out.Scatters = append(out.Scatters, info)
			}
		}
	}
	return out, nil
}

// workloadDereg deregisters the workload regions (which writes a cached
// tail back and has the worker forget it, before the target resets it).
func (t *benchTarget) workloadDereg(ctx context.Context) error {
	w := &t.wl
	var errs []error
	if w.ws != nil && t.workers[w.ws.strategy] == w.ws {
		for _, id := range w.regs {
			errs = append(errs, w.ws.tg.Deregister(ctx, id))
		}
	}
	w.regs, w.ws = nil, nil
	return errors.Join(errs...)
}

// checkWorkloadRow checks every initiator's regions after the round's
// final flush with the demo server's verifier: its req.Counts[i]
// operations, every byte of them, and nothing else written.
func checkWorkloadRow(t *benchTarget, req targetReq) error {
	w := &t.wl
	if w.ws == nil || len(req.Counts) != len(w.req.Seeds) {
		return fmt.Errorf("check: no workload regions for %d initiators", len(req.Counts))
	}
	for i, n := range req.Counts {
		if n > w.req.Ops {
			return fmt.Errorf("initiator %d reports %d operations; its regions hold %d", i, n, w.req.Ops)
		}
		q := w.queues[i]
		if _, err := demo.VerifyWorkload(w.req.workload(i, n), q.Bytes(), q.Address(), w.scats[i].Bytes()); err != nil {
			return fmt.Errorf("initiator %d: %w", i, err)
		}
	}
	return nil
}

// handleWorkload serves the target's workload command.
func (t *benchTarget) handleWorkload(ctx context.Context, ls *lineServer, body []byte) error {
	var req workloadReq
	if err := json.Unmarshal(body, &req); err != nil {
		return err
	}
	regs, err := t.workloadSetup(ctx, req)
	if err != nil {
		return err
	}
	ls.reply("WORKLOAD", regs)
	return nil
}

func (t *benchTarget) workloadClose() {
	for _, m := range append(t.wl.queues, t.wl.scats...) {
		if m != nil {
			m.Close()
		}
	}
	t.wl = workloadTarget{}
}

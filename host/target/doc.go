// Package target is the target side of RDMO as a library: it gets an RDMO
// worker from a UROM service (one it dials, or one it starts as its own
// child process), registers the target as a client (CLIENT_INIT), registers
// its memory (MR_REG / MR_DEREG), opens request queues for initiators
// (RQ_CREATE / RQ_DESTROY), and tears all of it down in order.
//
// A Target is one RDMO worker and this process's client on it:
//
//	local, _ := target.NewLocal(target.LocalOptions{})   // the memory's UCX
//	mem, _ := local.Allocate(1 << 20)
//	local.Start()
//	t, err := target.New(ctx, target.Options{ServiceAddress: "dpu:7000", Address: local.Address()})
//	region, _ := t.Register(ctx, mem)                      // MR_REG
//	rq, _ := t.CreateRQ(ctx, initiatorAddress)             // RQ_CREATE
//	// hand t.WorkerAddress(), region.ID to the initiator out of band
//	t.Close()                                              // RQ_DESTROY, MR_DEREG, stop
//	local.Close()                                          // only once no worker writes
//
// RegisterWith(ctx, mem, RegisterOptions{Populate: true}) registers memory
// whose page faults are paid at MR_REG rather than by the first appends
// into each page (docs/benchmarks/large-payloads.md).
//
// Several Targets may share one Service (Options.Service): each spawns its
// own worker there. Commands fail fast once the worker or the embedded
// service is gone (Done, Err). The command layer is described in
// docs/PROTOCOL.md and docs/ARCHITECTURE.md.
package target

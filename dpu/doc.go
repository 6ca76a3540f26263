// Package dpu is the RDMO worker component: the part of an RDMO worker
// (on a DPU, or on spare cores of the host) that owns a UCP worker, takes
// the control commands of its clients (CLIENT_INIT, RQ_CREATE, RQ_DESTROY,
// MR_REG, MR_DEREG), receives RDMO requests from initiators as UCP active
// messages, and runs them with operation handlers against the clients'
// registered memory.
//
// A Worker has one goroutine that owns every UCX object (the loop) and one
// executor goroutine per client that runs the handlers, so handlers need no
// per-client locking and different clients run in parallel. Commands reach
// the loop through Do; handlers reach UCX through the rdmo.Target they are
// given, which checks every address against the client's regions first.
//
// Requests of one request queue start in arrival order; a FENCE request
// (every FLUSH) starts after every earlier one completed. A request that
// fails completes at once with its status, is answered with an ack if it
// asked for one, and is reported in the next flush response, so a failure
// never blocks a later FLUSH. See docs/ARCHITECTURE.md ("dpu", "How a
// request flows", "Who owns which state") for the goroutines, queues and
// ownership, and docs/PROTOCOL.md for the wire.
//
// Words, one meaning each in this package (docs/ARCHITECTURE.md,
// "Glossary"): "worker" is the engine, a Worker; the UCX worker it owns is
// always called the UCP worker (ucp.Worker), and the OS process that runs
// a Worker the process. "target" is a client's process, whose memory the
// operations touch; what a handler is given of it is the handler's view
// (rdmo.Target, implemented by handlerView). "batch" is a run of one
// request queue's requests handed to one HandleBatch call (batch,
// Config.MaxBatch, Stats.Batches); a BATCH request of the wire is a
// container, and its requests are inner requests.
package dpu

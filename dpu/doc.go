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
package dpu

// Package initiator sends RDMO requests to one RDMO worker for one client.
//
// An Initiator owns a UCP worker, one endpoint to the RDMO worker's address
// and one goroutine (locked to its OS thread) that is the only one to touch
// them, as package ucp requires. Every public method may be called from any
// goroutine.
//
// # Data path
//
// A call (Append, Scatter, User, FlushAsync) encodes the request header with
// the rdmo codec and copies the caller's payload into a coalescing queue, so
// the caller may reuse its buffers as soon as the call returns. Producers
// append under one mutex; the progress loop takes the whole batch at once
// and turns it into ucp SendAM calls (AM id 0, ucp.SendReply), which ucp
// issues in one cgo crossing at the next Progress. The progress loop polls
// for a short while when it runs out of work and then sleeps in
// ucp.Worker.Wait; a producer calls ucp.Worker.Wake only when it puts the
// first request into an empty queue while the progress loop sleeps, so a
// busy stream of requests costs no system calls. While a stream's producers
// outrun the loop, the loop parks and they send what they queued
// themselves, a round every 64 requests (and wait for window space or
// credits by running rounds), so the stream crosses no thread in the
// initiator (stream.go).
//
// # Large payloads: lent, and read in place
//
// AppendLent (and UserLent, for a plugin op) sends from the caller's
// buffer without copying it; its Lend says when the buffer is the caller's
// again. With Options.Lend (only
// against a worker that advertises wire.CapabilityLend), a buffer inside a
// LendPool (NewLendPool: memory UCX allocates) and longer than
// Options.RendezvousThreshold is not even sent where the worker maps the
// pool, as over shared memory on one host: the request carries a 24-byte
// reference, the worker's handler copies the bytes once
// from the pool into target memory, and the Lend returns with the worker's
// ack. Where the worker cannot map the pool (TCP, another host) the same
// calls lend by value. docs/PROTOCOL.md section 13.
//
// # Results
//
// Call and CallAsync send a plugin operation with rdmo.FlagAck and return
// the worker's answer: status, value, up to rdmo.MaxResultData bytes of
// result data and, for a failure, the handler's detail (a worker that
// advertises wire.CapabilityResult; docs/PROTOCOL.md section 6.4). A
// failed Call is reported to its caller, not on Errors.
//
// # Drive
//
// Drive(ctx, fn) runs fn on the progress loop's goroutine, and a Driver's
// Call, CallAsync, Wait and Flush inside fn wait by running the loop
// themselves instead of handing the request to it and being handed the
// answer back: a dependent conversation (Call, look at the result, Call
// again) then costs no thread hand-off per call and no third thread
// polling for the answer, the way a UCX program that progresses its worker
// on its own thread works. The requests and answers are those of Call.
// The cost is that fn holds the loop between Driver calls: other
// goroutines' requests on the Initiator are served only while fn is in a
// Driver call, so fn must not block or compute long between calls.
//
// # Aggregation
//
// With Options.Aggregate (only against a worker that advertises
// wire.CapabilityBatch), the progress loop packs runs of small requests
// into BATCH containers, several requests per active message, when it took
// several requests at once (they queued up while it was busy with earlier
// sends); a request taken alone, as on an idle connection, still goes out
// at once as a plain request. Everything else (sequence numbers, acks, flushes, FENCE, the
// window, ordering) stays per request. docs/PROTOCOL.md section 11.
// Containers hold up to 8 KiB, or 60 KiB with Options.LargeBatches (only
// against a worker that advertises wire.CapabilityLargeBatch, whose UCX
// shared-memory segments take such a message in one piece; section 11.8).
//
// The answers travel the same way with Options.GroupAcks (only against a
// worker that advertises wire.CapabilityAckGroup): the acks of a batch
// the worker completed come in one ACK group, which over TCP saves a
// system call per answer on each side; each still completes its own call,
// in order. AggregateSupported, LargeBatchSupported and AckGroupSupported read the
// capabilities a target got from its worker (host/target
// Target.WorkerCapabilities). docs/PROTOCOL.md section 14.
//
// # Send window
//
// Memory is bounded: at most Options.Window requests may be queued, in
// flight (not yet locally complete) or awaiting an answer (a flush response,
// or the ack of a request sent with rdmo.FlagAck), and at most
// Options.WindowBytes bytes of headers and payloads may be queued or in
// flight. A call that finds the window full blocks until it has room, its
// context ends, the Initiator is closed or the peer fails.
//
// # Flow control
//
// The window frees a request's slot when its send completes locally, which
// says nothing about the worker: our worker holds a request until it
// completes and refuses requests past its in-flight limit per request queue
// (wire.DefaultMaxInFlightPerRQ unless configured). Options.Credits keeps
// the requests sent and not known to be complete below that limit. A
// fenced FLUSH is answered only once every request before it completed, so
// its answer confirms them; when half the credits went out since the last
// FLUSH (the caller's or its own) the Initiator queues a fenced FLUSH of
// its own, and a call that would exceed the credits waits, like a call
// that finds the window full. One credit is kept back so that a waiting
// call can always queue the flush that returns credits: flow control never
// waits for a flush nobody sent. Failures reported to its own flushes are
// added to the next Flush's report (Stats.CreditFlushes, CreditWaits).
//
// # Flushes and failures
//
// Flush sends FLUSH with rdmo.FlagFence and a fresh flush id and waits for
// the response carrying that id; any other message is not a flush
// completion (the reference initiator's defect 5). When the worker reports
// failed requests in the response, Flush returns an error that matches the
// first failure's status (errors.Is(err, rdmo.ErrOutOfBounds)).
//
// Requests sent with rdmo.FlagAck (Options.Ack, or Sender from With) are
// answered one by one; the answer is matched by the request's arrival
// sequence number, which the Initiator predicts by counting what it sends on
// its one endpoint. Failed acks are delivered on Errors and counted in Stats.
//
// When the endpoint fails (UCX reports the peer gone, or the layer above
// calls PeerFailed because the transport cannot detect it), every pending
// and later call returns an error matching ucp.ErrPeerFailed.
package initiator

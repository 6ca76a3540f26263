// Package demo is the rdmo binary's demo of NVIDIA DOCA's doca_urom_rdmo:
// the target (-m server) and the initiator (-m client), built on the host
// libraries (host/target, host/initiator, host/oob).
//
//   - RunServer (-m server) is the target: it owns memory, gets an RDMO
//     worker from a UROM service (--urom, or one it starts from its own
//     binary), registers its regions, and hands the worker's address to one
//     initiator over the out-of-band channel (package oob). When the
//     initiator reports Done, after its final flush returned, the target
//     checks its memory byte for byte and answers Verified. It never polls
//     its memory to learn that work is done.
//   - RunClient (-m client) is the initiator: it runs the seed flow of the
//     reference demo (an 8-byte append, flush, barrier, 16 scattered 8-byte
//     chunks, flush), then a workload both sides derive from a seed the
//     target chose (mixed-size appends of self-describing records and
//     scatters, flushed periodically), and succeeds only when the target
//     verified every byte.
//
// Every failure ends both sides with a clear error and no process left
// behind: the out-of-band connection closing tells each side the other is
// gone (the client then fails its initiator with PeerFailed, as UCX over
// shared memory cannot notice), a dead worker or embedded service ends the
// server, and an interrupt tears everything down in order (RQ_DESTROY,
// MR_DEREG, worker stop, embedded service stop, target memory).
package demo

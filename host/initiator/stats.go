package initiator

import "sync/atomic"

// Stats are the Initiator's counters since New. Requests count when they
// are handed to UCX (issued), not when they are queued.
type Stats struct {
	Appends  uint64 // APPEND requests issued
	Scatters uint64 // SCATTER requests issued
	UserOps  uint64 // plugin (user op) requests issued
	Flushes  uint64 // FLUSH requests issued

	HeaderBytes  uint64 // AM header bytes issued
	PayloadBytes uint64 // AM payload bytes issued
	Rendezvous   uint64 // requests issued with the rendezvous protocol

	// Messages counts the active messages issued: a plain request, or a
	// BATCH container carrying several (Options.Aggregate). Containers
	// counts the containers and Aggregated the requests they carried.
	Messages   uint64
	Containers uint64
	Aggregated uint64

	FlushesDone uint64 // flush responses matched to an outstanding flush
	// FailuresReported sums the failed-request counts of the flush
	// responses received (the worker's own count of failed requests).
	FailuresReported uint64
	Acks             uint64 // acks matched to an acked request
	AckGroups        uint64 // ACK groups received (Options.GroupAcks)
	AckFailures      uint64 // matched acks with a non-OK status
	ErrorsDropped    uint64 // ack failures not delivered because Errors() was full

	// UnknownResponses counts well-formed responses that match nothing
	// outstanding (a stale or foreign flush id, an unexpected ack seq).
	UnknownResponses uint64
	// MalformedResponses counts messages that do not decode as responses.
	MalformedResponses uint64
	SendErrors         uint64 // sends UCX failed (locally or at completion)

	WindowWaits uint64 // calls that found the send window full and waited
	// CreditWaits counts calls that waited for flow-control credits (see
	// Options.Credits), CreditFlushes the FLUSHes flow control queued.
	CreditWaits   uint64
	CreditFlushes uint64
	Batches       uint64 // batches the progress loop took from the queue
	Wakes         uint64 // ucp.Worker.Wake calls made by producers
	Sleeps        uint64 // times the progress loop slept in ucp.Worker.Wait
	Drives        uint64 // Drives whose fn ran on the progress loop
	// Borrows counts the Flushes and Calls whose caller ran the progress
	// loop's rounds itself while it waited (borrow.go); HandOvers the
	// times the loop parked for a waiting caller.
	Borrows   uint64
	HandOvers uint64
	// StreamRounds counts the progress loop's rounds that a stream's
	// producers ran while the loop was parked for them (stream.go).
	StreamRounds uint64
}

type counters struct {
	appends, scatters, userOps, flushes     atomic.Uint64
	headerBytes, payloadBytes, rendezvous   atomic.Uint64
	messages, containers, aggregated        atomic.Uint64
	flushesDone, failuresReported           atomic.Uint64
	acks, ackFailures, errorsDropped        atomic.Uint64
	ackGroups                               atomic.Uint64
	unknownResponses, malformed, sendErrors atomic.Uint64
	windowWaits, batches, wakes, sleeps     atomic.Uint64
	creditWaits, creditFlushes, drives      atomic.Uint64
	borrows, handOvers, streamRounds        atomic.Uint64
}

// batchCounts accumulates per-batch counts on the progress loop, so a
// batch of thousands of requests costs a handful of atomic adds.
type batchCounts struct {
	appends, scatters, userOps, flushes   uint64
	headerBytes, payloadBytes, rendezvous uint64
	messages, containers, aggregated      uint64
}

func (c *counters) add(b *batchCounts) {
	if b.appends != 0 {
		c.appends.Add(b.appends)
	}
	if b.scatters != 0 {
		c.scatters.Add(b.scatters)
	}
	if b.userOps != 0 {
		c.userOps.Add(b.userOps)
	}
	if b.flushes != 0 {
		c.flushes.Add(b.flushes)
	}
	if b.headerBytes != 0 {
		c.headerBytes.Add(b.headerBytes)
	}
	if b.payloadBytes != 0 {
		c.payloadBytes.Add(b.payloadBytes)
	}
	if b.rendezvous != 0 {
		c.rendezvous.Add(b.rendezvous)
	}
	if b.messages != 0 {
		c.messages.Add(b.messages)
	}
	if b.containers != 0 {
		c.containers.Add(b.containers)
		c.aggregated.Add(b.aggregated)
	}
	*b = batchCounts{}
}

func (c *counters) snapshot() Stats {
	return Stats{
		Appends:            c.appends.Load(),
		Scatters:           c.scatters.Load(),
		UserOps:            c.userOps.Load(),
		Flushes:            c.flushes.Load(),
		HeaderBytes:        c.headerBytes.Load(),
		PayloadBytes:       c.payloadBytes.Load(),
		Rendezvous:         c.rendezvous.Load(),
		Messages:           c.messages.Load(),
		Containers:         c.containers.Load(),
		Aggregated:         c.aggregated.Load(),
		FlushesDone:        c.flushesDone.Load(),
		FailuresReported:   c.failuresReported.Load(),
		Acks:               c.acks.Load(),
		AckGroups:          c.ackGroups.Load(),
		AckFailures:        c.ackFailures.Load(),
		ErrorsDropped:      c.errorsDropped.Load(),
		UnknownResponses:   c.unknownResponses.Load(),
		MalformedResponses: c.malformed.Load(),
		SendErrors:         c.sendErrors.Load(),
		WindowWaits:        c.windowWaits.Load(),
		CreditWaits:        c.creditWaits.Load(),
		CreditFlushes:      c.creditFlushes.Load(),
		Batches:            c.batches.Load(),
		Wakes:              c.wakes.Load(),
		Sleeps:             c.sleeps.Load(),
		Drives:             c.drives.Load(),
		Borrows:            c.borrows.Load(),
		HandOvers:          c.handOvers.Load(),
		StreamRounds:       c.streamRounds.Load(),
	}
}

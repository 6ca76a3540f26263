package command

import "github.com/openrdmo/rdmo/rdmo"

// BatchSizeBuckets is the number of buckets of Stats.BatchSizes: bucket i
// counts batches of 2^i .. 2^(i+1)-1 requests; the last bucket also counts
// everything larger.
const BatchSizeBuckets = 12

// Stats is a snapshot of the worker's counters. Every counter only grows,
// except the gauges (InFlight, Clients, RQs, Regions).
type Stats struct {
	// Requests counts the AMs that arrived on request queues, by op id
	// (failed ones included; one whose header is too short to name an op
	// counts only in Bytes and Failures). Bytes is their payload bytes.
	Requests map[uint32]uint64 `msgpack:"requests"`
	Bytes    uint64            `msgpack:"bytes"`
	// Dropped counts AMs that could not be answered: no reply endpoint,
	// not a request queue's endpoint, or a queue that is being destroyed.
	Dropped uint64 `msgpack:"dropped"`

	// Batches is the number of HandleBatch calls for requests, and
	// BatchedRequests the requests they carried.
	Batches         uint64                   `msgpack:"batches"`
	BatchedRequests uint64                   `msgpack:"batched_requests"`
	BatchSizes      [BatchSizeBuckets]uint64 `msgpack:"batch_sizes"`

	// Target operations issued by handlers.
	TargetPuts uint64 `msgpack:"target_puts"` // Puts through UCX
	MemcpyPuts uint64 `msgpack:"memcpy_puts"` // Puts copied through a mapping of target memory
	PutBytes   uint64 `msgpack:"put_bytes"`
	Places     uint64 `msgpack:"places"` // rendezvous payloads moved into target memory
	// AbandonedReceives counts rendezvous receives still under way when
	// their request queue closed (an initiator gone mid-rendezvous).
	AbandonedReceives uint64 `msgpack:"abandoned_receives"`
	Fetches           uint64 `msgpack:"fetches"`   // rendezvous payloads brought into worker memory
	Syncs             uint64 `msgpack:"syncs"`     // Sync calls
	SyncOps           uint64 `msgpack:"sync_ops"`  // their operations
	Fences            uint64 `msgpack:"fences"`    // Target.WriteBackAll calls
	Flushes           uint64 `msgpack:"flushes"`   // Target.Flush calls
	Readbacks         uint64 `msgpack:"readbacks"` // visibility reads after a flush
	HandlerPanics     uint64 `msgpack:"handler_panics"`
	// InlineBatches counts the batches (of Batches) that ran on the loop
	// instead of the client's executor (rdmo.HandlerInfo.Inline), and
	// CPUAtomics the Sync atomics done with the CPU's atomic instructions
	// on a mapping of target memory instead of through UCX.
	InlineBatches uint64 `msgpack:"inline_batches"`
	CPUAtomics    uint64 `msgpack:"cpu_atomics"`
	// ShmChecks counts the checks, each after a peer failed, that found
	// every shared-memory receive queue delivering (shmcheck.go).
	ShmChecks uint64 `msgpack:"shm_checks"`
	// ShmSlotsFilled counts the shared-memory FIFO slots the worker filled
	// for senders that died while writing them (dpu shmcheck.go,
	// docs/SECURITY.md finding 9).
	ShmSlotsFilled uint64 `msgpack:"shm_slots_filled"`

	// Answers sent.
	FlushResponses uint64 `msgpack:"flush_responses"`
	Acks           uint64 `msgpack:"acks"`
	// AckGroups counts the messages that carried acks in groups
	// (wire.CapabilityAckGroup); their acks count in Acks.
	AckGroups uint64 `msgpack:"ack_groups"`

	// Failures counts failed requests by status.
	Failures map[rdmo.Status]uint64 `msgpack:"failures"`

	// Latency is, by op id (OtherOp: user ops no handler serves), how
	// long requests that ran took from their message's arrival to their
	// completion (requests refused before they ran are not timed).
	Latency map[uint32]OpLatency `msgpack:"latency"`

	// Gauges.
	InFlight map[uint64]int64 `msgpack:"in_flight"` // accepted, not completed, by request queue (as of the worker's last container, request or batch completion on it)
	Clients  int              `msgpack:"clients"`
	RQs      int              `msgpack:"rqs"`
	Regions  int              `msgpack:"regions"`

	// OpNames names the registered user ops (OpLabel: "kv(38)"), for
	// logs and metrics.
	OpNames map[uint32]string `msgpack:"op_names"`
}

// LatencyBuckets is the number of buckets of an OpLatency: bucket 0
// counts requests that took less than 1 µs, bucket i (0 < i <
// LatencyBuckets-1) those from 2^(i-1) µs to less than 2^i µs, the last
// one everything slower (2^22 µs, about 4.2 s, and more).
const LatencyBuckets = 24

// OpLatency is one op's request latency histogram.
type OpLatency struct {
	Buckets [LatencyBuckets]uint64 `msgpack:"buckets"` // not cumulative
	SumNs   uint64                 `msgpack:"sum_ns"`
}

// Count is the number of requests timed.
func (l OpLatency) Count() uint64 {
	var n uint64
	for _, b := range l.Buckets {
		n += b
	}
	return n
}

// OtherOp is the key of Stats.Requests under which requests for user op
// ids no handler serves are counted.
const OtherOp = ^uint32(0)

// FlushEvent says how many FLUSHes of a request queue have completed and
// what the last one answered. It is how a target learns that an
// initiator's work is done and visible in its memory without polling that
// memory (an rdmo extension, docs/PROTOCOL.md "Extensions for reference
// peers": a reference initiator says nothing to its target after its
// flush, so the target asks the worker).
type FlushEvent struct {
	Client  uint64 `msgpack:"client"`
	RQ      uint64 `msgpack:"rq"`
	Flushes uint64 `msgpack:"flushes"` // FLUSHes completed on the queue so far
	// The last flush response: its flush id, and the failed requests it
	// reported (the first of them: op, status, sequence number).
	FlushID     uint64      `msgpack:"flush_id"`
	Failed      uint32      `msgpack:"failed"`
	FirstOp     uint32      `msgpack:"first_op,omitempty"`
	FirstStatus rdmo.Status `msgpack:"first_status,omitempty"`
	FirstSeq    uint64      `msgpack:"first_seq,omitempty"`
	// Failures is the sum of Failed over every flush of the queue.
	Failures uint64 `msgpack:"failures"`
}

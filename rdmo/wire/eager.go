package wire

// CapabilityLargeEager is the capability string of a worker that accepts
// eager payloads of MaxLargeEager bytes (its dpu.Config.MaxEagerPayload is
// at least that). An initiator that knows its worker has it may send
// appends and user ops up to that size eager where a rendezvous would cost
// more than it saves: on endpoints whose only transport is TCP, where UCX
// (with peer-failure detection) has no zero-copy lanes and a rendezvous
// adds a handshake to the same fragments (docs/benchmarks/large-payloads.md,
// "Eager over TCP").
const CapabilityLargeEager = "eager-512k-v1"

// MaxLargeEager is the largest payload an initiator sends eager to a
// worker with CapabilityLargeEager.
const MaxLargeEager = 512 << 10

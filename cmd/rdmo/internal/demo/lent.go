package demo

import (
	"context"

	"github.com/openrdmo/rdmo/host/initiator"
)

// The workload's large records, lent from a lend pool the worker reads in
// place: records above the initiator's rendezvous threshold, at most 1 of
// 100 operations but about half the bytes, then cost the initiator no copy
// and the worker one, instead of the initiator's copy into its own buffer
// and a rendezvous through the transport.

// ringSlots is how many large records may be lent at once. The large
// records come in bursts among small ones: with four slots the client
// waited for the worker's acks and ran 15-30% slower than with sixteen
// (docs/benchmarks/large-payloads.md, "A lend ring the caches hold").
const ringSlots = 16

// RecordRing is a ring of record slots in a LendPool.
type RecordRing struct {
	pool  *initiator.LendPool
	slots [][]byte
	lends []initiator.Lend
	next  int
}

// NewRecordRing allocates the ring from in's lend pool; nil (and no error)
// when the worker would not read it in place (TCP): the records then go by
// Append, copied. Without Options.Lend there is nothing to ask the worker:
// callers skip it (the pool would be allocated only to be freed).
func NewRecordRing(ctx context.Context, in *initiator.Initiator) (*RecordRing, error) {
	pool, err := in.NewLendPool(ctx, ringSlots*maxRecord)
	if err != nil {
		return nil, err
	}
	if !pool.ByReference() {
		return nil, pool.Close(ctx)
	}
	r := &RecordRing{pool: pool, slots: make([][]byte, ringSlots), lends: make([]initiator.Lend, ringSlots)}
	mem := pool.Bytes()
	for i := range r.slots {
		r.slots[i] = mem[i*maxRecord : (i+1)*maxRecord : (i+1)*maxRecord]
	}
	return r, nil
}

// Lends reports whether record sizes of n bytes go through the ring:
// those the initiator sends by reference.
func (r *RecordRing) Lends(n int) bool {
	return r != nil && n > initiator.DefaultRendezvousThreshold
}

// Append fills record seq of size bytes into the next slot (once the
// worker has read what the slot held) and appends it, lent, through s.
func (r *RecordRing) Append(ctx context.Context, s initiator.Sender, base, region uint64, seed uint64, seq uint32, size int) error {
	k := r.next
	r.next = (r.next + 1) % ringSlots
	if err := r.lends[k].Wait(ctx); err != nil {
		return err
	}
	_, err := s.AppendLent(base, region, region, fillRecord(r.slots[k], seed, seq, size), &r.lends[k])
	return err
}

// Close waits for the ring's loans and frees its pool.
func (r *RecordRing) Close(ctx context.Context) error {
	if r == nil {
		return nil
	}
	return r.pool.Close(ctx)
}

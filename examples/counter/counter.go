// Package counter is an example RDMO operation written only against the
// handler SDK: a remote fetch-and-add counter whose ack carries the value the
// counter had before, so an initiator gets a ticket number in one message.
//
// Wire: op id 16 (the first op id for plugins), flags must include
// rdmo.FlagAck to get the old value back; the 24-byte sub-header at offset
// 16 is addr u64 (the counter's target address, 8-byte aligned), region u64
// (the region id it lives in), delta u64.
package counter

import (
	"encoding/binary"
	"fmt"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// Name, Version and Op identify the operation.
const (
	Name    = "counter"
	Version = "1.0.0"
	Op      = rdmo.OpUserBase
	// SubHeaderLen is the length of the op's sub-header.
	SubHeaderLen = 24
)

// New returns the handler. It keeps no state: every increment is one remote
// atomic, so it is safe alongside any other writer of the counter.
func New() rdmo.Handler { return handler{} }

type handler struct{ rdmo.BaseHandler }

func (handler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: Name, Version: Version, Ops: []uint32{Op}, NoCachedState: true}
}

// Request encodes a counter request header for client: add delta to the
// counter at addr in region. (The arguments are in the SDK's order, region
// then address, as in rdmo.Target.Put; the wire order is the sub-header's.)
func Request(client uint64, region rdmo.RegionID, addr, delta uint64, flags uint32) []byte {
	sub := make([]byte, SubHeaderLen)
	binary.LittleEndian.PutUint64(sub[0:], addr)
	binary.LittleEndian.PutUint64(sub[8:], uint64(region))
	binary.LittleEndian.PutUint64(sub[16:], delta)
	hdr, _ := wire.AppendUserRequest(nil, wire.Header{ClientID: client, Op: Op, Flags: flags}, sub)
	return hdr
}

// Sub encodes the op's sub-header: add delta to the counter at addr in
// region (for initiator.Call).
func Sub(region rdmo.RegionID, addr, delta uint64) []byte {
	sub := make([]byte, SubHeaderLen)
	binary.LittleEndian.PutUint64(sub[0:], addr)
	binary.LittleEndian.PutUint64(sub[8:], uint64(region))
	binary.LittleEndian.PutUint64(sub[16:], delta)
	return sub
}

// HandleBatch runs every increment of the batch in one Sync, so a batch
// costs one round trip to target memory however many requests it holds.
func (handler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	ops := make([]rdmo.RemoteOp, 0, len(reqs))
	idx := make([]int, 0, len(reqs))
	for i := range reqs {
		// The worker checked the common header; the sub-header of a user
		// op is the handler's to check.
		sub := reqs[i].Sub
		switch {
		case len(sub) != SubHeaderLen:
			results[i] = rdmo.Fail(rdmo.StatusShortHeader, "counter sub-header is %d bytes, want %d", len(sub), SubHeaderLen)
			continue
		case reqs[i].Length != 0:
			results[i] = rdmo.Fail(rdmo.StatusPayloadMismatch, "counter requests carry no payload")
			continue
		}
		addr := binary.LittleEndian.Uint64(sub[0:])
		if addr%8 != 0 {
			results[i] = rdmo.Fail(rdmo.StatusOutOfBounds, "counter at %#x is not 8-byte aligned", addr)
			continue
		}
		ops = append(ops, rdmo.RemoteOp{
			Kind:    rdmo.RemoteFetchAdd,
			Region:  rdmo.RegionID(binary.LittleEndian.Uint64(sub[8:])),
			Addr:    addr,
			Operand: binary.LittleEndian.Uint64(sub[16:]),
		})
		idx = append(idx, i)
	}
	if len(ops) == 0 {
		return
	}
	if err := t.Sync(ops); err != nil {
		for _, i := range idx {
			results[i] = rdmo.ResultOf(fmt.Errorf("counter: %w", err))
		}
		return
	}
	for k, i := range idx {
		if ops[k].Status != rdmo.StatusOK {
			results[i] = rdmo.Result{Status: ops[k].Status, Detail: "counter fetch-add failed"}
			continue
		}
		results[i] = rdmo.Result{Value: ops[k].Result}
	}
}

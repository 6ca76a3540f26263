// Package host holds no code: its subpackages are the host-side libraries
// of rdmo, one job each.
//
//   - host/initiator sends RDMO requests (append, scatter, flush, ...) to an
//     RDMO worker over UCX.
//   - host/target gets an RDMO worker from a UROM service, registers the
//     target's memory with it and opens request queues for initiators.
//   - host/oob is the out-of-band channel on which a target hands its
//     worker's address and regions to an initiator.
//
// The rdmo binary's demo built on them is cmd/rdmo/internal/demo.
package host

//go:build knownbugs

package e2e_test

import "github.com/openrdmo/rdmo/ucp/ucptest"

// initiatorKillTransports includes shared memory, where UCX 1.13 aborts
// the worker when an initiator dies mid-rendezvous (see TestFaultInitiatorKilled).
func initiatorKillTransports() []ucptest.Transport { return ucptest.Transports }

//go:build !knownbugs

package e2e_test

import "github.com/openrdmo/rdmo/ucp/ucptest"

// initiatorKillTransports is TCP only until the shared-memory abort is
// fixed (see TestFaultInitiatorKilled; -tags knownbugs runs it).
func initiatorKillTransports() []ucptest.Transport { return ucptest.Transports[1:] }

package demo_test

import (
	"strings"
	"testing"

	"github.com/openrdmo/rdmo/internal/netns"
)

// Several hosts: the UROM service (embedded), the RDMO worker and the
// target in namespace A; the initiator in namespace B, speaking UCX over
// TCP on the veth link (UCX would otherwise use shared memory even across
// namespaces). The worker and the target keep shared memory between them.
// The same verification must pass.
func TestAcrossHosts(t *testing.T) {
	pair := netns.New(t)
	r := newRun(t)
	const port = "18515" // the default port, free in a fresh namespace
	server := r.start("server", nil, append(inNS(pair.A), "rdmo", "-m", "server", "-d", pair.A.Device, "--ops", "3000")...)
	waitOutput(t, server, "waiting for the initiator")
	client := r.start("client", pair.B.UCXEnv(),
		append(inNS(pair.B), "rdmo", "-m", "client", "-s", pair.A.Addr, "--oob-port", port, "-d", pair.B.Device)...)
	expectPass(t, server, client)
	if !strings.Contains(server.Stderr(), `initiator connected  {"from": "`+pair.B.Addr+`:`) {
		t.Errorf("the initiator did not connect from host B (%s)", pair.B.Addr)
	}
}

// inNS is the argv prefix that runs a command on host h.
func inNS(h netns.Host) []string { return []string{"ip", "netns", "exec", h.NS} }

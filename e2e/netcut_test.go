package e2e_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/internal/netns"
)

// The network between an initiator and the worker cut mid-stream: the
// worker and the target run in network namespace A, the initiator in B,
// over TCP on a veth pair. After Pair.Cut the initiator's Flush fails
// within a bounded time (UCX's keepalive, or the flush's deadline), and on
// the worker side the request queue is freed (endpoint error) or, when the
// target destroys it, RQ_DESTROY returns within the drain timeout: nothing
// hangs.
func TestFaultNetworkCut(t *testing.T) {
	p := netns.New(t)
	checkNoLeftoverProcesses(t)
	// Peer failure detection over a dead link: UCP keepalive and TCP
	// keepalive, shortened from their defaults (20 s, 10 s). Measured with
	// UCX 1.13: neither notices within 20 s while unacknowledged data sits
	// in the socket (TCP keepalive only probes idle connections; the
	// kernel's retransmission timeout is about 15 minutes), so it is the
	// flush's deadline that bounds the initiator's wait.
	keep := []string{"UCX_KEEPALIVE_INTERVAL=1s", "UCX_TCP_KEEPIDLE=1s", "UCX_TCP_KEEPINTVL=500ms"}
	const flushTimeout = 5 * time.Second
	tw := startChild(t, p.A.Command(os.Args[0], "-test.run=^$"),
		append(append([]string{"E2E_FAULT_ROLE=targetworker"}, p.A.UCXEnv()...), keep...)...)
	f := tw.must("READY", 30*time.Second)
	ld := startChild(t, p.B.Command(os.Args[0], "-test.run=^$"), append(append([]string{
		"E2E_FAULT_ROLE=loader", "E2E_WORKER=" + f[0], "E2E_CLIENT=" + f[1], "E2E_PTR=" + f[2], "E2E_REGION=" + f[3],
		fmt.Sprintf("E2E_FLUSH_TIMEOUT=%d", flushTimeout.Milliseconds())}, p.B.UCXEnv()...), keep...)...)
	addr := ld.must("ADDR", 30*time.Second)[0]
	tw.send("rq " + addr)
	rq := tw.must("RQ", 30*time.Second)[0]
	ld.send("go")
	for i := 0; i < 4; i++ {
		ld.must("FLUSHED", 30*time.Second)
	}
	tw.send("tail")
	t.Logf("%s bytes appended across the veth pair before the cut", tw.must("TAIL", 10*time.Second)[0])
	if err := p.Cut(); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	fail, err := ld.await("FAIL", flushTimeout+30*time.Second)
	if err != nil {
		t.Fatalf("the initiator across the cut: %v", err)
	}
	t.Logf("initiator failed %v after the cut: %s", time.Since(cut).Round(time.Millisecond), strings.Join(fail[1:], " "))
	freed := waitFor(5*time.Second, func() bool {
		tw.send("rqs")
		f, err := tw.await("RQS", 10*time.Second)
		return err == nil && f[0] == "0"
	})
	if freed {
		t.Logf("the worker freed the request queue by itself %v after the cut", time.Since(cut).Round(time.Millisecond))
	} else {
		tw.send("destroy " + rq)
		d := tw.must("DESTROYED", 30*time.Second)
		ms, _ := strconv.Atoi(d[0])
		if time.Duration(ms)*time.Millisecond > 2*time.Second+5*time.Second {
			t.Errorf("RQ_DESTROY across the cut took %d ms (drain timeout 2 s)", ms)
		}
		t.Logf("the worker did not notice within 5 s; RQ_DESTROY took %d ms: %s", ms, strings.Join(d[1:], " "))
	}
	tw.send("quit")
	if c, err := tw.await("CLOSED", time.Minute); err != nil {
		t.Errorf("worker close across the cut: %v", err)
	} else {
		t.Logf("worker closed in %s ms", c[0])
	}
	ld.send("quit")
	if c, err := ld.await("CLOSED", 30*time.Second); err != nil {
		t.Errorf("initiator close across the cut: %v", err)
	} else {
		t.Logf("initiator closed in %s ms", c[0])
	}
}

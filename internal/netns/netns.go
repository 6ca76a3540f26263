// Package netns makes test hosts out of Linux network namespaces: two
// namespaces joined by a veth pair with addresses of their own, so a test can
// run a program on each "host" and cut the wire between them.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/internal/testutil"
)

// Host is one end of a Pair.
type Host struct {
	NS     string // namespace name
	Device string // its veth device
	Addr   string // its IPv4 address
}

// Pair is two namespaced hosts on one veth link.
type Pair struct {
	A, B Host
}

// Available reports why namespaces cannot be made here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("the ip command (iproute2) is missing")
	}
	return nil
}

// New makes a pair for the test and removes it when the test ends. Outside
// CI a missing capability skips the test; in CI it fails it.
func New(t testing.TB) *Pair {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("required in CI: %v", err)
		}
		t.Skip(err)
	}
	var rnd [3]byte
	rand.Read(rnd[:])
	id := hex.EncodeToString(rnd[:])
	// A /24 of our own per pair, from the id, so parallel pairs differ.
	net := fmt.Sprintf("10.%d.%d", 200+int(rnd[0])%50, rnd[1])
	p := &Pair{
		A: Host{NS: "rdmo-" + id + "-a", Device: "rv" + id + "a", Addr: net + ".1"},
		B: Host{NS: "rdmo-" + id + "-b", Device: "rv" + id + "b", Addr: net + ".2"},
	}
	t.Cleanup(func() {
		run("ip", "netns", "del", p.A.NS)
		run("ip", "netns", "del", p.B.NS)
	})
	steps := [][]string{
		{"ip", "netns", "add", p.A.NS},
		{"ip", "netns", "add", p.B.NS},
		{"ip", "link", "add", p.A.Device, "type", "veth", "peer", "name", p.B.Device},
		{"ip", "link", "set", p.A.Device, "netns", p.A.NS},
		{"ip", "link", "set", p.B.Device, "netns", p.B.NS},
	}
	for _, h := range []Host{p.A, p.B} {
		steps = append(steps,
			[]string{"ip", "-n", h.NS, "addr", "add", h.Addr + "/24", "dev", h.Device},
			[]string{"ip", "-n", h.NS, "link", "set", h.Device, "up"},
			[]string{"ip", "-n", h.NS, "link", "set", "lo", "up"},
		)
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			t.Fatalf("netns set-up: %v", err)
		}
	}
	// A veth end set up is not yet running: its carrier comes when both
	// ends are up, asynchronously, and UCX opens TCP only on running
	// devices. A worker started before that (seen on a loaded machine) has
	// no TCP transport and every connection fails "Destination is
	// unreachable".
	for _, h := range []Host{p.A, p.B} {
		if !testutil.Poll(time.Now().Add(30*time.Second), h.running) {
			t.Fatalf("netns set-up: %s in %s not running after 30 s", h.Device, h.NS)
		}
	}
	return p
}

// running reports whether h's device is operationally up (carrier).
func (h Host) running() bool {
	out, err := exec.Command("ip", "-n", h.NS, "-o", "link", "show", "dev", h.Device).CombinedOutput()
	return err == nil && strings.Contains(string(out), "state UP")
}

func run(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Command runs argv on host h (inside its namespace).
func (h Host) Command(argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS}, argv...)...)
}

// UCXEnv is the environment that makes UCX on h use TCP over the veth link
// only. UCX would otherwise pick shared memory between namespaces of one
// kernel, and the test would not cross the network at all.
func (h Host) UCXEnv() []string {
	return []string{"UCX_TLS=tcp,self", "UCX_NET_DEVICES=" + h.Device, "UCX_WARN_UNUSED_ENV_VARS=n"}
}

// Cut takes the link down on both ends; Restore brings it back.
func (p *Pair) Cut() error {
	if err := run("ip", "-n", p.A.NS, "link", "set", p.A.Device, "down"); err != nil {
		return err
	}
	return run("ip", "-n", p.B.NS, "link", "set", p.B.Device, "down")
}

// Restore brings the link back up.
func (p *Pair) Restore() error {
	if err := run("ip", "-n", p.A.NS, "link", "set", p.A.Device, "up"); err != nil {
		return err
	}
	return run("ip", "-n", p.B.NS, "link", "set", p.B.Device, "up")
}

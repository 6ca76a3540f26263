package demo_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// writeDPUConfig writes an `rdmo dpu --config` file.
func writeDPUConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dpu.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// `rdmo dpu` with a small in-flight limit for its workers ("worker":
// {"max-in-flight-per-rq": 64} in its --config file): the worker tells the
// server (CLIENT_INIT), the server tells the client (WorkerInfo), and the
// client's flow control keeps within it, so a run of 2000 operations,
// flushed only every 128, passes with no TooManyInFlight (errors 0), where
// the default credits (1024) would overrun the worker.
func TestRemoteServiceWorkerLimits(t *testing.T) {
	r := newRun(t)
	addr := "127.0.0.1:" + freePort(t)
	conf := writeDPUConfig(t, fmt.Sprintf(`{
		"listen": %q,
		"worker": {"max-in-flight-per-rq": 64, "max-clients": 4},
	}`, addr))
	dpu := startDPU(r, addr, "--config", conf)
	waitOutput(t, dpu, `worker limits.*"max-in-flight-per-rq":"64"`)
	port := freePort(t)
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "2000", "--urom", addr)
	client := r.start("client", nil, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port)
	expectPass(t, server, client)
	if !regexp.MustCompile(`(?m)^\s+errors\s+0$`).MatchString(client.Stdout()) {
		t.Errorf("client reports errors:\n%s", client.Stdout())
	}
	if !strings.Contains(client.Stderr(), `"max_in_flight_per_rq": 64, "credits": 64`) {
		t.Errorf("client did not take its credits from the worker's limit:\n%s", tail(client.Stderr(), 3000))
	}
	if strings.Contains(output(server)+output(client)+output(dpu), "TooManyInFlight") {
		t.Errorf("a request met the worker's in-flight limit:\nserver:\n%s\nclient:\n%s", tail(output(server), 3000), tail(output(client), 3000))
	}
	stopDPU(t, dpu)
}

// A bad worker limit in the --config file stops `rdmo dpu` at once: exit
// status 2 and one line naming the key.
func TestDPUWorkerLimitsRefused(t *testing.T) {
	r := newRun(t)
	for _, tc := range []struct{ body, want string }{
		{`{"worker": {"max-in-flight-per-rq": -1}}`, `key "worker.max-in-flight-per-rq": invalid limit "-1"`},
		{`{"worker": {"max-in-flight": 64}}`, `unknown key "max-in-flight" in group "worker"`},
	} {
		conf := writeDPUConfig(t, tc.body)
		p := r.start("dpu", nil, "rdmo", "dpu", "--listen", "127.0.0.1:0", "--config", conf)
		if code := p.Wait(t, exitTimeout); code != 2 {
			t.Errorf("%s: exit %d, want 2\n%s", tc.body, code, output(p))
		}
		lines := strings.Split(strings.TrimSpace(p.Stderr()), "\n")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "rdmo: error: "+conf+":") || !strings.Contains(lines[0], tc.want) {
			t.Errorf("%s: stderr %q, want one line with %q", tc.body, p.Stderr(), tc.want)
		}
	}
}

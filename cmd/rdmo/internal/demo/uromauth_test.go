package demo_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/openrdmo/rdmo/internal/testproc"
	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/urom"
)

// startDPU runs `rdmo dpu args...` and waits until it listens on addr.
func startDPU(r *run, addr string, args ...string) *testproc.Proc {
	r.t.Helper()
	dpu := r.start("dpu", nil, append([]string{"rdmo", "dpu"}, args...)...)
	waitOutput(r.t, dpu, "UROM_LISTEN "+regexp.QuoteMeta(addr))
	return dpu
}

// stopDPU stops a service with SIGTERM, which is a clean exit.
func stopDPU(t *testing.T, dpu *testproc.Proc) {
	t.Helper()
	dpu.Signal(syscall.SIGTERM)
	if code := dpu.Wait(t, exitTimeout); code != 0 {
		t.Errorf("dpu exit %d after SIGTERM", code)
	}
}

// `rdmo dpu --secret-file` (here through its --config file): hosts with
// the same --secret-file are served (the plugin list, a whole server and
// client run through a worker of the service), hosts with another secret
// or none are refused with a clear error, and the service logs each
// refusal with the host's address and keeps serving.
func TestRemoteServiceSecret(t *testing.T) {
	r := newRun(t)
	secret, other := writeSecret(t, 0o600), writeSecret(t, 0o600)
	addr := "127.0.0.1:" + freePort(t)
	conf := filepath.Join(t.TempDir(), "dpu.json")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`{"listen": %q, "secret-file": %q}`, addr, secret)), 0o600); err != nil {
		t.Fatal(err)
	}
	dpu := startDPU(r, addr, "--config", conf)
	waitOutput(t, dpu, `UROM service listening .*"authenticates_hosts": true`)

	refused := regexp.MustCompile(`(?m)^rdmo: error: UROM service at ` + regexp.QuoteMeta(addr) +
		`: urom: authentication failed: .*\(the host's --secret-file and rdmo dpu --secret-file must hold the same secret\)$`)
	port := freePort(t)
	for _, tc := range []struct {
		name string
		argv []string
		want string
	}{
		{"plugins without a secret", []string{"rdmo", "plugins", "--urom", addr}, "the host has no secret configured"},
		{"plugins with another secret", []string{"rdmo", "plugins", "--urom", addr, "--secret-file", other}, "different secrets"},
		{"server with another secret", []string{"rdmo", "-m", "server", "--oob-port", port, "--ops", "100", "--urom", addr, "--secret-file", other}, "different secrets"},
	} {
		p := r.start(tc.name, nil, tc.argv...)
		if code := p.Wait(t, exitTimeout); code != 1 {
			t.Errorf("%s: exit %d, want 1", tc.name, code)
		}
		if !refused.MatchString(p.Stderr()) || !strings.Contains(p.Stderr(), tc.want) {
			t.Errorf("%s: no clear authentication error (%q):\n%s", tc.name, tc.want, p.Stderr())
		}
	}
	logged := regexp.MustCompile(`host refused: authentication failed\s+\{"peer": "127\.0\.0\.1:\d+", "reason": "authentication failed: `).
		FindAllString(dpu.Stderr(), -1)
	if len(logged) != 3 {
		t.Errorf("the service logged %d refusals with the host's address, want 3:\n%s", len(logged), dpu.Stderr())
	}

	pl := r.start("plugins", nil, "rdmo", "plugins", "--urom", addr, "--secret-file", secret)
	if code := pl.Wait(t, exitTimeout); code != 0 || !strings.Contains(pl.Stdout(), "of the UROM service at "+addr) {
		t.Errorf("plugins with the secret: exit %d\n%s", code, output(pl))
	}
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "500", "--urom", addr, "--secret-file", secret)
	client := r.start("client", nil, "rdmo", "-m", "client", "-s", "127.0.0.1", "--oob-port", port, "--secret-file", secret)
	expectPass(t, server, client)

	stopDPU(t, dpu)
}

// A host with --secret-file and a service without one: refused, not
// served unauthenticated.
func TestRemoteServiceWithoutSecret(t *testing.T) {
	r := newRun(t)
	secret := writeSecret(t, 0o600)
	addr := "127.0.0.1:" + freePort(t)
	dpu := startDPU(r, addr, "--listen", addr)
	port := freePort(t)
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", port, "--ops", "100", "--urom", addr, "--secret-file", secret)
	if code := server.Wait(t, exitTimeout); code != 1 {
		t.Errorf("server exit %d, want 1", code)
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: UROM service at .*authentication failed: .*this service has none configured \(rdmo dpu --secret-file\)`).MatchString(server.Stderr()) {
		t.Errorf("server: no clear authentication error:\n%s", server.Stderr())
	}
	if !strings.Contains(dpu.Stderr(), "host refused: authentication failed") {
		t.Errorf("the service did not log the refusal:\n%s", dpu.Stderr())
	}
	stopDPU(t, dpu)
}

// The embedded service of a server gets a random secret of the run on a
// pipe: it is not in the service's command line, and another local
// process that finds its loopback port cannot use it.
func TestEmbeddedServiceRequiresTheRunSecret(t *testing.T) {
	r := newRun(t)
	server := r.start("server", nil, "rdmo", "-m", "server", "--oob-port", freePort(t), "--ops", "100")
	m := waitOutput(t, server, `embedded UROM service started\s+\{"addr": "([0-9.:]+)", "pid": (\d+)`)
	cmdline, err := os.ReadFile("/proc/" + m[2] + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cmdline), "\x00--secret-file\x00"+urom.EmbeddedSecretFile+"\x00") {
		t.Errorf("embedded service command line %q does not read its secret from the pipe", cmdline)
	}
	ctx, cancel := context.WithTimeout(context.Background(), exitTimeout)
	defer cancel()
	c, err := urom.Dial(ctx, m[1], urom.ClientOptions{ComponentVersion: command.ComponentVersion})
	if err == nil {
		c.Close()
		t.Error("a host without the run's secret was served by the embedded service")
	} else if !errors.Is(err, urom.ErrAuth) {
		t.Errorf("a host without the run's secret: %v, want urom.ErrAuth", err)
	}
	waitOutput(t, server, "waiting for the initiator")
	server.Signal(syscall.SIGINT)
	if code := server.Wait(t, exitTimeout); code != 128+int(syscall.SIGINT) {
		t.Errorf("server exit %d", code)
	}
}

package service_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/service"
)

var (
	secretA = []byte("0123456789abcdef0123456789abcdef")
	secretB = []byte("fedcba9876543210fedcba9876543210")
)

// startAuthService starts a service with the given secret whose log the
// test can read.
func startAuthService(t *testing.T, secret []byte) (string, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	addr, _ := startServiceWith(t, func(c *service.Config) {
		c.Secret = secret
		c.Logger = zap.New(core)
	})
	return addr, logs
}

func dialSecret(ctx context.Context, addr string, secret []byte) (*urom.Client, error) {
	return urom.Dial(ctx, addr, urom.ClientOptions{ComponentVersion: "1.0.0", Secret: secret})
}

// checkServes checks that a host with the service's secret is served end
// to end: a new worker process, a command to it, the plugin list.
func checkServes(t *testing.T, addr string, secret []byte) {
	t.Helper()
	ctx := context.Background()
	c, err := dialSecret(ctx, addr, secret)
	if err != nil {
		t.Fatalf("host with the right secret: %v", err)
	}
	defer c.Close()
	if pl, err := c.Plugins(ctx); err != nil || len(pl) != 2 {
		t.Fatalf("plugins: %v %v", pl, err)
	}
	w, err := c.Spawn(ctx, urom.SpawnOptions{Plugins: []string{"echo"}})
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	var pid int
	if err := w.Call(ctx, "pid", nil, &pid); err != nil || pid != w.PID {
		t.Fatalf("pid: %d %v, spawned as %d", pid, err, w.PID)
	}
	var echo string
	if err := w.Call(ctx, "echo", "authenticated", &echo); err != nil || echo != "authenticated" {
		t.Fatalf("echo: %q %v", echo, err)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, w.PID)
}

// Host and service with the same secret: authenticated, and everything
// works as without one.
func TestAuthRightSecret(t *testing.T) {
	addr, logs := startAuthService(t, secretA)
	checkServes(t, addr, secretA)
	// White space is not trimmed here: that is the CLI's job.
	if _, err := dialSecret(context.Background(), addr, append(bytes.Clone(secretA), '\n')); !errors.Is(err, urom.ErrAuth) {
		t.Errorf("a secret with a trailing newline: %v, want ErrAuth", err)
	}
	if n := logs.FilterMessage("host connected").FilterField(zap.Bool("authenticated", true)).Len(); n != 1 {
		t.Errorf("%d authenticated hosts logged, want 1", n)
	}
}

// Each wrong host — another secret, no secret — gets ErrAuth with a
// message that says what is wrong; the service logs one line with its
// address and keeps serving the host it already had (and its worker) and
// new good hosts.
func TestAuthRefusedHostsServiceKeepsServing(t *testing.T) {
	addr, logs := startAuthService(t, secretA)
	ctx := context.Background()
	good, err := dialSecret(ctx, addr, secretA)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	w, err := good.Spawn(ctx, urom.SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name   string
		secret []byte
		want   string
	}{
		{"wrong secret", secretB, "the host's proof does not match: the host and the UROM service have different secrets"},
		{"no secret", nil, "this UROM service requires hosts to prove its shared secret (rdmo dpu --secret-file) and the host has no secret configured"},
		{"wrong secret and another version", secretB, "the host's proof does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := urom.ClientOptions{ComponentVersion: "1.0.0", Secret: tc.secret}
			if i == 2 {
				opts.ComponentVersion = "9.0.0" // authentication comes first: a stranger learns no version
			}
			c, err := urom.Dial(ctx, addr, opts)
			if err == nil {
				c.Close()
				t.Fatal("refused host connected")
			}
			if !errors.Is(err, urom.ErrAuth) || errors.Is(err, urom.ErrVersion) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrAuth saying %q", err, tc.want)
			}
			refused := logs.FilterMessage("host refused: authentication failed").AllUntimed()
			if len(refused) != i+1 {
				t.Fatalf("%d refusals logged, want %d", len(refused), i+1)
			}
			peer, _ := refused[i].ContextMap()["peer"].(string)
			if !strings.HasPrefix(peer, "127.0.0.1:") || peer == addr {
				t.Errorf("refusal logged with peer %q, want the host's address", peer)
			}
			var echo string
			if err := w.Call(ctx, "echo", "still here", &echo); err != nil || echo != "still here" {
				t.Fatalf("the good host's worker: %q %v", echo, err)
			}
			checkServes(t, addr, secretA)
		})
	}
	workers, err := good.Workers(ctx)
	if err != nil || len(workers) != 1 || workers[0].ID != w.ID {
		t.Errorf("workers after the refusals: %+v %v, want only the good host's", workers, err)
	}
}

// A secret on the host only: the service has none, so both refuse (no
// silent downgrade to an unauthenticated session); hosts without a secret
// are still served.
func TestAuthSecretOnHostOnly(t *testing.T) {
	addr, logs := startAuthService(t, nil)
	_, err := dialSecret(context.Background(), addr, secretA)
	if !errors.Is(err, urom.ErrAuth) || !strings.Contains(err.Error(), "this service has none configured (rdmo dpu --secret-file)") {
		t.Fatalf("host with a secret, service without: %v, want ErrAuth", err)
	}
	if n := logs.FilterMessage("host refused: authentication failed").Len(); n != 1 {
		t.Errorf("%d refusals logged, want 1", n)
	}
	checkServes(t, addr, nil)
}

// A secret shorter than MinSecretLen is refused on both sides.
func TestAuthSecretTooShort(t *testing.T) {
	cfg := serviceConfig()
	cfg.Secret = []byte("short")
	if _, err := service.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("service: %v", err)
	}
	if _, err := dialSecret(context.Background(), "127.0.0.1:1", []byte("short")); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("host: %v", err)
	}
}

// The embedded service gets its secret on a pipe (StartEmbeddedWith), not
// in its arguments or environment.
func TestEmbeddedServiceWithSecret(t *testing.T) {
	ctx := context.Background()
	e, err := urom.StartEmbeddedWith(ctx, []string{os.Args[0], "-test.run=^$"}, urom.EmbeddedOptions{
		Env:    []string{"UROM_TEST_ROLE=service", "UROM_TEST_SECRET_FILE=" + urom.EmbeddedSecretFile},
		Secret: secretA,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		e.Stop()
		<-e.Done()
	}()
	for _, f := range []string{"cmdline", "environ"} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(e.PID()) + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, secretA) {
			t.Errorf("the secret is in the service's %s", f)
		}
	}
	if _, err := dialSecret(ctx, e.Addr, nil); !errors.Is(err, urom.ErrAuth) {
		t.Errorf("host without the secret: %v, want ErrAuth", err)
	}
	checkServes(t, e.Addr, secretA)
}

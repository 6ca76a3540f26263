// Package uromtest runs a real UROM service inside a test process.
package uromtest

import (
	"context"
	"testing"

	"github.com/openrdmo/rdmo/urom/service"
)

// Start runs a UROM service with cfg until the test ends and returns the
// address it listens on. An empty cfg.Listen means a random loopback port,
// so tests running side by side never collide. The service is stopped,
// and waited for, when the test's cleanups run: cleanups registered after
// Start (stopping workers, closing clients) run before it.
func Start(t testing.TB, cfg service.Config) string {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := service.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("uromtest: %v", err)
	}
	addr, err := svc.Listen()
	if err != nil {
		cancel()
		t.Fatalf("uromtest: %v", err)
	}
	served := make(chan struct{})
	go func() { svc.Serve(ctx); close(served) }()
	t.Cleanup(func() { cancel(); <-served })
	return addr
}

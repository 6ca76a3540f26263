package service_test

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/service"
)

// poll waits until cond holds (the service reacts on its own goroutines).
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The end of Serve's context drains: the service is no longer ready, its
// hosts are told, new workers are refused and running ones keep serving;
// Hurry then stops them, and their hosts learn that the service is
// shutting down, not that the worker died. The service's counters and
// worker listing tell an operator what happened.
func TestDrainAndShutdownReason(t *testing.T) {
	cfg := serviceConfig()
	cfg.DrainTimeout = 10 * time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := service.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), "not listening") {
		t.Errorf("Ready before Serve: %v", err)
	}
	addr, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	c := dial(t, addr)
	if err := s.Ready(); err != nil {
		t.Errorf("Ready while serving: %v", err)
	}
	w, err := c.Spawn(ctx, urom.SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := c.Workers(context.Background())
	if err != nil || len(ws) != 1 || ws[0].ID != w.ID || ws[0].State != "running" || ws[0].Host == "" || ws[0].Uptime <= 0 {
		t.Fatalf("Workers: %+v %v", ws, err)
	}

	cancel()
	poll(t, "the host told of the shutdown", c.ShuttingDown)
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), "draining") {
		t.Errorf("Ready while draining: %v", err)
	}
	if _, err := c.Spawn(context.Background(), urom.SpawnOptions{}); !errors.Is(err, urom.ErrShuttingDown) {
		t.Errorf("Spawn while draining: %v, want ErrShuttingDown", err)
	}
	var echo string
	if err := w.Call(context.Background(), "echo", "draining", &echo); err != nil || echo != "draining" {
		t.Errorf("a running worker while draining: %q %v", echo, err)
	}
	rec := httptest.NewRecorder()
	service.MetricsHandler(s, nil).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		"rdmo_urom_draining 1", "rdmo_urom_ready 0", "rdmo_urom_worker_spawns_total 1", "rdmo_urom_hosts 1",
		`rdmo_urom_worker_spawn_failures_total{reason="shutting_down"} 1`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}

	s.Hurry()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	<-w.Gone()
	if !errors.Is(w.Err(), urom.ErrShuttingDown) || w.Reason() != urom.ReasonShuttingDown {
		t.Errorf("worker gone with %v (%q), want ErrShuttingDown", w.Err(), w.Reason())
	}
	if err := w.Call(context.Background(), "echo", "x", nil); !errors.Is(err, urom.ErrShuttingDown) {
		t.Errorf("a call after the shutdown: %v, want ErrShuttingDown", err)
	}
}

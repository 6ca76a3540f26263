package service

import (
	"context"
	"testing"
)

// startForTest runs a service with cfg in this process until the test
// ends and returns its address.
func startForTest(t testing.TB, cfg Config) (string, *Service) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	addr, err := s.Listen()
	if err != nil {
		cancel()
		s.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		s.Serve(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return addr, s
}

// StartForTest is startForTest for the tests of package urom_test.
var StartForTest = startForTest

// ReadSpecAnswerAfterExit makes the service, until the test ends, read a
// new worker's answer to its spec only once it has seen the worker's
// process exit: the worst timing for a worker that refuses its spec and
// exits at once (a worker that accepts it never exits, so only tests of
// refusals may use this).
func ReadSpecAnswerAfterExit(t testing.TB) {
	testHookBeforeReady = func(exited <-chan struct{}) { <-exited }
	t.Cleanup(func() { testHookBeforeReady = nil })
}

package service

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/internal/uromwire"
)

// This file is what an operator of a service sees besides its hosts:
// readiness, the counters that outlive the workers they count, graceful
// drain, and the events a worker process reports about its plugins.

// workerEvent is what a worker process reports on its own (uromwire.KindEvent,
// cookie 0): the service counts it (rdmo_urom_plugin_*_total).
type workerEvent struct {
	Event  string `msgpack:"event"` // eventPluginFailed, eventPluginRestarted, eventFatal
	Plugin string `msgpack:"plugin"`
	Reason string `msgpack:"reason,omitempty"` // eventFatal's
}

const (
	eventPluginFailed    = "plugin-failed"
	eventPluginRestarted = "plugin-restarted"
	eventFatal           = "fatal"
)

// The label values of the service's counters (docs/OPERATIONS.md).
var (
	exitReasons         = []string{"stopped", "exited", "failed", "killed"}
	spawnFailureReasons = []string{"limit", "bad_request", "shutting_down", "start"}
	refusalReasons      = []string{"auth", "version", "bad_request", "dropped"}
)

// serviceStats are the service's counters: they live as long as the
// service, so a worker's exit is still counted after its series are gone.
type serviceStats struct {
	mu             sync.Mutex
	spawns         uint64
	spawnFailures  map[string]uint64
	exits          map[string]uint64
	pluginFailures map[string]uint64
	pluginRestarts map[string]uint64
	refused        map[string]uint64
}

func newServiceStats(plugins []urom.PluginInfo) *serviceStats {
	zero := func(keys []string) map[string]uint64 {
		m := make(map[string]uint64, len(keys))
		for _, k := range keys {
			m[k] = 0
		}
		return m
	}
	// Series exist from the start (at 0), so that rate() and increase()
	// see the first event.
	var ext []string
	for _, p := range plugins {
		if !p.Builtin {
			ext = append(ext, p.Name)
		}
	}
	return &serviceStats{
		spawnFailures:  zero(spawnFailureReasons),
		exits:          zero(exitReasons),
		pluginFailures: zero(ext),
		pluginRestarts: zero(ext),
		refused:        zero(refusalReasons),
	}
}

func (st *serviceStats) inc(m map[string]uint64, key string) {
	st.mu.Lock()
	m[key]++
	st.mu.Unlock()
}

// snapshot copies a counter map under the lock.
func (st *serviceStats) snapshot(m map[string]uint64) map[string]uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// spawnFailureReason classifies a failed spawn for
// rdmo_urom_worker_spawn_failures_total.
func spawnFailureReason(err error) string {
	var ue *urom.Error
	if errors.As(err, &ue) {
		switch ue.Code {
		case uromwire.CodeLimit:
			return "limit"
		case uromwire.CodeBadRequest, uromwire.CodeNotFound:
			return "bad_request"
		case uromwire.CodeShuttingDown:
			return "shutting_down"
		}
	}
	return "start"
}

// exitReason classifies a worker's exit for rdmo_urom_worker_exits_total:
// stopped (by its host, its host leaving, or the service), exited (on its
// own, status 0), failed (on its own, another status), killed (by a signal
// the service did not send: SIGKILL, the OOM killer, a crash).
func exitReason(stopped bool, err error) string {
	if stopped {
		return "stopped"
	}
	if err == nil {
		return "exited"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed"
		}
	}
	return "failed"
}

// Ready says whether the service can take hosts and spawn workers: it
// listens, is not draining, offers plugins, finds its worker command and
// has room for a worker. It is /readyz (ServeMetrics).
func (s *Service) Ready() error {
	s.mu.Lock()
	serving, draining, closed, n := s.serving, s.draining, s.closed, len(s.workers)
	s.mu.Unlock()
	switch {
	case closed:
		return errors.New("stopped")
	case draining:
		return errors.New("draining: shutting down")
	case !serving:
		return errors.New("not listening yet")
	case len(s.plugins) == 0:
		return errors.New("no plugins")
	case n >= s.cfg.MaxWorkers:
		return fmt.Errorf("worker limit reached (%d)", s.cfg.MaxWorkers)
	}
	if _, err := exec.LookPath(s.cfg.WorkerCommand[0]); err != nil {
		return fmt.Errorf("cannot start workers: %w", err)
	}
	return nil
}

// beginDrain stops accepting hosts and tells every connected host that the
// service is shutting down.
func (s *Service) beginDrain() {
	s.mu.Lock()
	if s.draining || s.closed {
		s.mu.Unlock()
		return
	}
	s.draining = true
	if s.ln != nil {
		s.ln.Close()
	}
	var sessions []*session
	for ss := range s.sessions {
		sessions = append(sessions, ss)
	}
	n := len(s.workers)
	s.mu.Unlock()
	if n > 0 && s.cfg.DrainTimeout > 0 {
		s.log.Info("UROM service draining: accepting no hosts, waiting for the workers' hosts to finish",
			zap.Int("workers", n), zap.Duration("drain_timeout", s.cfg.DrainTimeout))
	}
	for _, ss := range sessions {
		ss.notifyShutdown()
	}
}

// notifyShutdown sends the host the shutdown notice once, after its
// handshake (a notice in the middle of it would confuse the host).
func (ss *session) notifyShutdown() {
	ss.mu.Lock()
	send := ss.welcomed && !ss.notified
	if send {
		ss.notified = true
	}
	ss.mu.Unlock()
	if send {
		body, _ := uromwire.EncodeBody(urom.ShutdownNotice{Drain: ss.s.cfg.DrainTimeout})
		ss.c.Write(&uromwire.Envelope{Kind: uromwire.KindShutdown, Body: body})
	}
}

// waitDrained waits until no worker runs, timeout passed, or hurry is
// closed (a second signal).
func (s *Service) waitDrained(timeout time.Duration, hurry <-chan struct{}) {
	if timeout <= 0 {
		return
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		n := len(s.workers)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-deadline.C:
			s.log.Info("drain timeout passed: stopping the workers left", zap.Int("workers", n))
			return
		case <-hurry:
			return
		case <-tick.C:
		}
	}
}

// Hurry ends a drain at once (the operator's second signal): Serve then
// stops every worker and returns.
func (s *Service) Hurry() {
	s.hurryOnce.Do(func() { close(s.hurry) })
}

// eventsKey carries a worker process's event reporter in the context its
// factory gets (ServeWorker).
type eventsKey struct{}

// ReportPluginFailed tells the service that a plugin process of this
// worker failed (rdmo_urom_plugin_failures_total). ctx is (derived from)
// the one the WorkerFactory got; elsewhere the call does nothing.
func ReportPluginFailed(ctx context.Context, plugin string) {
	report(ctx, workerEvent{Event: eventPluginFailed, Plugin: plugin})
}

// ReportPluginRestarted tells the service that a plugin process of this
// worker was restarted (rdmo_urom_plugin_restarts_total).
func ReportPluginRestarted(ctx context.Context, plugin string) {
	report(ctx, workerEvent{Event: eventPluginRestarted, Plugin: plugin})
}

// ReportFatal ends this worker process because its component can serve no
// one any more (dpu.Config.OnFatal): the service records err as the
// worker's death reason (WorkerProcess.Reason, `rdmo workers`), and
// ServeWorker returns err, so the process exits and its peers see it gone
// (a worker that lives on but hears nothing is a hang to them). ctx is (derived
// from) the one the WorkerFactory got; elsewhere the call does nothing.
func ReportFatal(ctx context.Context, err error) {
	report(ctx, workerEvent{Event: eventFatal, Reason: err.Error()})
	if f, ok := ctx.Value(fatalKey{}).(func(error)); ok {
		f(err)
	}
}

// fatalKey carries ServeWorker's end-the-process function (ReportFatal).
type fatalKey struct{}

func report(ctx context.Context, ev workerEvent) {
	if f, ok := ctx.Value(eventsKey{}).(func(workerEvent)); ok {
		f(ev)
	}
}

// event counts a worker's event; a fatal one becomes the reason of the
// worker's end.
func (s *Service) event(w *workerProc, ev workerEvent) {
	switch ev.Event {
	case eventFatal:
		w.mu.Lock()
		w.fatal = ev.Reason
		w.mu.Unlock()
		s.log.Error("worker failed", zap.Uint64("worker", w.id), zap.String("reason", ev.Reason))
	case eventPluginFailed:
		s.stats.inc(s.stats.pluginFailures, ev.Plugin)
	case eventPluginRestarted:
		s.stats.inc(s.stats.pluginRestarts, ev.Plugin)
	}
}

// nowSince is how long ago t was (0 for the zero time), for
// WorkerInfo.Uptime.
func nowSince(t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return time.Since(t).Truncate(time.Millisecond)
}

// WorkerSummarizer is implemented by a Config.Metrics that can read a
// worker's answer to its Command into the counts Client.Workers reports
// (WorkerInfo.Clients, RequestQueues).
type WorkerSummarizer interface {
	Summary(decode func(v any) error) (clients, requestQueues int, err error)
}

// describeWorkers is the answer to a host's Client.Workers: every worker
// with its state and, when the component can say, its clients and queues.
func (s *Service) describeWorkers(ctx context.Context) []urom.WorkerInfo {
	out := s.Workers()
	sum, ok := s.cfg.Metrics.(WorkerSummarizer)
	if !ok || len(out) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, MetricsScrapeTimeout)
	defer cancel()
	byID := map[uint64]*urom.WorkerInfo{}
	for i := range out {
		out[i].Clients, out[i].RequestQueues = -1, -1
		byID[out[i].ID] = &out[i]
	}
	for _, a := range s.AskWorkers(ctx, s.cfg.Metrics.Command(), nil) {
		wi := byID[a.ID]
		if wi == nil || a.Err != nil {
			continue
		}
		if c, q, err := sum.Summary(a.Decode); err == nil {
			wi.Clients, wi.RequestQueues = c, q
		}
	}
	return out
}

// BuildInfo is what rdmo_build_info labels (Config.Build); the Go version
// is the running binary's.
type BuildInfo struct {
	Version, Commit, UCX string
}

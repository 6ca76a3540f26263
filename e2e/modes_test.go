package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/dpu"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/ucp/ucptest"
	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/rdmoworker"
	"github.com/openrdmo/rdmo/urom/service"
	"github.com/openrdmo/rdmo/urom/uromtest"
)

// workerMode says where the RDMO worker runs and how its handlers are
// loaded.
type workerMode int

const (
	modeInProcess  workerMode = iota // dpu.Worker in the test process
	modeUROM                         // a worker process of a UROM service, handlers built in
	modeUROMPlugin                   // the same, every handler a plugin process
)

func (m workerMode) String() string {
	return [...]string{"inproc", "urom", "plugins"}[m]
}

type inProcess struct{ *dpu.Worker }

func startWorker(t testing.TB, tr ucptest.Transport, strategy appendop.Strategy, mode workerMode) rdmoWorker {
	if mode == modeInProcess {
		w, err := dpu.New(dpu.Config{Handlers: handlers(strategy), UCXConfig: tr.Config()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := w.Close(); err != nil {
				t.Errorf("worker close: %v", err)
			}
		})
		return inProcess{w}
	}
	names := []string{"append", "flush", "scatter"}
	if mode == modeUROMPlugin {
		names = []string{"plugin:append", "plugin:flush", "plugin:scatter"}
	}
	return startUROMWorker(t, tr, names, map[string]string{command.ConfigAppendStrategy: strategy.String()})
}

// startUROMWorker runs a UROM service in this process and spawns one worker
// process with the named plugins (plugin binaries come from pluginDir).
func startUROMWorker(t testing.TB, tr ucptest.Transport, names []string, config map[string]string) remote {
	cfg := service.Config{
		Builtins:         rdmoworker.Builtins(),
		MaxWorkers:       4,
		WorkerCommand:    []string{os.Args[0], "-test.run=^$"},
		WorkerEnv:        workerEnv(tr),
		ComponentVersion: command.ComponentVersion,
	}
	for _, n := range names {
		if strings.HasPrefix(n, "plugin:") {
			cfg.PluginPath = []string{pluginDir(t)}
			cfg.Probe = rdmoworker.Probe
		}
		if strings.HasPrefix(n, "wasm:") {
			cfg.PluginPath = []string{wasmDir(t)}
			cfg.Probe = rdmoworker.Probe
		}
	}
	addr := uromtest.Start(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := urom.Dial(ctx, addr, urom.ClientOptions{ComponentVersion: command.ComponentVersion})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Spawn(ctx, urom.SpawnOptions{Plugins: names, Config: config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.Stop(context.Background())
		c.Close()
	})
	return remote{Remote: command.Remote{W: w}, W: w}
}

// remote is a worker process through its service: its commands, and the
// process (W) for the tests that watch or kill it.
type remote struct {
	command.Remote
	W *urom.WorkerProcess
}

func (r remote) Stats() dpu.Stats {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, _ := r.Remote.Stats(ctx)
	return st
}

var (
	pluginOnce sync.Once
	pluginPath string
	pluginErr  error
)

// pluginDir builds the three plugin binaries once per test run.
func pluginDir(t testing.TB) string {
	pluginOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rdmo-plugins-")
		if err != nil {
			pluginErr = err
			return
		}
		pluginPath = dir
		for _, pkg := range []string{"plugins/append", "plugins/flush", "plugins/scatter", "examples/counter"} {
			name := filepath.Base(pkg)
			out := filepath.Join(dir, "rdmo-plugin-"+name)
			cmd := exec.Command("go", "build", "-o", out, "github.com/openrdmo/rdmo/"+pkg+"/cmd/rdmo-plugin-"+name)
			if b, err := cmd.CombinedOutput(); err != nil {
				pluginErr = fmt.Errorf("build plugin %s: %v\n%s", name, err, b)
				return
			}
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginPath
}

func workerProcessMain() int {
	// E2E_WORKER_LOG=DIR keeps each worker process's debug log in
	// DIR/worker-PID.log, for a failure that needs the worker's side.
	var log *zap.Logger
	if dir := os.Getenv("E2E_WORKER_LOG"); dir != "" {
		cfg := zap.NewDevelopmentConfig()
		cfg.OutputPaths = []string{fmt.Sprintf("%s/worker-%d.log", dir, os.Getpid())}
		log, _ = cfg.Build()
	}
	err := service.ServeWorker(context.Background(), os.NewFile(service.ControlFD, "control"), rdmoworker.Factory, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

package pluginhost_test

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/examples/counter"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/openrdmo/rdmo/internal/testutil"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin/internal/testplugin"
	"github.com/openrdmo/rdmo/rdmo/plugin/pluginhost"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
)

const ucpPkg = "github.com/openrdmo/rdmo/ucp"

// TestNoLibUCP: the plugin packages and every plugin binary are pure Go
// against the SDK: none imports package ucp, none links libucp or libucs.
func TestNoLibUCP(t *testing.T) {
	mains := []string{
		"github.com/openrdmo/rdmo/plugins/append/cmd/rdmo-plugin-append",
		"github.com/openrdmo/rdmo/plugins/flush/cmd/rdmo-plugin-flush",
		"github.com/openrdmo/rdmo/plugins/scatter/cmd/rdmo-plugin-scatter",
		testPluginPkg,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	for _, pkg := range append([]string{"github.com/openrdmo/rdmo/rdmo/plugin", "github.com/openrdmo/rdmo/rdmo/plugin/pluginhost"}, mains...) {
		out, err := exec.CommandContext(ctx, goTool(), "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == ucpPkg || strings.HasPrefix(dep, ucpPkg+"/") {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
	for _, pkg := range mains {
		bin := buildOnce(t, pkg)
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		libs, err := f.ImportedLibraries()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range libs {
			if strings.HasPrefix(l, "libucp") || strings.HasPrefix(l, "libucs") || strings.HasPrefix(l, "libuct") {
				t.Errorf("%s links %s", filepath.Base(bin), l)
			}
		}
		t.Logf("%s: DT_NEEDED %v", filepath.Base(bin), libs)
	}
}

// pluginProcesses lists the live processes running the test plugin binary.
func pluginProcesses(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err != nil {
			continue
		}
		if strings.TrimSuffix(exe, " (deleted)") == testPluginPath && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ourGoroutines returns the stacks of goroutines running code of the
// plugin machinery (go-plugin, gRPC, the plugin packages).
func ourGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "ourGoroutines") {
			continue
		}
		if strings.Contains(g, "hashicorp/go-plugin") || strings.Contains(g, "google.golang.org/grpc") ||
			strings.Contains(g, "rdmo/rdmo/plugin.") || strings.Contains(g, "rdmo/rdmo/plugin/pluginhost.") ||
			strings.Contains(g, "rdmo/rdmo/plugin/internal/wire.") || strings.Contains(g, "rdmo/rdmo/plugin/internal/hclogzap.") || strings.Contains(g, "hashicorp/yamux") {
			out = append(out, g)
		}
	}
	return out
}

func TestCloseLeavesNothing(t *testing.T) {
	// Whatever earlier tests left must be gone by now too.
	if !testutil.Poll(testutil.Deadline(t), func() bool { return len(pluginProcesses(t)) == 0 && len(ourGoroutines()) == 0 }) {
		t.Fatal("before: " + strings.Join(ourGoroutines(), "\n\n"))
	}

	core, logs := observer.New(zapcore.InfoLevel)
	h, err := pluginhost.Load(context.Background(), testPluginPath, pluginhost.LoadOptions{MinBackoff: time.Millisecond, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	tg, _ := newTarget(t)
	wantStatus(t, run(h, tg, putReq(tg, region, base, 0, []byte("x")), ctlReq(tg, "flush")), 0, 0)
	// A crash and restart on the way, and a call in flight at Close.
	pid := h.Pid()
	wantStatus(t, run(h, tg, ctlReq(tg, "exit")), rdmo.StatusHandlerFailed)
	waitUp(t, h, pid)
	if n := len(pluginProcesses(t)); n != 1 {
		t.Fatalf("%d plugin processes", n)
	}
	inflight := make(chan []rdmo.Result)
	go func() { inflight <- run(h, tg, ctlReq(tg, "sleep 30s")) }()
	testutil.WaitFor(t, "the plugin to start the call", func() bool { return logs.FilterMessage("sleeping").Len() > 0 })
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-inflight:
		wantStatus(t, res, rdmo.StatusHandlerFailed)
	case <-time.After(5 * time.Second):
		t.Fatal("call in flight at Close did not return")
	}
	if pids := pluginProcesses(t); len(pids) != 0 {
		t.Errorf("plugin processes after Close: %v", pids)
	}
	if !testutil.Poll(testutil.Deadline(t), func() bool { return len(ourGoroutines()) == 0 }) {
		t.Fatal("goroutines left after Close:\n" + strings.Join(ourGoroutines(), "\n\n"))
	}
}

func TestCleanupClientsStopsRestarts(t *testing.T) {
	h := load(t, pluginhost.LoadOptions{MinBackoff: 20 * time.Millisecond})
	tg, _ := newTarget(t)
	wantStatus(t, run(h, tg, ctlReq(tg, "pid")), 0)
	pid := h.Pid()
	// Shut down while a restart is due: none happens.
	wantStatus(t, run(h, tg, ctlReq(tg, "exit")), rdmo.StatusHandlerFailed)
	// CleanupClients returns once Close waited for the handler's restart
	// goroutine: no restart can start a process after this point, so no
	// wait for the backoff to pass is needed.
	pluginhost.CleanupClients()
	if n := h.Restarts(); n != 0 {
		t.Errorf("%d restarts after a shutdown while one was due", n)
	}
	waitGone(t, pid)
	if pids := pluginProcesses(t); len(pids) != 0 {
		t.Errorf("plugin processes after Close during restart: %v", pids)
	}
}

// TestPluginLogLevels: a WARN line the plugin logs with plugin.Logger
// reaches the worker's zap logger as a Warn entry, with its fields.
func TestPluginLogLevels(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	h := load(t, pluginhost.LoadOptions{Logger: zap.New(core)})
	tg, _ := newTarget(t)
	wantStatus(t, run(h, tg, ctlReq(tg, "warn careful now")), 0)
	testutil.WaitFor(t, "the plugin's line in the worker log", func() bool { return logs.FilterMessage("careful now").Len() > 0 })
	e := logs.FilterMessage("careful now").All()[0]
	if e.Level != zapcore.WarnLevel {
		t.Errorf("plugin WARN arrived at %v", e.Level)
	}
	f := e.ContextMap()
	if f["from"] != "testplugin" || f["plugin_path"] != testPluginPath || e.LoggerName != "plugin.rdmo-plugin-test" {
		t.Errorf("fields %v", f)
	}
	// go-plugin's own lines arrive too, and at Debug (its trace/debug).
	if logs.FilterLevelExact(zapcore.DebugLevel).Len() == 0 {
		t.Error("no debug lines from go-plugin")
	}
}

// TestExamplePlugin: the plugin of Serve's documentation (and of
// docs/PLUGINS.md), examples/counter served by its command, works as
// documented: each increment returns the old value, a sub-header of the
// wrong size fails alone, and the handler's NoCachedState declaration
// crosses the plugin wire.
func TestExamplePlugin(t *testing.T) {
	bin := buildOnce(t, "github.com/openrdmo/rdmo/examples/counter/cmd/rdmo-plugin-counter")
	h, err := pluginhost.Load(context.Background(), bin, pluginhost.LoadOptions{Name: "counter", Version: "1.0.0", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if !h.Info().NoCachedState {
		t.Fatalf("%+v: the counter declares it keeps no cached state", h.Info())
	}
	tg, mem := newTarget(t)
	le.PutUint64(mem[64:], 41)
	hdr := counter.Request(client, region, base+64, 1, rdmo.FlagAck)
	res := run(h, tg, tg.Req(hdr, nil), tg.Req(hdr, nil), tg.Req(hdr[:39], nil))
	wantStatus(t, res, 0, 0, rdmo.StatusShortHeader)
	if res[0].Value != 41 || res[1].Value != 42 || le.Uint64(mem[64:]) != 43 {
		t.Fatalf("results %+v, counter %d", res, le.Uint64(mem[64:]))
	}
}

// TestReferencePlugins: the append, flush and scatter plugins work through
// pluginhost.Load, including the flush plugin's WriteBack reaching the append
// plugin (a call into one plugin from inside another's batch).
func TestReferencePlugins(t *testing.T) {
	hs := map[string]*pluginhost.Handler{}
	for _, name := range []string{"append", "flush", "scatter"} {
		bin := buildOnce(t, "github.com/openrdmo/rdmo/plugins/"+name+"/cmd/rdmo-plugin-"+name)
		h, err := pluginhost.Load(context.Background(), bin, pluginhost.LoadOptions{Name: name, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		hs[name] = h
	}
	tg, mem := newTarget(t)
	tg.Register(hs["append"], hs["flush"], hs["scatter"])
	le.PutUint64(mem, base+8) // the queue's tail
	q := rdmo.AppendHeader{PtrAddr: base, PtrRkey: region, DataRkey: region}
	wantStatus(t, run(hs["append"], tg, tg.AppendReq(q, []byte("aaaa")), tg.AppendReq(q, []byte("bbbbbb"))), 0, 0)
	unknown := rdmo.AppendHeader{PtrAddr: base, PtrRkey: region, DataRkey: 0x999}
	wantStatus(t, run(hs["append"], tg, tg.AppendReq(q, []byte("cc")), tg.AppendReq(unknown, []byte("d"))), 0, rdmo.StatusUnknownRegion)
	if string(mem[8:20]) != "aaaabbbbbbcc" {
		t.Fatalf("queue %q", mem[8:20])
	}
	wantStatus(t, run(hs["flush"], tg, tg.FlushReq(0xbeef)), 0)
	if tail := le.Uint64(mem); tail != base+20 {
		t.Fatalf("tail after flush %#x, want %#x", tail, base+20)
	}
	wantStatus(t, run(hs["scatter"], tg, tg.ScatterReq(
		rdmotest.Chunk{Rkey: region, Addr: base + 1000, Data: []byte("xyz")},
		rdmotest.Chunk{Rkey: region, Addr: base + 1003, Data: []byte("uvw")}),
		tg.ScatterReq(rdmotest.Chunk{Rkey: region, Addr: base + regSize - 1, Data: []byte("no")})),
		0, rdmo.StatusOutOfBounds)
	if string(mem[1000:1006]) != "xyzuvw" {
		t.Fatalf("scatter %q", mem[1000:1006])
	}
	if err := tg.CheckGuards(); err != nil {
		t.Fatal(err)
	}
}

// TestWorkerDeathEndsPlugin: a plugin whose worker is killed (so it never
// stops the plugin) exits by itself.
func TestWorkerDeathEndsPlugin(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envHostMode+"="+testPluginPath)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line := make([]byte, 32)
	n, err := out.Read(line)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(line[:n])))
	if err != nil || !alive(pid) {
		t.Fatalf("plugin pid %q: %v", line[:n], err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	start := time.Now()
	waitGone(t, pid)
	t.Logf("plugin exited %v after its worker", time.Since(start))
}

// TestPluginStatusClash: a plugin that names a status the host already
// knows under another name is refused at Load, and the error names both
// (in a stand-in worker process: the clash must not reach this one).
func TestPluginStatusClash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), envHostMode+"="+testPluginPath, envHostClash+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the stand-in loaded a plugin whose status clashes with its own:\n%s", out)
	}
	for _, want := range []string{"HostsOwn", testplugin.StatusRefusedName, strconv.Itoa(int(testplugin.StatusRefused))} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
}

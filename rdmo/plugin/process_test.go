package plugin_test

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
)

const ucpPkg = "github.com/openrdmo/rdmo/ucp"

// TestNoLibUCP: the plugin package and every plugin binary are pure Go
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
	for _, pkg := range append([]string{"github.com/openrdmo/rdmo/rdmo/plugin"}, mains...) {
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
// plugin machinery (go-plugin, gRPC, this package).
func ourGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "ourGoroutines") {
			continue
		}
		if strings.Contains(g, "hashicorp/go-plugin") || strings.Contains(g, "google.golang.org/grpc") ||
			strings.Contains(g, "rdmo/rdmo/plugin.") || strings.Contains(g, "hashicorp/yamux") {
			out = append(out, g)
		}
	}
	return out
}

func TestCloseLeavesNothing(t *testing.T) {
	// Whatever earlier tests left must be gone by now too.
	waitFor(t, 10*time.Second, func() bool { return len(pluginProcesses(t)) == 0 && len(ourGoroutines()) == 0 },
		func() string { return "before: " + strings.Join(ourGoroutines(), "\n\n") })

	core, logs := observer.New(zapcore.InfoLevel)
	h, err := plugin.Load(context.Background(), testPluginPath, plugin.LoadOptions{MinBackoff: time.Millisecond, Logger: zap.New(core)})
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
	waitFor(t, 30*time.Second, func() bool { return logs.FilterMessage("sleeping").Len() > 0 },
		func() string { return "the plugin never started the call" })
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
	waitFor(t, 10*time.Second, func() bool { return len(ourGoroutines()) == 0 },
		func() string { return "goroutines left after Close:\n" + strings.Join(ourGoroutines(), "\n\n") })
}

func TestCleanupClientsStopsRestarts(t *testing.T) {
	h := load(t, plugin.LoadOptions{MinBackoff: 20 * time.Millisecond})
	tg, _ := newTarget(t)
	wantStatus(t, run(h, tg, ctlReq(tg, "pid")), 0)
	pid := h.Pid()
	// Shut down while a restart is due: none happens.
	wantStatus(t, run(h, tg, ctlReq(tg, "exit")), rdmo.StatusHandlerFailed)
	// CleanupClients returns once Close waited for the handler's restart
	// goroutine: no restart can start a process after this point, so no
	// wait for the backoff to pass is needed.
	plugin.CleanupClients()
	if n := h.Restarts(); n != 0 {
		t.Errorf("%d restarts after a shutdown while one was due", n)
	}
	waitGone(t, pid)
	if pids := pluginProcesses(t); len(pids) != 0 {
		t.Errorf("plugin processes after Close during restart: %v", pids)
	}
}

func waitFor(t *testing.T, d time.Duration, ok func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal(msg())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPluginLogLevels: a WARN line the plugin logs with plugin.Logger
// reaches the worker's zap logger as a Warn entry, with its fields.
func TestPluginLogLevels(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	h := load(t, plugin.LoadOptions{Logger: zap.New(core)})
	tg, _ := newTarget(t)
	wantStatus(t, run(h, tg, ctlReq(tg, "warn careful now")), 0)
	waitFor(t, 5*time.Second, func() bool { return logs.FilterMessage("careful now").Len() > 0 },
		func() string { return "no plugin line in the worker log" })
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

// TestPluginLoggerFormat: Logger's lines are hclog JSON.
func TestPluginLoggerFormat(t *testing.T) {
	var buf bytes.Buffer
	l := plugin.NewPluginLogger(&buf, zapcore.DebugLevel).Named("mod")
	l.Warn("w", zap.Int("n", 3))
	l.Debug("d")
	l.Error("e")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("lines %q", lines)
	}
	for i, want := range []string{"warn", "debug", "error"} {
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil {
			t.Fatal(err)
		}
		if m["@level"] != want || m["@module"] != "mod" {
			t.Errorf("line %d: %v", i, m)
		}
		if _, err := time.Parse("2006-01-02T15:04:05.000000Z07:00", m["@timestamp"].(string)); err != nil {
			t.Errorf("timestamp: %v", err)
		}
	}
	if !strings.Contains(lines[0], `"@message":"w"`) || !strings.Contains(lines[0], `"n":3`) {
		t.Errorf("line %s", lines[0])
	}
}

// TestHCLogger: the hclog adapter keeps levels, fields and names.
func TestHCLogger(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	l := plugin.NewHCLogger(zap.New(core))
	if l.GetLevel() != hclog.Info || l.IsDebug() || !l.IsWarn() {
		t.Fatalf("level %v", l.GetLevel())
	}
	l.Trace("t")
	l.Debug("d")
	l.Info("i", "k", 1)
	l.Named("sub").With("w", "x").Warn("w", "@module", "m")
	l.Error("e", "err", os.ErrNotExist, "odd")
	l.Log(hclog.Warn, "lw")
	l.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}).Print("[ERROR] std")
	all := logs.AllUntimed()
	want := []struct {
		msg string
		lvl zapcore.Level
	}{{"i", zapcore.InfoLevel}, {"w", zapcore.WarnLevel}, {"e", zapcore.ErrorLevel}, {"lw", zapcore.WarnLevel}, {"std", zapcore.ErrorLevel}}
	if len(all) != len(want) {
		t.Fatalf("entries %v", all)
	}
	for i, w := range want {
		if all[i].Message != w.msg || all[i].Level != w.lvl {
			t.Errorf("entry %d: %s at %v, want %s at %v", i, all[i].Message, all[i].Level, w.msg, w.lvl)
		}
	}
	if m := all[1].ContextMap(); m["w"] != "x" || m["plugin_module"] != "m" || all[1].LoggerName != "sub" {
		t.Errorf("fields %v name %q", m, all[1].LoggerName)
	}
	if m := all[2].ContextMap(); m["err"] == nil || m["EXTRA_VALUE_AT_END"] != "odd" {
		t.Errorf("fields %v", m)
	}
	l.SetLevel(hclog.Error)
	if l.IsWarn() || l.GetLevel() != hclog.Error {
		t.Error("SetLevel")
	}
	dbg := plugin.NewHCLogger(zap.New(zapcore.NewNopCore()))
	if dbg.GetLevel() != hclog.Off {
		t.Errorf("nop core level %v", dbg.GetLevel())
	}
	core2, _ := observer.New(zapcore.DebugLevel)
	if plugin.NewHCLogger(zap.New(core2)).GetLevel() != hclog.Trace {
		t.Error("debug core should take trace lines")
	}
}

// TestExamplePlugin: the plugin of Serve's documentation works as
// documented.
func TestExamplePlugin(t *testing.T) {
	bin := buildOnce(t, "github.com/openrdmo/rdmo/rdmo/plugin/internal/exampleplugin")
	h, err := plugin.Load(context.Background(), bin, plugin.LoadOptions{Name: "counter", Version: "1.0.0", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	tg, mem := newTarget(t)
	le.PutUint64(mem[64:], 41)
	sub := make([]byte, 16)
	le.PutUint64(sub, region)
	le.PutUint64(sub[8:], base+64)
	hdr, _ := rdmo.AppendUserRequest(nil, rdmo.Header{ClientID: client, Op: 16}, sub)
	res := run(h, tg, tg.Req(hdr, nil), tg.Req(hdr, nil), tg.Req(hdr[:20], nil))
	wantStatus(t, res, 0, 0, rdmo.StatusShortHeader)
	if res[0].Value != 41 || res[1].Value != 42 || le.Uint64(mem[64:]) != 43 {
		t.Fatalf("results %+v, counter %d", res, le.Uint64(mem[64:]))
	}
}

// TestReferencePlugins: the append, flush and scatter plugins work through
// plugin.Load, including the flush plugin's Fence reaching the append
// plugin (a call into one plugin from inside another's batch).
func TestReferencePlugins(t *testing.T) {
	hs := map[string]*plugin.Handler{}
	for _, name := range []string{"append", "flush", "scatter"} {
		bin := buildOnce(t, "github.com/openrdmo/rdmo/plugins/"+name+"/cmd/rdmo-plugin-"+name)
		h, err := plugin.Load(context.Background(), bin, plugin.LoadOptions{Name: name, Logger: testLogger(t)})
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
	wantStatus(t, run(hs["append"], tg, tg.AppendReq(q, []byte("cc")), tg.AppendReq(q, nil)), 0, rdmo.StatusEmptyAppend)
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

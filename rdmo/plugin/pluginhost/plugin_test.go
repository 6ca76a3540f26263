package pluginhost_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/openrdmo/rdmo/rdmo"
	tp "github.com/openrdmo/rdmo/rdmo/plugin/internal/testplugin"
	"github.com/openrdmo/rdmo/rdmo/plugin/pluginhost"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

var le = binary.LittleEndian

const (
	client  = 7
	region  = 0x10
	base    = 0x7f00_0000_0000
	regSize = 4096
	other   = 0x20 // a region of another client
)

func newTarget(t testing.TB) (*rdmotest.Target, []byte) {
	tg := rdmotest.NewTarget(client)
	mem := tg.AddRegion(region, base, regSize)
	tg.AddRegionFor(99, other, base+1<<20, 64)
	return tg, mem
}

func load(t testing.TB, opts pluginhost.LoadOptions) *pluginhost.Handler {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := pluginhost.Load(ctx, testPluginPath, opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// testLogger logs warnings and errors of the worker side and the plugin
// to the test log.
func testLogger(t testing.TB) *zap.Logger {
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
		zapcore.AddSync(testWriter{t}), zapcore.WarnLevel))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func req(tg *rdmotest.Target, op uint32, a, b, c uint64, payload []byte) rdmo.Request {
	hdr, err := wire.AppendUserRequest(nil, wire.Header{ClientID: uint64(tg.ClientID()), Op: op}, tp.Sub(a, b, c))
	if err != nil {
		panic(err)
	}
	return tg.Req(hdr, payload)
}

func putReq(tg *rdmotest.Target, reg, addr, mode uint64, payload []byte) rdmo.Request {
	return req(tg, tp.OpPut, reg, addr, mode, payload)
}

func ctlReq(tg *rdmotest.Target, cmd string) rdmo.Request {
	hdr, _ := wire.AppendUserRequest(nil, wire.Header{ClientID: uint64(tg.ClientID()), Op: tp.OpCtl}, nil)
	return tg.Req(hdr, []byte(cmd))
}

func run(h rdmo.Handler, tg *rdmotest.Target, reqs ...rdmo.Request) []rdmo.Result {
	return tg.RunBatch(h, reqs...)
}

func wantStatus(t *testing.T, res []rdmo.Result, want ...rdmo.Status) {
	t.Helper()
	if len(res) != len(want) {
		t.Fatalf("%d results, want %d", len(res), len(want))
	}
	for i := range res {
		if res[i].Status != want[i] {
			t.Errorf("result %d: %v (%s), want %v", i, res[i].Status.Name(), res[i].Detail, want[i].Name())
		}
	}
}

// waitUp waits until h has a running process other than old.
func waitUp(t *testing.T, h *pluginhost.Handler, old int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if p := h.Pid(); p != 0 && p != old {
			return p
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("plugin not restarted")
	return 0
}

// alive reports whether pid is a live process (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestInfo(t *testing.T) {
	h := load(t, pluginhost.LoadOptions{Name: tp.Name, Version: tp.Version})
	info := h.Info()
	if info.Name != tp.Name || info.Version != tp.Version || len(info.Ops) != 5 || info.Ops[0] != tp.OpPut {
		t.Fatalf("Info = %+v", info)
	}
	if h.Pid() == 0 || !alive(h.Pid()) {
		t.Fatalf("Pid %d not running", h.Pid())
	}
	var _ rdmo.Handler = h
}

func TestLoadVersionMismatch(t *testing.T) {
	ctx := context.Background()
	_, err := pluginhost.Load(ctx, testPluginPath, pluginhost.LoadOptions{Version: "9.9.9"})
	if err == nil || !strings.Contains(err.Error(), `version "1.2.3", want "9.9.9"`) {
		t.Fatalf("Load with another version: %v", err)
	}
	_, err = pluginhost.Load(ctx, testPluginPath, pluginhost.LoadOptions{Name: "append"})
	if err == nil || !strings.Contains(err.Error(), "want \"append\"") {
		t.Fatalf("Load with another name: %v", err)
	}
	_, err = pluginhost.Load(ctx, testPluginPath, pluginhost.LoadOptions{Checksum: make([]byte, 32)})
	if err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("Load with a wrong checksum: %v", err)
	}
	_, err = pluginhost.Load(ctx, filepath.Join(t.TempDir(), "nope"), pluginhost.LoadOptions{})
	if err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
	// A binary that is not a plugin (no handshake line).
	_, err = pluginhost.Load(ctx, "/bin/true", pluginhost.LoadOptions{StartTimeout: 5 * time.Second})
	if err == nil {
		t.Fatal("Load of /bin/true succeeded")
	}
}

func TestBatchRoundTrip(t *testing.T) {
	h := load(t, pluginhost.LoadOptions{})
	tg, mem := newTarget(t)
	le.PutUint64(mem[256:], 40)
	le.PutUint64(mem[512:], 0xfeedface)
	res := run(h, tg,
		putReq(tg, region, base, tp.PutDirect, []byte("hello, ")),
		putReq(tg, region, base+7, tp.PutChecked, []byte("world")),
		req(tg, tp.OpFetchAdd, region, base+256, 2, nil),
		req(tg, tp.OpFetchAdd, region, base+256, 3, nil),
		req(tg, tp.OpGet, region, base+512, 0, nil),
		ctlReq(tg, "flush"),
		ctlReq(tg, "pid"),
	)
	wantStatus(t, res, 0, 0, 0, 0, 0, 0, 0)
	if got := string(mem[:12]); got != "hello, world" {
		t.Errorf("memory = %q", got)
	}
	if res[2].Value != 40 || res[3].Value != 42 || le.Uint64(mem[256:]) != 45 {
		t.Errorf("fetch-add: %d %d, memory %d", res[2].Value, res[3].Value, le.Uint64(mem[256:]))
	}
	if res[4].Value != 0xfeedface {
		t.Errorf("get = %#x", res[4].Value)
	}
	if int(res[6].Value) != h.Pid() || res[6].Value == uint64(os.Getpid()) {
		t.Errorf("pid %d, plugin %d", res[6].Value, h.Pid())
	}
	st := tg.Stats()
	if st.Puts != 2 || st.PutBytes != 12 || st.Syncs != 3 || st.Flushes != 1 {
		t.Errorf("stats %+v", st)
	}
	if err := tg.CheckGuards(); err != nil {
		t.Error(err)
	}
	// An empty batch and an unknown op.
	if res := run(h, tg); len(res) != 0 {
		t.Errorf("empty batch: %v", res)
	}
	wantStatus(t, run(h, tg, req(tg, 30, 0, 0, 0, nil)), rdmo.StatusUnknownOp)
}

func TestTargetErrors(t *testing.T) {
	h := load(t, pluginhost.LoadOptions{})
	tg, mem := newTarget(t)

	// Waiting calls: the error reaches the handler, which makes it the
	// request's status; the other requests are unaffected.
	wantStatus(t, run(h, tg,
		req(tg, tp.OpFetchAdd, region, base+regSize, 1, nil),
		req(tg, tp.OpFetchAdd, region, base+8, 1, nil),
		req(tg, tp.OpFetchAdd, 0x99, base, 1, nil),
		req(tg, tp.OpGet, other, base+1<<20, 0, nil),
		putReq(tg, 0x99, base, tp.PutChecked, []byte("x")),
		putReq(tg, region, base+regSize-1, tp.PutChecked, []byte("xy")),
		putReq(tg, region, base+100, tp.PutChecked, []byte("ok")),
	), rdmo.StatusOutOfBounds, 0, rdmo.StatusUnknownRegion, rdmo.StatusRegionNotOwned,
		rdmo.StatusUnknownRegion, rdmo.StatusOutOfBounds, 0)
	if le.Uint64(mem[8:]) != 1 || string(mem[100:102]) != "ok" {
		t.Errorf("memory not written")
	}

	// A pipelined Put to a region not looked up: the worker's error comes
	// at the end of the batch, on every OK request.
	res := run(h, tg,
		putReq(tg, region, base+200, tp.PutDirect, []byte("ab")),
		putReq(tg, region, base+regSize, tp.PutDirect, []byte("cd")),
		req(tg, tp.OpFetchAdd, 0x99, base, 1, nil),
	)
	wantStatus(t, res, rdmo.StatusOutOfBounds, rdmo.StatusOutOfBounds, rdmo.StatusUnknownRegion)
	if !strings.Contains(res[0].Detail, "pipelined") {
		t.Errorf("detail %q", res[0].Detail)
	}
	if string(mem[200:202]) != "ab" {
		t.Errorf("the good Put did not run")
	}

	// A Flush reports it instead, once: the handler decides.
	wantStatus(t, run(h, tg,
		putReq(tg, region, base+regSize, tp.PutDirect, []byte("cd")),
		ctlReq(tg, "flush"),
		ctlReq(tg, "flush"),
	), 0, rdmo.StatusOutOfBounds, 0)

	// A Put failing in the target itself.
	tg.Faults.Put = &rdmo.WireError{Status: rdmo.StatusTargetUnreachable, Detail: "endpoint down"}
	res = run(h, tg, putReq(tg, region, base, tp.PutDirect, []byte("z")))
	tg.Faults.Put = nil
	wantStatus(t, res, rdmo.StatusTargetUnreachable)
	if !strings.Contains(res[0].Detail, "endpoint down") {
		t.Errorf("detail %q", res[0].Detail)
	}
	// A Sync failing as a whole.
	tg.Faults.Sync = errors.New("sync broke")
	res = run(h, tg, req(tg, tp.OpFetchAdd, region, base, 1, nil))
	tg.Faults.Sync = nil
	wantStatus(t, res, rdmo.StatusInternal)
	if !strings.Contains(res[0].Detail, "sync broke") {
		t.Errorf("detail %q", res[0].Detail)
	}
	if err := tg.CheckGuards(); err != nil {
		t.Error(err)
	}
}

func TestRendezvous(t *testing.T) {
	h := load(t, pluginhost.LoadOptions{})
	tg, mem := newTarget(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 64)
	res := run(h, tg,
		tg.Rendezvous(putReq(tg, region, base, tp.PutPlace, big)),
		tg.Rendezvous(putReq(tg, region, base+2048, tp.PutFetch, big[:100])),
	)
	wantStatus(t, res, 0, 0)
	if !bytes.Equal(mem[:len(big)], big) || !bytes.Equal(mem[2048:2148], big[:100]) {
		t.Error("rendezvous payloads not in memory")
	}
	st := tg.Stats()
	if st.Places != 1 || st.PlaceBytes != uint64(len(big)) || st.Fetches != 1 {
		t.Errorf("stats %+v", st)
	}
	// Place of an eager request: the target refuses it, at the end of the
	// batch (Place is pipelined).
	wantStatus(t, run(h, tg, putReq(tg, region, base+3000, tp.PutPlace, []byte("eager"))), rdmo.StatusInternal)
	tg.FetchLimit = 10
	wantStatus(t, run(h, tg, tg.Rendezvous(putReq(tg, region, base, tp.PutFetch, big[:11]))), rdmo.StatusRendezvousRefused)
}

func events(t *testing.T, h rdmo.Handler, tg *rdmotest.Target) string {
	t.Helper()
	res := run(h, tg, ctlReq(tg, "events"))
	wantStatus(t, res, 0)
	return res[0].Detail
}

func TestHooks(t *testing.T) {
	h := load(t, pluginhost.LoadOptions{})
	tg, mem := newTarget(t)
	tg.Register(h)
	tg.AddRegion(0x11, base+1<<16, 64)

	wantStatus(t, run(h, tg, req(tg, tp.OpCache, region, base+8, 0x1111, nil),
		req(tg, tp.OpCache, 0x11, base+1<<16, 0x2222, nil)), 0, 0)
	if le.Uint64(mem[8:]) != 0 {
		t.Fatal("cached value written early")
	}
	// WriteBack: the hook runs in the plugin and Puts through its Target.
	if err := h.WriteBack(tg); err != nil {
		t.Fatal(err)
	}
	if le.Uint64(mem[8:]) != 0x1111 || le.Uint64(tg.Memory(0x11)) != 0x2222 {
		t.Fatalf("WriteBack did not write back")
	}
	// A WriteBack from inside a batch (Target.WriteBackAll calls every handler's
	// hook, this plugin's too: a nested call while the batch waits).
	wantStatus(t, run(h, tg, req(tg, tp.OpCache, region, base+16, 0x3333, nil), ctlReq(tg, "fence")), 0, 0)
	if le.Uint64(mem[16:]) != 0x3333 {
		t.Fatalf("nested WriteBack did not write back")
	}
	// RegionRemoved writes back that region's values, before it goes.
	wantStatus(t, run(h, tg, req(tg, tp.OpCache, 0x11, base+1<<16+8, 0x4444, nil),
		req(tg, tp.OpCache, region, base+24, 0x5555, nil)), 0, 0)
	m11 := tg.Memory(0x11)
	if err := tg.RemoveRegion(0x11); err != nil {
		t.Fatal(err)
	}
	if le.Uint64(m11[8:]) != 0x4444 || le.Uint64(mem[24:]) != 0 {
		t.Fatalf("RegionRemoved wrote %#x %#x", le.Uint64(m11[8:]), le.Uint64(mem[24:]))
	}
	// An error of a hook's Put comes back as the hook's error.
	wantStatus(t, run(h, tg, req(tg, tp.OpCache, region, base+regSize, 1, nil)), 0)
	if err := h.WriteBack(tg); !errors.Is(err, rdmo.ErrOutOfBounds) {
		t.Fatalf("WriteBack = %v, want OutOfBounds", err)
	}
	if le.Uint64(mem[24:]) != 0x5555 {
		t.Fatal("WriteBack did not write back before the failing Put")
	}
	// ClientRemoved drops the client's values.
	wantStatus(t, run(h, tg, req(tg, tp.OpCache, region, base+32, 0x6666, nil)), 0)
	tg.RemoveClient()
	if err := h.WriteBack(tg); err != nil {
		t.Fatal(err)
	}
	if le.Uint64(mem[32:]) != 0 {
		t.Fatal("value of a removed client written back")
	}
	ev := events(t, h, tg)
	want := "fence:7,fence:7,region-removed:7:17,fence:7,client-removed:7,fence:7"
	if ev != want {
		t.Fatalf("events %q, want %q", ev, want)
	}
}

func TestConcurrentClients(t *testing.T) {
	h := load(t, pluginhost.LoadOptions{})
	tg, _ := newTarget(t)
	var wg sync.WaitGroup
	for c := uint64(1); c <= 4; c++ {
		pt := tg.Peer(rdmo.ClientID(100 + c))
		id := 0x100 + c
		mem := pt.AddRegion(rdmo.RegionID(id), base+c<<20+1<<24, 8<<10)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				off := uint64(i * 64)
				p := bytes.Repeat([]byte{byte(c), byte(i)}, 32)
				res := run(h, pt, putReq(pt, id, base+c<<20+1<<24+off, tp.PutChecked, p),
					req(pt, tp.OpFetchAdd, id, base+c<<20+1<<24+8000, 1, nil))
				if res[0].Status != 0 || res[1].Status != 0 || res[1].Value != uint64(i) {
					t.Errorf("client %d batch %d: %+v", c, i, res)
					return
				}
				if !bytes.Equal(mem[off:off+64], p) {
					t.Errorf("client %d batch %d: memory", c, i)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestCrashIsolation(t *testing.T) {
	type crashFunc func(t *testing.T, h *pluginhost.Handler, tg *rdmotest.Target, logs *observer.ObservedLogs) []rdmo.Result
	cases := []struct {
		name  string
		crash crashFunc
		want  string // in the Detail
	}{
		{"panic", func(t *testing.T, h *pluginhost.Handler, tg *rdmotest.Target, _ *observer.ObservedLogs) []rdmo.Result {
			return run(h, tg, putReq(tg, region, base, tp.PutDirect, []byte("a")), ctlReq(tg, "panic"))
		}, "panic on command"},
		{"exit", func(t *testing.T, h *pluginhost.Handler, tg *rdmotest.Target, _ *observer.ObservedLogs) []rdmo.Result {
			return run(h, tg, putReq(tg, region, base, tp.PutDirect, []byte("a")), ctlReq(tg, "exit"))
		}, "HandleBatch"},
		{"exit-after-put", func(t *testing.T, h *pluginhost.Handler, tg *rdmotest.Target, _ *observer.ObservedLogs) []rdmo.Result {
			return run(h, tg, putReq(tg, region, base, tp.PutThenExit, []byte("a")), ctlReq(tg, "pid"))
		}, "HandleBatch"},
		{"sigkill", func(t *testing.T, h *pluginhost.Handler, tg *rdmotest.Target, logs *observer.ObservedLogs) []rdmo.Result {
			pid := h.Pid()
			// Killed once the plugin is inside the call (it logs
			// "sleeping" there).
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				for logs.FilterMessage("sleeping").Len() == 0 {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond): // polling the log
					}
				}
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}()
			return run(h, tg, putReq(tg, region, base, tp.PutDirect, []byte("a")), ctlReq(tg, "sleep 20s"))
		}, "HandleBatch"},
		{"timeout", func(t *testing.T, h *pluginhost.Handler, tg *rdmotest.Target, _ *observer.ObservedLogs) []rdmo.Result {
			return run(h, tg, putReq(tg, region, base, tp.PutDirect, []byte("a")), ctlReq(tg, "sleep 20s"))
		}, "CallTimeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Only the timeout case wants the call timeout to fire; the
			// others have one no loaded machine reaches.
			callTimeout := time.Minute
			if tc.name == "timeout" {
				callTimeout = 2 * time.Second
			}
			core, logs := observer.New(zapcore.InfoLevel)
			h := load(t, pluginhost.LoadOptions{CallTimeout: callTimeout, MinBackoff: time.Millisecond,
				Logger: zap.New(zapcore.NewTee(testLogger(t).Core(), core))})
			tg, mem := newTarget(t)
			wantStatus(t, run(h, tg, putReq(tg, region, base+100, tp.PutDirect, []byte("before"))), 0)
			pid := h.Pid()
			// The test sees the plugin down, whatever the timing.
			release := h.HoldRestarts()
			defer release()

			start := time.Now()
			res := tc.crash(t, h, tg, logs)
			if d := time.Since(start); d >= 20*time.Second {
				t.Errorf("the failed batch took %v: it waited for the plugin's sleep", d)
			}
			wantStatus(t, res, rdmo.StatusHandlerFailed, rdmo.StatusHandlerFailed)
			for _, r := range res {
				if !strings.Contains(r.Detail, tc.want) {
					t.Errorf("detail %q does not mention %q", r.Detail, tc.want)
				}
			}
			t.Logf("detail: %s", res[0].Detail)

			// Down: calls fail with the typed error, without waiting for
			// the restart (it is held until the checks are done, so a
			// call that waited for it would not return).
			down := make(chan []rdmo.Result, 1)
			go func() { down <- run(h, tg, putReq(tg, region, base, tp.PutDirect, []byte("b"))) }()
			select {
			case res = <-down:
			case <-time.After(time.Minute): // a hang guard, not a measurement
				t.Fatal("a call while the plugin is down waited for its restart")
			}
			wantStatus(t, res, rdmo.StatusHandlerFailed)
			if !strings.Contains(res[0].Detail, "down") {
				t.Errorf("detail %q", res[0].Detail)
			}
			if err := h.WriteBack(tg); !errors.Is(err, rdmo.ErrHandlerFailed) {
				t.Errorf("WriteBack while down = %v", err)
			}
			if p := h.Pid(); p != 0 {
				t.Errorf("plugin up (pid %d) while its restart is held", p)
			}
			release()

			// Back: the next batch succeeds, in a new process; the old is gone.
			newPid := waitUp(t, h, pid)
			waitGone(t, pid)
			res = run(h, tg, putReq(tg, region, base+200, tp.PutDirect, []byte("after")), ctlReq(tg, "pid"))
			wantStatus(t, res, 0, 0)
			if int(res[1].Value) != newPid || string(mem[200:205]) != "after" {
				t.Errorf("after restart: pid %d (want %d), memory %q", res[1].Value, newPid, mem[200:205])
			}
			if h.Restarts() != 1 {
				t.Errorf("Restarts = %d", h.Restarts())
			}
		})
	}
}

func TestBackoffGrows(t *testing.T) {
	h := load(t, pluginhost.LoadOptions{MinBackoff: 100 * time.Millisecond, MaxBackoff: 800 * time.Millisecond})
	tg, _ := newTarget(t)
	var gaps []time.Duration
	pid := h.Pid()
	for i := 0; i < 5; i++ {
		wantStatus(t, run(h, tg, ctlReq(tg, "exit")), rdmo.StatusHandlerFailed)
		start := time.Now()
		pid = waitUp(t, h, pid)
		gaps = append(gaps, time.Since(start))
	}
	t.Logf("restart gaps %v", gaps)
	// 100, 200, 400, 800, 800 ms (plus the start of a process): no
	// successful call in between.
	for i, min := range []time.Duration{100, 200, 400, 800, 800} {
		if gaps[i] < min*time.Millisecond {
			t.Errorf("restart %d after %v, want >= %vms", i, gaps[i], min)
		}
	}
	if b := h.Backoff(); b != 800*time.Millisecond {
		t.Errorf("backoff after five failures %v: MaxBackoff (800ms) not applied", b)
	}
	// A successful call resets it to MinBackoff.
	wantStatus(t, run(h, tg, ctlReq(tg, "pid")), 0)
	if b := h.Backoff(); b != 0 {
		t.Errorf("backoff after a successful call %v, want it reset", b)
	}
	wantStatus(t, run(h, tg, ctlReq(tg, "exit")), rdmo.StatusHandlerFailed)
	waitUp(t, h, pid)
	if b := h.Backoff(); b != 100*time.Millisecond {
		t.Errorf("restart after a success waited %v, want MinBackoff (100ms)", b)
	}
}

func TestLostStateReported(t *testing.T) {
	h := load(t, pluginhost.LoadOptions{MinBackoff: 10 * time.Millisecond})
	tg, mem := newTarget(t)
	wantStatus(t, run(h, tg, req(tg, tp.OpCache, region, base+8, 0x77, nil)), 0)
	pid := h.Pid()
	wantStatus(t, run(h, tg, ctlReq(tg, "exit")), rdmo.StatusHandlerFailed)
	waitUp(t, h, pid)
	// RegionRemoved reports it and leaves it for the WriteBack.
	if err := h.RegionRemoved(tg, region); !errors.Is(err, rdmo.ErrHandlerFailed) || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("RegionRemoved after restart = %v", err)
	}
	err := h.WriteBack(tg)
	if !errors.Is(err, rdmo.ErrHandlerFailed) || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("first WriteBack after restart = %v", err)
	}
	if err := h.WriteBack(tg); err != nil {
		t.Fatalf("second WriteBack = %v", err)
	}
	if le.Uint64(mem[8:]) != 0 {
		t.Fatal("lost value written")
	}
	// A stateless handler does not report it.
	h2 := load(t, pluginhost.LoadOptions{MinBackoff: 10 * time.Millisecond, Env: []string{"RDMO_TESTPLUGIN_STATELESS=1"}})
	if !h2.Info().NoCachedState {
		t.Fatalf("%+v: the declaration did not cross the plugin wire", h2.Info())
	}
	wantStatus(t, run(h2, tg, ctlReq(tg, "pid")), 0)
	pid = h2.Pid()
	wantStatus(t, run(h2, tg, ctlReq(tg, "exit")), rdmo.StatusHandlerFailed)
	waitUp(t, h2, pid)
	if err := h2.WriteBack(tg); err != nil {
		t.Fatalf("WriteBack of a stateless plugin after restart = %v", err)
	}
}

func TestClosedHandler(t *testing.T) {
	h := load(t, pluginhost.LoadOptions{})
	tg, _ := newTarget(t)
	pid := h.Pid()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("plugin %d still running after Close", pid)
	}
	res := run(h, tg, ctlReq(tg, "pid"))
	wantStatus(t, res, rdmo.StatusHandlerFailed)
	if !strings.Contains(res[0].Detail, "closed") {
		t.Errorf("detail %q", res[0].Detail)
	}
	h.ClientRemoved(client)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPluginOpNames: the names a plugin gives its ops, in its Info and with
// rdmo.DefineOp in its main package (which this test binary does not
// link), reach the host with the handshake; ops it does not name have
// none, and the worker labels them by the handler's name.
func TestPluginOpNames(t *testing.T) {
	h := load(t, pluginhost.LoadOptions{})
	got := h.Info().OpNames
	want := map[uint32]string{tp.OpCtl: tp.OpCtlName, tp.OpFetchAdd: tp.OpFetchAddName}
	if !maps.Equal(got, want) {
		t.Fatalf("the host has the plugin's op names %v, want %v", got, want)
	}
	if _, ok := rdmo.DefinedOpName(tp.OpFetchAdd); ok {
		t.Fatal("the plugin's DefineOp name leaked into the host's registry: the test proves nothing")
	}
}

// TestPluginOpNamesRefused: op names a worker will not put in its logs
// and metrics refuse the plugin, naming what is wrong.
func TestPluginOpNamesRefused(t *testing.T) {
	info := rdmo.HandlerInfo{Name: "p", Ops: []uint32{16, 17}}
	if m, err := pluginhost.OpNames(info, uint32(16), "fetch-max"); err != nil || m[16] != "fetch-max" {
		t.Fatalf("a good name: %v %v", m, err)
	}
	for _, c := range []struct {
		pairs []any
		want  string
	}{
		{[]any{uint32(18), "x"}, "does not serve"},
		{[]any{uint32(1), "append2"}, "does not serve"},
		{[]any{uint32(16), "a", uint32(16), "b"}, "twice"},
		{[]any{uint32(16), ""}, "printable"},
		{[]any{uint32(16), "two words"}, "printable"},
		{[]any{uint32(16), "nl\n"}, "printable"},
		{[]any{uint32(16), strings.Repeat("x", rdmo.MaxOpNameLen+1)}, "printable"},
	} {
		if _, err := pluginhost.OpNames(info, c.pairs...); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "plugin p") {
			t.Errorf("%v: %v, want an error naming the plugin and %q", c.pairs, err, c.want)
		}
	}
}

// TestPluginStatusNames: the statuses a plugin process defines reach the
// host with the handshake, so the worker's logs, metrics and errors name
// them. The test plugin defines its status in its main package, which this
// test binary does not link: only the handshake can have told it.
func TestPluginStatusNames(t *testing.T) {
	h := load(t, pluginhost.LoadOptions{})
	if got := tp.StatusRefused.Name(); got != tp.StatusRefusedName {
		t.Fatalf("after Load the host names the plugin's status %q, want %q", got, tp.StatusRefusedName)
	}
	tg, _ := newTarget(t)
	res := run(h, tg, ctlReq(tg, "refuse"))
	wantStatus(t, res, tp.StatusRefused)
	if err := res[0].Status.Err(); err == nil || !strings.Contains(err.Error(), "refused on command") {
		t.Errorf("the status's error is %v, want the plugin's text", err)
	}
}

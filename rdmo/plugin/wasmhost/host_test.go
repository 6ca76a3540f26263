package wasmhost_test

import (
	"context"
	"encoding/binary"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/openrdmo/rdmo/examples/counter"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin/internal/testwasm"
	"github.com/openrdmo/rdmo/rdmo/plugin/wasmhost"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
)

const (
	testPkg    = "github.com/openrdmo/rdmo/rdmo/plugin/internal/testwasm/cmd/rdmo-plugin-testwasm"
	badABIPkg  = "github.com/openrdmo/rdmo/rdmo/plugin/internal/testwasm/cmd/rdmo-plugin-badabi"
	counterPkg = "github.com/openrdmo/rdmo/examples/counter/cmd/rdmo-plugin-counter-wasm"
)

func load(t *testing.T, pkg string, opts wasmhost.LoadOptions) (*wasmhost.Handler, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	opts.Logger = zap.New(core)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := wasmhost.Load(ctx, buildModule(t, pkg), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, logs
}

func sub(region rdmo.RegionID, addr uint64, more ...uint64) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(region))
	b = binary.LittleEndian.AppendUint64(b, addr)
	for _, v := range more {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

// The counter's handler source gives the same results built in and as a
// module, for good and bad requests.
func TestCounterModuleMatchesBuiltin(t *testing.T) {
	h, _ := load(t, counterPkg, wasmhost.LoadOptions{})
	if info := h.Info(); info.Name != counter.Name || info.Version != counter.Version || len(info.Ops) != 1 || info.Ops[0] != counter.Op || !info.NoCachedState {
		t.Fatalf("Info = %+v", info)
	}
	run := func(hd rdmo.Handler) ([]rdmo.Result, []byte) {
		tg := rdmotest.NewTarget(7)
		mem := tg.AddRegion(3, 0x1000, 64)
		tg.AddRegionFor(8, 4, 0x2000, 64)
		var reqs []rdmo.Request
		for i := range 5 {
			reqs = append(reqs, tg.UserReq(counter.Op, counter.Sub(3, 0x1000+8*uint64(i%2), uint64(i+1)), nil, rdmo.FlagAck))
		}
		reqs = append(reqs,
			tg.UserReq(counter.Op, counter.Sub(3, 0x1004, 1), nil, 0),       // misaligned
			tg.UserReq(counter.Op, counter.Sub(3, 0x1040, 1), nil, 0),       // out of bounds
			tg.UserReq(counter.Op, counter.Sub(4, 0x2000, 1), nil, 0),       // another client's
			tg.UserReq(counter.Op, counter.Sub(9, 0x2000, 1), nil, 0),       // unknown region
			tg.UserReq(counter.Op, counter.Sub(3, 0x1000, 1)[:8], nil, 0),   // short sub-header
			tg.UserReq(counter.Op, counter.Sub(3, 0x1000, 1), []byte{1}, 0), // payload
		)
		res := tg.RunBatch(hd, reqs...)
		return res, append([]byte(nil), mem...)
	}
	want, wantMem := run(counter.New())
	got, gotMem := run(h)
	for i := range want {
		if want[i].Status != got[i].Status || want[i].Value != got[i].Value || (want[i].Status == rdmo.StatusOK) != (got[i].Detail == "") {
			t.Errorf("request %d: module %+v, built in %+v", i, got[i], want[i])
		}
	}
	if string(wantMem) != string(gotMem) {
		t.Fatalf("memory: module %x, built in %x", gotMem, wantMem)
	}
}

func TestModuleTargetCalls(t *testing.T) {
	h, logs := load(t, testPkg, wasmhost.LoadOptions{})
	if n := h.Info().OpNames[testwasm.OpPut]; n != "t-put" {
		t.Fatalf("OpNames = %v", h.Info().OpNames)
	}
	tg := rdmotest.NewTarget(7)
	mem := tg.AddRegion(3, 0x1000, 64)
	binary.LittleEndian.PutUint64(mem[16:], 41)
	res := tg.RunBatch(h,
		tg.UserReq(testwasm.OpPut, sub(3, 0x1000), []byte("hello"), 0),
		tg.UserReq(testwasm.OpAdd, sub(3, 0x1010, 1), nil, 0),
		tg.UserReq(testwasm.OpGet, sub(3, 0x1010), nil, 0),
		tg.UserReq(testwasm.OpPut, sub(3, 0x103e), []byte("hello"), 0),
	)
	if res[0].Status != rdmo.StatusOK || res[0].Value != 5 || string(mem[:5]) != "hello" {
		t.Fatalf("put: %+v, memory %q", res[0], mem[:5])
	}
	if res[1].Status != rdmo.StatusOK || res[1].Value != 41 {
		t.Fatalf("add: %+v", res[1])
	}
	if res[2].Status != rdmo.StatusOK || binary.LittleEndian.Uint64(res[2].Data) != 42 {
		t.Fatalf("get: %+v", res[2])
	}
	if res[3].Status != rdmo.StatusOutOfBounds || !strings.Contains(res[3].Detail, "outside region") {
		t.Fatalf("put out of bounds: %+v", res[3])
	}
	if err := tg.CheckGuards(); err != nil {
		t.Fatal(err)
	}
	if h.Failures() != 0 || logs.Len() != 0 {
		t.Fatalf("failures %d, logs %v", h.Failures(), logs.All())
	}
}

// isolated runs one bad request and checks that it fails its batch with
// HandlerFailed and one log line, that the instance is replaced, and that
// the next batch is served.
func isolated(t *testing.T, h *wasmhost.Handler, logs *observer.ObservedLogs, op uint32, want string) {
	t.Helper()
	tg := rdmotest.NewTarget(7)
	mem := tg.AddRegion(3, 0x1000, 64)
	before := h.Failures()
	res := tg.RunBatch(h, tg.UserReq(testwasm.OpPut, sub(3, 0x1000), []byte("a"), 0), tg.UserReq(op, sub(3, 0x1000), nil, 0))
	for i, r := range res {
		if r.Status != rdmo.StatusHandlerFailed || !strings.Contains(r.Detail, want) {
			t.Fatalf("request %d: %+v, want HandlerFailed with %q", i, r, want)
		}
	}
	if h.Failures() != before+1 || logs.FilterMessageSnippet("instance failed").Len() != int(before+1) {
		t.Fatalf("failures %d (before %d), logs %v", h.Failures(), before, logs.All())
	}
	res = tg.RunBatch(h, tg.UserReq(testwasm.OpPut, sub(3, 0x1008), []byte("b"), 0))
	if res[0].Status != rdmo.StatusOK || mem[8] != 'b' {
		t.Fatalf("after the failure: %+v", res[0])
	}
}

func TestModulePanicFailsBatch(t *testing.T) {
	h, logs := load(t, testPkg, wasmhost.LoadOptions{})
	isolated(t, h, logs, testwasm.OpPanic, "handler panicked in HandleBatch: testwasm: asked to panic")
}

func TestModuleMemoryLimit(t *testing.T) {
	h, logs := load(t, testPkg, wasmhost.LoadOptions{MemoryLimit: 64 << 20, BatchTimeout: time.Minute})
	isolated(t, h, logs, testwasm.OpGrow, "out of memory")
}

// A module that loops is stopped after the time bound; meanwhile and
// afterwards other clients are served.
func TestModuleLoopStopped(t *testing.T) {
	h, logs := load(t, testPkg, wasmhost.LoadOptions{BatchTimeout: time.Second})
	looping := make(chan []rdmo.Result)
	go func() {
		tg := rdmotest.NewTarget(9)
		tg.AddRegion(5, 0x1000, 64)
		looping <- tg.RunBatch(h, tg.UserReq(testwasm.OpLoop, sub(5, 0x1000), nil, 0))
	}()
	// Another client is served while the loop runs (or after it ended).
	tg := rdmotest.NewTarget(7)
	mem := tg.AddRegion(3, 0x1000, 64)
	if res := tg.RunBatch(h, tg.UserReq(testwasm.OpPut, sub(3, 0x1000), []byte("x"), 0)); res[0].Status != rdmo.StatusOK || mem[0] != 'x' {
		t.Fatalf("other client: %+v", res[0])
	}
	select {
	case res := <-looping:
		if res[0].Status != rdmo.StatusHandlerFailed || !strings.Contains(res[0].Detail, "time bound") {
			t.Fatalf("looping batch: %+v", res[0])
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("looping batch never stopped")
	}
	if h.Failures() != 1 || logs.FilterMessageSnippet("instance failed").Len() != 1 {
		t.Fatalf("failures %d, logs %v", h.Failures(), logs.All())
	}
	isolated(t, h, logs, testwasm.OpLoop, "time bound")
}

// inlineTarget is a Target whose batch the worker's loop runs (dpu's
// answers RunsInline so).
type inlineTarget struct{ *rdmotest.Target }

func (inlineTarget) RunsInline() bool { return true }

// slowTarget is an inline Target whose Sync takes d, as a target's atomics
// over a slow network or on a loaded machine do.
type slowTarget struct {
	inlineTarget
	d time.Duration
}

func (s slowTarget) Sync(ops []rdmo.RemoteOp) error {
	time.Sleep(s.d) // the Target's latency, not a synchronisation
	return s.inlineTarget.Sync(ops)
}

// The inline time bound counts the module's own running time: a batch
// whose Sync waits longer than it (the worker's time, not the module's)
// completes. The call as a whole is still bounded by BatchTimeout: a Sync
// longer than that stops it, and the detail names that bound.
func TestInlineBoundCountsModuleTime(t *testing.T) {
	h, logs := load(t, testPkg, wasmhost.LoadOptions{BatchTimeout: time.Second, InlineTimeout: 100 * time.Millisecond})
	tg := rdmotest.NewTarget(7)
	tg.AddRegion(3, 0x1000, 64)
	add := func(d time.Duration) rdmo.Result {
		res := make([]rdmo.Result, 1)
		h.HandleBatch(slowTarget{inlineTarget{tg}, d}, []rdmo.Request{tg.UserReq(testwasm.OpAdd, sub(3, 0x1000, 1), nil, 0)}, res)
		tg.EndBatch()
		return res[0]
	}
	for i := range 2 {
		if r := add(300 * time.Millisecond); r.Status != rdmo.StatusOK || r.Value != uint64(i) {
			t.Fatalf("add %d with a Sync of 3 inline bounds: %+v", i, r)
		}
	}
	if h.Failures() != 0 {
		t.Fatalf("failures %d, logs %v", h.Failures(), logs.All())
	}
	if r := add(1500 * time.Millisecond); r.Status != rdmo.StatusHandlerFailed || !strings.Contains(r.Detail, "time bound (1s)") {
		t.Fatalf("add with a Sync past the batch bound: %+v", r)
	}
	if h.Failures() != 1 {
		t.Fatalf("failures %d, logs %v", h.Failures(), logs.All())
	}
}

// A module that loops in a batch the worker's loop runs is stopped after
// the inline time bound, not the batch time bound: the detail names the
// bound that stopped it. The instance is replaced and the next batch,
// inline too, is served.
func TestModuleLoopStoppedInline(t *testing.T) {
	h, logs := load(t, testPkg, wasmhost.LoadOptions{BatchTimeout: time.Hour, InlineTimeout: 50 * time.Millisecond})
	tg := rdmotest.NewTarget(7)
	mem := tg.AddRegion(3, 0x1000, 64)
	run := func(reqs ...rdmo.Request) []rdmo.Result {
		res := make([]rdmo.Result, len(reqs))
		h.HandleBatch(inlineTarget{tg}, reqs, res)
		tg.EndBatch()
		return res
	}
	res := run(tg.UserReq(testwasm.OpPut, sub(3, 0x1000), []byte("a"), 0), tg.UserReq(testwasm.OpLoop, sub(3, 0x1000), nil, 0))
	for i, r := range res {
		if r.Status != rdmo.StatusHandlerFailed || !strings.Contains(r.Detail, "time bound (50ms)") {
			t.Fatalf("request %d: %+v, want HandlerFailed after the inline bound", i, r)
		}
	}
	if h.Failures() != 1 || logs.FilterMessageSnippet("instance failed").Len() != 1 {
		t.Fatalf("failures %d, logs %v", h.Failures(), logs.All())
	}
	if res := run(tg.UserReq(testwasm.OpPut, sub(3, 0x1008), []byte("b"), 0)); res[0].Status != rdmo.StatusOK || mem[8] != 'b' {
		t.Fatalf("after the failure: %+v", res[0])
	}
}

// A forged pointer fails the call (OutOfBounds, nothing touched) without
// killing the instance.
func TestModuleForgedPointer(t *testing.T) {
	h, logs := load(t, testPkg, wasmhost.LoadOptions{})
	tg := rdmotest.NewTarget(7)
	mem := tg.AddRegion(3, 0x1000, 64)
	res := tg.RunBatch(h, tg.UserReq(testwasm.OpForge, sub(3, 0x1000), nil, 0))
	if res[0].Status != rdmo.StatusOutOfBounds {
		t.Fatalf("forged: %+v", res[0])
	}
	if string(mem) != string(make([]byte, 64)) || tg.Stats().Puts != 0 {
		t.Fatalf("memory touched: %x", mem)
	}
	if h.Failures() != 0 || logs.Len() != 0 {
		t.Fatalf("failures %d, logs %v", h.Failures(), logs.All())
	}
}

func TestModuleConcurrentClients(t *testing.T) {
	h, _ := load(t, counterPkg, wasmhost.LoadOptions{})
	shared := rdmotest.NewTarget(1)
	mem := shared.AddRegion(3, 0x1000, 8)
	var wg sync.WaitGroup
	const clients, batches = 4, 50
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tg := shared.Peer(rdmo.ClientID(c + 1))
			for range batches {
				res := tg.RunBatch(h, tg.UserReq(counter.Op, counter.Sub(3, 0x1000, 1), nil, 0))
				if res[0].Status != rdmo.StatusOK && res[0].Status != rdmo.StatusRegionNotOwned {
					t.Errorf("client %d: %+v", c+1, res[0])
					return
				}
			}
		}()
	}
	wg.Wait()
	_ = mem
}

func TestBadABIRefused(t *testing.T) {
	_, err := wasmhost.Load(context.Background(), buildModule(t, badABIPkg), wasmhost.LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "ABI version 99") {
		t.Fatalf("Load = %v, want an ABI version refusal", err)
	}
}

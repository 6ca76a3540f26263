package ops_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/host/target"
	"github.com/openrdmo/rdmo/internal/testproc"
	"github.com/openrdmo/rdmo/plugins/ops"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/rdmo/rdmotest"
	"github.com/openrdmo/rdmo/ucp/ucptest"
	"github.com/openrdmo/rdmo/urom/rdmoworker"
	"github.com/openrdmo/rdmo/urom/service"
	"github.com/openrdmo/rdmo/urom/uromtest"
)

// The test binary doubles as a UROM worker process (role "worker").
func TestMain(m *testing.M) {
	if testproc.Role() == "worker" {
		if err := service.ServeWorker(context.Background(), os.NewFile(service.ControlFD, "control"), rdmoworker.Factory, nil); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var names = []string{ops.NameGet, ops.NameFetchAdd, ops.NameCompareSwap, ops.NameIndirect, ops.NameAlloc, ops.NameKV}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// pluginDir builds the pack's six plugin binaries and its fetch-add module
// once per test run.
func pluginDir(t testing.TB) string {
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "rdmo-ops-plugins-")
		if buildErr != nil {
			return
		}
		args := []string{"build", "-o", buildDir + string(filepath.Separator)}
		for _, n := range names {
			args = append(args, "github.com/openrdmo/rdmo/plugins/ops/cmd/rdmo-plugin-"+n)
		}
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		// fetch-add as a WebAssembly module too (the op pack's only one).
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", filepath.Join(buildDir, "rdmo-plugin-fetch-add.wasm"),
			"github.com/openrdmo/rdmo/plugins/ops/cmd/rdmo-plugin-fetch-add-wasm")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("GOOS=wasip1 go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

// startService runs a UROM service in this process whose workers are this
// test binary.
func startService(t testing.TB, tr ucptest.Transport, plugins bool) string {
	cfg := service.Config{
		Builtins:         rdmoworker.Builtins(),
		MaxWorkers:       2,
		WorkerCommand:    []string{os.Args[0], "-test.run=^$"},
		WorkerEnv:        append([]string{testproc.RoleEnv + "=worker"}, tr.Env()...),
		ComponentVersion: command.ComponentVersion,
	}
	if plugins {
		cfg.PluginPath, cfg.Probe = []string{pluginDir(t)}, rdmoworker.Probe
	}
	return uromtest.Start(t, cfg)
}

// TestWorkerModel runs the model test's random requests through a real
// RDMO worker process (built-in handlers, then the plugin binaries) over
// every transport, pipelined with CallAsync, and compares every answer and
// the target's memory with the model.
func TestWorkerModel(t *testing.T) {
	for _, tr := range ucptest.Transports {
		for _, mode := range []string{"builtin", "plugin"} {
			t.Run(tr.Name+"/"+mode, func(t *testing.T) {
				ucptest.CheckLeaks(t)
				if mode == "plugin" {
					pluginDir(t) // built outside the test's time budget
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				fx := newFixture(t, ctx, tr, mode == "plugin")
				mem, reg := fx.mem, fx.reg
				// The heap at the real address, mirrored by an rdmotest.Target
				// the model and the generator use.
				useLayout(mem.Address(), rdmo.RegionID(reg.ID), false)
				defer useLayout(0x10000, 1, true)
				rng := rand.New(rand.NewPCG(7, uint64(len(tr.Name))))
				mirror := heap(rng)
				copy(mem.Bytes(), mirror.Memory(own))
				md := model{rdmotest.NewModel(mirror)}
				g := gen{rng: rng, tg: mirror}

				in := fx.connect(t, ctx)
				ok := 0
				for round := 0; round < 40; round++ {
					reqs := make([]rdmo.Request, 1+rng.IntN(12))
					waits := make([]*initiator.CallWait, len(reqs))
					for i := range reqs {
						reqs[i] = g.make(names[rng.IntN(len(names))])
						var err error
						if waits[i], err = in.CallAsync(ctx, reqs[i].Op, reqs[i].Sub, reqs[i].Payload); err != nil {
							t.Fatal(err)
						}
					}
					for i, w := range waits {
						got, err := w.Wait(ctx)
						want := md.run(&reqs[i])
						if got.Status != want.st || got.Value != want.value || !bytes.Equal(got.Data, want.data) {
							t.Fatalf("round %d request %d (op %d, sub %x): got %s %#x %x (%s, %v); model %s %#x %x",
								round, i, reqs[i].Op, reqs[i].Sub, got.Status.Name(), got.Value, got.Data, got.Detail, err,
								want.st.Name(), want.value, want.data)
						}
						if got.Status == rdmo.StatusOK {
							ok++
						} else if got.Detail == "" {
							t.Errorf("failure %s without a detail", got.Status.Name())
						}
					}
					// What the model wrote, the target's memory holds.
					if !bytes.Equal(mem.Bytes(), md.m.Read(own, base, size)) {
						t.Fatalf("round %d: target memory differs from the model", round)
					}
				}
				if ok == 0 {
					t.Fatal("no request succeeded")
				}
			})
		}
	}
}

// fixture is a target with one registered region of size bytes on a worker
// process that runs the pack (built in or as plugins).
type fixture struct {
	tr  ucptest.Transport
	mem interface {
		Bytes() []byte
		Address() uint64
	}
	reg   target.Region
	tg    *target.Target
	local *target.Local
}

func newFixture(t testing.TB, ctx context.Context, tr ucptest.Transport, plugins bool) *fixture {
	return newFixtureOf(t, ctx, tr, map[bool]string{true: "plugin"}[plugins])
}

// newFixtureOf is newFixture for a form of the pack: "" built in, "plugin"
// (every op a plugin process) or "wasm" (fetch-add a WebAssembly module,
// the others built in).
func newFixtureOf(t testing.TB, ctx context.Context, tr ucptest.Transport, form string) *fixture {
	plugins := form == "plugin"
	addr := startService(t, tr, form != "")
	local, err := target.NewLocal(target.LocalOptions{Config: tr.Config()})
	if err != nil {
		ucptest.SkipOrFail(t, "UCX unavailable: %v", err)
	}
	t.Cleanup(func() { local.Close() })
	mem, err := local.Allocate(size)
	if err != nil {
		t.Fatal(err)
	}
	local.Start()
	list := names
	switch {
	case plugins:
		list = nil
		for _, n := range names {
			list = append(list, "plugin:"+n)
		}
	case form == "wasm":
		list = nil
		for _, n := range names {
			if n == ops.NameFetchAdd {
				n = "wasm:" + n
			}
			list = append(list, n)
		}
	}
	tg, err := target.New(ctx, target.Options{ServiceAddress: addr, Env: tr.Env(), ClientID: client,
		Address: local.Address(), Plugins: list})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	reg, err := tg.Register(ctx, mem)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{tr: tr, mem: mem, reg: reg, tg: tg, local: local}
}

// connect makes an initiator with a request queue on the worker.
func (fx *fixture) connect(t testing.TB, ctx context.Context) *initiator.Initiator {
	in, err := initiator.New(initiator.Options{WorkerAddress: fx.tg.WorkerAddress(), ClientID: client, UCX: fx.tr.Config()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	if _, err := fx.tg.CreateRQ(ctx, in.Address()); err != nil {
		t.Fatal(err)
	}
	return in
}

// Where the worker maps target memory (shm), a built-in op's batch runs on
// the worker's loop when its executor is idle, and its atomics are the
// CPU's; so does the same op as a WebAssembly module (its handshake
// declares Inline); the same op as a plugin always runs on the executor
// (its calls cross a process boundary), its atomics through the worker's
// Target still the CPU's. Over tcp nothing is mapped: neither happens.
// Every answer is checked, so a wrong path shows as a wrong value, not only
// in the counts.
func TestInlineForms(t *testing.T) {
	const calls = 10
	for _, tr := range ucptest.Transports {
		for _, mode := range []string{"builtin", "plugin", "wasm"} {
			t.Run(tr.Name+"/"+mode, func(t *testing.T) {
				if mode != "builtin" {
					pluginDir(t) // built outside the test's time budget
				}
				ucptest.CheckLeaks(t)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				fx := newFixtureOf(t, ctx, tr, map[string]string{"plugin": "plugin", "wasm": "wasm"}[mode])
				in := fx.connect(t, ctx)
				region, counter := rdmo.RegionID(fx.reg.ID), fx.mem.Address()+64
				binary.LittleEndian.PutUint64(fx.mem.Bytes()[64:], 1000)
				st0, err := fx.tg.Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for i := uint64(0); i < calls; i++ {
					res, err := in.Call(ctx, ops.OpFetchAdd, ops.AtomicReq{Region: region, Addr: counter, Operand: 1}.FetchAddSub(), nil)
					if err != nil || res.Value != 1000+i {
						t.Fatalf("fetch-add %d: %+v, %v; want old value %d", i, res, err, 1000+i)
					}
				}
				st, err := fx.tg.Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				inline, cpu := st.InlineBatches-st0.InlineBatches, st.CPUAtomics-st0.CPUAtomics
				t.Logf("%d of %d batches inline, %d CPU atomics", inline, st.Batches-st0.Batches, cpu)
				mapped := tr.Name == "shm"
				switch {
				case mapped && cpu != calls, !mapped && cpu != 0:
					t.Errorf("%d CPU atomics, want %d", cpu, map[bool]int{true: calls}[mapped])
				case mapped && mode != "plugin" && inline == 0:
					t.Error("no batch ran on the loop")
				case (!mapped || mode == "plugin") && inline != 0:
					t.Errorf("%d batches ran on the loop", inline)
				}
			})
		}
	}
}

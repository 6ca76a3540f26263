package e2e_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

var (
	wasmOnce sync.Once
	wasmPath string
	wasmErr  error
)

// wasmDir builds the WebAssembly test module (rdmo-plugin-testwasm.wasm)
// once per test run with the Go toolchain (GOOS=wasip1).
func wasmDir(t testing.TB) string {
	wasmOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rdmo-wasm-")
		if err != nil {
			wasmErr = err
			return
		}
		wasmPath = dir
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", filepath.Join(dir, "rdmo-plugin-testwasm.wasm"),
			"github.com/openrdmo/rdmo/rdmo/plugin/internal/testwasm/cmd/rdmo-plugin-testwasm")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if b, err := cmd.CombinedOutput(); err != nil {
			wasmErr = fmt.Errorf("build the wasm test module: %v\n%s", err, b)
		}
	})
	if wasmErr != nil {
		t.Fatal(wasmErr)
	}
	return wasmPath
}

// Ops of the test module (rdmo/plugin/internal/testwasm).
const (
	testwasmAdd   = rdmo.OpUserBase + 1
	testwasmPanic = rdmo.OpUserBase + 2
)

func testwasmReq(client uint64, op uint32, region rdmo.RegionID, addr uint64, more ...uint64) []byte {
	sub := binary.LittleEndian.AppendUint64(nil, uint64(region))
	sub = binary.LittleEndian.AppendUint64(sub, addr)
	for _, v := range more {
		sub = binary.LittleEndian.AppendUint64(sub, v)
	}
	hdr, err := wire.AppendUserRequest(nil, wire.Header{ClientID: client, Op: op, Flags: rdmo.FlagAck}, sub)
	if err != nil {
		panic(err)
	}
	return hdr
}

// A WebAssembly module in a real worker process: its adds are acked with
// their old values; a request that makes it panic fails typed
// (HandlerFailed) and the next requests are served by a new instance.
func TestWasmModuleInWorker(t *testing.T) {
	tr := ucptest.Transports[0]
	ucptest.CheckLeaks(t)
	tg := newTargetWith(t, tr, func() rdmoWorker {
		return startUROMWorker(t, tr, []string{"append", "flush", "scatter", "wasm:testwasm"}, nil)
	})
	r := tg.register(4096)
	raw := tg.raw(t, tr)
	add := func() wire.AckResponse {
		raw.send(testwasmReq(1, testwasmAdd, rdmo.RegionID(r.id), r.base()+64, 1), nil)
		a, err := wire.ParseAck(raw.next())
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for i := range uint64(10) {
		if a := add(); a.Status != rdmo.StatusOK || a.Value != i {
			t.Fatalf("add %d: %+v", i, a)
		}
	}
	raw.send(testwasmReq(1, testwasmPanic, rdmo.RegionID(r.id), r.base()), nil)
	a, err := wire.ParseAck(raw.next())
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != rdmo.StatusHandlerFailed || a.DetailLen == 0 {
		t.Fatalf("panicking request: %+v", a)
	}
	for i := uint64(10); i < 20; i++ {
		if a := add(); a.Status != rdmo.StatusOK || a.Value != i {
			t.Fatalf("add %d after the panic: %+v", i, a)
		}
	}
	if rsp := raw.flush(9); rsp.Failed != 1 {
		t.Fatalf("flush %+v, want the one failed request", rsp)
	}
	if got := le64get(r.bytes()[64:]); got != 20 {
		t.Fatalf("counter %d, want 20", got)
	}
}

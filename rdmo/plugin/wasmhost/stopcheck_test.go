package wasmhost

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// loopModule is a module by hand: one memory and an export f whose body is
// `loop; br 0; end`, a loop that never ends.
var loopModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type: () -> ()
	0x03, 0x02, 0x01, 0x00, // function 0 of type 0
	0x05, 0x03, 0x01, 0x00, 0x01, // memory, 1 page
	0x07, 0x05, 0x01, 0x01, 'f', 0x00, 0x00, // export "f" = function 0
	0x0a, 0x09, 0x01, 0x07, 0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b, // loop; br 0; end; end
}

// The check stops a loop that calls nothing, when the stop global is set
// from another goroutine, without wazero's context check; a garbage
// collection meanwhile does not wait for the loop forever (the check
// leaves the compiled code every stopEvery loop heads).
func TestStopCheckStopsLoop(t *testing.T) {
	bin, err := addStopCheck(loopModule)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	defer rt.Close(ctx)
	mod, err := rt.InstantiateWithConfig(ctx, bin, wazero.NewModuleConfig())
	if err != nil {
		t.Fatal(err)
	}
	stop, ok := mod.ExportedGlobal(stopGlobal).(api.MutableGlobal)
	if !ok {
		t.Fatal("no stop global")
	}
	done := make(chan error, 1)
	go func() { _, err := mod.ExportedFunction("f").Call(ctx); done <- err }()
	// The loop runs until told to stop; a GC meanwhile must complete.
	select {
	case err := <-done:
		t.Fatalf("the loop returned before it was stopped: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	gcDone := make(chan struct{})
	go func() { runtime.GC(); close(gcDone) }()
	select {
	case <-gcDone:
	case <-time.After(2 * time.Minute):
		t.Fatal("a garbage collection waited for the loop")
	}
	stop.Set(1)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("stopped loop: %v, want an unreachable trap", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the loop was not stopped")
	}
}

// A binary the rewrite cannot read is refused (Load then runs it under
// wazero's own check).
func TestStopCheckRefuses(t *testing.T) {
	bad := append([]byte(nil), loopModule...)
	bad[len(bad)-4] = 0xff // an opcode that does not exist, in f's body
	for _, bin := range [][]byte{nil, []byte("not wasm"), loopModule[:20], bad} {
		if _, err := addStopCheck(bin); err == nil {
			t.Errorf("addStopCheck(%x) took it", bin)
		}
	}
}

// A module's bytes are untrusted: whatever they are, addStopCheck returns
// an error or a binary (never panics), and a binary it returns for a
// module wazero accepts is one wazero accepts too (the rewrite keeps a
// valid module valid).
func FuzzAddStopCheck(f *testing.F) {
	f.Add(loopModule)
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add(loopModule[:len(loopModule)-3])
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	f.Cleanup(func() { rt.Close(ctx) })
	f.Fuzz(func(t *testing.T, bin []byte) {
		out, err := addStopCheck(bin)
		if err != nil {
			return
		}
		in, err := rt.CompileModule(ctx, bin)
		if err != nil {
			return // not a valid module to begin with
		}
		in.Close(ctx)
		cm, err := rt.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("a valid module no longer compiles after the rewrite: %v\nin:  %x\nout: %x", err, bin, out)
		}
		cm.Close(ctx)
	})
}

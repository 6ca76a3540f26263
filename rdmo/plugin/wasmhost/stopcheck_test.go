package wasmhost

import (
	"bytes"
	"context"
	"encoding/binary"
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
	t.Run("loop", func(t *testing.T) { testStopCheckStops(t, loopModule, "f") })
	// A dispatch loop that jumps forward, then back, forever: the forward
	// jump is made direct, the backward one keeps the check.
	t.Run("dispatch", func(t *testing.T) { testStopCheckStops(t, dispatchModule(), "spin") })
}

func testStopCheckStops(t *testing.T, mod []byte, fn string) {
	bin, err := addStopCheck(mod)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	defer rt.Close(ctx)
	inst, err := rt.InstantiateWithConfig(ctx, bin, wazero.NewModuleConfig())
	if err != nil {
		t.Fatal(err)
	}
	stop, ok := inst.ExportedGlobal(stopGlobal).(api.MutableGlobal)
	if !ok {
		t.Fatal("no stop global")
	}
	done := make(chan error, 1)
	go func() { _, err := inst.ExportedFunction(fn).Call(ctx); done <- err }()
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

// dispatchModule is a module by hand with two functions shaped as Go
// compiles a function (rewriteBody): a loop whose head is two blocks and a
// br_table on a pc local, the code of resume point 0 after the inner
// block's end and of resume point 1 after the outer one's.
//
// f(n) adds 1 at point 0, jumps forward to point 1 (i32.const 1;
// local.set pc; br loop), adds 10 there, and while n > 0 counts n down and
// jumps back to point 0: it returns 11*(n+1). spin jumps forward and back
// forever.
func dispatchModule() []byte {
	head := func(pc byte) []byte { // loop; block; block; local.get pc; br_table 0 1 (1); end
		return []byte{0x03, 0x40, 0x02, 0x40, 0x02, 0x40, 0x20, pc, 0x0e, 0x02, 0x00, 0x01, 0x01, 0x0b}
	}
	f := []byte{0x01, 0x02, 0x7f} // locals: pc (1), acc (2)
	f = append(f, head(1)...)
	f = append(f, 0x20, 0x02, 0x41, 0x01, 0x6a, 0x21, 0x02) // acc += 1
	f = append(f, 0x41, 0x01, 0x21, 0x01, 0x0c, 0x01)       // pc = 1; br loop (forward)
	f = append(f, 0x0b)                                     // end: point 1
	f = append(f, 0x20, 0x02, 0x41, 0x0a, 0x6a, 0x21, 0x02) // acc += 10
	f = append(f, 0x20, 0x00, 0x04, 0x40)                   // if n
	f = append(f, 0x20, 0x00, 0x41, 0x01, 0x6b, 0x21, 0x00) // n -= 1
	f = append(f, 0x41, 0x00, 0x21, 0x01, 0x0c, 0x01)       // pc = 0; br loop (backward)
	f = append(f, 0x0b, 0x0b, 0x20, 0x02, 0x0b)             // end if; end loop; acc; end
	spin := []byte{0x01, 0x01, 0x7f}                        // locals: pc (0)
	spin = append(spin, head(0)...)
	spin = append(spin, 0x41, 0x01, 0x21, 0x00, 0x0c, 0x01) // pc = 1; br loop (forward)
	spin = append(spin, 0x0b)                               // end: point 1
	spin = append(spin, 0x41, 0x00, 0x21, 0x00, 0x0c, 0x00) // pc = 0; br loop (backward)
	spin = append(spin, 0x0b, 0x0b)                         // end loop; end
	sec := func(b []byte, id byte, body []byte) []byte {
		return append(binary.AppendUvarint(append(b, id), uint64(len(body))), body...)
	}
	code := []byte{0x02}
	for _, body := range [][]byte{f, spin} {
		code = append(binary.AppendUvarint(code, uint64(len(body))), body...)
	}
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = sec(m, 1, []byte{0x02, 0x60, 0x01, 0x7f, 0x01, 0x7f, 0x60, 0x00, 0x00}) // (i32) -> i32, () -> ()
	m = sec(m, 3, []byte{0x02, 0x00, 0x01})
	m = sec(m, 5, []byte{0x01, 0x00, 0x01})
	m = sec(m, 7, []byte{0x02, 0x01, 'f', 0x00, 0x00, 0x04, 's', 'p', 'i', 'n', 0x00, 0x01})
	return sec(m, 10, code)
}

// The rewrite sends a dispatch loop's forward jump straight to its resume
// point (br 0, the outer block, instead of br 1, the loop), leaves the
// backward one through the loop head, and branches a call (pc 0) to point
// 0 ahead of the br_table; the function computes what it did.
func TestStopCheckDirectJumps(t *testing.T) {
	in := dispatchModule()
	out, err := addStopCheck(in)
	if err != nil {
		t.Fatal(err)
	}
	forward := []byte{0x41, 0x01, 0x21, 0x01, 0x0c}
	if !bytes.Contains(in, append(forward, 0x01)) || !bytes.Contains(out, append(forward, 0x00)) || bytes.Contains(out, append(forward, 0x01)) {
		t.Errorf("f's forward jump is not direct after the rewrite:\n%x", out)
	}
	if backward := []byte{0x41, 0x00, 0x21, 0x01, 0x0c, 0x01}; !bytes.Contains(out, backward) {
		t.Errorf("f's backward jump was changed:\n%x", out)
	}
	// local.get pc; i32.eqz; br_if 0; local.get pc; br_table
	if entry := []byte{0x20, 0x01, 0x45, 0x0d, 0x00, 0x20, 0x01, 0x0e}; !bytes.Contains(out, entry) {
		t.Errorf("f's entry has no direct branch:\n%x", out)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	defer rt.Close(ctx)
	for _, bin := range [][]byte{in, out} {
		m, err := rt.InstantiateWithConfig(ctx, bin, wazero.NewModuleConfig().WithName(""))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []uint64{0, 1, 5} {
			res, err := m.ExportedFunction("f").Call(ctx, n)
			if err != nil || res[0] != 11*(n+1) {
				t.Errorf("f(%d) = %v, %v; want %d", n, res, err, 11*(n+1))
			}
		}
		m.Close(ctx)
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
	f.Add(dispatchModule())
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

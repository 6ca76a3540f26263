package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFormModes(t *testing.T) {
	got, err := expandModes([]string{"forms"}, nil)
	want := []string{ModeFetchAddPipelined, ModeFetchAddWasm, ModeFetchAddWasmPipe, ModeFetchAddPlugin, ModeFetchAddPluginPipe}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("forms: got %v %v, want %v", got, err, want)
	}
	for m, w := range map[string]string{
		ModeFetchAdd: "owned", ModeFetchAddPipelined: "owned", ModeNativeFetchAdd: "",
		ModeFetchAddWasm: "owned+wasm:fetch-add", ModeFetchAddWasmPipe: "owned+wasm:fetch-add",
		ModeFetchAddPlugin: "owned+plugin:fetch-add", ModeFetchAddPluginPipe: "owned+plugin:fetch-add",
	} {
		r := mustRow(m)
		if got := r.worker(); got != w {
			t.Errorf("%s's worker is %q, want %q", m, got, w)
		}
		s, p := splitWorker(r.worker())
		if s != r.Strategy || (r.Plugins == "") != (p == nil) || (p != nil && p[0] != r.Plugins) {
			t.Errorf("%s: splitWorker(%q) = %q, %v", m, r.worker(), s, p)
		}
	}
	for m, b := range map[string]string{ModeFetchAddWasm: ModeFetchAdd, ModeFetchAddWasmPipe: ModeFetchAddPipelined, ModeFetchAddPluginPipe: ModeFetchAddWasmPipe} {
		if r := mustRow(m); r.Baseline != b || r.Goal == nil || r.Goal.Kind == "" {
			t.Errorf("%s: baseline %q goal %+v, want %q and a goal", m, r.Baseline, r.Goal, b)
		}
	}
}

// buildForms builds the op pack's fetch-add as a go-plugin binary and as
// a WebAssembly module into dir, with the Go toolchain running the test.
func buildForms(t *testing.T, dir string) {
	t.Helper()
	gotool, err := exec.LookPath("go")
	if err != nil {
		gotool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard
	defer cancel()
	for _, b := range []struct {
		out, pkg string
		env      []string
	}{
		{"rdmo-plugin-fetch-add", "github.com/openrdmo/rdmo/plugins/ops/cmd/rdmo-plugin-fetch-add", nil},
		{"rdmo-plugin-fetch-add.wasm", "github.com/openrdmo/rdmo/plugins/ops/cmd/rdmo-plugin-fetch-add-wasm", []string{"GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0"}},
	} {
		args := []string{"build", "-o", filepath.Join(dir, b.out), b.pkg}
		if b.env != nil {
			args = slices.Insert(args, 1, "-buildmode=c-shared")
		}
		cmd := exec.CommandContext(ctx, gotool, args...)
		cmd.Env = append(os.Environ(), b.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
	}
}

// TestShortForms runs the handler-form rows between real processes: the
// built-in fetch-add, the module in the worker and the plugin process,
// one call at a time and pipelined, every answer and counter checked.
func TestShortForms(t *testing.T) {
	ucxAvailable(t)
	dir := t.TempDir()
	buildForms(t, dir)
	o := DefaultOptions()
	o.Topology = TopologyDPU
	o.Sizes = []int{8}
	o.Initiators = 2
	o.PluginPath = []string{dir}
	o.Modes = []string{ModeFetchAdd, ModeFetchAddPipelined, ModeFetchAddWasm, ModeFetchAddWasmPipe, ModeFetchAddPlugin, ModeFetchAddPluginPipe}
	rep := runShort(t, o)
	for _, row := range rep.Rows {
		if r := mustRow(row.Mode); row.Plugins != r.Plugins {
			t.Errorf("row %s: plugins %q, want %q", row.Mode, row.Plugins, r.Plugins)
		}
	}
}

// TestFormWithoutModule: a form whose module is not on the plugin path
// fails its rows with the reason; the run's other rows are measured.
func TestFormWithoutModule(t *testing.T) {
	ucxAvailable(t)
	var out bytes.Buffer
	o := DefaultOptions()
	o.Topology, o.Sizes, o.Short = TopologyDPU, []int{8}, true
	o.Executable, o.Stdout, o.Stderr = os.Args[0], &out, os.Stderr
	o.PluginPath = []string{t.TempDir()}
	o.Modes = []string{ModeFetchAdd, ModeFetchAddWasm}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute) // a hang guard
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	for _, row := range rep.Rows {
		switch row.Mode {
		case ModeFetchAdd:
			if row.Error != "" || !row.Verified {
				t.Errorf("%s: error %q, verified %v", row.Mode, row.Error, row.Verified)
			}
		case ModeFetchAddWasm:
			if !strings.Contains(row.Error, `no plugin "wasm:fetch-add"`) || !strings.Contains(row.Error, "make bench-plugins") {
				t.Errorf("%s: error %q, want the missing module and how to build it", row.Mode, row.Error)
			}
		}
	}
	if len(rep.Rows) != 2 {
		t.Errorf("%d rows, want 2\n%s", len(rep.Rows), out.String())
	}
}

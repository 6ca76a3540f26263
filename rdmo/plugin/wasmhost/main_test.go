package wasmhost_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var (
	buildMu  sync.Mutex
	built    = map[string]string{}
	buildDir string
)

// buildModule builds a wasip1 reactor module from a main package with the
// Go toolchain running the tests, once per test run.
func buildModule(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	p, err := BuildModule(buildDir, pkg)
	if err != nil {
		t.Fatal(err)
	}
	built[pkg] = p
	return p
}

// BuildModule runs GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared.
func BuildModule(dir, pkg string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := filepath.Join(dir, filepath.Base(pkg)+".wasm")
	gotool := "go"
	if p, err := exec.LookPath("go"); err == nil {
		gotool = p
	} else if r := os.Getenv("GOROOT"); r != "" {
		gotool = filepath.Join(r, "bin", "go")
	}
	cmd := exec.CommandContext(ctx, gotool, "build", "-buildmode=c-shared", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("GOOS=wasip1 go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "rdmo-wasmhost-test")
	if err != nil {
		panic(err)
	}
	buildDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

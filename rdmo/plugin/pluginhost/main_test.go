package pluginhost_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/rdmo"
	tp "github.com/openrdmo/rdmo/rdmo/plugin/internal/testplugin"
	"github.com/openrdmo/rdmo/rdmo/plugin/pluginhost"
)

// testPluginPath is the test plugin binary, built once by TestMain.
var testPluginPath string

// binDir holds the binaries the tests build.
var binDir string

var (
	builtMu sync.Mutex
	built   = map[string]string{}
)

// buildOnce builds a main package (without -race) once per test run.
func buildOnce(t *testing.T, pkg string) string {
	t.Helper()
	builtMu.Lock()
	defer builtMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := goBuild(ctx, binDir, pkg, false)
	if err != nil {
		t.Fatal(err)
	}
	built[pkg] = p
	return p
}

const testPluginPkg = "github.com/openrdmo/rdmo/rdmo/plugin/internal/testplugin/cmd/rdmo-plugin-test"

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// goBuild builds pkg into dir and returns the binary's path.
func goBuild(ctx context.Context, dir, pkg string, race bool) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, goTool(), append(args, pkg)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

func TestMain(m *testing.M) {
	if path := os.Getenv(envHostMode); path != "" {
		os.Exit(hostMode(path))
	}
	os.Exit(runTests(m))
}

// envHostMode makes the test binary a worker stand-in: it loads the plugin
// at the path given, prints the plugin's pid and waits to be killed
// (TestWorkerDeathEndsPlugin).
const envHostMode = "RDMO_PLUGIN_TEST_HOST"

// envHostClash makes the stand-in name the test plugin's status
// differently before it loads the plugin (TestPluginStatusClash).
const envHostClash = "RDMO_PLUGIN_TEST_CLASH"

func hostMode(path string) int {
	if os.Getenv(envHostClash) != "" {
		rdmo.DefineStatus(tp.StatusRefused, "HostsOwn", "the host's meaning of the code")
	}
	h, err := pluginhost.Load(context.Background(), path, pluginhost.LoadOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(h.Pid())
	time.Sleep(time.Minute)
	return 0
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "rdmo-plugin-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	// The plugin is built with -race when the tests are, so the plugin
	// side of the protocol is checked too; its race runtime must not sleep
	// a second at exit (GORACE's default), or every Close waits for it.
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	testPluginPath, err = goBuild(context.Background(), dir, testPluginPkg, raceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	pluginhost.CleanupClients()
	return code
}

package dpucmd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/internal/testproc"
	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/urom"
)

// These tests run `rdmo dpu` as a real process, with real worker and
// plugin processes, real targets and initiators (rdmo -m server/client):
// what an operator sees (health, readiness, metrics, rdmo workers) and what
// a shutdown does to the hosts.

var (
	rdmoBin   string // built by TestMain
	pluginDir string // holds rdmo-plugin-counter
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rdmo-dpucmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rdmoBin = filepath.Join(dir, "rdmo")
	pluginDir = filepath.Join(dir, "plugins")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	for _, b := range [][2]string{
		{rdmoBin, "github.com/openrdmo/rdmo/cmd/rdmo"},
		{filepath.Join(pluginDir, "rdmo-plugin-counter"), "github.com/openrdmo/rdmo/examples/counter/cmd/rdmo-plugin-counter"},
	} {
		// A plain build, as `go build` makes it: whatever VCS facts the
		// toolchain records here (TestVersionFromToolchain).
		if buildErr = testproc.GoBuild(ctx, b[0], b[1], "-buildvcs=auto"); buildErr != nil {
			break
		}
	}
	cancel()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const exitTimeout = 90 * time.Second

func newRun(t *testing.T) {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	testproc.CheckNoLeftovers(t)
}

// start runs the rdmo binary with args.
func start(t *testing.T, name string, args ...string) *testproc.Proc {
	t.Helper()
	return testproc.StartCommand(t, append([]string{rdmoBin}, args...),
		testproc.Options{Name: name, Env: []string{"UCX_WARN_UNUSED_ENV_VARS=n"}, Grace: -1})
}

// waitFor polls until the process's output matches re.
func waitFor(t *testing.T, p *testproc.Proc, re string, timeout time.Duration) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(timeout)
	for {
		if m := rx.FindStringSubmatch(p.Stderr() + p.Stdout()); m != nil {
			return m
		}
		select {
		case <-p.Done():
			if m := rx.FindStringSubmatch(p.Stderr() + p.Stdout()); m != nil {
				return m
			}
			t.Fatalf("%s exited (status %d) before printing %q:\n%s", p, p.ExitCode(), re, p.Stderr())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not print %q within %v:\n%s", p, re, timeout, p.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startDPU runs `rdmo dpu` on free loopback ports with metrics and returns
// it, its UROM address and its metrics base URL.
func startDPU(t *testing.T, args ...string) (*testproc.Proc, string, string) {
	t.Helper()
	p := start(t, "dpu", append([]string{"dpu", "--listen", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"}, args...)...)
	// The announce line: "UROM_LISTEN host:port", or its JSON form with
	// --log-format json.
	addr := waitFor(t, p, `(?:UROM_LISTEN |\{"urom_listen":")([^\s"]+)`, 30*time.Second)[1]
	murl := waitFor(t, p, `serving metrics.*"url": ?"(http://[^"]+)/metrics"`, 30*time.Second)[1]
	return p, addr, murl
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// scrape reads /metrics into "name{labels}" → value, and name → type.
func scrape(t *testing.T, murl string) (map[string]float64, map[string]string) {
	t.Helper()
	code, body := get(t, murl+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	vals, types := map[string]float64{}, map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		vals[line[:i]] = v
	}
	return vals, types
}

// waitMetric polls /metrics until series (name{labels}, as served) has
// at least want.
func waitMetric(t *testing.T, murl, series string, want float64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		vals, _ := scrape(t, murl)
		if vals[series] >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached %v (is %v)", series, want, vals[series])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// An operator's view of a running service: /healthz and /readyz answer,
// `rdmo workers` lists the workers (table and JSON), a plugin process
// killed under a worker and a SIGKILLed worker are counted by counters
// that survive the worker, and every series served is in
// docs/OPERATIONS.md with its type.
func TestOperatorView(t *testing.T) {
	newRun(t)
	dpu, addr, murl := startDPU(t, "--plugin-path", pluginDir)
	if code, body := get(t, murl+"/healthz"); code != 200 {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, murl+"/readyz"); code != 200 {
		t.Errorf("/readyz: %d %q", code, body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := urom.Dial(ctx, addr, urom.ClientOptions{ComponentVersion: command.ComponentVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	withPlugin, err := c.Spawn(ctx, urom.SpawnOptions{Plugins: []string{"flush", "counter"}})
	if err != nil {
		t.Fatal(err)
	}
	victim, err := c.Spawn(ctx, urom.SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}

	wp := start(t, "workers", "workers", "--urom", addr, "--output", "json")
	if code := wp.Wait(t, exitTimeout); code != 0 {
		t.Fatalf("rdmo workers --output json: exit %d\n%s", code, wp.Stderr())
	}
	var listed []urom.WorkerInfo
	if err := json.Unmarshal([]byte(wp.Stdout()), &listed); err != nil {
		t.Fatalf("rdmo workers --output json: %v\n%s", err, wp.Stdout())
	}
	if len(listed) != 2 || listed[0].ID != withPlugin.ID || listed[0].PID != withPlugin.PID || listed[1].PID != victim.PID {
		t.Fatalf("rdmo workers listed %+v, want workers %d (pid %d) and %d (pid %d)", listed, withPlugin.ID, withPlugin.PID, victim.ID, victim.PID)
	}
	for _, w := range listed {
		if w.State != "running" || w.Clients != 0 || w.RequestQueues != 0 || w.Host == "" || w.Uptime <= 0 || len(w.Plugins) == 0 {
			t.Errorf("rdmo workers: %+v, want a running worker with 0 clients and queues, its host, uptime and plugins", w)
		}
	}
	tp := start(t, "workers table", "workers", "--urom", addr)
	if code := tp.Wait(t, exitTimeout); code != 0 {
		t.Fatalf("rdmo workers: exit %d\n%s", code, tp.Stderr())
	}
	if !regexp.MustCompile(`(?m)^ID\s+PID\s+STATE\s+UPTIME\s+CLIENTS\s+RQS\s+PLUGINS\s+HOST\n` +
		strconv.FormatUint(withPlugin.ID, 10) + `\s+` + strconv.Itoa(withPlugin.PID) + `\s+running\s+\S+\s+0\s+0\s+flush,counter\s+127\.0\.0\.1:\d+$`).MatchString(tp.Stdout()) {
		t.Errorf("rdmo workers table:\n%s", tp.Stdout())
	}

	// A plugin process killed: its worker restarts it; the service counts
	// both.
	plugin := testproc.ChildOf(withPlugin.PID, "rdmo-plugin-counter")
	if plugin == 0 {
		t.Fatalf("no rdmo-plugin-counter process under worker pid %d", withPlugin.PID)
	}
	syscall.Kill(plugin, syscall.SIGKILL)
	waitMetric(t, murl, `rdmo_urom_plugin_failures_total{plugin="counter"}`, 1)
	waitMetric(t, murl, `rdmo_urom_plugin_restarts_total{plugin="counter"}`, 1)

	// A worker SIGKILLed: its series go, the counters stay.
	syscall.Kill(victim.PID, syscall.SIGKILL)
	<-victim.Gone()
	waitMetric(t, murl, `rdmo_urom_worker_exits_total{reason="killed"}`, 1)
	vals, types := scrape(t, murl)
	for series, want := range map[string]float64{
		`rdmo_urom_worker_spawns_total`:                         2,
		`rdmo_urom_workers`:                                     1,
		`rdmo_urom_hosts`:                                       1,
		`rdmo_urom_ready`:                                       1,
		`rdmo_urom_draining`:                                    0,
		`rdmo_urom_worker_exits_total{reason="stopped"}`:        0,
		`rdmo_urom_worker_spawn_failures_total{reason="limit"}`: 0,
	} {
		if got, ok := vals[series]; !ok || got != want {
			t.Errorf("%s = %v (served: %v), want %v", series, got, ok, want)
		}
	}
	victimUp := fmt.Sprintf(`rdmo_worker_up{worker="%d"}`, victim.ID)
	if _, ok := vals[victimUp]; ok {
		t.Errorf("%s still served after the worker died", victimUp)
	}
	build := regexp.MustCompile(`^rdmo_build_info\{commit="[^"]*",go_version="go[^"]+",ucx_version="(\d+\.\d+[^"]*)",version="[^"]+"\}$`)
	found := false
	for s := range vals {
		if build.MatchString(s) {
			found = true
		}
	}
	if !found {
		t.Errorf("no rdmo_build_info with Go and UCX versions in %v", keys(vals, "rdmo_build"))
	}

	// Every rdmo_ series served is documented, with its type.
	doc := readOperationsDoc(t)
	for name, typ := range types {
		if !strings.HasPrefix(name, "rdmo_") {
			continue
		}
		d, ok := doc[name]
		if !ok {
			t.Errorf("/metrics serves %s (%s), which docs/OPERATIONS.md does not list", name, typ)
		} else if d.typ != typ {
			t.Errorf("%s: /metrics says %s, docs/OPERATIONS.md says %s", name, typ, d.typ)
		}
	}

	if err := withPlugin.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, murl, `rdmo_urom_worker_exits_total{reason="stopped"}`, 1)
	c.Close()
	dpu.Signal(syscall.SIGTERM)
	if code := dpu.Wait(t, exitTimeout); code != 0 {
		t.Errorf("dpu: exit %d after SIGTERM\n%s", code, dpu.Stderr())
	}
}

func keys(m map[string]float64, prefix string) []string {
	var out []string
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// freePort is a TCP port nothing listens on (for the OOB channel).
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// SIGTERM to the service while a target has its worker: the service stops
// accepting (readiness fails, no new host gets in), tells the target, and
// lets the run finish within the drain timeout; target and initiator
// succeed, and the service exits 0 once the target released its worker.
func TestDrainLetsTheRunFinish(t *testing.T) {
	newRun(t)
	dpu, addr, murl := startDPU(t, "--worker-drain-timeout", "5m")
	port := freePort(t)
	server := start(t, "server", "-m", "server", "--urom", addr, "--oob-port", port, "--ops", "2000")
	waitFor(t, server, `RDMO worker started`, 60*time.Second)

	dpu.Signal(syscall.SIGTERM)
	waitFor(t, server, `the UROM service is shutting down`, 60*time.Second)
	waitFor(t, dpu, `UROM service draining`, 60*time.Second)
	if code, body := get(t, murl+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
		t.Errorf("/readyz while draining: %d %q, want 503 draining", code, body)
	}
	if code, _ := get(t, murl+"/healthz"); code != 200 {
		t.Errorf("/healthz while draining: %d", code)
	}
	if _, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		t.Errorf("the draining service still accepts connections on %s", addr)
	}

	client := start(t, "client", "-m", "client", "-s", "127.0.0.1", "--oob-port", port, "--ops", "2000")
	if code := client.Wait(t, exitTimeout); code != 0 {
		t.Errorf("client: exit %d\n%s", code, client.Stderr())
	}
	if code := server.Wait(t, exitTimeout); code != 0 {
		t.Errorf("server: exit %d\n%s", code, server.Stderr())
	}
	if code := dpu.Wait(t, exitTimeout); code != 0 {
		t.Errorf("dpu: exit %d\n%s", code, dpu.Stderr())
	}
	if strings.Contains(server.Stderr(), "worker died") {
		t.Errorf("the server reports a dead worker:\n%s", server.Stderr())
	}
}

// A target still holding its worker when the drain timeout passes: the
// service stops the worker and the target reports that the service is
// shutting down (not that its worker died); the service exits 0.
func TestDrainTimeoutStopsWorkers(t *testing.T) {
	newRun(t)
	dpu, addr, _ := startDPU(t, "--worker-drain-timeout", "1s")
	server := start(t, "server", "-m", "server", "--urom", addr, "--oob-port", freePort(t), "--ops", "100")
	waitFor(t, server, `RDMO worker started`, 60*time.Second)
	dpu.Signal(syscall.SIGTERM)
	if code := server.Wait(t, exitTimeout); code != 1 {
		t.Errorf("server: exit %d, want 1\n%s", code, server.Stderr())
	}
	if !regexp.MustCompile(`(?m)^rdmo: error: .*the UROM service is shutting down`).MatchString(server.Stderr()) ||
		strings.Contains(server.Stderr(), "worker died") {
		t.Errorf("the server does not say the service is shutting down:\n%s", server.Stderr())
	}
	if code := dpu.Wait(t, exitTimeout); code != 0 {
		t.Errorf("dpu: exit %d\n%s", code, dpu.Stderr())
	}
}

// A second signal ends a draining service at once, its workers with it.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	newRun(t)
	dpu, addr, _ := startDPU(t, "--worker-drain-timeout", "10m")
	server := start(t, "server", "-m", "server", "--urom", addr, "--oob-port", freePort(t), "--ops", "100")
	waitFor(t, server, `RDMO worker started`, 60*time.Second)
	dpu.Signal(syscall.SIGTERM)
	waitFor(t, dpu, `UROM service draining`, 60*time.Second)
	dpu.Signal(syscall.SIGTERM)
	if code := dpu.Wait(t, exitTimeout); code != 128+int(syscall.SIGTERM) {
		t.Errorf("dpu: exit %d after a second SIGTERM, want %d\n%s", code, 128+int(syscall.SIGTERM), dpu.Stderr())
	}
	if !regexp.MustCompile(`(?m)WARN  rdmo  second signal: stopping now  \{"signal": "terminated"\}$`).MatchString(dpu.Stderr()) {
		t.Errorf("dpu: no \"second signal\" line:\n%s", dpu.Stderr())
	}
	if code := server.Wait(t, exitTimeout); code != 1 {
		t.Errorf("server: exit %d, want 1\n%s", code, server.Stderr())
	}
}

// The service warns when it listens beyond loopback without a secret, and
// only then.
func TestListenWarning(t *testing.T) {
	newRun(t)
	for _, tc := range []struct {
		listen string
		warn   bool
	}{{"0.0.0.0:0", true}, {"127.0.0.1:0", false}} {
		p := start(t, "dpu "+tc.listen, "dpu", "--listen", tc.listen)
		waitFor(t, p, `UROM_LISTEN`, 30*time.Second)
		p.Signal(syscall.SIGTERM)
		if code := p.Wait(t, exitTimeout); code != 0 {
			t.Errorf("%s: exit %d", tc.listen, code)
		}
		warned := regexp.MustCompile(`WARN.*listens beyond loopback without --secret-file`).MatchString(p.Stderr())
		if warned != tc.warn {
			t.Errorf("--listen %s: warned %v, want %v:\n%s", tc.listen, warned, tc.warn, p.Stderr())
		}
	}
}

// With --log-format json every line is one JSON object without a repeated
// key, a plugin's lines included (go-plugin names the plugin too), and each
// event is one line ("serving metrics" once).
func TestJSONLogs(t *testing.T) {
	newRun(t)
	dpu, addr, murl := startDPU(t, "--plugin-path", pluginDir, "--log-format", "json")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := urom.Dial(ctx, addr, urom.ClientOptions{ComponentVersion: command.ComponentVersion})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Spawn(ctx, urom.SpawnOptions{Plugins: []string{"flush", "counter"}})
	if err != nil {
		t.Fatal(err)
	}
	plugin := testproc.ChildOf(w.PID, "rdmo-plugin-counter")
	if plugin == 0 {
		t.Fatalf("no rdmo-plugin-counter process under worker pid %d", w.PID)
	}
	syscall.Kill(plugin, syscall.SIGKILL)
	waitMetric(t, murl, `rdmo_urom_plugin_restarts_total{plugin="counter"}`, 1)
	c.Close()
	dpu.Signal(syscall.SIGTERM)
	if code := dpu.Wait(t, exitTimeout); code != 0 {
		t.Fatalf("dpu: exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(dpu.Stderr()), "\n")
	pluginLines := 0
	for _, line := range lines {
		keys, err := objectKeys(line)
		if err != nil {
			t.Errorf("not one JSON object: %v: %s", err, line)
			continue
		}
		seen := map[string]bool{}
		for _, k := range keys {
			if seen[k] {
				t.Errorf("key %q twice: %s", k, line)
			}
			seen[k] = true
		}
		if seen["plugin_name"] {
			pluginLines++
		}
	}
	if pluginLines == 0 {
		t.Errorf("no line of the plugin's:\n%s", dpu.Stderr())
	}
	if n := strings.Count(dpu.Stderr(), `"msg":"serving metrics"`); n != 1 {
		t.Errorf("\"serving metrics\" logged %d times, want once", n)
	}
	// Standard output is machine-readable too: the announce line alone, as
	// one JSON object.
	var announce map[string]string
	if err := json.Unmarshal([]byte(dpu.Stdout()), &announce); err != nil || len(announce) != 1 || announce[urom.AnnounceKey] != addr {
		t.Errorf("stdout %q: %v; want {\"urom_listen\":%q}", dpu.Stdout(), err, addr)
	}
}

// objectKeys lists the top-level keys of one JSON object, repeats kept.
func objectKeys(line string) ([]string, error) {
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("no object (%v)", err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, tok.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("more after the object")
	}
	return keys, nil
}

// A binary built without the link-time stamp (plain `go build`) says in
// -v what the toolchain recorded in it (`go version -m`): the VCS revision
// when the build saw one, the module version, or "devel" when neither.
func TestVersionFromToolchain(t *testing.T) {
	newRun(t)
	out, err := exec.Command(testproc.GoTool(), "version", "-m", rdmoBin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	recorded := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "mod":
			recorded["mod"] = f[2]
		case len(f) >= 2 && f[0] == "build":
			if k, v, ok := strings.Cut(f[1], "="); ok {
				recorded[k] = v
			}
		}
	}
	want := "rdmo version devel"
	if v := recorded["mod"]; v != "" && v != "(devel)" {
		want = "rdmo version " + v
	}
	if rev := recorded["vcs.revision"]; rev != "" {
		want += " (commit " + rev[:12]
		if recorded["vcs.modified"] == "true" {
			want += "-dirty"
		}
		want += ", built " + recorded["vcs.time"] + ")"
	}
	p := start(t, "version", "-v")
	if code := p.Wait(t, exitTimeout); code != 0 {
		t.Fatalf("rdmo -v: exit %d\n%s", code, p.Stderr())
	}
	if got, _, _ := strings.Cut(p.Stdout(), "\n"); got != want {
		t.Errorf("rdmo -v says %q; the toolchain recorded %v, so want %q", got, recorded, want)
	}
}

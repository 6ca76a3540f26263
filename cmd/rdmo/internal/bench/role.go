package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/openrdmo/rdmo/urom/rdmoworker"
	"github.com/openrdmo/rdmo/urom/service"
)

// The benchmark's processes are this program re-executed in a hidden role
// named by the environment (so it works the same for the rdmo binary and
// for a test binary): the target, the initiators, and the RDMO worker
// (started by the UROM service).
const (
	roleEnv      = "RDMO_BENCH_ROLE"
	roleTarget   = "target"
	roleInit     = "initiator"
	roleWorker   = "worker"
	envUROM      = "RDMO_BENCH_UROM"       // target: the UROM service address
	envID        = "RDMO_BENCH_ID"         // initiator: its index
	envWorkerEnv = "RDMO_BENCH_WORKERENV"  // target: environment for the worker, JSON list
	envProfile   = "RDMO_BENCH_CPUPROFILE" // every role: write a CPU profile into this directory
)

// RoleMain runs the benchmark role this process was started in, if any,
// and returns its exit status and true; otherwise it returns false at once.
// Call it before anything else: cmd/rdmo calls it from an init function, a
// test binary from TestMain.
func RoleMain() (int, bool) {
	role := os.Getenv(roleEnv)
	if role == "" {
		return 0, false
	}
	// A child stops with its driver: SIGINT reaches the whole terminal
	// process group, and the driver closes our standard input.
	signal.Ignore(syscall.SIGINT)
	if dir := os.Getenv(envProfile); dir != "" {
		name := role
		if id := os.Getenv(envID); id != "" && role == roleInit {
			name += "-" + id
		}
		stop := profile(filepath.Join(dir, fmt.Sprintf("%s-%d", name, os.Getpid())))
		defer stop()
	}
	var err error
	switch role {
	case roleTarget:
		err = targetMain()
	case roleInit:
		err = initiatorMain()
	case roleWorker:
		err = service.ServeWorker(context.Background(), os.NewFile(service.ControlFD, "urom-control"), rdmoworker.Factory, childLogger("worker"))
	default:
		err = fmt.Errorf("unknown %s %q", roleEnv, role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rdmo bench %s: %v\n", role, err)
		return 1, true
	}
	return 0, true
}

// profileSegment is how long one CPU profile file covers. The UROM service
// kills a worker process as soon as it stops it, so the worker's profile is
// written in segments: all but the last survive.
const profileSegment = 5 * time.Second

// profile writes CPU profiles to prefix-<n>.pprof, one per segment (and a
// heap profile at the end of each, prefix-<n>.heap.pprof), until the
// returned function is called.
func profile(prefix string) func() {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for n := 0; ; n++ {
			f, err := os.Create(fmt.Sprintf("%s-%d.pprof", prefix, n))
			if err != nil {
				return
			}
			if pprof.StartCPUProfile(f) != nil {
				f.Close()
				return
			}
			select {
			case <-done:
				pprof.StopCPUProfile()
				f.Close()
				return
			case <-time.After(profileSegment):
				pprof.StopCPUProfile()
				f.Close()
				// And the heap of that moment (RSS questions).
				if h, err := os.Create(fmt.Sprintf("%s-%d.heap.pprof", prefix, n)); err == nil {
					pprof.Lookup("heap").WriteTo(h, 0)
					h.Close()
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// profileEnv is the environment that makes every child write a CPU
// profile into dir.
func profileEnv(dir string) []string {
	if dir == "" {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	return []string{envProfile + "=" + abs}
}

func childLogger(name string) *zap.Logger {
	cfg := zap.NewDevelopmentConfig()
	cfg.Level = zap.NewAtomicLevelAt(zapcore.WarnLevel)
	cfg.DisableStacktrace = true
	log, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return log.Named("bench-" + name)
}

// lineServer is a child's side of the line protocol: commands "VERB json"
// on standard input, answers "VERB json" (or "ERR text") on standard output.
type lineServer struct {
	sc  *bufio.Scanner
	out *bufio.Writer
}

func newLineServer() *lineServer {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	return &lineServer{sc: sc, out: bufio.NewWriter(os.Stdout)}
}

// next returns the next command; ok is false at the end of input.
func (l *lineServer) next() (verb string, body []byte, ok bool) {
	for l.sc.Scan() {
		line := strings.TrimSpace(l.sc.Text())
		if line == "" {
			continue
		}
		v, b, _ := strings.Cut(line, " ")
		return v, []byte(b), true
	}
	return "", nil, false
}

func (l *lineServer) reply(verb string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		l.fail(err)
		return
	}
	fmt.Fprintf(l.out, "%s %s\n", verb, b)
	l.out.Flush()
}

func (l *lineServer) fail(err error) {
	fmt.Fprintf(l.out, "ERR %s\n", strings.Join(strings.Fields(err.Error()), " "))
	l.out.Flush()
}

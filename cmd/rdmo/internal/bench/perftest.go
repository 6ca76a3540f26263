package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/openrdmo/rdmo/internal/childproc"
)

// The perftest rows run UCX's own ucx_perftest (ucx-utils) between two
// processes of this host, at the row's size and over the topology's
// initiator transport (UCX_TLS), interleaved with the other rows: what
// libucp itself moves here and now, the limit every other row is read
// against. perftest-am is `-t ucp_am_bw`, perftest-put `-t ucp_put_bw`.
//
// A round starts a server and a client with far more iterations than a
// round needs and reads the client's reports (one a second: iterations so
// far and the mean time per iteration since the end of the warm-up). The
// round is the stretch between the first report and the last one before
// the round's time is up, so connection set-up and warm-up are outside it;
// the CPU time of both processes is read at the same two reports. With
// --short (no timing) the client runs a fixed count and its final line
// counts. ucx_perftest checks no data: its rows are never "verified".

// perftestBinary is the program the perftest rows run.
var perftestBinary = "ucx_perftest"

// perftestDrive is the round of a perftest row running test.
func perftestDrive(test string) func(d *driver, rs *rowState, warm bool) error {
	return func(d *driver, rs *rowState, warm bool) error { return d.perftestRound(rs, test, warm) }
}

// perftestReport is one report line of the client.
type perftestReport struct {
	iters   uint64
	elapsed time.Duration // iterations × mean time per iteration, since the warm-up
	final   bool
	at      time.Time
	cpu     cpuSample // client (init) and server (target) when the line arrived
}

// parsePerftestLine reads "[thread 0] iters p50 avg overall bw bw rate rate"
// or "Final: ..." (the same columns); ok is false for anything else.
func parsePerftestLine(l string) (r perftestReport, ok bool) {
	l = strings.TrimSpace(l)
	switch {
	case strings.HasPrefix(l, "Final:"):
		r.final = true
		l = strings.TrimPrefix(l, "Final:")
	case strings.HasPrefix(l, "[thread"):
		i := strings.IndexByte(l, ']')
		if i < 0 {
			return r, false
		}
		l = l[i+1:]
	default:
		return r, false
	}
	f := strings.Fields(l)
	if len(f) < 8 {
		return r, false
	}
	iters, err1 := strconv.ParseUint(f[0], 10, 64)
	overall, err2 := strconv.ParseFloat(f[3], 64) // µs per iteration, whole run
	if err1 != nil || err2 != nil {
		return r, false
	}
	r.iters = iters
	r.elapsed = time.Duration(overall * float64(iters) * 1e3)
	return r, true
}

// perftestRound runs one round of a perftest row.
func (d *driver) perftestRound(rs *rowState, test string, warm bool) error {
	if warm {
		return nil // ucx_perftest warms up itself (-w)
	}
	row := &rs.row
	want := d.o.Interval
	if d.o.Duration > 0 && d.o.Duration-rs.elapsed < want {
		want = max(d.o.Duration-rs.elapsed, 10*time.Millisecond)
	}
	ops, el, cpu, err := d.perftest(test, row.Size, want, rs.last)
	if err != nil {
		rs.fail(err)
		d.out.failed(rs.row)
		return nil
	}
	row.Rounds++
	row.Ops += ops
	row.Bytes += ops * uint64(row.Size)
	rs.elapsed += el
	rs.perInit += int(ops)
	rs.addRate(ops, el)
	rs.cpu = rs.cpu.add(cpu)
	rs.line.add(roundSum{ops: ops, bytes: ops * uint64(row.Size), elapsed: el}, nil, nil)
	rs.done = d.o.Duration == 0 || rs.elapsed >= d.o.Duration || d.o.Short
	d.out.interval(*row, rs.elapsed, &rs.line)
	rs.line = lineAcc{}
	return nil
}

// perftest runs ucx_perftest's test at size for about want (after its
// warm-up) and returns the iterations, their time and the CPU time of
// client (init) and server (target) over them (with --short, the
// client's only: the server is killed, not waited for).
func (d *driver) perftest(test string, size int, want time.Duration, lastRate float64) (uint64, time.Duration, cpuSample, error) {
	initEnv, _ := d.o.envs()
	port, err := freePort()
	if err != nil {
		return 0, 0, cpuSample{}, err
	}
	warmup := max(16, min(10000, (64<<20)/size))
	// ucx_perftest -t ucp_am_bw stalls before its first report when the
	// iteration count is very large, so the count is sized to the round:
	// from the last round's rate, else from the bytes a first round may
	// move.
	iters := max(2000, min(2_000_000, (2<<30)/size))
	if lastRate > 0 {
		iters = max(2000, int(lastRate*(want.Seconds()+2)*1.5))
	}
	if d.o.Short {
		iters = max(d.o.MaxOps, 16) * d.o.Initiators
		warmup = 16
	}
	p := []string{"-p", strconv.Itoa(port)}
	var srvErr, cliErr bytes.Buffer
	srv, err := startPerftest(d.o.TargetCPUs, initEnv, &srvErr, false, p...)
	if err != nil {
		return 0, 0, cpuSample{}, fmt.Errorf("%s: %w (ucx_perftest comes with ucx-utils)", perftestBinary, err)
	}
	defer srv.Kill()
	if err := waitListening(port, srv.Done(), 30*time.Second); err != nil {
		return 0, 0, cpuSample{}, fmt.Errorf("%s server: %w: %s", perftestBinary, err, lastLine(srvErr.String()))
	}
	cli, err := startPerftest(d.o.InitiatorCPUs, initEnv, &cliErr, true, append([]string{"127.0.0.1"}, append(p,
		"-t", test, "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters), "-w", strconv.Itoa(warmup))...)...)
	if err != nil {
		return 0, 0, cpuSample{}, fmt.Errorf("%s: %w", perftestBinary, err)
	}
	lines := make(chan perftestReport, 16)
	var text strings.Builder
	go func() {
		defer close(lines)
		for l := range cli.Lines() {
			if text.Len() < 4096 {
				text.WriteString(l + "\n")
			}
			if r, ok := parsePerftestLine(l); ok {
				r.at = time.Now()
				r.cpu = cpuSample{init: readCPU(cli.Pid()), target: readCPU(srv.Pid())}
				lines <- r
			}
		}
	}()
	stop := func() {
		cli.Kill()
		for range lines {
		}
	}
	var first, last, final *perftestReport
	timeout := time.NewTimer(want + 2*time.Minute)
	defer timeout.Stop()
	for {
		select {
		case r, ok := <-lines:
			if !ok {
				<-cli.Done()
				err := cli.Err()
				st := cli.Cmd.ProcessState
				if last != nil && last.final && d.o.Short {
					// The count ran out: the whole run, CPU from the
					// processes' exit accounting.
					c := cpuSample{init: cpuTime{user: st.UserTime(), sys: st.SystemTime()}}
					return last.iters, last.elapsed, c, nil
				}
				if first != nil && last != first {
					return last.iters - first.iters, last.elapsed - first.elapsed, last.cpu.sub(first.cpu), nil
				}
				if final != nil && final.elapsed > 0 {
					// Over before a second report: the whole run, CPU
					// from the exit accounting (client) and the last
					// report (server).
					c := cpuSample{init: cpuTime{user: st.UserTime(), sys: st.SystemTime()}, target: final.cpu.target}
					return final.iters, final.elapsed, c, nil
				}
				return 0, 0, cpuSample{}, fmt.Errorf("%s -t %s -s %d ended without a measurement (%v): %s%s", perftestBinary, test, size, err,
					lastLine(text.String()), lastLine(cliErr.String()))
			}
			if r.final && !d.o.Short {
				rr := r
				final = &rr // the whole run: used only if it ends before a second report
				continue
			}
			rr := r
			last = &rr
			if first == nil && !d.o.Short {
				first = last
				continue
			}
			if !d.o.Short && last.elapsed-first.elapsed >= want {
				stop()
				return last.iters - first.iters, last.elapsed - first.elapsed, last.cpu.sub(first.cpu), nil
			}
		case <-timeout.C:
			stop()
			return 0, 0, cpuSample{}, fmt.Errorf("%s -t %s -s %d: no measurement within %v: %s", perftestBinary, test, size, want+2*time.Minute, lastLine(cliErr.String()))
		}
	}
}

// startPerftest starts ucx_perftest with args, its output line-buffered
// (it reports through stdio; with lines, read from Proc.Lines), pinned to
// cpus when given.
func startPerftest(cpus string, env []string, stderr io.Writer, lines bool, args ...string) (*childproc.Proc, error) {
	return childproc.Start(append([]string{"stdbuf", "-oL", perftestBinary}, args...),
		childproc.Options{Name: perftestBinary, Env: env, CPUs: cpus, Lines: lines, Stderr: stderr})
}

// freePort returns a TCP port nothing listens on right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitListening waits until a socket listens on port (read from
// /proc/net/tcp*: connecting to find out would be the server's one client).
func waitListening(port int, exited <-chan struct{}, timeout time.Duration) error {
	want := fmt.Sprintf(":%04X ", port)
	deadline := time.Now().Add(timeout)
	for {
		for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
			b, _ := os.ReadFile(f)
			for _, l := range strings.Split(string(b), "\n") {
				fs := strings.Fields(l)
				if len(fs) > 3 && strings.HasSuffix(fs[1]+" ", want) && fs[3] == "0A" { // 0A: LISTEN
					return nil
				}
			}
		}
		select {
		case <-exited:
			return errors.New("exited before listening")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on port %d after %v", port, timeout)
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

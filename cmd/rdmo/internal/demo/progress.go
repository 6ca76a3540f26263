package demo

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Stdout is where the demo prints its results (the summaries). Tests may
// replace it.
var Stdout io.Writer = os.Stdout

// ProgressOutput is where the client's progress line goes (standard error).
// Tests may replace it.
var ProgressOutput io.Writer = os.Stderr

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// ProgressIntervalEnv, when set (a Go duration, e.g. "100ms"), is how often
// the client prints its progress line instead of every second (a few
// times a second on a terminal).
const ProgressIntervalEnv = "RDMO_PROGRESS_INTERVAL"

// startProgress reports the client's progress while the workload runs: on
// a terminal one line rewritten in place a few times a second, otherwise a
// line about every second (ProgressIntervalEnv). The returned function
// stops it (and ends the terminal line).
func startProgress(c *client, total uint64, enabled bool) func() {
	if !enabled {
		return func() {}
	}
	w := ProgressOutput
	tty := isTerminal(w)
	every := time.Second
	if tty {
		every = 200 * time.Millisecond
	}
	if d, err := time.ParseDuration(os.Getenv(ProgressIntervalEnv)); err == nil && d > 0 {
		every = d
	}
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	line := func() string {
		ops, bytes := c.ops.Load(), c.bytes.Load()
		secs := max(time.Since(start).Seconds(), 1e-9)
		pct := 100 * float64(ops) / float64(max(total, 1))
		return fmt.Sprintf("rdmo client: %d/%d ops (%.0f%%), %s, %.1f kops/s", ops, total, pct, sizeStr(bytes), float64(ops)/secs/1e3)
	}
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		printed := false
		for {
			select {
			case <-t.C:
				if tty {
					fmt.Fprintf(w, "\r%s\x1b[K", line())
				} else {
					fmt.Fprintln(w, line())
				}
				printed = true
			case <-stop:
				if tty && printed {
					fmt.Fprintf(w, "\r%s\x1b[K\n", line())
				}
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			wg.Wait()
		})
	}
}

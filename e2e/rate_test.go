package e2e_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// Append rate at saturation with the append handler built into the worker
// process and as a plugin process, measured one after the other in the same
// run (the ratio is what counts on a shared machine; nothing is asserted
// about time). Two initiator processes each send E2E_RATE_N 64-byte appends
// with one flush at the end; the queue is checked afterwards.
func TestPluginVersusBuiltinAppendRate(t *testing.T) {
	n := 20000
	if s := os.Getenv("E2E_RATE_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	if testing.Short() {
		n = 2000
	}
	tr := ucptest.Transports[0]
	rates := map[workerMode]float64{}
	for _, mode := range []workerMode{modeUROM, modeUROMPlugin} {
		t.Run(mode.String(), func(t *testing.T) {
			ucptest.CheckLeaks(t)
			tg := newTargetMode(t, tr, appendop.Owned, mode)
			q := tg.queue(2*n*64 + 4096)
			ps := []*initiatorProc{tg.startInitiator(tr), tg.startInitiator(tr)}
			start := time.Now()
			for i, p := range ps {
				p.Send(fmt.Sprintf("burst %d %d %d %d %d", i, n, q.base(), q.id, 64))
			}
			for _, p := range ps {
				p.Must(t, "DONE", 5*time.Minute)
			}
			el := time.Since(start)
			if err := checkQueue(q.bytes()[8:tail(q)-q.base()], map[int]int{0: n, 1: n}); err != nil {
				t.Fatal(err)
			}
			rates[mode] = float64(2*n) / el.Seconds()
			t.Logf("%s: %d appends of 64 B in %v: %.0f appends/s; %s", mode, 2*n, el.Round(time.Millisecond), rates[mode], coalescing(tg.worker.Stats()))
			for _, p := range ps {
				p.Send("quit")
			}
		})
	}
	if rates[modeUROM] > 0 {
		t.Logf("plugin / built-in append rate: %.2f (goal >= 0.25)", rates[modeUROMPlugin]/rates[modeUROM])
	}
}

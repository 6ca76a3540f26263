package e2e_test

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

var strategies = []appendop.Strategy{appendop.Owned, appendop.Shared}

func forEach(t *testing.T, fn func(t *testing.T, tr ucptest.Transport, s appendop.Strategy)) {
	for _, tr := range ucptest.Transports {
		for _, s := range strategies {
			t.Run(tr.Name+"/"+s.String(), func(t *testing.T) {
				ucptest.CheckLeaks(t)
				fn(t, tr, s)
			})
		}
	}
}

// forEachMode also runs the worker as a UROM worker process, with the
// handlers built in and as plugin processes. The worker's own counters and
// handles are then another process's: the leak check covers this one.
func forEachMode(t *testing.T, fn func(t *testing.T, tr ucptest.Transport, s appendop.Strategy, mode workerMode)) {
	for _, mode := range []workerMode{modeInProcess, modeUROM, modeUROMPlugin} {
		t.Run(mode.String(), func(t *testing.T) {
			forEach(t, func(t *testing.T, tr ucptest.Transport, s appendop.Strategy) { fn(t, tr, s, mode) })
		})
	}
}

// forEachModeAggregate is forEachMode plus, for the in-process worker only
// (to keep CI's time), initiators that aggregate requests into BATCH
// containers: the target hands them the worker's capabilities (env for
// startInitiator), as host/oob.WorkerInfo does.
func forEachModeAggregate(t *testing.T, fn func(t *testing.T, tr ucptest.Transport, s appendop.Strategy, mode workerMode, env []string)) {
	forEachMode(t, func(t *testing.T, tr ucptest.Transport, s appendop.Strategy, mode workerMode) {
		fn(t, tr, s, mode, nil)
	})
	t.Run(modeInProcess.String()+"-aggregate", func(t *testing.T) {
		env := []string{"E2E_CAPABILITIES=" + strings.Join(dpu.Capabilities(), ",")}
		forEach(t, func(t *testing.T, tr ucptest.Transport, s appendop.Strategy) { fn(t, tr, s, modeInProcess, env) })
	})
}

// The reference demo (docs/PROTOCOL.md section 12.1): an 8-byte append and a flush, then 16
// scattered 8-byte chunks and a flush; the target checks every byte and the
// tail.
func TestSeedFlow(t *testing.T) {
	forEachMode(t, func(t *testing.T, tr ucptest.Transport, s appendop.Strategy, mode workerMode) {
		tg := newTargetMode(t, tr, s, mode)
		q := tg.queue(128 << 10)
		p := tg.startInitiator(tr)
		p.Send(fmt.Sprintf("append8 %d %d", q.base(), q.id))
		p.Must(t, "DONE", 30*time.Second)
		p.Send("flush")
		f := p.Must(t, "DONE", 30*time.Second)
		if f[2] != "0" {
			t.Fatalf("first flush reports failures: %v", f)
		}
		mem := q.bytes()
		if !bytes.Equal(mem[8:16], bytes.Repeat([]byte{0x33}, 8)) {
			t.Fatalf("appended bytes: % x", mem[8:16])
		}
		if got, want := tail(q), q.base()+16; got != want {
			t.Fatalf("tail %#x after flush, want base+16 (%#x)", got, want)
		}
		// Barrier passed: scatter 16 chunks with gaps between them.
		p.Send(fmt.Sprintf("scatter16 %d %d %d", q.id, q.base()+64, 16))
		p.Must(t, "DONE", 30*time.Second)
		p.Send("flush")
		if f := p.Must(t, "DONE", 30*time.Second); f[2] != "0" {
			t.Fatalf("second flush reports failures: %v", f)
		}
		for i := 0; i < 16; i++ {
			off := 64 + 16*i
			if !bytes.Equal(mem[off:off+8], bytes.Repeat([]byte{byte(0x40 + i)}, 8)) {
				t.Fatalf("chunk %d: % x", i, mem[off:off+8])
			}
			if !bytes.Equal(mem[off+8:off+16], make([]byte, 8)) {
				t.Fatalf("bytes after chunk %d were written: % x", i, mem[off+8:off+16])
			}
		}
		if !bytes.Equal(mem[16:64], make([]byte, 48)) {
			t.Fatalf("bytes between the append and the scatter were written")
		}
		p.Send("quit")
	})
}

func recordsPerInitiator() int {
	if s := os.Getenv("E2E_RECORDS"); s != "" {
		n, _ := strconv.Atoi(s)
		return n
	}
	if testing.Short() {
		return 5000
	}
	return 100000
}

// Four initiators append self-describing records of mixed sizes into one
// queue through one worker; afterwards the queue holds every record exactly
// once, intact, each initiator's in its order, and the tail is the total.
func TestExactlyOnceUnderConcurrency(t *testing.T) {
	forEachModeAggregate(t, func(t *testing.T, tr ucptest.Transport, s appendop.Strategy, mode workerMode, env []string) {
		n := recordsPerInitiator()
		if mode != modeInProcess {
			n /= 5 // the same paths, fewer records: the suite must fit CI's time
		}
		tg := newTargetMode(t, tr, s, mode)
		q := tg.queue(n*4*700 + (1 << 20))
		var ps []*initiatorProc
		for i := 0; i < 4; i++ {
			ps = append(ps, tg.startInitiator(tr, env...))
		}
		start := time.Now()
		for i, p := range ps {
			p.Send(fmt.Sprintf("records %d %d %d %d %d %d", i, n, q.base(), q.id, 997, 42))
		}
		for _, p := range ps {
			p.Must(t, "DONE", 10*time.Minute)
		}
		el := time.Since(start)
		end := tail(q)
		if end < q.base()+8 || end > q.base()+uint64(q.mem.Len()) {
			t.Fatalf("tail %#x outside the queue", end)
		}
		want := map[int]int{0: n, 1: n, 2: n, 3: n}
		if err := checkQueue(q.bytes()[8:end-q.base()], want); err != nil {
			t.Fatal(err)
		}
		st := tg.worker.Stats()
		t.Logf("%d appends in %v (%.0f/s); %s", 4*n, el.Round(time.Millisecond), float64(4*n)/el.Seconds(), coalescing(st))
		if env != nil && st.Requests[rdmo.OpBatch] == 0 {
			t.Errorf("aggregating initiators under load sent no batch container")
		}
		for _, p := range ps {
			p.Send("quit")
		}
	})
}

// coalescing reports target accesses per append from worker counters.
func coalescing(st dpu.Stats) string {
	appends := st.Requests[rdmo.OpAppend]
	puts := st.TargetPuts + st.MemcpyPuts + st.Places
	if appends == 0 {
		return "no appends"
	}
	return fmt.Sprintf("%d appends, %d target puts (%d via UCX, %d memcpy, %d placed): %.3f puts/append, %.1f requests/batch, %d batch containers",
		appends, puts, st.TargetPuts, st.MemcpyPuts, st.Places, float64(puts)/float64(appends),
		float64(st.BatchedRequests)/float64(max(st.Batches, 1)), st.Requests[rdmo.OpBatch])
}

// Random sequences of appends (some fenced), scatters (some adjacent, some
// out of bounds) and flushes from several initiators, checked against a
// reference model: each initiator's scatter area must equal the model's,
// the queue must hold every appended record exactly once and in order, and
// every flush must report exactly the failures the model expects.
func TestModelBased(t *testing.T) {
	steps := 3000
	if testing.Short() {
		steps = 600
	}
	forEachModeAggregate(t, func(t *testing.T, tr ucptest.Transport, s appendop.Strategy, mode workerMode, env []string) {
		steps := steps
		if mode != modeInProcess {
			steps /= 3
		}
		tg := newTargetMode(t, tr, s, mode)
		q := tg.queue(4 << 20)
		sr := tg.register(3 * scatterArea)
		const seed = 7
		var ps []*initiatorProc
		for i := 0; i < 3; i++ {
			ps = append(ps, tg.startInitiator(tr, env...))
		}
		for i, p := range ps {
			p.Send(fmt.Sprintf("model %d %d %d %d %d %d %d", i, seed, steps, q.base(), q.id, sr.id, sr.base()+uint64(i*scatterArea)))
		}
		want := map[int]int{}
		for i, p := range ps {
			p.Must(t, "DONE", 5*time.Minute)
			area, records := applyModel(modelOps(seed, i, steps))
			want[i] = records
			got := sr.bytes()[i*scatterArea : (i+1)*scatterArea]
			if !bytes.Equal(got, area) {
				for k := range area {
					if got[k] != area[k] {
						t.Fatalf("initiator %d: scatter area differs from the model at offset %d", i, k)
					}
				}
			}
		}
		if err := checkQueue(q.bytes()[8:tail(q)-q.base()], want); err != nil {
			t.Fatal(err)
		}
		st := tg.worker.Stats()
		t.Logf("%s; failures %v", coalescing(st), st.Failures)
		for _, p := range ps {
			p.Send("quit")
		}
	})
}

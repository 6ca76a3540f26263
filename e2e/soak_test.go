package e2e_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/internal/testproc"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// soakDuration is SOAK_DURATION (a Go duration), 10 s by default; `make
// soak` runs 60 s.
func soakDuration(t *testing.T) time.Duration {
	if s := os.Getenv("SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("SOAK_DURATION: %v", err)
		}
		return d
	}
	return 10 * time.Second
}

// procMem reads a process's memory figures (bytes) from /proc/PID/status.
type procMem struct{ rss, anon, file, shmem uint64 }

// private is the resident memory that belongs to the process alone:
// shared-memory pages of target memory mapped into the worker (rkey_ptr)
// count in VmRSS as they are touched, without being the worker's own.
func (m procMem) private() uint64 { return m.rss - m.shmem }

func (m procMem) String() string {
	return fmt.Sprintf("VmRSS %.1f MiB (anon %.1f, file %.1f, shmem %.1f)",
		float64(m.rss)/(1<<20), float64(m.anon)/(1<<20), float64(m.file)/(1<<20), float64(m.shmem)/(1<<20))
}

func readProcMem(pid int) (procMem, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procMem{}, err
	}
	defer f.Close()
	var m procMem
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		kb, _ := strconv.ParseUint(fs[0], 10, 64)
		switch k {
		case "VmRSS":
			m.rss = kb << 10
		case "RssAnon":
			m.anon = kb << 10
		case "RssFile":
			m.file = kb << 10
		case "RssShmem":
			m.shmem = kb << 10
		}
	}
	return m, sc.Err()
}

// soakQueue is an initiator's queue: two buffers of target memory, one
// registered at a time; when the registered one fills up it is
// deregistered and the other, zeroed, registered under a new region id.
type soakQueue struct {
	bufs   [2]*ucp.Memory
	packed [2][]byte
	cur    int
	id     uint64
	size   int
}

func (q *soakQueue) base() uint64  { return q.bufs[q.cur].Address() }
func (q *soakQueue) bytes() []byte { return q.bufs[q.cur].Bytes() }
func (q *soakQueue) tail() uint64  { return binary.LittleEndian.Uint64(q.bytes()) }

// rotate deregisters the current buffer and registers the other one.
func (q *soakQueue) rotate(ctx context.Context, w rdmoWorker, client uint64) error {
	if q.id != 0 {
		if _, err := w.Do(ctx, dpu.MRDereg{Client: client, Region: q.id}); err != nil {
			return fmt.Errorf("MR_DEREG of a full queue: %w", err)
		}
		q.cur ^= 1
	}
	b := q.bytes()
	clear(b)
	binary.LittleEndian.PutUint64(b, q.base()+8)
	n, err := w.Do(ctx, dpu.MRReg{Client: client, VA: q.base(), Len: uint64(q.size), PackedRkey: q.packed[q.cur]})
	if err != nil {
		return fmt.Errorf("MR_REG: %w", err)
	}
	q.id = n.Region
	return nil
}

// soaker is one initiator of the soak and its model of what target memory
// must hold.
type soaker struct {
	id     int
	in     *initiator.Initiator
	q      soakQueue
	area   fenced // its scatter area
	model  []byte
	rnd    *rand.Rand
	seq    int // records appended to the current queue buffer
	bytes  uint64
	off    int // queue bytes verified so far
	offSeq int // records in them
	bad    int // out-of-bounds scatters since the last flush
	ops    atomic.Uint64
	checks atomic.Uint64
	rots   int
}

// flushAndCheck flushes and checks that every request acknowledged by the
// flush is in target memory exactly once: the queue holds this
// initiator's records 0..seq-1 in order and nothing else, and the scatter
// area equals the model. Rejected requests are reported, exactly.
func (s *soaker) flushAndCheck() error {
	// The flush has its own deadline: the soak's ending must not cut it.
	fctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	rsp, err := s.in.Flush(fctx)
	cancel()
	switch {
	case s.bad == 0 && err != nil:
		return fmt.Errorf("flush: %w", err)
	case s.bad > 0 && (int(rsp.Failed) != s.bad || !errors.Is(err, rdmo.ErrOutOfBounds)):
		return fmt.Errorf("flush after %d bad scatters: %+v, %v", s.bad, rsp, err)
	}
	s.bad = 0
	mem := s.q.bytes()
	tail := s.q.tail()
	if want := s.q.base() + 8 + s.bytes; tail != want {
		return fmt.Errorf("tail %#x after the flush, want %#x (%d records, %d bytes)", tail, want, s.seq, s.bytes)
	}
	end := int(tail - s.q.base())
	// Records since the last check; earlier ones were checked then (and the
	// whole queue is checked again before it is rotated).
	next := s.offSeq
	for off := 8 + s.off; off < end; {
		size := int(binary.LittleEndian.Uint32(mem[off:]))
		if size < recordHeader || off+size > end {
			return fmt.Errorf("bad record length %d at offset %d", size, off)
		}
		rec := mem[off : off+size]
		if id, seq := int(binary.LittleEndian.Uint16(rec[4:])), int(binary.LittleEndian.Uint32(rec[8:])); id != s.id || seq != next {
			return fmt.Errorf("record %d/%d at offset %d, want %d/%d (lost, duplicated or foreign)", id, seq, off, s.id, next)
		}
		if !bytesEqual(rec, makeRecord(s.id, next, size)) {
			return fmt.Errorf("record %d at offset %d is corrupted", next, off)
		}
		next++
		off += size
	}
	if next != s.seq {
		return fmt.Errorf("%d records in the queue, %d appended", next, s.seq)
	}
	s.off, s.offSeq = end-8, next
	if i := firstDiff(s.model, s.area.data()); i >= 0 {
		return fmt.Errorf("scatter area differs from the model at offset %d", i)
	}
	if err := s.area.guardsOK(); err != nil {
		return err
	}
	s.checks.Add(1)
	return nil
}

func bytesEqual(a, b []byte) bool { return firstDiff(a, b) < 0 }

func (s *soaker) run(ctx context.Context, w rdmoWorker) error {
	for ctx.Err() == nil {
		switch x := s.rnd.IntN(1000); {
		case x < 600: // append
			size := recordHeader + s.rnd.IntN(300)
			if s.rnd.IntN(100) == 0 {
				size = 9000 + s.rnd.IntN(8000) // rendezvous
			}
			if uint64(size)+s.bytes+8 > uint64(s.q.size) {
				// Full: check it all, then rotate to the other buffer.
				if err := s.flushAndCheck(); err != nil {
					return err
				}
				s.off, s.offSeq = 0, 0
				if err := s.flushAndCheck(); err != nil {
					return fmt.Errorf("whole queue before rotation: %w", err)
				}
				rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := s.q.rotate(rctx, w, 1)
				cancel()
				if err != nil {
					return err
				}
				s.rots++
				s.seq, s.bytes, s.off, s.offSeq = 0, 0, 0, 0
			}
			if err := s.in.Append(s.q.base(), s.q.id, s.q.id, makeRecord(s.id, s.seq, size)); err != nil {
				return fmt.Errorf("append: %w", err)
			}
			s.seq++
			s.bytes += uint64(size)
		case x < 900: // scatter into the area, following the model
			n := 1 + s.rnd.IntN(4)
			var iovs []wire.IOV
			var chunks [][]byte
			for k := 0; k < n; k++ {
				l := 1 + s.rnd.IntN(64)
				off := s.rnd.IntN(len(s.model) - l)
				c := make([]byte, l)
				for j := range c {
					c[j] = byte(s.rnd.Uint32())
				}
				iovs = append(iovs, wire.IOV{Addr: s.area.base + uint64(off), Rkey: rdmo.RegionID(s.area.id), Len: uint16(l)})
				chunks = append(chunks, c)
			}
			if err := s.in.Scatter(iovs, chunks); err != nil {
				return fmt.Errorf("scatter: %w", err)
			}
			for k, v := range iovs {
				copy(s.model[v.Addr-s.area.base:], chunks[k])
			}
		case x < 905: // out of bounds: must write nothing and be reported
			iov := []wire.IOV{{Addr: s.area.base, Rkey: rdmo.RegionID(s.area.id), Len: 8}, {Addr: s.area.base + uint64(s.area.size) - 4, Rkey: rdmo.RegionID(s.area.id), Len: 8}}
			if err := s.in.Scatter(iov, [][]byte{make([]byte, 8), make([]byte, 8)}); err != nil {
				return fmt.Errorf("scatter: %w", err)
			}
			s.bad++
		case x >= 990:
			if err := s.flushAndCheck(); err != nil {
				return err
			}
		}
		s.ops.Add(1)
	}
	return s.flushAndCheck()
}

// Four initiators (two of them packing requests into BATCH containers)
// append and scatter (and now and then send an out-of-bounds scatter) with
// random flushes for SOAK_DURATION against a
// UROM worker process. At every flush every acknowledged request must be
// in target memory exactly once; queues that fill up are deregistered and
// replaced. At the end: no leaked goroutines or UCX handles, no leftover
// processes, and the worker process's resident memory within 10% of its
// value after warm-up.
func TestSoak(t *testing.T) {
	testproc.CheckNoLeftovers(t)
	ucptest.CheckLeaks(t)
	d := soakDuration(t)
	tr := ucptest.Transports[1] // TCP: nothing of target memory is mapped into the worker
	if os.Getenv("SOAK_TRANSPORT") == "shm" {
		tr = ucptest.Transports[0]
	}
	var rw remote
	tg := newTargets(t, tr, func() rdmoWorker {
		rw = startUROMWorker(t, tr, []string{"append", "flush", "scatter"}, nil)
		return rw
	}, 1)[0]
	const nInit = 4
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var ss []*soaker
	for i := 0; i < nInit; i++ {
		s := &soaker{id: i, rnd: rand.New(rand.NewPCG(uint64(i), 99)), area: tg.fenced(4096, 0)}
		s.model = make([]byte, s.area.size)
		s.q.size = 512 << 10
		for k := range s.q.bufs {
			m, err := tg.ctx.Allocate(s.q.size)
			if err != nil {
				t.Fatal(err)
			}
			tg.mems = append(tg.mems, m)
			s.q.bufs[k] = m
			if s.q.packed[k], err = m.PackRkey(); err != nil {
				t.Fatal(err)
			}
		}
		s.q.cur = 1
		if err := s.q.rotate(ctx, tg.worker, 1); err != nil {
			t.Fatal(err)
		}
		// Half of them pack queued requests into BATCH containers.
		in, err := initiator.New(initiator.Options{WorkerAddress: tg.wAddr, ClientID: 1, UCX: tr.Config(),
			Aggregate: i%2 == 1 && initiator.AggregateSupported(dpu.Capabilities())})
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		s.in = in
		tg.do(dpu.RQCreate{Client: 1, Addr: in.Address()})
		ss = append(ss, s)
	}

	pid := rw.W.PID
	errc := make(chan error, nInit)
	var wg sync.WaitGroup
	start := time.Now()
	for _, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.run(ctx, tg.worker); err != nil {
				errc <- fmt.Errorf("initiator %d: %w", s.id, err)
				cancel()
			}
		}()
	}
	ops := func() (n uint64) {
		for _, s := range ss {
			n += s.ops.Load()
		}
		return n
	}
	// Sample the worker's memory ten times; the one at warm-up is the
	// baseline.
	warm := max(d*4/10, 3*time.Second)
	var memWarm procMem
	var opsWarm uint64
	var trend []string
	tick := time.NewTicker(d / 10)
	for done := false; !done; {
		select {
		case <-tick.C:
			m, err := readProcMem(pid)
			if err != nil {
				t.Fatal(err)
			}
			if memWarm.rss == 0 && time.Since(start) >= warm {
				memWarm, opsWarm = m, ops()
			}
			trend = append(trend, fmt.Sprintf("%.1f", float64(m.private())/(1<<20)))
		case <-ctx.Done():
			done = true
		}
	}
	tick.Stop()
	wg.Wait()
	el := time.Since(start)
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	memEnd, err := readProcMem(pid)
	if err != nil {
		t.Fatal(err)
	}
	var checks uint64
	rots := 0
	for _, s := range ss {
		checks += s.checks.Load()
		rots += s.rots
	}
	total := ops()
	st := rw.Stats()
	t.Logf("%d initiators, %v: %d requests (%.0f/s), %d flushes checked, %d queue rotations (MR_DEREG + MR_REG); worker: %s",
		nInit, el.Round(time.Millisecond), total, float64(total)/el.Seconds(), checks, rots, coalescing(st))
	t.Logf("worker process memory after warm-up (%v, %d requests): %s", warm, opsWarm, memWarm)
	t.Logf("worker process memory at the end   (%v, %d requests): %s", el.Round(time.Millisecond), total, memEnd)
	t.Logf("worker private resident memory (VmRSS - RssShmem, MiB) every %v: %s", d/10, strings.Join(trend, " "))
	if memWarm.rss == 0 {
		t.Fatal("the soak ended before warm-up")
	}
	if limit := memWarm.private() + memWarm.private()/10; memEnd.private() > limit {
		t.Errorf("worker resident memory grew from %.1f MiB to %.1f MiB (more than 10%%)",
			float64(memWarm.private())/(1<<20), float64(memEnd.private())/(1<<20))
	}
	if st.Regions != 2*nInit || st.RQs != nInit {
		t.Errorf("worker holds %d regions and %d request queues, want %d and %d", st.Regions, st.RQs, 2*nInit, nInit)
	}
	for rq, n := range st.InFlight {
		if n != 0 {
			t.Errorf("request queue %d has %d requests in flight after the last flush", rq, n)
		}
	}
	if st.Failures[rdmo.StatusOutOfBounds] == 0 || len(st.Failures) != 1 {
		t.Errorf("worker failures %v: want out-of-bounds scatters only", st.Failures)
	}
}

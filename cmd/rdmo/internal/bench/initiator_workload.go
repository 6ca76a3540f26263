package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/demo"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// The workload row: the operations `rdmo -m client` sends (the demo's
// generator: records of 8 B to 64 KiB appended to a queue, scatters of 1
// to 8 chunks, a pipelined flush every workloadSpec.FlushEvery operations
// with at most demo.PendingFlushes of them in flight), each initiator from
// its own seed into its own queue and scatter region. The target checks
// every byte with the demo server's verifier (target_workload.go). The
// row's latency is the flushes'.

// workloadSpec is a workload round as the initiators get it.
type workloadSpec struct {
	Seeds      []uint64    `json:"seeds"` // per initiator
	FlushEvery uint64      `json:"flush_every"`
	Queues     []queueInfo `json:"queues"`   // per initiator
	Scatters   []queueInfo `json:"scatters"` // per initiator
}

// workload runs the round's operations until its budget is used, then
// makes a final flush: when it answers, every byte is in target memory.
func (p *initProc) workload(s roundSpec) (roundResult, error) {
	w := s.Workload
	if w == nil || p.id >= len(w.Seeds) || p.id >= len(w.Queues) || p.id >= len(w.Scatters) {
		return roundResult{}, fmt.Errorf("workload round without this initiator's regions")
	}
	seed, q, sc := w.Seeds[p.id], w.Queues[p.id], w.Scatters[p.id]
	g := demo.NewGenerator(seed)
	rec := make([]byte, demo.MaxRecord)
	bufs := make([][]byte, demo.MaxScatterIOV)
	for i := range bufs {
		bufs[i] = make([]byte, demo.MaxChunk)
	}
	iovs := make([]wire.IOV, 0, demo.MaxScatterIOV)
	chunks := make([][]byte, 0, demo.MaxScatterIOV)
	fl := newFlushes(demo.PendingFlushes(w.FlushEvery))
	ring, err := p.recordRing()
	if err != nil {
		return roundResult{}, err
	}
	ctx := context.Background()
	send := p.in.With(nil, 0)
	b := newBudget(s, 64)
	start := time.Now()
	var n int
	var bytes uint64
	for ; !b.done(n); n++ {
		if err := fl.failed(); err != nil {
			return roundResult{}, err
		}
		op := g.Next()
		var err error
		if op.Scatter {
			iovs, chunks = iovs[:0], chunks[:0]
			for k, c := range op.Chunks {
				iovs = append(iovs, wire.IOV{Addr: sc.Base + c.Off, Rkey: rdmo.RegionID(sc.Region), Len: uint16(c.Len)})
				chunks = append(chunks, demo.FillWorkloadChunk(bufs[k], seed, op.Index, k, c.Len))
				bytes += uint64(c.Len)
			}
			err = p.in.Scatter(iovs, chunks)
		} else {
			if ring.Lends(op.Size) {
				err = ring.Append(ctx, send, q.Base, q.Region, seed, op.Seq, op.Size)
			} else {
				err = p.in.Append(q.Base, q.Region, q.Region, demo.FillWorkloadRecord(rec, seed, op.Seq, op.Size))
			}
			bytes += uint64(op.Size)
		}
		if err != nil {
			return roundResult{}, fmt.Errorf("op %d: %w", n, err)
		}
		if uint64(n+1)%w.FlushEvery == 0 {
			if err := fl.async(p); err != nil {
				return roundResult{}, fmt.Errorf("flush after op %d: %w", n+1, err)
			}
		}
	}
	t0 := time.Now()
	err = p.flush()
	fl.add(time.Since(t0))
	el := time.Since(start)
	if werr := fl.wait(); err == nil {
		err = werr
	}
	if err != nil {
		return roundResult{}, err
	}
	return roundResult{Ops: uint64(n), Bytes: bytes, Elapsed: el, Lat: fl.hist}, nil
}

// recordRing is the round's initiator's ring for the workload's large
// records, as the demo client makes it (demo.RecordRing), kept from round
// to round; nil without --lend-pool or where the worker cannot map it.
func (p *initProc) recordRing() (*demo.RecordRing, error) {
	if !p.lends[p.in] {
		return nil, nil
	}
	if p.ringIn != p.in {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := demo.NewRecordRing(ctx, p.in)
		if err != nil {
			return nil, err
		}
		p.ring, p.ringIn = r, p.in
	}
	return p.ring, nil
}

// flushes are a workload's pipelined flushes, as the demo client makes
// them: at most cap(sem) in flight, each timed from its issue to its
// answer.
type flushes struct {
	sem  chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	hist Hist
	err  error
}

func newFlushes(pending int) *flushes { return &flushes{sem: make(chan struct{}, pending)} }

func (f *flushes) add(d time.Duration) {
	f.mu.Lock()
	f.hist.Add(d)
	f.mu.Unlock()
}

func (f *flushes) failed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// async issues a flush and waits for its answer on a goroutine of its own.
func (f *flushes) async(p *initProc) error {
	f.sem <- struct{}{}
	t0 := time.Now()
	fw, err := p.in.FlushAsync(context.Background())
	if err != nil {
		<-f.sem
		return err
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer func() { <-f.sem }()
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		rsp, err := fw.Wait(ctx)
		d := time.Since(t0)
		if err == nil && rsp.Failed != 0 {
			err = fmt.Errorf("flush reports %d failed requests (first: %v)", rsp.Failed, rsp.FirstStatus)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.hist.Add(d)
		if err != nil && f.err == nil {
			f.err = fmt.Errorf("flush: %w", err)
		}
	}()
	return nil
}

// wait waits for every flush in flight and returns the first failure.
func (f *flushes) wait() error {
	f.wg.Wait()
	return f.failed()
}

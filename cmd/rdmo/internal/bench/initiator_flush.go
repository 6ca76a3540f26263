package bench

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// The flush rows: FLUSH round trips, idle and under an append load.

// flushIdle measures FLUSH round trips with nothing else in flight; with
// drive, each made inside initiator.Drive.
func flushIdle(drive bool) roundFunc {
	return func(p *initProc, s roundSpec) (roundResult, error) { return p.flushIdle(s, drive) }
}

func (p *initProc) flushIdle(s roundSpec, drive bool) (roundResult, error) {
	run := func(flush func(ctx context.Context) (wire.FlushResponse, error)) (roundResult, error) {
		return timedOps(s, 0, func(int) error { return checkFlush(flush) }, nil)
	}
	if drive {
		// The flushes run on the Initiator's own loop thread, as a
		// latency-minded caller would make them: no hand-off between the
		// caller's thread and the loop's.
		// A Driver's flush has the Drive's context: bound the whole
		// round as a flush alone is bounded elsewhere.
		ctx, cancel := context.WithTimeout(context.Background(), s.Duration+flushTimeout)
		defer cancel()
		var rr roundResult
		err := p.in.Drive(ctx, func(d *initiator.Driver) (err error) {
			rr, err = run(func(context.Context) (wire.FlushResponse, error) { return d.Flush() })
			return err
		})
		return rr, err
	}
	return run(p.in.Flush)
}

// flushLoad measures FLUSH round trips while a second goroutine streams
// appends on the same connection (so every flush waits for the appends
// queued before it). The round ends when the flushes are done or the
// load's queue space is used up.
func (p *initProc) flushLoad(s roundSpec) (roundResult, error) {
	var stop atomic.Bool
	var loaded atomic.Uint64
	loadErr := make(chan error, 1)
	in := p.in
	go func() {
		rec := make([]byte, s.Size)
		cr := newCreditor(in, s.Credit)
		n := 0
		for ; n < s.LoadMax && !stop.Load(); n++ {
			if err := cr.before(); err != nil {
				loadErr <- err
				return
			}
			fillRecord(rec, p.id, s.Round, uint32(n))
			if err := in.Append(s.Queue.Base, s.Queue.Region, s.Queue.Region, rec); err != nil {
				loadErr <- err
				return
			}
			loaded.Store(uint64(n + 1))
			if err := cr.after(); err != nil {
				loadErr <- err
				return
			}
		}
		loadErr <- cr.drain()
	}()
	var h Hist
	b := newBudget(s, 1)
	start := time.Now()
	n := 0
	var err error
	for ; !b.done(n) && loaded.Load() < uint64(s.LoadMax); n++ {
		if n == 0 {
			// Let the load fill the pipeline first.
			for loaded.Load() < uint64(min(s.LoadMax, s.Window)) && len(loadErr) == 0 {
				runtime.Gosched()
			}
		}
		t0 := time.Now()
		if err = p.flush(); err != nil {
			break
		}
		h.Add(time.Since(t0))
	}
	el := time.Since(start)
	stop.Store(true)
	if lerr := <-loadErr; lerr != nil && err == nil {
		err = lerr
	}
	if err == nil {
		err = p.flush()
	}
	if err != nil {
		return roundResult{}, err
	}
	l := loaded.Load()
	return roundResult{Ops: uint64(n), Bytes: l * uint64(s.Size), Elapsed: el, Lat: h, Load: l}, nil
}

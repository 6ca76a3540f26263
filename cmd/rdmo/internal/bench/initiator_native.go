package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/openrdmo/rdmo/ucp"
)

// The native-append rows: appends without RDMO, fetch-add and put by
// the initiator itself.

// native appends without RDMO: fetch-add the tail in target memory by
// Size, then put the record at the fetched address. inflight bounds the
// fetch-adds outstanding: 1 is native-blocking (each put waits for its
// fetch-add, the next fetch-add for nothing else), more is
// native-pipelined (each put is issued when its fetch-add returns).
// nativeAppend is native-append/blocking or, pipelined, /pipelined.
func nativeAppend(pipelined bool) roundFunc {
	return func(p *initProc, s roundSpec) (roundResult, error) {
		if pipelined {
			return p.native(s, s.Window)
		}
		return p.native(s, 1)
	}
}

func (p *initProc) native(s roundSpec, inflight int) (roundResult, error) {
	rkey, err := p.rkey(s.Queue.Rkey)
	if err != nil {
		return roundResult{}, err
	}
	nbuf := s.Window + 1
	nt := &nativeRun{
		p: p, s: s, rkey: rkey,
		lo: s.Queue.Data, hi: s.Queue.Base + s.Queue.Len,
		bufs: p.recordBuffers(nbuf, s.Size), seq: make([]uint32, nbuf), t0: make([]time.Time, nbuf),
	}
	for i := range nt.bufs {
		nt.free = append(nt.free, i)
	}
	sample := s.Sample
	if inflight == 1 {
		sample = 1
	}
	b := newBudget(s, max(16, min(inflight, 256)))
	start := time.Now()
	n := 0
	for !b.done(n) && nt.err == nil {
		if nt.fadds < inflight && len(nt.free) > 0 {
			idx := nt.free[len(nt.free)-1]
			nt.free = nt.free[:len(nt.free)-1]
			nt.seq[idx] = uint32(n)
			nt.t0[idx] = time.Time{}
			if n%sample == 0 {
				nt.t0[idx] = time.Now()
			}
			err := p.ep.Atomic(ucp.AtomicFetchAdd, uint64(s.Size), 0, s.Queue.Base, rkey, nt, tagFADD<<32|uint64(idx))
			if err == nil {
				nt.fadds++
				n++
				if nt.fadds < inflight && n%16 != 0 {
					continue
				}
			} else {
				nt.free = append(nt.free, idx)
				if !errors.Is(err, ucp.ErrTooManyOutstanding) {
					return roundResult{}, err
				}
			}
		}
		if _, err := p.w.Progress(); err != nil {
			return roundResult{}, err
		}
	}
	if err := p.w.ProgressUntil(func() bool { return nt.fadds == 0 && len(nt.free) == nbuf || nt.err != nil }, flushTimeout); err != nil {
		return roundResult{}, fmt.Errorf("waiting for the last puts: %w", err)
	}
	if nt.err != nil {
		return roundResult{}, nt.err
	}
	if err := p.ep.FlushSync(flushTimeout); err != nil {
		return roundResult{}, fmt.Errorf("endpoint flush: %w", err)
	}
	el := time.Since(start)
	return roundResult{Ops: uint64(n), Bytes: uint64(n) * uint64(s.Size), Elapsed: el, Lat: nt.hist}, nil
}

const (
	tagFADD = 1
	tagPut  = 2
)

// nativeRun is the state of a native round; its Complete runs inside
// Progress on the command goroutine.
type nativeRun struct {
	p      *initProc
	s      roundSpec
	rkey   *ucp.RemoteKey
	lo, hi uint64
	bufs   [][]byte
	free   []int
	seq    []uint32
	t0     []time.Time
	fadds  int
	hist   Hist
	err    error
}

func (nt *nativeRun) Complete(c ucp.Completion) {
	idx := int(c.Tag & 0xffffffff)
	if c.Err != nil {
		if nt.err == nil {
			nt.err = c.Err
		}
		if c.Tag>>32 == tagFADD {
			nt.fadds--
		}
		nt.free = append(nt.free, idx)
		return
	}
	switch c.Tag >> 32 {
	case tagFADD:
		nt.fadds--
		addr := c.Value
		if addr < nt.lo || addr+uint64(nt.s.Size) > nt.hi {
			if nt.err == nil {
				nt.err = fmt.Errorf("fetch-add returned %#x, outside the queue [%#x, %#x): the queue is full or its tail was moved", addr, nt.lo, nt.hi)
			}
			nt.free = append(nt.free, idx)
			return
		}
		fillRecord(nt.bufs[idx], nt.p.id, nt.s.Round, nt.seq[idx])
		if err := nt.p.ep.Put(nt.bufs[idx], addr, nt.rkey, nt, tagPut<<32|uint64(idx)); err != nil {
			if nt.err == nil {
				nt.err = fmt.Errorf("put: %w", err)
			}
			nt.free = append(nt.free, idx)
		}
	case tagPut:
		if !nt.t0[idx].IsZero() {
			nt.hist.Add(time.Since(nt.t0[idx]))
		}
		nt.free = append(nt.free, idx)
	}
}

// nativeOwnedBatch is the most bytes native-owned packs into one put.
const nativeOwnedBatch = 64 << 10

// nativeOwned is the append a careful user writes without RDMO when one
// writer owns the queue: no fetch-add, the writer keeps the tail itself,
// packs its records into large puts (several in flight), and publishes the
// tail word once at the end of the round.
func (p *initProc) nativeOwned(s roundSpec) (roundResult, error) {
	rkey, err := p.rkey(s.Queue.Rkey)
	if err != nil {
		return roundResult{}, err
	}
	per := max(1, nativeOwnedBatch/s.Size) // records per put
	const nbuf = 8
	ow := &ownedRun{free: make([]int, 0, nbuf), t0: make([]time.Time, nbuf)}
	bufs := p.recordBuffers(nbuf, per*s.Size)
	for i := range bufs {
		ow.free = append(ow.free, i)
	}
	tail, hi := s.Queue.Data, s.Queue.Base+s.Queue.Len
	b := newBudget(s, 1)
	start := time.Now()
	n := 0
	for !b.done(n) && ow.err == nil {
		if len(ow.free) == 0 {
			if _, err := p.w.Progress(); err != nil {
				return roundResult{}, err
			}
			continue
		}
		k := per
		if b.max > 0 {
			k = min(k, b.max-n)
		}
		if room := int((hi - tail) / uint64(s.Size)); room < k {
			k = room
		}
		if k <= 0 {
			break // the queue is full
		}
		idx := ow.free[len(ow.free)-1]
		buf := bufs[idx][:k*s.Size]
		for j := 0; j < k; j++ {
			fillRecord(buf[j*s.Size:(j+1)*s.Size], p.id, s.Round, uint32(n+j))
		}
		ow.t0[idx] = time.Now()
		if err := p.ep.Put(buf, tail, rkey, ow, uint64(idx)); err != nil {
			if errors.Is(err, ucp.ErrTooManyOutstanding) {
				p.w.Progress()
				continue
			}
			return roundResult{}, fmt.Errorf("put: %w", err)
		}
		ow.free = ow.free[:len(ow.free)-1]
		tail += uint64(k * s.Size)
		n += k
	}
	if err := p.w.ProgressUntil(func() bool { return len(ow.free) == nbuf || ow.err != nil }, flushTimeout); err != nil {
		return roundResult{}, fmt.Errorf("waiting for the last puts: %w", err)
	}
	if ow.err != nil {
		return roundResult{}, ow.err
	}
	// Publish the tail once the records are in target memory (a put's
	// completion is local only; the flush makes them remote).
	if err := p.ep.FlushSync(flushTimeout); err != nil {
		return roundResult{}, fmt.Errorf("endpoint flush: %w", err)
	}
	var word [8]byte
	binary.LittleEndian.PutUint64(word[:], tail)
	if err := p.ep.Put(word[:], s.Queue.Base, rkey, nil, 0); err != nil {
		return roundResult{}, fmt.Errorf("put tail: %w", err)
	}
	if err := p.ep.FlushSync(flushTimeout); err != nil {
		return roundResult{}, fmt.Errorf("endpoint flush: %w", err)
	}
	el := time.Since(start)
	return roundResult{Ops: uint64(n), Bytes: uint64(n) * uint64(s.Size), Elapsed: el, Lat: ow.hist}, nil
}

// ownedRun is native-owned's put completions (inside Progress).
type ownedRun struct {
	free []int
	t0   []time.Time
	hist Hist
	err  error
}

func (ow *ownedRun) Complete(c ucp.Completion) {
	if c.Err != nil && ow.err == nil {
		ow.err = c.Err
	}
	ow.hist.Add(time.Since(ow.t0[c.Tag]))
	ow.free = append(ow.free, int(c.Tag))
}

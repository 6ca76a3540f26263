package bench

import (
	"context"
	"time"

	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/rdmo"
)

// The rdmo-append rows: APPEND streams through the RDMO worker.

// The rdmo-append rows: APPEND streams through the RDMO worker. Records of
// lentMin bytes and more are lent (AppendLent) from a ring of buffers, as an
// application streaming large records would: no copy in the initiator, and
// a buffer is refilled once its Lend returned it. Smaller ones go by Append,
// whose copy is cheaper than a loan's bookkeeping.

// lentMin is the smallest record the rows lend; lentRingBytes bounds a
// ring's memory (at most lentRing buffers, at least 2).
//
// A ring of 4 MiB lets the initiator's fill and the worker's read of a
// slot meet in the caches rather than in memory: 1 MiB appends ran at
// 1.08-1.15 of native-owned from sixteen slots (16 MiB), 1.35-1.60 from
// four, and waited 0.8 ms (p50) instead of 3.3-3.7 ms. Smaller records
// want more slots than sixteen (on a machine with 1 MiB of L2 per core,
// sixteen slots of 64 KiB are one core's whole L2): 64 slots (4 MiB) took
// 64 KiB appends from 0.44-0.68 to 0.49-0.92 of native-owned and their
// CPU from 15-30 to 12-23 us, and 16 KiB ones from 0.28-0.43 to
// 0.36-0.47 (four pairs alternated). Records sent by value (up to the
// rendezvous threshold: the worker copies them out of its FIFO, and the
// slot is free at once) keep sixteen: over eight pairs 4 KiB ones ran at
// a median 0.35 of native-owned from 64 slots, 0.40 from sixteen.
// So the ring is bounded by bytes, by 64 slots, and by 16 for records sent
// by value (docs/benchmarks/large-payloads.md, "A lend ring the caches
// hold").
const (
	lentMin        = 4 << 10
	lentRingBytes  = 4 << 20
	lentRing       = 64
	lentRingByCopy = 16
)

// rdmoAppend streams APPENDs of records to the queue, then flushes: when
// the flush answers, every record is in target memory.
func (p *initProc) rdmoAppend(s roundSpec) (roundResult, error) {
	p.acks.reset()
	if s.Size >= lentMin && s.Credit <= 0 {
		return p.rdmoAppendLent(s)
	}
	rec := make([]byte, s.Size)
	q := s.Queue
	b := newBudget(s, 64)
	acked := p.in.With(nil, rdmo.FlagAck)
	cr := newCreditor(p.in, s.Credit)
	start := time.Now()
	n := 0
	for ; !b.done(n); n++ {
		if err := cr.before(); err != nil {
			return roundResult{}, err
		}
		fillRecord(rec, p.id, s.Round, uint32(n))
		if n%s.Sample == 0 {
			t0 := time.Now()
			seq, err := acked.Append(q.Base, q.Region, q.Region, rec)
			if err != nil {
				return roundResult{}, err
			}
			p.acks.sent(seq, t0)
		} else if err := p.in.Append(q.Base, q.Region, q.Region, rec); err != nil {
			return roundResult{}, err
		}
		if err := cr.after(); err != nil {
			return roundResult{}, err
		}
	}
	return p.endStream(cr, start, n, s.Size)
}

// rdmoAppendDrive is rdmoAppend's stream made inside initiator.Drive with
// Driver.Append: the producer is the initiator's loop thread, which sends
// as it goes (a loop round every few dozen appends) and runs the loop when
// the window is full, so no other thread polls and nothing is handed
// between threads. Records of lentMin bytes and more are lent, as in
// rdmoAppend; with --credit the creditor's flushes need the plain path.
func (p *initProc) rdmoAppendDrive(s roundSpec) (roundResult, error) {
	if s.Size >= lentMin || s.Credit > 0 {
		return p.rdmoAppend(s)
	}
	p.acks.reset()
	rec := make([]byte, s.Size)
	q := s.Queue
	return p.driveStream(s, driveStep{
		record: func(_ *initiator.Driver, n int) ([]byte, error) {
			fillRecord(rec, p.id, s.Round, uint32(n))
			return rec, nil
		},
		send: func(ds initiator.DriverSender, _ int, rec []byte) (uint64, error) {
			return ds.Append(q.Base, q.Region, q.Region, rec)
		},
	})
}

// rdmoAppendLent is the stream of large records: lent from a ring of
// buffers, inside initiator.Drive, so the stream runs on the initiator's
// loop thread and waits for a buffer by running the loop (no thread
// hand-off per append). With --credit the creditor's flushes need the
// plain path.
func (p *initProc) rdmoAppendLent(s roundSpec) (roundResult, error) {
	k := min(max(lentRingBytes/s.Size, 2), lentRing)
	if s.Size <= initiator.DefaultRendezvousThreshold {
		k = min(k, lentRingByCopy)
	}
	ring, err := p.lentBuffers(k, s.Size)
	if err != nil {
		return roundResult{}, err
	}
	lends := make([]initiator.Lend, k)
	q := s.Queue
	return p.driveStream(s, driveStep{
		record: func(d *initiator.Driver, n int) ([]byte, error) {
			if err := d.WaitLend(&lends[n%k]); err != nil {
				return nil, err
			}
			fillRecord(ring[n%k], p.id, s.Round, uint32(n))
			return ring[n%k], nil
		},
		send: func(ds initiator.DriverSender, n int, rec []byte) (uint64, error) {
			return ds.AppendLent(q.Base, q.Region, q.Region, rec, &lends[n%k])
		},
		end: func(d *initiator.Driver) error {
			for i := range lends {
				if err := d.WaitLend(&lends[i]); err != nil {
					return err
				}
			}
			return nil
		},
	})
}

// driveStep is what a stream inside one Drive does per record: make the
// n-th record (record), send it (send, with rdmo.FlagAck on every Sample-th,
// whose ack times the latency sample from the send on), and once after the
// last (end, optional).
type driveStep struct {
	record func(d *initiator.Driver, n int) ([]byte, error)
	send   func(ds initiator.DriverSender, n int, rec []byte) (uint64, error)
	end    func(d *initiator.Driver) error
}

// driveStream runs the round's appends inside one initiator.Drive, then
// flushes as every append row does (endStream).
func (p *initProc) driveStream(s roundSpec, step driveStep) (roundResult, error) {
	b := newBudget(s, 64)
	start := time.Now()
	n := 0
	ctx, cancel := context.WithTimeout(context.Background(), s.Duration+flushTimeout)
	defer cancel()
	err := p.in.Drive(ctx, func(d *initiator.Driver) error {
		plain, acked := d.With(0), d.With(rdmo.FlagAck)
		for ; !b.done(n); n++ {
			rec, err := step.record(d, n)
			if err != nil {
				return err
			}
			if n%s.Sample != 0 {
				if _, err := step.send(plain, n, rec); err != nil {
					return err
				}
				continue
			}
			t0 := time.Now()
			seq, err := step.send(acked, n, rec)
			if err != nil {
				return err
			}
			p.acks.sent(seq, t0)
		}
		if step.end != nil {
			return step.end(d)
		}
		return nil
	})
	if err != nil {
		return roundResult{}, err
	}
	return p.endStream(newCreditor(p.in, 0), start, n, s.Size)
}

package demo

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/host/oob"
	"github.com/openrdmo/rdmo/host/target"
	"github.com/openrdmo/rdmo/rdmo"
)

// The reference demo (NVIDIA DOCA 3.0's urom_rdmo), as -m server runs it
// for a reference initiator: what its client sends and what its server
// checks (docs/PROTOCOL.md, "The reference out-of-band exchange").
const (
	refQueueSize    = SeedQueueSize // 128 KiB, the first u64 the tail
	refAppendLen    = 8
	refByte         = 0x33
	refScatterBytes = 16 * 8 // 16 chunks of 8 bytes from base, over the tail word
	refFlushID      = 0xbeef
	refStepTimeout  = 60 * time.Second // from one exchange to the initiator's next flush or message
)

// runReference serves a reference initiator (oob.Listener.AcceptEither
// found its first message, its worker address, on the out-of-band port):
// the reference demo's sequence of exchanges, with the reference server's
// checks, on the seed region (a 128 KiB queue whose tail starts at
// base+8). It learns that the initiator's append and scatter are done
// from the worker (command.Remote.WaitFlush: the queue's FLUSH
// completed), never by polling its memory.
func (s *server) runReference(ctx context.Context, rc *oob.RefConn) error {
	s.ref = rc
	s.log.Info("reference initiator connected (DOCA urom_rdmo out-of-band exchange)",
		zap.Stringer("from", rc.RemoteAddr()), zap.Int("address_len", len(rc.First())))
	q := s.seed
	if q.mem.Len() != refQueueSize {
		return fmt.Errorf("reference demo: the queue region is %d bytes, want %d", q.mem.Len(), refQueueSize)
	}
	start := time.Now()
	if err := s.refSetup(ctx, rc); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, gone := err.(*refAbandoned); !gone {
			return err
		}
		// Bad input from a peer that has nothing yet (no region id):
		// one line, undo, and wait for a proper initiator.
		s.log.Warn("reference initiator failed before its work began; still waiting for an initiator", zap.Error(err))
		if s.rqMade {
			if derr := s.t.DestroyRQ(ctx, s.rq); derr != nil && ctx.Err() == nil {
				return fmt.Errorf("RQ_DESTROY after the reference initiator left: %w", derr)
			}
			s.rqMade = false
		}
		rc.Close()
		s.ref = nil
		return errRefAbandoned
	}
	// One initiator per run (this one has its queue and region):
	// acceptLoop turns any other away.
	s.commit()

	// The append of 8 bytes and its FLUSH.
	ev, err := s.waitRefFlush(ctx, 0, "the append's FLUSH")
	if err != nil {
		return err
	}
	mem, base := q.mem.Bytes(), q.mem.Address()
	if err := checkRefAppend(mem, base); err != nil {
		return refFailed("append", err, ev)
	}
	s.log.Info("reference append verified: 8 bytes of 0x33 at base+8, tail at base+16")
	clear(mem) // as the reference server does, before the scatter

	// Exchange 3: the barrier, two empty messages.
	if err := s.refExchange(ctx, rc, nil, "3 (barrier)"); err != nil {
		return err
	}

	// The scatter of 16 chunks of 8 bytes over base..base+127 and its FLUSH.
	ev2, err := s.waitRefFlush(ctx, 1, "the scatter's FLUSH")
	if err != nil {
		return err
	}
	if err := checkRefScatter(mem); err != nil {
		return refFailed("scatter", err, ev2)
	}
	elapsed := time.Since(start)
	s.verified = true
	// The initiator's work is over and it never says so: close its queue.
	if err := s.t.DestroyRQ(ctx, s.rq); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.Warn("RQ_DESTROY after the reference demo", zap.Error(err))
	}
	s.rqMade = false
	s.printRefSummary(ctx, rc, ev, ev2, elapsed)
	return nil
}

// errRefAbandoned: runReference undid what it did for a reference initiator
// that failed before its work began; the server waits for another.
var errRefAbandoned = errors.New("reference initiator abandoned")

// refAbandoned is a failure of the peer (its address, its connection)
// before it learned the region id.
type refAbandoned struct{ err error }

func (e *refAbandoned) Error() string { return e.err.Error() }
func (e *refAbandoned) Unwrap() error { return e.err }

// refSetup runs exchanges 1 and 2 and creates the initiator's queue.
func (s *server) refSetup(ctx context.Context, rc *oob.RefConn) error {
	// Exchange 1: the initiator's address came with its connection; the
	// answer is the RDMO worker's address.
	if err := rc.Send(ctx, s.t.WorkerAddress()); err != nil {
		return &refAbandoned{fmt.Errorf("reference exchange 1 (worker address): %w", err)}
	}
	// Its queue: no error handling on the worker's endpoint (the
	// initiator asks for none, and UCX refuses asymmetric modes), and its
	// headers' client id 0 means this client.
	rq, err := s.t.CreateRQWith(ctx, rc.First(), target.RQOptions{ErrorHandling: dpu.RQErrorsNone, ZeroClientID: true})
	if err != nil {
		// The worker refused the initiator's address (it answered, with
		// a status); the worker being gone or silent is this side's end.
		var we *rdmo.WireError
		if errors.As(err, &we) {
			return &refAbandoned{fmt.Errorf("RQ_CREATE for the reference initiator: %w", err)}
		}
		return fmt.Errorf("RQ_CREATE for the reference initiator: %w", err)
	}
	s.rq, s.rqMade = rq, true
	s.log.Info("request queue created", zap.String("initiator", "reference"), zap.Uint64("rq", s.rq))

	// Exchange 2: the queue's region id and the address of its tail word;
	// the initiator sends nothing.
	var info [16]byte
	binary.LittleEndian.PutUint64(info[0:], s.seed.id)
	binary.LittleEndian.PutUint64(info[8:], s.seed.mem.Address())
	if err := s.refExchange(ctx, rc, info[:], "2 (region id and tail address)"); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return &refAbandoned{err}
	}
	return nil
}

// refExchange is one exchange in which the initiator sends nothing.
func (s *server) refExchange(ctx context.Context, rc *oob.RefConn, msg []byte, step string) error {
	sctx, cancel := context.WithTimeout(ctx, refStepTimeout)
	defer cancel()
	got, err := rc.Exchange(sctx, msg)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("reference exchange %s: %w", step, err)
	}
	if len(got) != 0 {
		s.log.Warn("the reference initiator sent data where it sends none; ignored", zap.String("exchange", step), zap.Int("bytes", len(got)))
	}
	return nil
}

// waitRefFlush waits for the queue's FLUSH number after+1 to complete.
func (s *server) waitRefFlush(ctx context.Context, after uint64, what string) (dpu.FlushEvent, error) {
	wctx, cancel := context.WithTimeout(ctx, refStepTimeout)
	defer cancel()
	type result struct {
		ev  dpu.FlushEvent
		err error
	}
	ch := make(chan result, 1)
	go func() {
		ev, err := s.t.WaitFlush(wctx, s.rq, after)
		ch <- result{ev, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-s.fail.ch:
		cancel()
		<-ch
		return dpu.FlushEvent{}, s.fail.get()
	}
	switch {
	case r.err == nil:
	case ctx.Err() != nil:
		return r.ev, ctx.Err()
	case errors.Is(r.err, context.DeadlineExceeded):
		return r.ev, fmt.Errorf("reference demo: %s did not complete within %v", what, refStepTimeout)
	default:
		return r.ev, fmt.Errorf("reference demo: waiting for %s: %w", what, r.err)
	}
	if r.ev.FlushID != refFlushID {
		s.log.Info("the reference initiator's flush id is not the demo's", zap.String("flush_id", fmt.Sprintf("%#x", r.ev.FlushID)))
	}
	if r.ev.Failed > 0 {
		s.log.Warn("the worker reports failed requests of the reference initiator",
			zap.Uint32("failed", r.ev.Failed), zap.String("first_op", rdmo.OpName(r.ev.FirstOp)),
			zap.String("first_status", r.ev.FirstStatus.Name()), zap.Uint64("first_seq", r.ev.FirstSeq))
	}
	return r.ev, nil
}

// refFailed is the one line saying which check of the reference demo failed
// (and what the worker reported, which the reference initiator ignores).
func refFailed(check string, err error, ev dpu.FlushEvent) error {
	msg := fmt.Sprintf("verification FAILED: reference %s check: %v", check, err)
	if ev.Failed > 0 {
		msg += fmt.Sprintf(" (the worker reports %d failed request(s), the first %s: %s)", ev.Failed, rdmo.OpName(ev.FirstOp), ev.FirstStatus.Name())
	}
	return errors.New(msg)
}

// checkRefAppend is the reference server's first check: the tail moved
// from base+8 to base+16 and the 8 bytes after the tail word are 0x33.
func checkRefAppend(mem []byte, base uint64) error {
	if got := binary.LittleEndian.Uint64(mem); got != base+8+refAppendLen {
		return fmt.Errorf("the tail is base%+d, want base+16", int64(got-base))
	}
	if want := bytes.Repeat([]byte{refByte}, refAppendLen); !bytes.Equal(mem[8:8+refAppendLen], want) {
		return fmt.Errorf("the appended bytes are % x, want 8 × 33", mem[8:8+refAppendLen])
	}
	return nil
}

// checkRefScatter is its second: 16 × 8 bytes of 0x33 from base.
func checkRefScatter(mem []byte) error {
	for i := 0; i < refScatterBytes; i++ {
		if mem[i] != refByte {
			return fmt.Errorf("chunk %d (base+%d) is % x, want 8 × 33", i/8, i/8*8, mem[i/8*8:i/8*8+8])
		}
	}
	return nil
}

func (s *server) printRefSummary(ctx context.Context, rc *oob.RefConn, ev1, ev2 dpu.FlushEvent, elapsed time.Duration) {
	out := Stdout
	fmt.Fprintf(out, "rdmo server: verification PASSED (reference initiator)\n")
	fmt.Fprintf(out, "  initiator     reference out-of-band exchange, %s\n", rc.RemoteAddr())
	fmt.Fprintf(out, "  append        8 bytes of 0x33 at base+8, tail base+16: intact (flush id %#x)\n", ev1.FlushID)
	fmt.Fprintf(out, "  scatter       16 chunks of 8 bytes of 0x33 at base..base+127: intact (flush id %#x)\n", ev2.FlushID)
	fmt.Fprintf(out, "  reported      %d failed requests in flush responses; %s from the queue to the last flush\n", ev2.Failures, elapsed.Round(time.Millisecond))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if st, err := s.t.Stats(sctx); err == nil {
		fmt.Fprintf(out, "  worker        %s\n", workerStats(st))
	}
}

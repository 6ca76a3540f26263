package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/openrdmo/rdmo/ucp"
)

// The AM baselines: raw-am (a one-way stream of active messages to the
// target's sink) and am-pingpong (one at a time, echoed).

// echoState is the AM baselines' view of the sink's echoes (touched only
// inside Progress, on the command goroutine).
type echoState struct {
	t0   map[uint64]time.Time // sampled seq -> send time
	hist *Hist
	last uint64 // last echoed seq + 1
	fin  bool
	errs int
}

// onEcho receives the sink's echoes (inside Progress).
func (p *initProc) onEcho(_ *ucp.Worker, msgs []ucp.Message) {
	e := &p.echo
	now := time.Now()
	for i := range msgs {
		h := msgs[i].Header
		if len(h) < sinkHeaderLen {
			e.errs++
			continue
		}
		seq := binary.LittleEndian.Uint64(h[8:])
		if h[2]&sinkFin != 0 {
			e.fin = true
			continue
		}
		if t0, ok := e.t0[seq]; ok {
			if e.hist != nil {
				e.hist.Add(now.Sub(t0))
			}
			delete(e.t0, seq)
		}
		e.last = seq + 1
	}
}

// amSender sends sink messages of one round: header and record, from
// per-slot buffers when they are too large to be copied at once.
type amSender struct {
	p      *initProc
	s      roundSpec
	inline bool
	hdr    [][sinkHeaderLen]byte
	bufs   [][]byte
	free   []int
	err    error
}

// amSendBytes bounds the payload buffers of the AM baselines (and so the
// bytes they have in flight): 64 MiB, 64 sends of 1 MiB, as many as the
// window allows below that. A window's worth of 1 MiB buffers was 1 GiB,
// allocated and cleared every round: the row measured page faults.
const amSendBytes = 64 << 20

// amBufs keeps the AM baselines' payload buffers from round to round (the
// command goroutine's only: one initiator per process). Their records are
// written once, when made; a send rewrites only the record's 8-byte header
// (id, round, seq), the part the sink checks, so the row measures what
// ucx_perftest measures, sending, not the bench's pattern.
var amBufs struct {
	size int
	bufs [][]byte
}

func newAMSender(p *initProc, s roundSpec) *amSender {
	a := &amSender{p: p, s: s, inline: sinkHeaderLen+s.Size <= 256}
	n := 1
	if !a.inline {
		n = max(1, min(s.Window, amSendBytes/s.Size))
	}
	if amBufs.size != s.Size || len(amBufs.bufs) < n {
		amBufs.size, amBufs.bufs = s.Size, make([][]byte, n)
		for i := range amBufs.bufs {
			amBufs.bufs[i] = make([]byte, s.Size)
			fillRecord(amBufs.bufs[i], p.id, s.Round, 0)
		}
	}
	a.hdr = make([][sinkHeaderLen]byte, n)
	a.bufs = amBufs.bufs[:n]
	for i := range a.bufs {
		a.free = append(a.free, i)
	}
	return a
}

func (a *amSender) Complete(c ucp.Completion) {
	if c.Err != nil && a.err == nil {
		a.err = c.Err
	}
	a.free = append(a.free, int(c.Tag))
}

// send queues message seq (flags: sinkEcho, sinkFin); false means no room
// (progress and try again).
func (a *amSender) send(seq uint64, flags byte) (bool, error) {
	if len(a.free) == 0 {
		return false, nil
	}
	idx := a.free[len(a.free)-1]
	h := a.hdr[idx][:]
	binary.LittleEndian.PutUint16(h[0:], uint16(a.p.id))
	h[2], h[3] = flags, 0
	binary.LittleEndian.PutUint32(h[4:], uint32(a.s.Round))
	binary.LittleEndian.PutUint64(h[8:], seq)
	var data []byte
	if flags&sinkFin == 0 {
		data = a.bufs[idx]
		binary.LittleEndian.PutUint16(data[0:], uint16(a.p.id))
		binary.LittleEndian.PutUint16(data[2:], uint16(a.s.Round))
		binary.LittleEndian.PutUint32(data[4:], uint32(seq))
	}
	var sf ucp.SendFlags
	if flags != 0 {
		sf = ucp.SendReply
	}
	var c ucp.Completer
	if !a.inline {
		c = a
		a.free = a.free[:len(a.free)-1]
	}
	err := a.p.ep.SendAM(amSink, h, data, sf, c, uint64(idx))
	if err != nil {
		if !a.inline {
			a.free = append(a.free, idx)
		}
		if errors.Is(err, ucp.ErrTooManyOutstanding) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// finish sends the round's fin and waits for its echo: every message sent
// before it has then reached the sink.
func (a *amSender) finish() error {
	e := &a.p.echo
	e.fin = false
	for {
		ok, err := a.send(0, sinkFin)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		a.p.w.Progress()
	}
	if err := a.p.w.ProgressUntil(func() bool { return e.fin || a.err != nil }, flushTimeout); err != nil {
		return fmt.Errorf("waiting for the sink's fin: %w", err)
	}
	return a.err
}

// rawAM streams Size-byte AMs to the target's sink, which counts them.
func (p *initProc) rawAM(s roundSpec) (roundResult, error) {
	var h Hist
	p.echo = echoState{t0: map[uint64]time.Time{}, hist: &h}
	a := newAMSender(p, s)
	b := newBudget(s, 256)
	start := time.Now()
	n := 0
	for !b.done(n) {
		var flags byte
		if n%s.Sample == 0 {
			flags = sinkEcho
			p.echo.t0[uint64(n)] = time.Now()
		}
		ok, err := a.send(uint64(n), flags)
		if err != nil {
			return roundResult{}, err
		}
		if !ok {
			delete(p.echo.t0, uint64(n))
			p.w.Progress()
			continue
		}
		if n++; n%64 == 0 {
			p.w.Progress()
		}
	}
	if err := a.finish(); err != nil {
		return roundResult{}, err
	}
	el := time.Since(start)
	p.w.ProgressUntil(func() bool { return len(p.echo.t0) == 0 }, 10*time.Second)
	p.echo.hist = nil
	return roundResult{Ops: uint64(n), Bytes: uint64(n) * uint64(s.Size), Elapsed: el, Lat: h}, nil
}

// pingPong sends one Size-byte AM at a time and waits for its echo.
func (p *initProc) pingPong(s roundSpec) (roundResult, error) {
	var h Hist
	p.echo = echoState{t0: map[uint64]time.Time{}, hist: &h}
	a := newAMSender(p, s)
	b := newBudget(s, 1)
	start := time.Now()
	n := 0
	for ; !b.done(n); n++ {
		p.echo.t0[uint64(n)] = time.Now()
		for {
			ok, err := a.send(uint64(n), sinkEcho)
			if err != nil {
				return roundResult{}, err
			}
			if ok {
				break
			}
			p.w.Progress()
		}
		want := uint64(n) + 1
		for p.echo.last < want && a.err == nil {
			if _, err := p.w.Progress(); err != nil {
				return roundResult{}, err
			}
			if time.Since(start) > flushTimeout {
				return roundResult{}, fmt.Errorf("no echo for ping %d", n)
			}
		}
		if a.err != nil {
			return roundResult{}, a.err
		}
	}
	el := time.Since(start)
	if err := a.finish(); err != nil {
		return roundResult{}, err
	}
	p.echo.hist = nil
	return roundResult{Ops: uint64(n), Bytes: uint64(n) * uint64(s.Size), Elapsed: el, Lat: h}, nil
}

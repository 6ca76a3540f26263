package dpu

import (
	"encoding/binary"
	"errors"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/ucp"
)

// ErrReceiveQueueBlocked means a shared-memory receive queue of the worker
// delivers nothing any more and the worker could not repair it: a local
// peer process died between claiming a slot of it and filling the slot
// (docs/SECURITY.md finding 9), and the slot could not be filled (a UCX
// whose FIFO layout ucp does not know, RDMO_SHM_FIFO_REPAIR=0, or a FIFO
// that stays blocked after the fill). No message from any local peer on
// that transport reaches the worker again. The worker reports it through
// Config.OnFatal.
var ErrReceiveQueueBlocked = errors.New("dpu: a shared-memory receive queue is blocked by a peer that died while writing to it")

// DefaultShmCheckTimeout is Config.ShmCheckTimeout's default.
const DefaultShmCheckTimeout = 10 * time.Second

// shmCheckMinRounds is the least number of loop rounds (each a Progress of
// the worker, so a read of its receive queues) a probe must have been
// given before a missing one counts: on a starved machine the wall clock
// alone says nothing.
const shmCheckMinRounds = 1000

// shmCheckAM is the active-message id of the probes (requests use 0).
const shmCheckAM = 1

// shmTransports are UCX's shared-memory transports that receive through a
// FIFO every local sender writes into.
//
// Why the worker checks them: a sender claims a slot of the receiver's FIFO
// (an atomic increment of its head), writes the message, then marks the
// slot ready; the receiver reads slots in order. A sender killed between
// the claim and the mark (a window of the message's copy, hit about once
// in 25 kills of an initiator in the middle of a burst, e2e
// TestFaultHostileInitiatorKilledMidRendezvous, and up to once in 10 kills
// of one streaming small records, TestFaultInitiatorKilled) leaves a slot
// that never becomes ready, and every later message of every local peer
// waits behind it for good. The worker cannot see its FIFOs through UCX's
// API, so after a peer failure it sends itself a message through each of
// them from a probe worker of its own and waits for it.
var shmTransports = []string{"sysv", "posix"}

// shmProbe sends through one shared-memory transport to the worker.
type shmProbe struct {
	tl  string
	ctx *ucp.Context
	w   *ucp.Worker
	ep  *ucp.Endpoint // nil: the worker has no interface of this transport
}

// shmCheck is the state of the receive-queue check (loop-owned).
type shmCheck struct {
	due        bool       // a peer failed: check at the next round
	probes     []shmProbe // made at the first check, kept until teardown
	seq        uint64     // the probe under way (0: none)
	last       uint64     // the last probe sent: each check's is new
	got        []uint64   // by probe: the last seq that arrived
	started    time.Time
	startRound uint64
	waits      []ucp.ShmFIFOWait // the FIFOs waiting on a slot when the wait began
	fillTried  bool              // fillDeadSlots ran at shmFillAfter in this wait
	failed     bool              // reported; nothing more to check
}

// shmFillAfter is how long a FIFO slot must stay claimed and unready, with
// the probes missing, before the worker takes its sender for dead and
// fills it (bounded by Config.ShmCheckTimeout). A live sender writes its
// slot in microseconds; one kept off the CPU (a cgroup's quota period is
// 100 ms) is back well within it, and every other local peer waits this
// long.
const shmFillAfter = 2 * time.Second

// beginShmWait starts the wait for the check's probes (when they are sent,
// and again after a fill), from the FIFOs' state now.
func (w *Worker) beginShmWait() {
	s := &w.shm
	s.started, s.startRound, s.fillTried = time.Now(), w.round, false
	s.waits, _ = ucp.ShmFIFOWaits()
}

// peerFailed asks for a check of the shared-memory receive queues: it runs
// inside Progress (an endpoint's error callback), where no worker may be
// made, so the loop starts it (checkShm).
func (w *Worker) peerFailed() {
	if !w.shm.failed {
		w.shm.due = true
	}
}

// checkShm starts a due check and judges the one under way; it runs at the
// top of the loop, outside Progress.
func (w *Worker) checkShm() {
	s := &w.shm
	if s.due && s.seq == 0 {
		s.due = false
		w.startShmCheck()
	}
	if s.seq == 0 {
		return
	}
	waiting := false
	for i := range s.probes {
		p := &s.probes[i]
		if p.ep == nil {
			continue
		}
		// Moves the probe's send on if the FIFO was full when it was
		// made; a probe worker has nothing else to do.
		p.w.Progress()
		if s.got[i] != s.seq {
			waiting = true
		}
	}
	if !waiting {
		w.log.Debug("shared-memory receive queues deliver", zap.Uint64("check", s.seq))
		w.stats.shmChecks.Add(1)
		s.seq = 0
		return
	}
	if w.round-s.startRound < shmCheckMinRounds {
		return
	}
	waited := time.Since(s.started)
	if !s.fillTried && waited >= min(shmFillAfter, w.cfg.ShmCheckTimeout) {
		s.fillTried = true
		if w.fillDeadSlots() {
			w.beginShmWait()
			return
		}
	}
	if waited < w.cfg.ShmCheckTimeout {
		return
	}
	var blocked []string
	for i, p := range s.probes {
		if p.ep != nil && s.got[i] != s.seq {
			blocked = append(blocked, p.tl)
		}
	}
	s.seq, s.failed = 0, true
	w.log.Error("a shared-memory receive queue is blocked: a local peer died while writing to it, and no local peer's message reaches this worker any more",
		zap.Strings("transports", blocked), zap.Duration("waited", time.Since(s.started)),
		zap.Uint64("rounds", w.round-s.startRound))
	if w.cfg.OnFatal != nil {
		w.cfg.OnFatal(ErrReceiveQueueBlocked)
	}
}

// startShmCheck sends a probe through every shared-memory transport the
// worker listens on.
func (w *Worker) startShmCheck() {
	s := &w.shm
	if s.probes == nil {
		s.probes = make([]shmProbe, len(shmTransports))
		s.got = make([]uint64, len(shmTransports))
		for i, tl := range shmTransports {
			s.probes[i] = w.newShmProbe(tl)
		}
	}
	s.last++
	s.seq = s.last
	w.beginShmWait()
	var hdr [16]byte
	sent := false
	for i := range s.probes {
		p := &s.probes[i]
		if p.ep == nil {
			continue
		}
		binary.LittleEndian.PutUint64(hdr[:], uint64(i))
		binary.LittleEndian.PutUint64(hdr[8:], s.seq)
		if err := p.ep.SendAM(shmCheckAM, hdr[:], nil, 0, nil, 0); err != nil {
			w.log.Warn("shared-memory check: probe not sent", zap.String("transport", p.tl), zap.Error(err))
			continue
		}
		sent = true
	}
	if !sent {
		s.seq = 0
	}
}

// fillDeadSlots fills every FIFO slot waited on now that was waited on
// when the wait for the probes began (shmFillAfter ago at least). It
// reports whether it filled any.
func (w *Worker) fillDeadSlots() bool {
	s := &w.shm
	now, err := ucp.ShmFIFOWaits()
	if err != nil {
		w.log.Warn("shared-memory check: the FIFOs cannot be read", zap.Error(err))
		return false
	}
	filled := 0
	for _, fw := range now {
		if !slices.ContainsFunc(s.waits, fw.SameSlot) {
			continue
		}
		if err := ucp.UnblockShmFIFO(fw); err != nil {
			w.log.Warn("shared-memory check: slot not filled", zap.String("fifo", fw.Name), zap.Uint64("slot", fw.Slot), zap.Error(err))
			continue
		}
		filled++
		w.stats.shmSlotsFilled.Add(1)
		w.log.Warn("a local peer died while writing into a shared-memory receive FIFO: filled its slot, and the messages behind it are read again",
			zap.String("fifo", fw.Name), zap.Uint64("slot", fw.Slot), zap.Uint64("claimed", fw.Claimed),
			zap.Duration("waited", time.Since(s.started)))
	}
	return filled > 0
}

// newShmProbe makes a probe worker that reaches the worker only through
// transport tl; its endpoint is nil when the worker has no such interface.
func (w *Worker) newShmProbe(tl string) shmProbe {
	p := shmProbe{tl: tl}
	cfg := map[string]string{}
	for k, v := range w.cfg.UCXConfig {
		cfg[k] = v
	}
	cfg["TLS"] = tl
	var err error
	if p.ctx, err = ucp.NewContext(ucp.ContextOptions{Config: cfg, Name: "rdmo-dpu-shm-check"}); err != nil {
		w.log.Debug("shared-memory check: no context", zap.String("transport", tl), zap.Error(err))
		return p
	}
	if p.w, err = p.ctx.NewWorker(ucp.WorkerOptions{}); err != nil {
		w.log.Debug("shared-memory check: no worker", zap.String("transport", tl), zap.Error(err))
		p.ctx.Close()
		p.ctx = nil
		return p
	}
	// Without error handling: the message goes straight into the FIFO,
	// with no wire-up exchange that would itself wait on it.
	ep, err := p.w.Connect(w.addr, ucp.EndpointOptions{Name: "shm-check-" + tl, ErrorHandling: ucp.ErrorHandlingNone})
	if err == nil && !slices.Contains(ep.Transports(), tl) {
		ep.CloseForce()
		err = errors.New("no lane on " + tl)
	}
	if err != nil {
		w.log.Debug("shared-memory check: transport not checked", zap.String("transport", tl), zap.Error(err))
		p.w.Close()
		p.ctx.Close()
		p.w, p.ctx = nil, nil
		return p
	}
	p.ep = ep
	return p
}

// onShmProbe is the handler of arriving probes.
func (w *Worker) onShmProbe(_ *ucp.Worker, msgs []ucp.Message) {
	for _, m := range msgs {
		h := m.Header
		if len(h) < 16 {
			continue
		}
		i := binary.LittleEndian.Uint64(h)
		if i < uint64(len(w.shm.got)) {
			w.shm.got[i] = binary.LittleEndian.Uint64(h[8:])
		}
	}
}

// closeShmProbes ends the probe workers (teardown).
func (w *Worker) closeShmProbes() {
	for i := range w.shm.probes {
		p := &w.shm.probes[i]
		if p.ep != nil {
			p.ep.CloseForce()
		}
		if p.w != nil {
			p.w.Close()
		}
		if p.ctx != nil {
			p.ctx.Close()
		}
	}
	w.shm.probes = nil
}

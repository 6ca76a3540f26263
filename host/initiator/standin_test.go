package initiator_test

import (
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// standIn is a minimal RDMO worker for tests, built directly on package
// ucp: an AM id 0 handler that numbers every arrival from 0 (each inner
// request of a BATCH container, in order; the container itself takes no
// number), decodes it with the rdmo codec, records it in arrival order, and
// answers FLUSH with
// an extended flush response (failures since the previous one included)
// and requests with FlagAck with an ack. Requests complete in arrival
// order; a rendezvous payload is received before its request (and every
// later one) completes, so a FLUSH is answered only after everything
// before it, as FENCE requires. It touches no target memory.
type standIn struct {
	t    testing.TB
	w    *ucp.Worker
	addr []byte
	cfg  standInConfig

	hold      atomic.Bool // while set, nothing completes (a stalled worker)
	dropFlush atomic.Bool // while set, flushes get only the noise, no answer

	mu      sync.Mutex
	got     []arrival
	nflush  int // flush responses sent
	nacks   int
	arrived atomic.Uint64 // requests (inner ones of containers included)
	// completed counts the requests complete has answered (their
	// arrival's Status and Payload are set by then).
	completed atomic.Uint64
	// messages counts the AMs that arrived, containers the BATCH
	// containers among them.
	messages     atomic.Uint64
	containers   atomic.Uint64
	maxContainer atomic.Int64 // bytes, header and data
	// overLimit counts arrivals past cfg.limit; maxPending is the most
	// requests found not completed by an arrival.
	overLimit  atomic.Uint64
	maxPending atomic.Int64

	// progress loop only
	seq      uint64
	fifo     []*pendingReq
	head     int // fifo[head:] are pending
	failed   uint32
	first    wire.FlushResponse // First* fields of the earliest failure
	scratch  []byte
	freeReqs []*pendingReq

	stop     chan struct{}
	done     chan struct{}
	killReq  atomic.Bool
	killed   chan struct{}
	stopOnce sync.Once
}

type standInConfig struct {
	// failOn decides a request's status (after the codec's checks).
	failOn func(r wire.RequestHeader, payload []byte) rdmo.Status
	// noise sends stale, foreign and malformed responses before every
	// flush response.
	noise bool
	// reference answers flushes with the reference's 12-byte response.
	reference bool
	// countOnly records nothing and copies nothing (benchmarks).
	countOnly bool
	// result, if set, answers an acked user op whose status is st: its
	// value and result data (st OK) or failure detail, sent as our worker
	// does (the 40-byte ack with the AM data, docs/PROTOCOL.md section
	// 6.4). Without it an ack carries the value 0x1000+seq and no data.
	result func(r wire.RequestHeader, payload []byte, st rdmo.Status) (value uint64, data []byte, detail string)
	// limit, if set, is a worker's in-flight limit per request queue: an
	// arrival that finds limit requests not yet completed is counted in
	// overLimit (our worker would fail it with TooManyInFlight).
	limit int
	// largeShm gives the stand-in's context large shared-memory segments,
	// as our worker's (wire.CapabilityLargeBatch).
	largeShm bool
}

// arrival is one recorded request.
type arrival struct {
	Seq        uint64
	Hdr        []byte // the AM header as it arrived
	Req        wire.RequestHeader
	ParseErr   error
	Payload    []byte
	Rendezvous bool
	Status     rdmo.Status
	// Container is 0 for a plain request, else the number (from 1) of the
	// BATCH container the request came in.
	Container uint64
}

type pendingReq struct {
	seq        uint64
	hdr        wire.RequestHeader
	perr       error
	reply      *ucp.Endpoint
	payload    []byte
	recvDone   bool
	recvErr    error
	rendezvous bool
	st         rdmo.Status
	stKnown    bool
	index      int // into got, or -1
}

func newStandIn(t testing.TB, tr ucptest.Transport, cfg standInConfig) *standIn {
	t.Helper()
	ctx := ucptest.NewContextWith(t, tr, ucp.ContextOptions{LargeShmSegments: cfg.largeShm})
	s := &standIn{t: t, cfg: cfg,
		stop: make(chan struct{}), done: make(chan struct{}), killed: make(chan struct{})}
	ready := make(chan error, 1)
	go s.run(ctx, ready)
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

// open makes the stand-in's worker, on the goroutine that drives it (UCX
// binds a worker to the thread that made it).
func (s *standIn) open(ctx *ucp.Context) error {
	w, err := ctx.NewWorker(ucp.WorkerOptions{})
	if err != nil {
		return err
	}
	if s.addr, err = w.Address(); err == nil {
		err = w.SetHandler(0, ucp.MessageHandlerFunc(s.handle))
	}
	if err != nil {
		w.Close()
		return err
	}
	s.w = w
	return nil
}

// run is the stand-in's progress loop.
func (s *standIn) run(ctx *ucp.Context, ready chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(s.done)
	if err := s.open(ctx); err != nil {
		ready <- err
		return
	}
	ready <- nil
	idle := 0
	for {
		select {
		case <-s.stop:
			s.w.Close()
			return
		default:
		}
		if s.killReq.Load() {
			// Die mid-stream: the worker goes away with whatever it held.
			s.w.Close()
			close(s.killed)
			<-s.stop
			return
		}
		n, err := s.w.Progress()
		if err != nil {
			s.t.Errorf("stand-in progress: %v", err)
			s.w.Close()
			return
		}
		if s.complete() {
			n++
		}
		if n > 0 {
			idle = 0
			continue
		}
		if idle++; idle > 64 {
			s.w.Wait(time.Millisecond)
		}
	}
}

// kill closes the stand-in's worker mid-stream and waits until it is gone.
func (s *standIn) kill() {
	s.killReq.Store(true)
	s.w.Wake()
	select {
	case <-s.killed:
	case <-time.After(20 * time.Second):
		s.t.Fatal("stand-in did not die")
	}
}

func (s *standIn) close() {
	s.stopOnce.Do(func() { close(s.stop) })
	if !s.killReq.Load() {
		s.w.Wake()
	}
	<-s.done
}

func (s *standIn) handle(w *ucp.Worker, msgs []ucp.Message) {
	for i := range msgs {
		m := &msgs[i]
		s.messages.Add(1)
		if len(m.Header) >= wire.HeaderLen && binary.LittleEndian.Uint32(m.Header[wire.HeaderOpOffset:]) == rdmo.OpBatch {
			rh, err := wire.ParseRequest(m.Header)
			if err == nil && m.Rendezvous {
				err = rdmo.ErrRendezvousRefused
			}
			if err == nil {
				err = rh.CheckPayload(m.Data)
			}
			if err == nil {
				n := s.containers.Add(1)
				if size := int64(len(m.Header) + len(m.Data)); size > s.maxContainer.Load() {
					s.maxContainer.Store(size)
				}
				it := wire.NewBatchIter(m.Data, rh.Batch.Count)
				for it.Next() {
					inner, perr := it.Request()
					s.accept(m, it.Header(), inner, perr, it.Payload(), n)
				}
				continue
			}
			// A malformed container is one failed request.
			s.accept(m, m.Header, rh, err, m.Data, 0)
			continue
		}
		rh, err := wire.ParseRequest(m.Header)
		s.accept(m, m.Header, rh, err, m.Data, 0)
	}
}

// accept numbers and records one request: the AM m itself, or an inner
// request of the container m (container > 0).
func (s *standIn) accept(m *ucp.Message, header []byte, rh wire.RequestHeader, perr error, data []byte, container uint64) {
	s.arrived.Add(1)
	pending := len(s.fifo) - s.head
	if int64(pending) > s.maxPending.Load() {
		s.maxPending.Store(int64(pending))
	}
	if s.cfg.limit > 0 && pending >= s.cfg.limit {
		s.overLimit.Add(1)
	}
	p := s.newPending()
	p.seq = s.seq
	s.seq++
	p.hdr, p.perr = rh, perr
	p.reply = m.Reply
	p.index = -1
	p.rendezvous = m.Rendezvous && container == 0
	if !s.cfg.countOnly {
		hdr := append([]byte(nil), header...)
		if p.perr == nil && rdmo.IsUserOp(p.hdr.Header.Op) {
			p.hdr.User = hdr[wire.SubHeaderOffset:]
		}
		s.mu.Lock()
		p.index = len(s.got)
		s.got = append(s.got, arrival{Seq: p.seq, Hdr: hdr, Req: p.hdr, ParseErr: p.perr, Rendezvous: p.rendezvous, Container: container})
		s.mu.Unlock()
	}
	switch {
	case p.rendezvous:
		buf := make([]byte, m.Length)
		if err := m.Receive(buf, ucp.CompleterFunc(func(c ucp.Completion) {
			p.payload, p.recvErr, p.recvDone = buf, c.Err, true
		}), 0); err != nil {
			p.recvErr, p.recvDone = err, true
		}
	case s.cfg.countOnly:
		// Checked now, not kept.
		p.payload, p.recvDone = data, true
		p.st, p.stKnown = s.status(p), true
		p.payload = nil
	default:
		p.payload, p.recvDone = append([]byte(nil), data...), true
	}
	s.fifo = append(s.fifo, p)
}

func (s *standIn) newPending() *pendingReq {
	if n := len(s.freeReqs); n > 0 {
		p := s.freeReqs[n-1]
		s.freeReqs = s.freeReqs[:n-1]
		*p = pendingReq{}
		return p
	}
	return &pendingReq{}
}

// status is what happens to a request: the codec's verdict, then failOn.
func (s *standIn) status(p *pendingReq) rdmo.Status {
	if p.perr != nil {
		return rdmo.StatusOf(p.perr)
	}
	if p.recvErr != nil {
		return rdmo.StatusInternal
	}
	if err := p.hdr.CheckPayload(p.payload); err != nil {
		return rdmo.StatusOf(err)
	}
	if s.cfg.failOn != nil {
		return s.cfg.failOn(p.hdr, p.payload)
	}
	return rdmo.StatusOK
}

// complete completes requests in arrival order, as far as their payloads
// have arrived, and answers them. It reports whether it did anything.
func (s *standIn) complete() bool {
	if s.hold.Load() {
		return false
	}
	did := false
	for s.head < len(s.fifo) && s.fifo[s.head].recvDone {
		p := s.fifo[s.head]
		s.fifo[s.head] = nil
		if s.head++; s.head == len(s.fifo) {
			s.fifo, s.head = s.fifo[:0], 0
		}
		did = true
		st := p.st
		if !p.stKnown {
			st = s.status(p)
		}
		if p.index >= 0 {
			s.mu.Lock()
			s.got[p.index].Status = st
			s.got[p.index].Payload = p.payload
			s.mu.Unlock()
		}
		s.completed.Add(1)
		isFlush := p.perr == nil && p.hdr.Header.Op == rdmo.OpFlush
		if st != rdmo.StatusOK {
			if s.failed == 0 {
				s.first = wire.FlushResponse{FirstOp: p.hdr.Header.Op, FirstStatus: st, FirstSeq: p.seq}
			}
			s.failed++
		}
		switch {
		case isFlush:
			s.answerFlush(p)
		case p.hdr.Header.WantsAck():
			a := wire.AckResponse{Op: p.hdr.Header.Op, Seq: p.seq, Status: st, Value: 0x1000 + p.seq}
			var amData []byte
			if s.cfg.result != nil && p.perr == nil && rdmo.IsUserOp(p.hdr.Header.Op) {
				v, data, detail := s.cfg.result(p.hdr, p.payload, st)
				a.Value = v
				if st == rdmo.StatusOK {
					a.DataLen, amData = uint32(len(data)), append([]byte(nil), data...)
				} else {
					a.Value, a.DetailLen, amData = 0, uint32(len(detail)), []byte(detail)
				}
			}
			s.scratch = wire.AppendAck(s.scratch[:0], a)
			s.sendData(p.reply, s.scratch, amData)
			s.mu.Lock()
			s.nacks++
			s.mu.Unlock()
		}
		s.freeReqs = append(s.freeReqs, p)
	}
	return did
}

func (s *standIn) answerFlush(p *pendingReq) {
	id := p.hdr.Flush.FlushID
	if s.cfg.noise {
		// None of these may be taken for the answer to flush id.
		s.send(p.reply, wire.AppendFlushResponse(nil, wire.FlushResponse{FlushID: id ^ 0x5a5a5a5a5a5a5a5a}))
		s.send(p.reply, wire.AppendReferenceFlushResponse(nil, id-1000))
		s.send(p.reply, wire.AppendAck(nil, wire.AckResponse{Op: rdmo.OpAppend, Seq: 1 << 60}))
		s.send(p.reply, []byte{1, 2, 3})                                                     // too short
		s.send(p.reply, []byte{7, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8})                          // unknown rsp id
		s.send(p.reply, wire.AppendFlushResponse(nil, wire.FlushResponse{FlushID: id})[:20]) // truncated
	}
	if s.dropFlush.Load() {
		return
	}
	if s.cfg.reference {
		s.scratch = wire.AppendReferenceFlushResponse(s.scratch[:0], id)
	} else {
		r := s.first
		r.FlushID = id
		r.Failed = s.failed
		s.scratch = wire.AppendFlushResponse(s.scratch[:0], r)
	}
	s.failed, s.first = 0, wire.FlushResponse{}
	s.send(p.reply, s.scratch)
	s.mu.Lock()
	s.nflush++
	s.mu.Unlock()
}

// send sends a response; headers this small are copied by ucp at once.
func (s *standIn) send(ep *ucp.Endpoint, hdr []byte) { s.sendData(ep, hdr, nil) }

// sendData sends a response with AM data, which must not change afterwards
// (a fresh slice: larger ones are sent from where they are).
func (s *standIn) sendData(ep *ucp.Endpoint, hdr, data []byte) {
	if ep == nil {
		s.t.Errorf("stand-in: request without a reply endpoint")
		return
	}
	if len(data) > 0 {
		hdr = append([]byte(nil), hdr...) // together they may be too large to be copied
	}
	if err := ep.SendAM(0, hdr, data, ucp.SendEager, nil, 0); err != nil {
		s.t.Logf("stand-in: reply: %v", err)
	}
}

// arrivals returns a copy of what was recorded so far.
func (s *standIn) arrivals() []arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]arrival(nil), s.got...)
}

func (s *standIn) flushesAnswered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nflush
}

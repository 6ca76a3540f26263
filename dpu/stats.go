package dpu

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/openrdmo/rdmo/rdmo"
)

// latency is an OpLatency of atomics: the loop adds, Stats reads.
type latency struct {
	buckets [LatencyBuckets]atomic.Uint64
	sumNs   atomic.Uint64
}

func (l *latency) observe(ns int64) {
	l.add(latencyBucket(ns), 1, uint64(max(ns, 0)))
}

func (l *latency) add(bucket int, n, sumNs uint64) {
	l.buckets[bucket].Add(n)
	l.sumNs.Add(sumNs)
}

func latencyBucket(ns int64) int {
	if ns < 0 {
		ns = 0
	}
	return min(bits.Len64(uint64(ns)/1000), LatencyBuckets-1)
}

// latencyRun accumulates the latencies of consecutive requests of one op
// that fall in one bucket (a batch's requests mostly arrived together), so
// that the shared counters take one atomic add per run, not per request.
type latencyRun struct {
	op     uint32
	bucket int
	n, sum uint64
}

// observe adds a request to the run, publishing the run first when the
// request does not belong to it.
func (r *latencyRun) observe(c *counters, op uint32, ns int64) {
	b := latencyBucket(ns)
	if r.n > 0 && (r.op != op || r.bucket != b) {
		r.flush(c)
	}
	r.op, r.bucket = op, b
	r.n++
	r.sum += uint64(max(ns, 0))
}

// flush publishes the run.
func (r *latencyRun) flush(c *counters) {
	if r.n > 0 {
		c.latencyOf(r.op).add(r.bucket, r.n, r.sum)
	}
	*r = latencyRun{}
}

func (l *latency) snapshot() (OpLatency, bool) {
	var o OpLatency
	var n uint64
	for i := range l.buckets {
		o.Buckets[i] = l.buckets[i].Load()
		n += o.Buckets[i]
	}
	o.SumNs = l.sumNs.Load()
	return o, n > 0
}

// clock is the time since the worker started, for request latencies.
func (w *Worker) clock() int64 { return int64(time.Since(w.epoch)) }

type counters struct {
	reqOps    [rdmo.OpUserBase]atomic.Uint64
	reqUser   map[uint32]*atomic.Uint64 // registered user ops; fixed after New
	opNames   map[uint32]string         // their OpLabels; fixed after New
	reqOther  atomic.Uint64             // unregistered user ops
	bytes     atomic.Uint64
	dropped   atomic.Uint64
	batches   atomic.Uint64
	batched   atomic.Uint64
	sizes     [BatchSizeBuckets]atomic.Uint64
	ucxPuts   atomic.Uint64
	cpyPuts   atomic.Uint64
	putBytes  atomic.Uint64
	places    atomic.Uint64
	abandoned atomic.Uint64
	fetches   atomic.Uint64
	syncs     atomic.Uint64
	syncOps   atomic.Uint64
	fences    atomic.Uint64
	flushes   atomic.Uint64
	readbacks atomic.Uint64
	panics    atomic.Uint64
	inlined   atomic.Uint64
	cpuAtoms  atomic.Uint64
	shmChecks atomic.Uint64
	// shmSlotsFilled counts FIFO slots of dead senders filled (shmcheck.go).
	shmSlotsFilled atomic.Uint64
	flushRsp       atomic.Uint64
	acks           atomic.Uint64
	ackGroups      atomic.Uint64
	failures       [32]atomic.Uint64 // by status; the last counts codes >= 31
	lat            [rdmo.OpUserBase]latency
	latUser        map[uint32]*latency // registered user ops; fixed after New
	latOther       latency
}

// observe times a completed request of op.
func (c *counters) observe(op uint32, ns int64) { c.latencyOf(op).observe(ns) }

func (c *counters) latencyOf(op uint32) *latency {
	switch {
	case op < rdmo.OpUserBase:
		return &c.lat[op]
	default:
		if l := c.latUser[op]; l != nil {
			return l
		}
		return &c.latOther
	}
}

func (c *counters) request(op uint32, n int) {
	c.requests(op, 1)
	c.bytes.Add(uint64(n))
}

// requests counts k requests of op (their bytes are counted elsewhere).
func (c *counters) requests(op uint32, k uint64) {
	switch {
	case op < rdmo.OpUserBase:
		c.reqOps[op].Add(k)
	default:
		if p := c.reqUser[op]; p != nil {
			p.Add(k)
		} else {
			c.reqOther.Add(k)
		}
	}
}

func (c *counters) failure(s rdmo.Status) {
	i := int(s)
	if s >= rdmo.Status(len(c.failures)-1) {
		i = len(c.failures) - 1
	}
	c.failures[i].Add(1)
}

func (c *counters) batch(n int) {
	c.batches.Add(1)
	c.batched.Add(uint64(n))
	b := 0
	for n > 1 && b < BatchSizeBuckets-1 {
		n >>= 1
		b++
	}
	c.sizes[b].Add(1)
}

// Stats returns a snapshot of the counters. It is safe to call from any
// goroutine and does not wait for the loop.
func (w *Worker) Stats() Stats {
	c := &w.stats
	s := Stats{
		Requests:          map[uint32]uint64{},
		Bytes:             c.bytes.Load(),
		Dropped:           c.dropped.Load(),
		Batches:           c.batches.Load(),
		BatchedRequests:   c.batched.Load(),
		TargetPuts:        c.ucxPuts.Load(),
		MemcpyPuts:        c.cpyPuts.Load(),
		PutBytes:          c.putBytes.Load(),
		Places:            c.places.Load(),
		AbandonedReceives: c.abandoned.Load(),
		Fetches:           c.fetches.Load(),
		Syncs:             c.syncs.Load(),
		SyncOps:           c.syncOps.Load(),
		Fences:            c.fences.Load(),
		Flushes:           c.flushes.Load(),
		Readbacks:         c.readbacks.Load(),
		HandlerPanics:     c.panics.Load(),
		InlineBatches:     c.inlined.Load(),
		CPUAtomics:        c.cpuAtoms.Load(),
		ShmChecks:         c.shmChecks.Load(),
		ShmSlotsFilled:    c.shmSlotsFilled.Load(),
		FlushResponses:    c.flushRsp.Load(),
		Acks:              c.acks.Load(),
		AckGroups:         c.ackGroups.Load(),
		Failures:          map[rdmo.Status]uint64{},
		Latency:           map[uint32]OpLatency{},
		InFlight:          map[uint64]int64{},
		OpNames:           make(map[uint32]string, len(c.opNames)),
	}
	for op, n := range c.opNames {
		s.OpNames[op] = n
	}
	for op := range c.lat {
		if l, ok := c.lat[op].snapshot(); ok {
			s.Latency[uint32(op)] = l
		}
	}
	for op, p := range c.latUser {
		if l, ok := p.snapshot(); ok {
			s.Latency[op] = l
		}
	}
	if l, ok := c.latOther.snapshot(); ok {
		s.Latency[OtherOp] = l
	}
	for op := range c.reqOps {
		if n := c.reqOps[op].Load(); n != 0 {
			s.Requests[uint32(op)] = n
		}
	}
	for op, p := range c.reqUser {
		if n := p.Load(); n != 0 {
			s.Requests[op] = n
		}
	}
	if n := c.reqOther.Load(); n != 0 {
		s.Requests[OtherOp] = n
	}
	for i := range c.sizes {
		s.BatchSizes[i] = c.sizes[i].Load()
	}
	for i := range c.failures {
		if n := c.failures[i].Load(); n != 0 {
			s.Failures[rdmo.Status(i)] = n
		}
	}
	w.regMu.Lock()
	for id, q := range w.rqByID {
		s.InFlight[id] = q.inflightSeen.Load()
	}
	s.RQs = len(w.rqByID)
	s.Clients = w.nclients
	s.Regions = len(w.allRegions)
	w.regMu.Unlock()
	return s
}

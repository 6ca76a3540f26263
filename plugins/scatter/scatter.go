// Package scatter is the RDMO SCATTER handler: it writes a request's chunks to their target addresses, all or nothing, merging adjacent chunks into one Put.
package scatter

import (
	"sync"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// Name and Version identify the handler to the worker.
const (
	Name    = "scatter"
	Version = "1.0.0"
)

// DefaultMaxCoalesce is the default cap on the bytes staged for one Put.
const DefaultMaxCoalesce = 64 << 10

// Options configures the handler.
type Options struct {
	// MaxCoalesce caps the bytes of one merged Put; a run of adjacent
	// chunks longer than that is split. 0 means DefaultMaxCoalesce.
	MaxCoalesce int
	// RefuseRendezvous makes rendezvous scatters fail with
	// RendezvousRefused, as the reference does. By default their payload
	// is fetched into worker memory (Target.Fetch, which refuses payloads
	// over the worker's limit) and handled like an eager one.
	RefuseRendezvous bool
}

// New returns a SCATTER handler.
//
// Each request is checked completely before anything is written: the
// payload against its count (the worker does it for an eager payload, the
// handler for a rendezvous one it fetched), and
// every chunk's region (UnknownRegion, RegionNotOwned) and range
// (OutOfBounds, including addr+len wrapping past 2^64). Zero-length chunks
// are checked too and then skipped. A request that fails any check writes
// nothing; the other requests of the batch are unaffected.
//
// Chunks of one request that follow each other in one region (chunk k ends
// where chunk k+1 starts) are written by one Put from a staging buffer;
// other chunks are Put straight from the payload, which stays valid until
// the batch completes. Chunks are written in payload order, so where chunks
// overlap the later one wins. Only a failure of the target itself (a Put
// that fails after the checks passed) can leave a request partly written.
func New(opt Options) rdmo.Handler {
	if opt.MaxCoalesce <= 0 {
		opt.MaxCoalesce = DefaultMaxCoalesce
	}
	return &handler{opt: opt, clients: make(map[rdmo.ClientID]*client)}
}

type handler struct {
	rdmo.BaseHandler // nothing is cached across batches, so WriteBack and RegionRemoved have nothing to do

	opt     Options
	mu      sync.Mutex // guards clients; a client's scratch is used by one call at a time
	clients map[rdmo.ClientID]*client
}

// chunk is one checked iov of the current request.
type chunk struct {
	region rdmo.RegionID
	addr   uint64
	data   []byte
}

// client is the scratch of one client, reused by every batch.
type client struct {
	chunks []chunk
	regs   []rdmo.Region
}

func (h *handler) Info() rdmo.HandlerInfo {
	// Inline: an eager scatter's chunks are copies into mapped regions; a
	// rendezvous one (Fetch) never runs on the worker's loop.
	return rdmo.HandlerInfo{Name: Name, Version: Version, Ops: []uint32{rdmo.OpScatter}, NoCachedState: true, Inline: true}
}

func (h *handler) client(id rdmo.ClientID) *client {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.clients[id]
	if c == nil {
		c = &client{}
		h.clients[id] = c
	}
	return c
}

func (h *handler) ClientRemoved(client rdmo.ClientID) {
	h.mu.Lock()
	delete(h.clients, client)
	h.mu.Unlock()
}

func (h *handler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, results []rdmo.Result) {
	c := h.client(t.ClientID())
	c.regs = c.regs[:0]
	for i := range reqs {
		results[i] = h.scatter(t, c, &reqs[i])
	}
	clear(c.chunks[:cap(c.chunks)]) // drop references to payloads
	c.chunks = c.chunks[:0]
}

func (h *handler) scatter(t rdmo.Target, c *client, req *rdmo.Request) rdmo.Result {
	// The worker has checked the header and an eager payload (exactly
	// Scatter.Count well-formed iovs); a rendezvous payload it has not
	// seen, so that one is checked here, whole, before any region is.
	payload := req.Payload
	if req.Rendezvous {
		if h.opt.RefuseRendezvous {
			return rdmo.Fail(rdmo.StatusRendezvousRefused, "rendezvous scatter of %d bytes refused", req.Length)
		}
		var err error
		if payload, err = t.Fetch(req); err != nil {
			return rdmo.ResultOf(err)
		}
		it := wire.NewScatterIter(payload, req.Scatter.Count)
		for it.Next() {
		}
		if err := it.Err(); err != nil {
			return rdmo.ResultOf(err)
		}
	}

	// Resolve and bounds-check every chunk before writing any.
	c.chunks = c.chunks[:0]
	it := wire.NewScatterIter(payload, req.Scatter.Count)
	for it.Next() {
		v := it.IOV()
		reg, err := c.region(t, v.Rkey)
		if err != nil {
			return rdmo.ResultOf(err)
		}
		if err := reg.CheckRange(v.Addr, uint64(v.Len)); err != nil {
			return rdmo.ResultOf(err)
		}
		if v.Len > 0 {
			c.chunks = append(c.chunks, chunk{region: v.Rkey, addr: v.Addr, data: it.Data()})
		}
	}
	if err := it.Err(); err != nil { // the payload was checked before; never expected
		return rdmo.ResultOf(err)
	}

	// Write runs of adjacent chunks.
	limit := uint64(h.opt.MaxCoalesce)
	for i := 0; i < len(c.chunks); {
		first := c.chunks[i]
		end, n := first.addr+uint64(len(first.data)), uint64(len(first.data))
		j := i + 1
		for ; j < len(c.chunks); j++ {
			k := c.chunks[j]
			if k.region != first.region || k.addr != end || n+uint64(len(k.data)) > limit {
				break
			}
			end += uint64(len(k.data))
			n += uint64(len(k.data))
		}
		data := first.data
		if j-i > 1 {
			data = t.Buffer(int(n))
			off := 0
			for _, k := range c.chunks[i:j] {
				off += copy(data[off:], k.data)
			}
		}
		if err := t.Put(first.region, first.addr, data); err != nil {
			return rdmo.ResultOf(err)
		}
		i = j
	}
	return rdmo.Result{}
}

// region resolves a region id through a per-batch cache (regions cannot
// change during a batch: calls for one client never overlap).
func (c *client) region(t rdmo.Target, id rdmo.RegionID) (rdmo.Region, error) {
	for _, r := range c.regs {
		if r.ID == id {
			return r, nil
		}
	}
	r, err := t.Region(id)
	if err == nil {
		c.regs = append(c.regs, r)
	}
	return r, err
}

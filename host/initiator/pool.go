package initiator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/wire"
	"github.com/openrdmo/rdmo/ucp"
)

// LendPool is memory for AppendLent's payloads that the worker may read in
// place (docs/PROTOCOL.md section 13). UCX allocates it, so that a worker
// on the same host maps it through shared memory; the Initiator registers
// it on its connection when Options.Lend is set. An AppendLent whose data
// lies in a pool the worker mapped, and which is longer than
// Options.RendezvousThreshold, then sends a 24-byte reference instead of
// the bytes, and the worker's handler copies them once, from here into
// target memory: no copy by the initiator, none through the transport.
// The Lend is returned when the worker's ack says it has read them.
// Where the worker cannot map the pool (over TCP, on another host, a
// worker without wire.CapabilityLend), AppendLent sends its bytes from the
// pool as from any buffer. ByReference says which.
type LendPool struct {
	in    *Initiator
	mem   *ucp.Memory
	buf   []byte
	id    wire.PoolID
	byRef bool
	why   error // why not byRef

	// out counts the pool's lends not yet returned; Close waits for
	// them, since UCX or the worker may still read the memory.
	out     atomic.Int64
	closing atomic.Bool
	idleMu  sync.Mutex
	idle    chan struct{} // closed when out reaches 0 after closing
}

// ErrPoolUnmapped is a LendPool's Unmapped when the worker cannot map it
// (no shared-memory transport between the two processes): its payloads go
// by value.
var ErrPoolUnmapped = errors.New("initiator: the worker cannot map the lend pool (no shared memory between the two processes)")

// ErrPoolClosed is returned by AppendLent for data in a LendPool whose
// Close has begun, and by a second LendPool.Close. (Once Close returned,
// the memory is gone: lending it is a use after free.)
var ErrPoolClosed = errors.New("initiator: lend pool closed")

// LendSupported reports whether a worker with these capabilities (as the
// target passes them out of band, host/oob.WorkerInfo.Capabilities) maps
// lend pools, so that Options.Lend may be set.
func LendSupported(capabilities []string) bool {
	for _, c := range capabilities {
		if c == wire.CapabilityLend {
			return true
		}
	}
	return false
}

// NewLendPool allocates n bytes of pool memory and, with Options.Lend,
// registers them with the worker, waiting (bounded by ctx) for its answer.
// A worker that cannot map them is no error: the pool then lends by value
// (ByReference false, Unmapped says why). A refused registration
// (rdmo.ErrPoolRefused: too many pools on the connection) is.
func (in *Initiator) NewLendPool(ctx context.Context, n int) (*LendPool, error) {
	if n <= 0 {
		return nil, fmt.Errorf("initiator: lend pool of %d bytes", n)
	}
	if in.q.failedErr() != nil || in.isClosed() {
		return nil, ErrClosed
	}
	mem, err := in.ctx.Allocate(n)
	if err != nil {
		return nil, fmt.Errorf("initiator: lend pool: %w", err)
	}
	p := &LendPool{in: in, mem: mem, buf: mem.Bytes(), id: wire.PoolID(in.poolSeq.Add(1))}
	if !in.opts.Lend {
		p.why = errors.New("initiator: Options.Lend is off")
	} else if mapped, err := p.register(ctx); err != nil {
		mem.Close()
		return nil, fmt.Errorf("initiator: lend pool: %w", err)
	} else if !mapped {
		p.why = ErrPoolUnmapped
	} else {
		p.byRef = true
	}
	in.addPool(p)
	return p, nil
}

// register sends LEND_POOL with the pool's key and waits for the ack,
// which says whether the worker mapped the pool.
func (p *LendPool) register(ctx context.Context) (bool, error) {
	packed, err := p.mem.PackRkey()
	if err != nil {
		return false, err
	}
	res, err := p.call(ctx, wire.LendPoolHeader{Pool: p.id, VA: p.mem.Address(), Len: uint64(p.mem.Len())}, packed)
	return err == nil && res.Value == wire.LendPoolMapped, err
}

func (p *LendPool) call(ctx context.Context, h wire.LendPoolHeader, packed []byte) (Result, error) {
	c := &CallWait{in: p.in}
	r := request{op: rdmo.OpLendPool, flags: rdmo.FlagAck, pool: h, data: packed, plen: len(packed), call: c}
	if _, err := p.in.enqueue(ctx, &r); err != nil {
		return Result{}, err
	}
	return c.Wait(ctx)
}

// Bytes is the pool's memory, valid until Close. AppendLent lends any
// slice of it.
func (p *LendPool) Bytes() []byte { return p.buf }

// ByReference reports whether the worker reads the pool's payloads in
// place.
func (p *LendPool) ByReference() bool { return p.byRef }

// Unmapped is why the pool lends by value (nil when ByReference).
func (p *LendPool) Unmapped() error { return p.why }

// contains reports whether data lies inside the pool, and where.
func (p *LendPool) contains(data []byte) (uint64, bool) {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(p.buf)))
	d := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	if d < base || d-base > uintptr(len(p.buf)) || uintptr(len(data)) > uintptr(len(p.buf))-(d-base) {
		return 0, false
	}
	return uint64(d - base), true
}

// lend counts a lend of the pool's memory, unless the pool is closing.
func (p *LendPool) lend() bool {
	p.out.Add(1)
	if p.closing.Load() {
		p.returned()
		return false
	}
	return true
}

// returned is a lend's return.
func (p *LendPool) returned() {
	if p.out.Add(-1) == 0 && p.closing.Load() {
		p.signalIdle()
	}
}

func (p *LendPool) signalIdle() {
	p.idleMu.Lock()
	select {
	case <-p.idle:
	default:
		close(p.idle)
	}
	p.idleMu.Unlock()
}

// Close waits (bounded by ctx) until every lend from the pool was
// returned, releases the pool at the worker and frees its memory. After
// Close, AppendLent of the pool's memory fails with ErrPoolClosed. When
// ctx ends first the pool stays closing, its memory allocated until the
// Initiator closes.
func (p *LendPool) Close(ctx context.Context) error {
	p.idleMu.Lock()
	if p.closing.Load() {
		p.idleMu.Unlock()
		return ErrPoolClosed
	}
	p.idle = make(chan struct{})
	p.closing.Store(true)
	p.idleMu.Unlock()
	if p.out.Load() == 0 {
		p.signalIdle()
	}
	var stop <-chan struct{}
	if ctx != nil {
		stop = ctx.Done()
	}
	select {
	case <-p.idle:
	case <-stop:
		return ctx.Err()
	case <-p.in.done:
	}
	var err error
	if p.byRef && !p.in.isClosed() {
		// Every request that named the pool was answered: the worker
		// holds no reference into it.
		_, err = p.call(ctx, wire.LendPoolHeader{Pool: p.id}, nil)
		if errors.Is(err, ErrClosed) || errors.As(err, new(*PeerFailedError)) {
			err = nil // the connection, and the worker's mapping with it, is gone
		}
	}
	p.in.removePool(p)
	if cerr := p.mem.Close(); err == nil {
		err = cerr
	}
	return err
}

// addPool makes p findable by AppendLent.
func (in *Initiator) addPool(p *LendPool) {
	in.poolMu.Lock()
	defer in.poolMu.Unlock()
	old := in.pools.Load()
	var ps []*LendPool
	if old != nil {
		ps = append(ps, *old...)
	}
	ps = append(ps, p)
	in.pools.Store(&ps)
}

func (in *Initiator) removePool(p *LendPool) {
	in.poolMu.Lock()
	defer in.poolMu.Unlock()
	old := in.pools.Load()
	if old == nil {
		return
	}
	ps := make([]*LendPool, 0, len(*old))
	for _, x := range *old {
		if x != p {
			ps = append(ps, x)
		}
	}
	in.pools.Store(&ps)
}

// poolOf returns the pool data lies in, and its offset there.
func (in *Initiator) poolOf(data []byte) (*LendPool, uint64) {
	ps := in.pools.Load()
	if ps == nil {
		return nil, 0
	}
	for _, p := range *ps {
		if off, ok := p.contains(data); ok {
			return p, off
		}
	}
	return nil, 0
}

// closePools frees the memory of the pools still open when the progress
// loop has closed the endpoint: nothing sends from it any more, and a
// worker's mapping of it is its own.
func (in *Initiator) closePools() {
	ps := in.pools.Load()
	if ps == nil {
		return
	}
	for _, p := range *ps {
		p.mem.Close()
	}
}

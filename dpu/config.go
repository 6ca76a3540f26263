package dpu

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/limits"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/ucp"
)

// Defaults of Config fields left zero. The limits' are those of the
// worker limits table (internal/limits), which the rdmo CLI and the UROM
// worker's settings read too.
const (
	DefaultMaxInFlightPerRQ    = limits.DefaultMaxInFlightPerRQ
	DefaultMaxClients          = limits.DefaultMaxClients
	DefaultMaxRQsPerClient     = limits.DefaultMaxRQsPerClient
	DefaultMaxRegionsPerClient = limits.DefaultMaxRegionsPerClient
	DefaultMaxRendezvousFetch  = limits.DefaultMaxRendezvousFetch
	DefaultMaxEagerPayload     = limits.DefaultMaxEagerPayload
	DefaultMaxBatch            = limits.DefaultMaxBatch
	DefaultDrainTimeout        = limits.DefaultDrainTimeout
	DefaultIdleWait            = time.Millisecond
)

// Config configures a Worker. Zero values pick the defaults above; negative
// limits are an error.
type Config struct {
	// Handlers serve the operations; each op id may be claimed by one
	// handler only. Without a handler for FLUSH (op 0) the worker uses
	// plugins/flush (the only FLUSH implementation), so a FLUSH is always
	// answered.
	Handlers []rdmo.Handler

	// MaxInFlightPerRQ bounds the requests of one request queue that were
	// accepted and have not completed; more fail with TooManyInFlight.
	MaxInFlightPerRQ int
	// MaxClients bounds the clients (CLIENT_INIT) alive at once.
	MaxClients int
	// MaxRQsPerClient bounds a client's request queues (RQ_CREATE).
	MaxRQsPerClient int
	// MaxRegionsPerClient bounds a client's registered regions (MR_REG).
	MaxRegionsPerClient int
	// MaxRendezvousFetch is the largest rendezvous payload the worker
	// brings into its own memory (Target.Fetch, and the bounce buffer of
	// Target.Place when target memory is not mapped into the worker).
	MaxRendezvousFetch int
	// MaxEagerPayload is the largest eager payload (the AM data of a plain
	// request, or of a BATCH container as a whole) the worker accepts. UCX
	// has received the message by then; a larger one fails at once with
	// LengthOverflow and its buffer goes back to UCX, so a queue never
	// holds more than MaxInFlightPerRQ payloads of at most this size. Our
	// initiator sends eager only appends and user ops up to its
	// RendezvousThreshold (8 KiB; 512 KiB over TCP-only endpoints when
	// this is at least that, wire.CapabilityLargeEager), containers up to
	// MaxAggregate (8 KiB) and scatters (always eager: 24 bytes per iov
	// plus its chunk).
	MaxEagerPayload int
	// MaxBatch bounds the requests handed to one HandleBatch call.
	MaxBatch int

	// UCXAtomics makes Target.Sync's atomics go through UCX also on
	// memory mapped into the worker. By default the worker does those with
	// the CPU's atomic instructions on its mapping, without a round trip to
	// the target's progress: that agrees with every atomic UCX does on one
	// host without an RDMA NIC (its software atomics are CPU atomics in the
	// target process, its shared-memory transports' CPU atomics in the
	// caller's). Set it when initiators use an RDMA NIC's device atomics
	// (UCX_ATOMIC_MODE=device) on the words the handlers' atomics touch:
	// those are atomic only with respect to other atomics through the NIC.
	UCXAtomics bool

	// DrainTimeout bounds how long RQ_DESTROY (and client removal) waits
	// for in-flight requests before closing the endpoint anyway.
	DrainTimeout time.Duration
	// IdleWait is how long the loop sleeps in the kernel when
	// it has nothing to do (an arrival or a Wake ends the sleep early).
	IdleWait time.Duration

	// ShmCheckTimeout bounds the wait for the probes that check, after a
	// peer failed, that the worker's shared-memory receive queues still
	// deliver (ErrReceiveQueueBlocked); 0 means DefaultShmCheckTimeout.
	ShmCheckTimeout time.Duration
	// OnFatal is called once, on the worker's loop goroutine, when the
	// worker can serve no local peer any more: today only
	// ErrReceiveQueueBlocked. Its peers on shared memory notice a dead
	// process but not a deaf one, so the process that runs the worker should
	// exit (urom/rdmoworker's does, with ExitReceiveQueueBlocked); nil only
	// logs.
	OnFatal func(error)

	// Logger receives the worker's log; nil means zap.NewNop().
	Logger *zap.Logger
	// UCXConfig overrides UCX configuration entries for the worker's
	// context, named without the UCX_ prefix, e.g. {"TLS": "shm,self"}.
	// RNDV_SCHEME defaults to SafeRendezvousScheme, whatever the
	// environment says; setting it here overrides that (see there).
	UCXConfig map[string]string
}

// SafeRendezvousScheme is the UCX rendezvous scheme of the worker's
// context (see ucp.SafeRendezvousScheme).
const SafeRendezvousScheme = ucp.SafeRendezvousScheme

func (c *Config) setDefaults() error {
	for _, l := range limits.Table {
		if l.NotEngine {
			continue // the worker process applies it (WebAssembly handlers)
		}
		switch v := l.Get(c); {
		case v < 0:
			return fmt.Errorf("dpu: Config.%s is negative (%s)", l.Field, l.Format(v))
		case v == 0:
			l.Set(c, l.Default)
		}
	}
	if c.IdleWait < 0 || c.ShmCheckTimeout < 0 {
		return fmt.Errorf("dpu: negative Config.IdleWait or Config.ShmCheckTimeout")
	}
	if c.ShmCheckTimeout == 0 {
		c.ShmCheckTimeout = DefaultShmCheckTimeout
	}
	if c.IdleWait == 0 {
		c.IdleWait = DefaultIdleWait
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	c.UCXConfig = ucp.WithRendezvousScheme(c.UCXConfig)
	return nil
}

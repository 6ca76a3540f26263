package ucp

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"unsafe"
)

// ContextOptions configure a Context. The standard UCX_* environment is
// always read first; Config entries override it.
type ContextOptions struct {
	// Config overrides UCX configuration entries, named without the UCX_
	// prefix, e.g. {"TLS": "shm,self"}.
	Config map[string]string
	// Name is reported in UCX logs.
	Name string
	// LargeShmSegments makes the shared-memory transports carry messages
	// of up to 64 KiB in one descriptor (ShmSegmentLarge) instead of 8 KiB,
	// sending and receiving, unless the environment sets the segment
	// (shmSegmentEnv). Receiving into large descriptors is safe with any
	// peer; sending large ones is safe only to peers whose descriptors are
	// as large (see shmsegment.go): set it on a context that sends large
	// messages only to such peers.
	LargeShmSegments bool
}

// Context is a UCP application context with the features the project needs:
// active messages, RMA, 64-bit atomics and wake-up.
type Context struct {
	h        *handle
	ctx      C.ucp_context_h
	mu       sync.Mutex // guards workers count for Close
	nw       int
	largeShm bool // made with LargeShmSegments, and they took effect
}

// shmErrorHandling are the UCX settings that let shared-memory endpoints
// offer peer-failure detection: UCX 1.13 defaults them to "n", and an
// endpoint asking for detection then finds no shared-memory transport, so
// a dead peer on the same machine goes unnoticed by UCX. NewContext turns
// both on (docs/SECURITY.md finding 7: a hostile initiator dying
// mid-rendezvous then fails its own endpoint instead of aborting the
// worker), unless RDMO_SHM_PEER_FAILURE=0 or the environment sets one of
// them (or UCX_MM_ERROR_HANDLING) itself. Processes whose settings differ
// still connect: an endpoint asking for detection (ErrorHandlingPrefer)
// falls back to none when the peer's transport lacks it, and an endpoint
// made without (ErrorHandlingNone, the DOCA-style initiators') connects to
// a peer that has it, as long as the two endpoints of a connection ask for
// the same mode. They are transport settings, read from the environment
// when a worker opens its interfaces (ucp_config_modify does not reach
// them), hence setenv, once, before the first context.
var shmErrorHandling = []string{"UCX_POSIX_ERROR_HANDLING", "UCX_SYSV_ERROR_HANDLING"}

// keepaliveInterval is how often UCX checks that the peers of endpoints
// with error handling are alive, where nothing else tells (a process that
// dies leaves its shared memory mapped, so writes to it still succeed).
// UCX's default, 20 s, left a dead initiator's queue or a dead target
// unnoticed for that long; a check is a look at the peer's process (shared
// memory) or a small message (TCP) per endpoint, so 1 s costs little
// (docs/benchmarks/ucx-limits.md). Set unless the environment sets
// UCX_KEEPALIVE_INTERVAL.
const keepaliveInterval = "1s"

var shmErrorHandlingOnce sync.Once

func enableShmErrorHandling() {
	if os.Getenv("RDMO_SHM_PEER_FAILURE") == "0" {
		return
	}
	if _, ok := os.LookupEnv("UCX_KEEPALIVE_INTERVAL"); !ok {
		os.Setenv("UCX_KEEPALIVE_INTERVAL", keepaliveInterval)
	}
	for _, k := range append([]string{"UCX_MM_ERROR_HANDLING"}, shmErrorHandling...) {
		if _, ok := os.LookupEnv(k); ok {
			return
		}
	}
	for _, k := range shmErrorHandling {
		os.Setenv(k, "y")
	}
}

// ShmPeerFailureDetection reports whether shared-memory endpoints of this
// process's contexts can detect a dead peer process (a peer in another
// process: one in the same process never dies on its own): unless the
// environment turned UCX's shared-memory error handling off
// (RDMO_SHM_PEER_FAILURE=0, or UCX_POSIX/SYSV_ERROR_HANDLING=n).
func ShmPeerFailureDetection() bool {
	shmErrorHandlingOnce.Do(enableShmErrorHandling)
	v, ok := os.LookupEnv(shmErrorHandling[0])
	if !ok {
		v = os.Getenv("UCX_MM_ERROR_HANDLING")
	}
	switch strings.ToLower(v) {
	case "y", "yes", "on", "1":
		return true
	}
	return false
}

// NewContext initialises UCX. It reads the UCX_* environment. Shared-memory
// transports get peer-failure detection (shmErrorHandling) unless the user
// configured it.
func NewContext(opts ContextOptions) (*Context, error) {
	shmErrorHandlingOnce.Do(enableShmErrorHandling)
	cfg := withProtocolV1(opts.Config)
	if opts.LargeShmSegments {
		cfg = withShmSegments(cfg)
	}
	keys := make([]*C.char, 0, len(cfg))
	vals := make([]*C.char, 0, len(cfg))
	names := make([]string, 0, len(cfg))
	for k := range cfg {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		keys = append(keys, cString(strings.TrimPrefix(k, "UCX_")))
		vals = append(vals, cString(cfg[k]))
	}
	defer func() {
		for i := range keys {
			cFree(unsafe.Pointer(keys[i]))
			cFree(unsafe.Pointer(vals[i]))
		}
	}()
	// C arrays of C pointers: the Go slices hold only C pointers, which
	// cgo allows passing.
	var kp, vp **C.char
	if len(keys) > 0 {
		kp, vp = &keys[0], &vals[0]
	}
	features := C.uint64_t(C.UCP_FEATURE_AM | C.UCP_FEATURE_RMA | C.UCP_FEATURE_AMO64 | C.UCP_FEATURE_WAKEUP)
	c := &Context{}
	if st := C.shim_context_create(features, kp, vp, C.int(len(keys)), &c.ctx); st != C.UCS_OK {
		return nil, fmt.Errorf("ucp: init context: %w", Status(st))
	}
	c.h = newHandle(c, "ucp.Context")
	c.largeShm = opts.LargeShmSegments && (ShmSegmentsLarge(opts.Config) || !shmSelected(opts.Config))
	return c, nil
}

// LargeShmSegments reports whether the context's shared-memory transports
// carry messages of up to 64 KiB in one descriptor: it was made with
// ContextOptions.LargeShmSegments and neither its Config nor the
// environment set a smaller segment (ShmSegmentsLarge). A context whose
// transport list leaves shared memory out has no descriptor to overrun:
// true as well.
func (c *Context) LargeShmSegments() bool { return c.largeShm }

// Close releases the context. Every worker and memory mapping made from it
// must be closed first.
func (c *Context) Close() error {
	c.mu.Lock()
	n := c.nw
	c.mu.Unlock()
	if n > 0 {
		return fmt.Errorf("ucp: context close with %d workers still open", n)
	}
	if !c.h.markClosed() {
		return nil
	}
	C.ucp_cleanup(c.ctx)
	return nil
}

// Info returns UCX's own description of the context: its resources
// (memory domains, devices, transports).
func (c *Context) Info() string {
	if c.h.check() != nil {
		return ""
	}
	return goStringAndFree(C.shim_context_info(c.ctx))
}

// Resource is a transport on a device that the context selected.
type Resource struct {
	Transport string // e.g. "tcp", "posix", "cma"
	Device    string // e.g. "lo", "memory"
}

func (r Resource) String() string { return r.Transport + "/" + r.Device }

var resourceLine = regexp.MustCompile(`resource\s+\d+\s*:\s*md\s+\d+\s+dev\s+\d+\s+flags\s+\S+\s+(\S+)/(\S+)`)

// Resources lists the transports and devices the context selected, as UCX
// reports them (after UCX_TLS and UCX_NET_DEVICES filtering).
func (c *Context) Resources() []Resource {
	var out []Resource
	for _, m := range resourceLine.FindAllStringSubmatch(c.Info(), -1) {
		out = append(out, Resource{Transport: m[1], Device: m[2]})
	}
	return out
}

// Devices lists the distinct device names among the selected resources.
func (c *Context) Devices() []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range c.Resources() {
		if !seen[r.Device] {
			seen[r.Device] = true
			out = append(out, r.Device)
		}
	}
	sort.Strings(out)
	return out
}

// UCX 1.16 made its second protocol-selection logic the default
// (UCX_PROTO_ENABLE=y; 1.13 to 1.15 have it off). The project's protocol
// choices were made and tested against the first, and under the second,
// on UCX 1.18.1, they do not hold: with the active-message rendezvous
// scheme a header-only message can arrive as a rendezvous, RMA reads on
// shared memory go through CMA (fatal when the peer died, on endpoints
// without peer-failure detection: see SafeRendezvousScheme), and 64-bit
// atomics over TCP from two processes trip an assertion in UCX's TCP
// transport. So a context keeps the first logic on every version unless
// the caller (Config) or the environment (UCX_PROTO_ENABLE) chooses.
func withProtocolV1(cfg map[string]string) map[string]string {
	if major, minor, _ := Version(); major == 1 && minor < 16 {
		return cfg
	}
	if _, set := cfg["PROTO_ENABLE"]; set {
		return cfg
	}
	if _, set := cfg["UCX_PROTO_ENABLE"]; set {
		return cfg
	}
	if _, set := os.LookupEnv("UCX_PROTO_ENABLE"); set {
		return cfg
	}
	out := make(map[string]string, len(cfg)+1)
	for k, v := range cfg {
		out[k] = v
	}
	out["PROTO_ENABLE"] = "n"
	return out
}

// SafeRendezvousScheme is the UCX rendezvous scheme (UCX_RNDV_SCHEME) for
// contexts that talk to processes that may die at any moment: payloads sent
// by rendezvous come as active-message fragments the sender pushes after
// the receiver's ready-to-receive. The zero-copy schemes make one process
// read (get) or write (put) the other's memory with CMA over shared memory,
// and UCX 1.13 treats a CMA call that finds the peer process gone as fatal
// on endpoints without peer-failure handling: an initiator killed
// mid-rendezvous aborted the RDMO worker, every client with it. Since
// NewContext gives shared-memory endpoints error handling
// (shmErrorHandling) that call fails only the endpoint; the scheme stays
// the default for endpoints without it (ErrorHandlingNone, or the
// environment turning shm error handling off). Both sides must use it: in
// 1.13 the sender offers its memory for a get, and the receiver takes the
// offer.
const SafeRendezvousScheme = "am"

// WithRendezvousScheme returns cfg with RNDV_SCHEME set to
// SafeRendezvousScheme unless cfg sets it (cfg itself is not modified).
func WithRendezvousScheme(cfg map[string]string) map[string]string {
	if _, set := cfg["RNDV_SCHEME"]; set {
		return cfg
	}
	out := make(map[string]string, len(cfg)+1)
	for k, v := range cfg {
		out[k] = v
	}
	out["RNDV_SCHEME"] = SafeRendezvousScheme
	return out
}

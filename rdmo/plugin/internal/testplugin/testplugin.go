// Package testplugin is a handler that exercises every rdmo.Target call,
// and can misbehave on command, for the tests of package plugin. Its main
// (cmd/rdmo-plugin-test) serves it as a plugin; the benchmarks also call it
// directly.
package testplugin

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin"
	"github.com/openrdmo/rdmo/rdmo/wire"
)

// Identity.
const (
	Name    = "testplugin"
	Version = "1.2.3"
)

// Ops. Every op but OpCtl has the sub-header (a, b, c u64) at offset 16.
const (
	// OpPut writes the payload at address b of region a. c is the mode.
	OpPut uint32 = 16
	// OpFetchAdd adds c to the u64 at address b of region a; Value = old.
	OpFetchAdd uint32 = 17
	// OpCtl runs the command in its payload (see HandleBatch).
	OpCtl uint32 = 18
	// OpGet reads the u64 at address b of region a into Value.
	OpGet uint32 = 19
	// OpCache caches value c for address b of region a; WriteBack writes it
	// back, RegionRemoved writes back those of its region, ClientRemoved
	// drops them.
	OpCache uint32 = 20
)

// StatusRefused is the plugin-defined status of OpCtl "refuse". Its name
// is defined (rdmo.DefineStatus) only in the plugin's main package, which
// no test links: a host names it only if the handshake told it.
const StatusRefused = rdmo.StatusUserBase + 0x7e57

// StatusRefusedName is the name the plugin gives StatusRefused.
const StatusRefusedName = "TestRefused"

// Op names: OpCtl's in the handler's Info (rdmo.HandlerInfo.OpNames),
// OpFetchAdd's with rdmo.DefineOp in the plugin's main package only, which
// no test links: a host names them only if the handshake told it.
const (
	OpCtlName      = "tp-ctl"
	OpFetchAddName = "tp-fetch-add"
)

// Modes of OpPut.
const (
	PutDirect   = 0 // Put straight from the payload
	PutChecked  = 1 // Region first, then a copy in Buffer is Put
	PutPlace    = 2 // Place the rendezvous payload
	PutFetch    = 3 // Fetch the rendezvous payload, then Put it
	PutThenExit = 4 // Put, then Flush, then the process exits
)

var le = binary.LittleEndian

// Sub builds the sub-header of an op.
func Sub(a, b, c uint64) []byte {
	s := make([]byte, 24)
	le.PutUint64(s, a)
	le.PutUint64(s[8:], b)
	le.PutUint64(s[16:], c)
	return s
}

type key struct{ region, addr uint64 }

// Handler is the test handler.
type Handler struct {
	mu     sync.Mutex
	cache  map[uint64]map[key]uint64 // client -> cached values
	events []string
}

// New returns a Handler.
func New() *Handler { return &Handler{cache: make(map[uint64]map[key]uint64)} }

// Info implements rdmo.Handler.
// With RDMO_TESTPLUGIN_STATELESS=1 in its environment the handler
// declares NoCachedState (its OpCache then loses values on a restart
// unreported, which is what the tests of that declaration check).
func (h *Handler) Info() rdmo.HandlerInfo {
	return rdmo.HandlerInfo{Name: Name, Version: Version, Ops: []uint32{OpPut, OpFetchAdd, OpCtl, OpGet, OpCache},
		OpNames:       map[uint32]string{OpCtl: OpCtlName},
		NoCachedState: os.Getenv("RDMO_TESTPLUGIN_STATELESS") == "1"}
}

func (h *Handler) event(format string, args ...any) {
	h.mu.Lock()
	h.events = append(h.events, fmt.Sprintf(format, args...))
	h.mu.Unlock()
}

// HandleBatch implements rdmo.Handler. OpCtl commands: "panic", "exit",
// "sleep <duration>" (logs "sleeping" first), "warn <message>" (a WARN log line), "flush" (Target
// Flush), "fence" (Target WriteBackAll), "events" (Detail = the hook calls seen,
// comma-separated), "pid" (Value = the process id), "refuse" (fails with
// StatusRefused).
func (h *Handler) HandleBatch(t rdmo.Target, reqs []rdmo.Request, res []rdmo.Result) {
	for i := range reqs {
		r := &reqs[i]
		if r.Op == OpCtl {
			res[i] = h.ctl(t, string(r.Payload))
			continue
		}
		if len(r.Sub) < 24 {
			res[i] = rdmo.Fail(rdmo.StatusShortHeader, "want %d header bytes, have %d", wire.HeaderLen+24, wire.HeaderLen+len(r.Sub))
			continue
		}
		sub := r.Sub
		a, b, c := rdmo.RegionID(le.Uint64(sub)), le.Uint64(sub[8:]), le.Uint64(sub[16:])
		switch r.Op {
		case OpPut:
			res[i] = h.put(t, r, a, b, c)
		case OpFetchAdd:
			old, err := rdmo.FetchAdd(t, a, b, c)
			res[i] = rdmo.ResultOf(err)
			res[i].Value = old
		case OpGet:
			var buf [8]byte
			err := rdmo.Get(t, a, b, buf[:])
			res[i] = rdmo.ResultOf(err)
			if err == nil {
				res[i].Value = le.Uint64(buf[:])
			}
		case OpCache:
			h.mu.Lock()
			m := h.cache[uint64(t.ClientID())]
			if m == nil {
				m = make(map[key]uint64)
				h.cache[uint64(t.ClientID())] = m
			}
			m[key{uint64(a), b}] = c
			h.mu.Unlock()
		default:
			res[i] = rdmo.Fail(rdmo.StatusUnknownOp, "op %d", r.Op)
		}
	}
}

func (h *Handler) put(t rdmo.Target, r *rdmo.Request, region rdmo.RegionID, addr, mode uint64) rdmo.Result {
	switch mode {
	case PutDirect:
		return rdmo.ResultOf(t.Put(region, addr, r.Payload))
	case PutChecked:
		if _, err := t.Region(region); err != nil {
			return rdmo.ResultOf(err)
		}
		buf := t.Buffer(len(r.Payload))
		copy(buf, r.Payload)
		return rdmo.ResultOf(t.Put(region, addr, buf))
	case PutPlace:
		return rdmo.ResultOf(t.Place(r, region, addr))
	case PutFetch:
		data, err := t.Fetch(r)
		if err != nil {
			return rdmo.ResultOf(err)
		}
		return rdmo.ResultOf(t.Put(region, addr, data))
	case PutThenExit:
		if err := t.Put(region, addr, r.Payload); err != nil {
			return rdmo.ResultOf(err)
		}
		if err := t.Flush(); err != nil {
			return rdmo.ResultOf(err)
		}
		os.Exit(4)
	}
	return rdmo.Fail(rdmo.StatusUnknownFlags, "put mode %d", mode)
}

func (h *Handler) ctl(t rdmo.Target, cmd string) rdmo.Result {
	verb, arg, _ := strings.Cut(cmd, " ")
	switch verb {
	case "panic":
		panic("testplugin: panic on command")
	case "exit":
		os.Exit(3)
	case "sleep":
		d, err := time.ParseDuration(arg)
		if err != nil {
			return rdmo.Fail(rdmo.StatusPayloadMismatch, "%v", err)
		}
		// Tests wait for this line to know the call is in the plugin.
		plugin.Logger().Info("sleeping", zap.String("from", Name), zap.Duration("for", d))
		time.Sleep(d)
	case "warn":
		plugin.Logger().Warn(arg, zap.String("from", Name))
	case "flush":
		return rdmo.ResultOf(t.Flush())
	case "fence":
		return rdmo.ResultOf(t.WriteBackAll())
	case "events":
		h.mu.Lock()
		defer h.mu.Unlock()
		return rdmo.Result{Detail: strings.Join(h.events, ",")}
	case "pid":
		return rdmo.Result{Value: uint64(os.Getpid())}
	case "refuse":
		return rdmo.Result{Status: StatusRefused, Detail: "refused on command"}
	default:
		return rdmo.Fail(rdmo.StatusPayloadMismatch, "unknown command %q", cmd)
	}
	return rdmo.Result{}
}

// writeBack Puts the cached values of client (only of region, unless
// all) and drops them.
func (h *Handler) writeBack(t rdmo.Target, region uint64, all bool) error {
	client := uint64(t.ClientID())
	h.mu.Lock()
	m := h.cache[client]
	keys := make([]key, 0, len(m))
	for k := range m {
		if all || k.region == region {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(x, y key) int {
		if c := cmp.Compare(x.region, y.region); c != 0 {
			return c
		}
		return cmp.Compare(x.addr, y.addr)
	})
	vals := make([]uint64, len(keys))
	for i, k := range keys {
		vals[i] = m[k]
		delete(m, k)
	}
	h.mu.Unlock()
	for i, k := range keys {
		buf := t.Buffer(8)
		le.PutUint64(buf, vals[i])
		if err := t.Put(rdmo.RegionID(k.region), k.addr, buf); err != nil {
			return err
		}
	}
	return nil
}

// WriteBack implements rdmo.Handler.
func (h *Handler) WriteBack(t rdmo.Target) error {
	h.event("fence:%d", t.ClientID())
	return h.writeBack(t, 0, true)
}

// RegionRemoved implements rdmo.Handler.
func (h *Handler) RegionRemoved(t rdmo.Target, region rdmo.RegionID) error {
	h.event("region-removed:%d:%d", t.ClientID(), region)
	return h.writeBack(t, uint64(region), false)
}

// ClientRemoved implements rdmo.Handler.
func (h *Handler) ClientRemoved(id rdmo.ClientID) {
	client := uint64(id)
	h.event("client-removed:%d", client)
	h.mu.Lock()
	delete(h.cache, client)
	h.mu.Unlock()
}

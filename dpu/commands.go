package dpu

import (
	"errors"
	"math"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/internal/prefault"
	"github.com/openrdmo/rdmo/rdmo"
	rdmocmd "github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/ucp"
)

// The worker's commands, notifications, their errors and its counters are
// rdmo/command's, the vocabulary the worker shares with its targets (so a
// target does not link the worker). These names let the worker's code and
// the callers of Worker.Do, Worker.Stats and Worker.WaitFlush say them as
// the worker's.
type (
	CommandType     = rdmocmd.CommandType
	Command         = rdmocmd.Command
	ClientInit      = rdmocmd.ClientInit
	RQCreate        = rdmocmd.RQCreate
	RQErrorHandling = rdmocmd.RQErrorHandling
	RQDestroy       = rdmocmd.RQDestroy
	MRReg           = rdmocmd.MRReg
	MRDereg         = rdmocmd.MRDereg
	Notification    = rdmocmd.Notification
	CommandError    = rdmocmd.CommandError
	Stats           = rdmocmd.Stats
	OpLatency       = rdmocmd.OpLatency
	FlushEvent      = rdmocmd.FlushEvent
)

// Command types, error-handling modes and counter shapes (rdmo/command).
const (
	CmdClientInit    = rdmocmd.CmdClientInit
	CmdRQCreate      = rdmocmd.CmdRQCreate
	CmdRQDestroy     = rdmocmd.CmdRQDestroy
	CmdMRReg         = rdmocmd.CmdMRReg
	CmdMRDereg       = rdmocmd.CmdMRDereg
	CmdRQFlushWait   = rdmocmd.CmdRQFlushWait
	RQErrorsPeer     = rdmocmd.RQErrorsPeer
	RQErrorsNone     = rdmocmd.RQErrorsNone
	BatchSizeBuckets = rdmocmd.BatchSizeBuckets
	LatencyBuckets   = rdmocmd.LatencyBuckets
	OtherOp          = rdmocmd.OtherOp
)

// Errors of commands (rdmo/command). Do returns a *CommandError that
// matches one of them and the rdmo status sentinel of the notification
// (errors.Is).
var (
	ErrClosed          = rdmocmd.ErrClosed
	ErrClientExists    = rdmocmd.ErrClientExists
	ErrUnknownClient   = rdmocmd.ErrUnknownClient
	ErrUnknownRQ       = rdmocmd.ErrUnknownRQ
	ErrRQExists        = rdmocmd.ErrRQExists
	ErrUnknownRegion   = rdmocmd.ErrUnknownRegion
	ErrRegionNotOwned  = rdmocmd.ErrRegionNotOwned
	ErrRegionBusy      = rdmocmd.ErrRegionBusy
	ErrTooManyClients  = rdmocmd.ErrTooManyClients
	ErrTooManyRQs      = rdmocmd.ErrTooManyRQs
	ErrTooManyRegions  = rdmocmd.ErrTooManyRegions
	ErrInvalidCommand  = rdmocmd.ErrInvalidCommand
	ErrConnect         = rdmocmd.ErrConnect
	ErrRkey            = rdmocmd.ErrRkey
	ErrWriteBackFailed = rdmocmd.ErrWriteBackFailed
)

func cmdErr(t CommandType, kind error, detail string) *CommandError {
	return rdmocmd.NewError(t, kind, detail)
}

// The loop's side of the commands: Do queued them, execute runs them.

// execute runs a command on the loop. Commands that need an executor or a
// drain answer later.
func (w *Worker) execute(c *command) {
	var err *CommandError
	switch cmd := c.cmd.(type) { // normalized by Do: values only
	case ClientInit:
		err = w.clientInit(c, cmd)
	case RQCreate:
		err = w.rqCreate(c, cmd)
	case RQDestroy:
		err = w.rqDestroy(c, cmd)
	case MRReg:
		err = w.mrReg(c, cmd)
	case MRDereg:
		err = w.mrDereg(c, cmd)
	case removeClient:
		err = w.removeClient(c, cmd.ID)
	default:
		err = cmdErr(c.cmd.CommandType(), ErrInvalidCommand, "unknown command type")
	}
	if err != nil {
		client := commandClient(c.cmd)
		w.log.Debug("command failed", zap.Stringer("command", err.Type), zap.Uint64("client", client), zap.Error(err))
		c.answer(err.Notification(client), err)
	}
}

func (w *Worker) clientInit(c *command, cmd ClientInit) *CommandError {
	t := CmdClientInit
	if _, ok := w.clients[cmd.ID]; ok {
		return cmdErr(t, ErrClientExists, "client "+utoa(cmd.ID))
	}
	for _, r := range w.removals {
		if r.id == cmd.ID {
			return cmdErr(t, ErrClientExists, "client "+utoa(cmd.ID)+" is still being removed")
		}
	}
	if len(w.clients) >= w.cfg.MaxClients {
		return cmdErr(t, ErrTooManyClients, "limit "+strconv.Itoa(w.cfg.MaxClients))
	}
	if len(cmd.Addr) == 0 {
		return cmdErr(t, ErrInvalidCommand, "empty target address")
	}
	cl := newClient(w, cmd.ID)
	ep, err := w.uw.Connect(cmd.Addr, ucp.EndpointOptions{
		Name:    "host/" + utoa(cmd.ID),
		OnError: func(_ *ucp.Endpoint, err error) { w.onHostError(cl, err) },
	})
	if err != nil {
		return cmdErr(t, ErrConnect, err.Error())
	}
	cl.hostEP = ep
	w.clients[cmd.ID] = cl
	w.regMu.Lock()
	w.nclients++
	w.regMu.Unlock()
	go cl.run()
	w.log.Debug("client registered", zap.Uint64("client", cmd.ID), zap.Bool("peer_failure_detection", ep.PeerFailureDetection()))
	n := Notification{Type: t, Client: cmd.ID, Addr: append([]byte(nil), w.addr...),
		MaxInFlightPerRQ: uint32(min(uint64(w.cfg.MaxInFlightPerRQ), math.MaxUint32)),
		Capabilities:     capabilities(w.cfg, w.uctx.LargeShmSegments())}
	// Answer once the endpoint to the target is wired up (a flush of a
	// fresh endpoint completes when its connection is established both
	// ways). A target that tears down right after CLIENT_INIT otherwise
	// may still hold UCX's half-done wire-up reply to this worker, and UCX
	// 1.13 (tcp) asserts on such a pending reply when the target's worker
	// is destroyed ("got REP message"): the target process aborts. The
	// flush costs one round trip per CLIENT_INIT, off the data path.
	if err := ep.Flush(ucp.CompleterFunc(func(comp ucp.Completion) {
		if comp.Err != nil {
			// The host error callback deals with the client; its target
			// learns why CLIENT_INIT failed.
			c.answer(Notification{}, cmdErr(t, ErrConnect, "reaching the target: "+comp.Err.Error()))
			return
		}
		c.answer(n, nil)
	}), 0); err != nil {
		c.answer(n, nil) // no flush possible (closing): answer as before
	}
	return nil
}

// plausibleAddress rejects what would make UCX abort the worker process
// instead of failing: UCX 1.13 asserts that a packed worker address's
// header names a version it knows (the low 4 bits of its first byte: 0 or
// 1). An initiator address comes from an unauthenticated peer when the
// out-of-band channel has no secret (the reference exchange never has
// one). It cannot check the rest: UCX does not even take the length;
// docs/SECURITY.md, "Reference initiators".
func plausibleAddress(addr []byte) string {
	if len(addr) < 2 {
		return "too short for a UCP worker address"
	}
	if v := addr[0] & 0x0f; v > 1 {
		return "not a UCP worker address (header version " + strconv.Itoa(int(v)) + ")"
	}
	return ""
}

func (w *Worker) onHostError(c *client, err error) {
	c.hostFailed.Store(true)
	w.peerFailed()
	w.log.Warn("target endpoint failed: the client's requests fail with TargetUnreachable", zap.Uint64("client", c.id), zap.Error(err))
}

func (w *Worker) rqCreate(c *command, cmd RQCreate) *CommandError {
	t := CmdRQCreate
	cl := w.clients[cmd.Client]
	if cl == nil {
		return cmdErr(t, ErrUnknownClient, "client "+utoa(cmd.Client))
	}
	if len(cl.rqs) >= w.cfg.MaxRQsPerClient {
		return cmdErr(t, ErrTooManyRQs, "limit "+strconv.Itoa(w.cfg.MaxRQsPerClient))
	}
	if len(cmd.Addr) == 0 {
		return cmdErr(t, ErrInvalidCommand, "empty initiator address")
	}
	if err := plausibleAddress(cmd.Addr); err != "" {
		return cmdErr(t, ErrInvalidCommand, "initiator address: "+err)
	}
	mode := ucp.ErrorHandlingPrefer
	switch cmd.ErrorHandling {
	case RQErrorsPeer:
	case RQErrorsNone:
		// One attempt, no fallback: see docs/PROTOCOL.md ("Extensions for
		// reference peers") for why a fallback would break the match of
		// the two endpoints over shared memory.
		mode = ucp.ErrorHandlingNone
	default:
		return cmdErr(t, ErrInvalidCommand, "unknown error-handling mode "+cmd.ErrorHandling.String())
	}
	key := string(cmd.Addr)
	if q := w.rqAddr[key]; q != nil {
		return cmdErr(t, ErrRQExists, "request queue "+utoa(q.id)+" of client "+utoa(q.c.id))
	}
	q := &rq{id: w.nextRQ + 1, c: cl, addrKey: key, zeroID: cmd.ZeroClientID, watch: new(flushWatch)}
	ep, err := w.uw.Connect(cmd.Addr, ucp.EndpointOptions{
		Name:          "rq/" + utoa(q.id),
		OnError:       func(_ *ucp.Endpoint, err error) { w.onRQError(q, err) },
		ErrorHandling: mode,
	})
	if err != nil {
		e := cmdErr(t, ErrConnect, err.Error())
		e.Status = rdmo.StatusInternal
		return e
	}
	w.nextRQ++
	ep.Value = q
	q.ep = ep
	cl.rqs = append(cl.rqs, q)
	w.rqAddr[key] = q
	w.regMu.Lock()
	w.rqByID[q.id] = q
	w.regMu.Unlock()
	w.log.Debug("request queue created", zap.Uint64("client", cl.id), zap.Uint64("rq", q.id),
		zap.Stringer("error_handling", cmd.ErrorHandling), zap.Bool("peer_failure_detection", ep.PeerFailureDetection()),
		zap.Bool("zero_client_id", cmd.ZeroClientID))
	c.answer(Notification{Type: t, Client: cl.id, RQ: q.id}, nil)
	return nil
}

func (w *Worker) rqDestroy(c *command, cmd RQDestroy) *CommandError {
	t := CmdRQDestroy
	cl := w.clients[cmd.Client]
	if cl == nil {
		return cmdErr(t, ErrUnknownClient, "client "+utoa(cmd.Client))
	}
	q := w.rqByID[cmd.RQ]
	if q == nil || q.closed {
		return cmdErr(t, ErrUnknownRQ, "request queue "+utoa(cmd.RQ))
	}
	if q.c != cl {
		e := cmdErr(t, ErrUnknownRQ, "request queue "+utoa(cmd.RQ)+" belongs to another client")
		e.Status = rdmo.StatusClientMismatch
		return e
	}
	w.startRQTeardown(q, c, 0, true)
	return nil
}

func (w *Worker) mrReg(c *command, cmd MRReg) *CommandError {
	t := CmdMRReg
	cl := w.clients[cmd.Client]
	if cl == nil {
		return cmdErr(t, ErrUnknownClient, "client "+utoa(cmd.Client))
	}
	if cl.nregions >= w.cfg.MaxRegionsPerClient {
		return cmdErr(t, ErrTooManyRegions, "limit "+strconv.Itoa(w.cfg.MaxRegionsPerClient))
	}
	switch {
	case cmd.Len == 0:
		return cmdErr(t, ErrInvalidCommand, "empty region")
	case cmd.Len > math.MaxUint64-cmd.VA:
		e := cmdErr(t, ErrInvalidCommand, "region wraps around the address space")
		e.Status = rdmo.StatusOutOfBounds
		return e
	case len(cmd.PackedRkey) == 0:
		return cmdErr(t, ErrInvalidCommand, "empty packed remote key")
	}
	if cl.hostFailed.Load() {
		return cmdErr(t, ErrRkey, "the endpoint to the target failed")
	}
	rkey, err := cl.hostEP.UnpackRkey(cmd.PackedRkey)
	if err != nil {
		return cmdErr(t, ErrRkey, err.Error())
	}
	w.nextRegion++
	r := &region{id: w.nextRegion, base: cmd.VA, length: cmd.Len, c: cl, rkey: rkey}
	if len(cmd.PackedMemh) > 0 {
		// Importing an exported memory handle needs UCX >= 1.14
		// (ucp.ErrNotSupported here): keep it for a later version.
		r.memh = append([]byte(nil), cmd.PackedMemh...)
	}
	if cmd.Len <= math.MaxInt {
		if m, err := rkey.Ptr(cmd.VA, int(cmd.Len)); err == nil {
			if mappingCovers(m) {
				r.mapping = m
			} else {
				w.log.Warn("rkey_ptr mapping does not cover the region; using UCX", zap.Uint64("client", cl.id),
					zap.Uint64("region", r.id), zap.Uint64("len", cmd.Len))
			}
		} else if !errors.Is(err, ucp.ErrNotSupported) {
			w.log.Debug("rkey_ptr failed", zap.Uint64("region", r.id), zap.Error(err))
		}
	}
	if cmd.Populate && r.mapping != nil {
		w.startPopulate(cl, r, c)
		return nil
	}
	w.addRegion(cl, r)
	c.answer(Notification{Type: t, Client: cl.id, Region: r.id}, nil)
	return nil
}

// addRegion makes r known: requests and MR_DEREG find it from now on.
func (w *Worker) addRegion(cl *client, r *region) {
	old := *cl.regions.Load()
	m := make(map[uint64]*region, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[r.id] = r
	cl.regions.Store(&m)
	w.regMu.Lock()
	w.allRegions[r.id] = r
	w.regMu.Unlock()
	cl.nregions++
	if r.mapping == nil {
		cl.unmapped++
	}
	w.log.Debug("region registered", zap.Uint64("client", cl.id), zap.Uint64("region", r.id),
		zap.Uint64("va", r.base), zap.Uint64("len", r.length), zap.Bool("mapped", r.mapping != nil))
}

// startPopulate commits the pages of r's mapping into this process before
// MR_REG is answered (MRReg.Populate), on a goroutine of its own: the
// loop keeps serving while the kernel faults the pages in, and the region
// stays unknown (no request, no MR_DEREG reaches it) until populated
// finishes the command. The client's removal waits for it (its endpoint
// holds the mapping).
func (w *Worker) startPopulate(cl *client, r *region, c *command) {
	cl.nregions++ // the region's place under MaxRegionsPerClient
	cl.populating++
	m := r.mapping
	go func() {
		start := time.Now()
		method, err := prefault.Populate(m)
		w.log.Debug("region populated", zap.Uint64("client", cl.id), zap.Uint64("region", r.id),
			zap.Int("len", len(m)), zap.Stringer("method", method), zap.Duration("took", time.Since(start)), zap.Error(err))
		w.push(inboxItem{kind: itemPopulated, c: cl, reg: r, cmd: c, err: err})
	}()
}

// populated finishes an MR_REG whose mapping startPopulate committed. A
// failure to populate is not the registration's: the pages then fault in
// on first use, as without Populate.
func (w *Worker) populated(cl *client, r *region, c *command, err error) {
	cl.populating--
	cl.nregions--
	if err != nil {
		w.log.Warn("populating a region's pages failed; they fault in on first use", zap.Uint64("client", cl.id),
			zap.Uint64("region", r.id), zap.Error(err))
	}
	if cl.stopping || w.clients[cl.id] != cl {
		w.destroyRkey(r)
		e := cmdErr(CmdMRReg, ErrUnknownClient, "client "+utoa(cl.id)+" was removed while its region was populated")
		c.answer(e.Notification(cl.id), e)
		return
	}
	w.addRegion(cl, r)
	c.answer(Notification{Type: CmdMRReg, Client: cl.id, Region: r.id}, nil)
}

func (w *Worker) mrDereg(c *command, cmd MRDereg) *CommandError {
	t := CmdMRDereg
	cl := w.clients[cmd.Client]
	if cl == nil {
		return cmdErr(t, ErrUnknownClient, "client "+utoa(cmd.Client))
	}
	r := w.allRegions[cmd.Region]
	switch {
	case r == nil:
		return cmdErr(t, ErrUnknownRegion, "region "+utoa(cmd.Region))
	case r.c != cl:
		return cmdErr(t, ErrRegionNotOwned, "region "+utoa(cmd.Region))
	case r.dying:
		return cmdErr(t, ErrRegionBusy, "region "+utoa(cmd.Region))
	}
	r.dying = true
	cl.pushExec(execItem{kind: execDereg, reg: r, cmd: c})
	return nil
}

// deregDone finishes MR_DEREG after the executor's write-back: the region
// becomes unknown, then its rkey goes (once no UCX operation uses it).
func (w *Worker) deregDone(cl *client, r *region, c *command, err error) {
	w.forgetRegion(cl, r)
	n := Notification{Type: CmdMRDereg, Client: cl.id, Region: r.id}
	w.log.Debug("region deregistered", zap.Uint64("client", cl.id), zap.Uint64("region", r.id), zap.Error(err))
	if err != nil {
		e := cmdErr(CmdMRDereg, ErrWriteBackFailed, err.Error())
		if st := rdmo.StatusOf(err); st != rdmo.StatusInternal {
			e.Status = st
		}
		n.Status, n.Detail = e.Status, e.Notification(cl.id).Detail
		c.answer(n, e)
		return
	}
	c.answer(n, nil)
}

func (w *Worker) forgetRegion(cl *client, r *region) {
	r.gone.Store(true)
	old := *cl.regions.Load()
	if _, ok := old[r.id]; ok {
		m := make(map[uint64]*region, len(old))
		for k, v := range old {
			if k != r.id {
				m[k] = v
			}
		}
		cl.regions.Store(&m)
		cl.nregions--
		if r.mapping == nil {
			cl.unmapped--
		}
	}
	w.regMu.Lock()
	delete(w.allRegions, r.id)
	w.regMu.Unlock()
	if r.inflight == 0 {
		w.destroyRkey(r)
	} else {
		r.destroyWhenIdle = true
	}
}

func (w *Worker) removeClient(c *command, id uint64) *CommandError {
	cl := w.clients[id]
	if cl == nil {
		return cmdErr(CommandType(255), ErrUnknownClient, "client "+utoa(id))
	}
	w.startRemoval(cl, c, false)
	return nil
}

// startRemoval removes a client: its queues close (requests not started
// fail), its executor runs the batches it has, writes back if graceful,
// calls ClientRemoved and ends; then finishRemoval releases the rest.
func (w *Worker) startRemoval(cl *client, c *command, graceful bool) {
	delete(w.clients, cl.id)
	w.regMu.Lock()
	w.nclients--
	w.regMu.Unlock()
	if c != nil {
		cl.waiters = append(cl.waiters, c)
	}
	failWith := rdmo.StatusInternal
	if !graceful {
		cl.hostFailed.Store(true)
		failWith = rdmo.StatusTargetUnreachable
	}
	for _, q := range append([]*rq(nil), cl.rqs...) {
		w.startRQTeardown(q, nil, failWith, graceful)
	}
	cl.stopping = true
	cl.pushExec(execItem{kind: execStop, graceful: graceful})
	w.removals = append(w.removals, cl)
	w.log.Debug("client removal started", zap.Uint64("client", cl.id), zap.Bool("graceful", graceful))
}

func (w *Worker) finishRemoval(cl *client) {
	for _, r := range *cl.regions.Load() {
		w.forgetRegion(cl, r)
	}
	// Regions being deregistered are no longer in the map but may still
	// hold their rkey: the endpoint's close releases it.
	cl.hostFailed.Store(true)
	if cl.hostEP != nil {
		if err := cl.hostEP.CloseForce(); err != nil {
			w.log.Warn("closing target endpoint", zap.Uint64("client", cl.id), zap.Error(err))
		}
	}
	w.log.Debug("client removed", zap.Uint64("client", cl.id))
	for _, c := range cl.waiters {
		c.answer(Notification{Type: CommandType(255), Client: cl.id}, nil)
	}
	cl.waiters = nil
}

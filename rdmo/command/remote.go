package command

import (
	"context"
	"time"
)

// ComponentVersion is the version of the RDMO component hosts check (the
// UROM hello's component version).
const ComponentVersion = "1.0.0"

// Command kinds on the UROM command channel.
const (
	KindClientInit = "client-init"
	KindRQCreate   = "rq-create"
	KindRQDestroy  = "rq-destroy"
	KindMRReg      = "mr-reg"
	KindMRDereg    = "mr-dereg"
	KindStats      = "stats"
	// KindRQFlushWait is rdmo's flush notification (FlushWait): answered
	// when a FLUSH of a request queue completed, or after its wait.
	KindRQFlushWait = "rq-flush-wait"
)

// Kind is the command channel's name of a command type ("" for one that
// is not a Command).
func Kind(t CommandType) string {
	switch t {
	case CmdClientInit:
		return KindClientInit
	case CmdRQCreate:
		return KindRQCreate
	case CmdRQDestroy:
		return KindRQDestroy
	case CmdMRReg:
		return KindMRReg
	case CmdMRDereg:
		return KindMRDereg
	}
	return ""
}

// FlushWait asks the worker to answer when more than After FLUSHes of
// request queue RQ (of Client) have completed, or after Wait at most
// (MaxFlushWait; 0: DefaultFlushWait), whichever comes first. The answer
// is the queue's FlushEvent: Flushes > After means done; otherwise ask
// again. The wait is bounded so the answer beats the service's command
// timeout (30 s by default).
type FlushWait struct {
	Client uint64        `msgpack:"client"`
	RQ     uint64        `msgpack:"rq"`
	After  uint64        `msgpack:"after"`
	Wait   time.Duration `msgpack:"wait"`
}

// Bounds of FlushWait.Wait.
const (
	DefaultFlushWait = 10 * time.Second
	MaxFlushWait     = 20 * time.Second
)

// Config keys a host may set in a spawn's configuration (the UROM
// SpawnOptions.Config).
const (
	// ConfigAppendStrategy selects the built-in append strategy:
	// "owned" (default) or "shared".
	ConfigAppendStrategy = "append-strategy"
)

// Caller carries one named call to a worker and decodes its answer into
// resp: a UROM service's *urom.WorkerProcess.
type Caller interface {
	Call(ctx context.Context, kind string, req, resp any) error
}

// Remote sends RDMO commands to a worker process through the UROM service.
type Remote struct{ W Caller }

// Do sends a command and returns its notification; a refused command
// returns its notification and an error matching the rdmo status sentinel.
func (r Remote) Do(ctx context.Context, cmd Command) (Notification, error) {
	var n Notification
	if err := r.W.Call(ctx, Kind(cmd.CommandType()), cmd, &n); err != nil {
		return n, err
	}
	return n, n.Err()
}

// WaitFlush waits until more than after FLUSHes of request queue rq have
// completed (FlushWait, asked again until then), and returns the queue's
// FlushEvent; ctx bounds the whole wait.
func (r Remote) WaitFlush(ctx context.Context, client, rq, after uint64) (FlushEvent, error) {
	for {
		wait := DefaultFlushWait
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
			if wait <= 0 {
				return FlushEvent{Client: client, RQ: rq}, context.DeadlineExceeded
			}
		}
		var ev FlushEvent
		if err := r.W.Call(ctx, KindRQFlushWait, FlushWait{Client: client, RQ: rq, After: after, Wait: wait}, &ev); err != nil {
			return ev, err
		}
		if ev.Flushes > after {
			return ev, nil
		}
		if err := ctx.Err(); err != nil {
			return ev, err
		}
	}
}

// Stats returns the worker's counters.
func (r Remote) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := r.W.Call(ctx, KindStats, nil, &st)
	return st, err
}

package wire

import (
	"context"
	"errors"
	"fmt"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/openrdmo/rdmo/rdmo"
)

// This file is what both ends agree on besides the messages: the go-plugin
// handshake, the bounds that keep every message under MaxMsgSize, and the
// gRPC options both ends set.

// ProtocolVersion is the version of the worker–plugin protocol (the gRPC
// service and its messages). go-plugin compares it during the handshake: a
// plugin built against another version refuses to start with the worker,
// so the worker and its plugins must be built from matching rdmo
// releases. Bump it on any incompatible change of this package.
const ProtocolVersion = 1

// Handshake is the go-plugin handshake of RDMO handler plugins. The magic
// cookie only keeps the binary from being run by hand (or by another
// go-plugin host) by mistake; it is not a security measure.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "RDMO_HANDLER_PLUGIN",
	MagicCookieValue: "b1e5c0a4-rdmo-handler-v1",
}

// PluginKey is the name the handler is dispensed under.
const PluginKey = "handler"

// MaxMsgSize bounds one gRPC message between the worker and a plugin,
// either way, and both sides enforce it (the plugin's server options, the
// worker's dial options): a peer cannot make the other receive more. The
// messages are kept under it by construction:
//
//   - a batch (CallReq) carries its requests' headers and eager payloads
//     (rendezvous payloads stay in the worker). A dpu worker's batch is at
//     most MaxBatch requests of at most MaxEagerPayload each (1024 × 1 MiB
//     by default), so Handler.HandleBatch splits a batch that would not fit
//     into consecutive calls, and fails a single request that cannot fit
//     one (only possible with MaxEagerPayload configured near this bound)
//     with LengthOverflow;
//   - a frame of target calls holds less than FlushBytes of pipelined
//     calls (their data and MaxOpOverhead each) plus one call: a Put of at
//     most MaxPutLen bytes, or a waiting call (a Sync's gets total at most
//     MaxGetLen bytes);
//   - an answer carries a Fetch's payload (at most the worker's
//     MaxRendezvousFetch, 1 MiB by default; a larger one fails with
//     LengthOverflow) or a Sync's gets.
const MaxMsgSize = 64 << 20

// MaxPutLen bounds the data of one Put of a plugin, and MaxGetLen the bytes
// one Sync of a plugin reads (its RemoteGets together): larger ones fail
// with LengthOverflow, nothing sent. Half a message leaves room for the
// pipelined calls that travel with them.
const (
	MaxPutLen = MaxMsgSize / 2
	MaxGetLen = MaxMsgSize / 2
)

// MaxOpOverhead is the encoded size of a target call without its data or
// its Sync ops (at most 45 bytes); MaxSyncOpLen that of one Sync op (at
// most 56). Pipelined calls count it against FlushBytes, so a frame of
// small or empty Puts stays small too.
const (
	MaxOpOverhead = 48
	MaxSyncOpLen  = 56
)

// FlushBytes is how much pipelined Put data the plugin holds before it sends
// a frame without waiting for a waiting call or the end of the call.
const FlushBytes = 1 << 20

// EnvLogLevel is the environment variable through which the worker tells a
// plugin process the lowest level it keeps ("trace", "debug", "info",
// "warn", "error"), so the plugin does not format lines that would be
// dropped. The worker sets it from its logger; the default is "info".
const EnvLogLevel = "RDMO_PLUGIN_LOG_LEVEL"

// Flow-control windows large enough that a batch never waits for a window
// update; a fixed window also turns off gRPC's bandwidth-probing pings.
const window = 16 << 20

// ServerOptions are the plugin's gRPC server options: the message bound,
// and windows and buffers sized for whole batches.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMsgSize), grpc.MaxSendMsgSize(MaxMsgSize),
		grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window),
		grpc.WriteBufferSize(128 << 10), grpc.ReadBufferSize(128 << 10),
		grpc.SharedWriteBuffer(true), grpc.NumStreamWorkers(4),
	}
}

// DialOptions are the worker's gRPC dial options, matching ServerOptions.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		// After go-plugin's own options (2 GiB), so these apply.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMsgSize), grpc.MaxCallSendMsgSize(MaxMsgSize)),
		grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window),
		grpc.WithWriteBufferSize(128 << 10), grpc.WithReadBufferSize(128 << 10),
		grpc.WithSharedWriteBuffer(true),
	}
}

// Plugin is the go-plugin glue on both sides: Impl is set in the plugin
// process, the worker only dispenses a *Client.
type Plugin struct {
	goplugin.NetRPCUnsupportedPlugin
	Impl Server
}

func (p *Plugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("rdmo plugin: no handler to serve")
	}
	s.RegisterService(&ServiceDesc, p.Impl)
	return nil
}

func (p *Plugin) GRPCClient(ctx context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &Client{Conn: c, Done: ctx.Done()}, nil
}

// Client is what the worker gets from Dispense: the connection, and a
// channel closed when go-plugin sees the process exit.
type Client struct {
	Conn *grpc.ClientConn
	Done <-chan struct{}
}

// Bounds of the encoded size of a CallReq (wire.go): the message without
// its requests, and each request without its header and payload.
const (
	MaxCallReqOverhead = 1 + 3*9 + 5
	MaxRequestOverhead = 1 + 2*9 + 2*5 + 2*5 + 9 + 1
)

// FitBatch returns how many of reqs, from the first, fit one CallReq of at
// most limit bytes.
func FitBatch(reqs []rdmo.Request, limit int) int {
	size := MaxCallReqOverhead
	for i := range reqs {
		size += MaxRequestOverhead + len(reqs[i].Sub) + len(reqs[i].Payload)
		if size > limit {
			return i
		}
	}
	return len(reqs)
}

// SyncFits checks a plugin's Sync against the bounds its answer must keep
// (MaxGetLen, MaxSyncOpLen).
func SyncFits(ops []SyncOp) error {
	if len(ops) > MaxGetLen/MaxSyncOpLen {
		return &rdmo.WireError{Status: rdmo.StatusLengthOverflow,
			Detail: fmt.Sprintf("Sync of %d ops: at most %d at once", len(ops), MaxGetLen/MaxSyncOpLen)}
	}
	gets := uint64(0)
	for i := range ops {
		if ops[i].Kind != rdmo.RemoteGet {
			continue
		}
		if gets += min(ops[i].Len, MaxGetLen+1); gets > MaxGetLen {
			return &rdmo.WireError{Status: rdmo.StatusLengthOverflow,
				Detail: fmt.Sprintf("Sync reading more than %d bytes at once", MaxGetLen)}
		}
	}
	return nil
}

// MaxAnswerOverhead bounds the encoded size of an answer without its data
// and Sync results.
const MaxAnswerOverhead = 64

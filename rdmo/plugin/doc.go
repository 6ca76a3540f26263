// Package plugin runs RDMO operation handlers (rdmo.Handler) as separate
// plugin processes, through HashiCorp go-plugin over gRPC, so that a
// handler that crashes, hangs or misbehaves cannot take the worker down.
//
// A plugin is a small program whose main calls Serve with its handler
// (see Serve for a complete one). The worker loads it with Load and gets a
// *Handler, which implements rdmo.Handler: built-in and plugin handlers are
// used the same way.
//
//	h, err := plugin.Load(ctx, "/usr/lib/rdmo/plugins/rdmo-plugin-append", plugin.LoadOptions{
//		Logger:  log,
//		Name:    "append",
//		Version: "1.0.0", // must match (SPEC §5)
//	})
//	...
//	defer plugin.CleanupClients() // at worker shutdown
//
// Neither this package nor a plugin links libucp: a plugin is pure Go
// against the rdmo SDK, and every access to target memory goes back to the
// worker.
//
// # Protocol
//
// The handshake is go-plugin's, with Handshake (ProtocolVersion and a magic
// cookie of our own); gRPC is the only protocol allowed. Over the gRPC
// connection the plugin serves the service rdmo.plugin.v1.Handler, declared
// by hand (no protoc) and carried as MessagePack by a codec registered with
// grpc/encoding as "rdmo-msgpack" and chosen per call (content-subtype), so
// go-plugin's own protobuf services share the connection unchanged:
//
//   - Info (unary), once per process start: HandlerInfo and pid.
//   - HandleBatch, WriteBack, RegionRemoved, ClientRemoved (unary): one call
//     per rdmo.Handler call; a batch travels whole (all requests in, all
//     results out).
//   - Target (bidirectional stream), opened once per process start by the
//     worker: the plugin sends its target calls on it as frames tagged with
//     the id of the call they belong to; the worker answers the calls that
//     wait, matched by a call id.
//
// Handler documents the semantics of the Target a plugin gets (which calls
// wait, how pipelined Put errors are reported) and what happens when a
// plugin fails (restart with backoff, fast failure while down, no hang).
//
// # Logs
//
// In the plugin, Logger is a zap logger writing hclog-shaped JSON lines on
// standard error; go-plugin parses them in the worker, which logs each one
// through LoadOptions.Logger at its own level (NewHCLogger is the bridge
// from hclog to zap).
package plugin

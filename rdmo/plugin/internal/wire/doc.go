// Package wire is the protocol between the worker and a handler plugin:
// the go-plugin handshake, a gRPC service declared by hand (no protoc),
// its messages, their MessagePack codec, and the bounds that keep every
// message under MaxMsgSize. Both ends import it: rdmo/plugin (the plugin
// process) and rdmo/plugin/pluginhost (the worker).
//
// Service rdmo.plugin.v1.Handler, served by the plugin process; its calls
// name the codec by content-subtype ("application/grpc+rdmo-msgpack"), so
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
// docs/PLUGINS.md ("Protocol") describes the messages.
//
// # Why the codec is hand-written
//
// The messages are encoded and decoded by hand (msgpack.go): no
// reflection, one buffer per message, byte strings decoded in place, every
// count bounded by the bytes present. It stays because it is measurably
// cheaper than the same messages through the maintained library
// (github.com/vmihailenco/msgpack/v5, structs as arrays, with the bounds
// check internal/msgpackcheck that untrusted input needs), registered as
// LibCodecName so the comparison can be rerun: BenchmarkCodec in
// rdmo/plugin/pluginhost, a HandleBatch round trip of 64 requests of 64 B,
// both codecs alternately, 6 runs each, on the 2-core test VM under load
// (benchstat -col /codec; wall time was within noise there, CPU time is
// not):
//
//	                 hand          lib
//	host-us/batch    70.98 ± 18%   171.55 ± 25%   +142% (p=0.002)
//	plugin-us/batch  68.00 ± 21%   143.00 ± 19%   +110% (p=0.002)
//	B/op             20.92Ki ± 1%  71.46Ki ± 0%   +242% (p=0.002)
//	allocs/op        102 ± 0%      315 ± 0%       +209% (p=0.002)
//
// The service declaration is hand-written either way: without protoc, a
// grpc.ServiceDesc is what generated code would hold too.
package wire

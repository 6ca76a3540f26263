// Package plugin is what an RDMO handler plugin imports: Serve runs an
// rdmo.Handler as a plugin process, so that a handler that crashes, hangs
// or misbehaves cannot take the worker down.
//
// A plugin is a small program whose main calls Serve with its handler (see
// Serve for a complete one) and logs with Logger. Neither this package nor
// a plugin links libucp: a plugin is pure Go against the rdmo SDK, and every
// access to target memory goes back to the worker.
//
// The worker's side (starting, supervising and restarting plugin
// processes, and running their target calls) is package
// rdmo/plugin/pluginhost; it documents the semantics of the Target a plugin
// gets (which calls wait, how pipelined Put errors are reported) and what
// happens when a plugin fails. The protocol between the two is
// rdmo/plugin/internal/wire (see docs/PLUGINS.md, "Protocol").
package plugin

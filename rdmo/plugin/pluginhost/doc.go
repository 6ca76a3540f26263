// Package pluginhost is the worker's side of RDMO handler plugins: Load
// starts a plugin binary (hashicorp/go-plugin over gRPC), supervises and
// restarts it, and runs the target calls it makes against the worker's
// Target, so that a plugin is an rdmo.Handler like a built-in one.
//
//	h, err := pluginhost.Load(ctx, "/usr/lib/rdmo/plugins/rdmo-plugin-append", pluginhost.LoadOptions{
//		Logger:  log,
//		Name:    "append",
//		Version: "1.0.0", // must match (docs/PLUGINS.md, "Versions")
//	})
//	...
//	defer pluginhost.CleanupClients() // at worker shutdown
//
// Plugins themselves are written with package rdmo/plugin (Serve). Handler
// documents the semantics of the Target a plugin gets (which calls wait,
// how pipelined Put errors are reported) and what happens when a plugin
// fails (restart with backoff, fast failure while down, no hang).
//
// # Logs
//
// A plugin logs hclog-shaped JSON lines on standard error (rdmo/plugin's
// Logger); go-plugin parses them here, and each one reaches
// LoadOptions.Logger at its own level.
package pluginhost

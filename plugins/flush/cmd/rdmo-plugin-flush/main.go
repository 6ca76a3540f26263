// Command rdmo-plugin-flush serves the FLUSH handler as an RDMO handler
// plugin: load it with pluginhost.Load in the worker.
package main

import (
	"github.com/openrdmo/rdmo/plugins/flush"
	"github.com/openrdmo/rdmo/rdmo/plugin"
)

func main() { plugin.Serve(flush.New()) }

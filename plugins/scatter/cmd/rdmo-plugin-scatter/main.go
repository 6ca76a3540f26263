// Command rdmo-plugin-scatter serves the SCATTER handler as an RDMO handler
// plugin: load it with pluginhost.Load in the worker.
package main

import (
	"github.com/openrdmo/rdmo/plugins/scatter"
	"github.com/openrdmo/rdmo/rdmo/plugin"
)

func main() { plugin.Serve(scatter.New(scatter.Options{})) }

// Command rdmo-plugin-counter serves the example counter operation as an
// RDMO plugin. Put it on a UROM service's plugin path (rdmo dpu
// --plugin-path DIR) and spawn a worker with "plugin:counter".
package main

import (
	"github.com/openrdmo/rdmo/examples/counter"
	"github.com/openrdmo/rdmo/rdmo/plugin"
)

func main() { plugin.Serve(counter.New()) }

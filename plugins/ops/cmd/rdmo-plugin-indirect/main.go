// Command rdmo-plugin-indirect serves the indirect operation of the operation pack
// (plugins/ops) as an RDMO handler plugin: put it on a UROM service's
// plugin path and spawn a worker with "plugin:indirect".
package main

import (
	"github.com/openrdmo/rdmo/plugins/ops"
	"github.com/openrdmo/rdmo/rdmo/plugin"
)

func main() { plugin.Serve(ops.ByName("indirect")) }

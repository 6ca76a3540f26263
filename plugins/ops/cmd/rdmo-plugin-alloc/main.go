// Command rdmo-plugin-alloc serves the alloc operation of the operation pack
// (plugins/ops) as an RDMO handler plugin: put it on a UROM service's
// plugin path and spawn a worker with "plugin:alloc".
package main

import (
	"github.com/openrdmo/rdmo/plugins/ops"
	"github.com/openrdmo/rdmo/rdmo/plugin"
)

func main() { plugin.Serve(ops.ByName("alloc")) }

// Command rdmo-plugin-kv serves the kv operation of the operation pack
// (plugins/ops) as an RDMO handler plugin: put it on a UROM service's
// plugin path and spawn a worker with "plugin:kv".
package main

import (
	"github.com/openrdmo/rdmo/plugins/ops"
	"github.com/openrdmo/rdmo/rdmo/plugin"
)

func main() { plugin.Serve(ops.ByName("kv")) }

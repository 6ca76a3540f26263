// Command rdmo-plugin-append serves the APPEND handler (Owned strategy) as
// an RDMO handler plugin: load it with plugin.Load in the worker.
package main

import (
	"github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/rdmo/plugin"
)

func main() { plugin.Serve(append.New(append.Options{Strategy: append.Owned})) }

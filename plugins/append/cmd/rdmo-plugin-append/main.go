// Command rdmo-plugin-append serves the APPEND handler as an RDMO handler
// plugin. The worker passes the append strategy as
// RDMO_CONFIG_APPEND_STRATEGY ("owned", the default, or "shared").
package main

import (
	"fmt"
	"os"

	"github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/rdmo/plugin"
)

func main() {
	strategy := append.Owned
	switch s := os.Getenv("RDMO_CONFIG_APPEND_STRATEGY"); s {
	case "", "owned":
	case "shared":
		strategy = append.Shared
	default:
		fmt.Fprintf(os.Stderr, "rdmo-plugin-append: unknown append strategy %q (valid: owned, shared)\n", s)
		os.Exit(2)
	}
	plugin.Serve(append.New(append.Options{Strategy: strategy}))
}

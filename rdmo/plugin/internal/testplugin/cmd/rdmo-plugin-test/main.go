// Command rdmo-plugin-test serves the test handler of package plugin's
// tests as a plugin. With RDMO_TESTPLUGIN_CPUPROFILE set it writes a CPU
// profile there when the worker stops it.
package main

import (
	"os"
	"runtime/pprof"

	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/plugin"
	"github.com/openrdmo/rdmo/rdmo/plugin/internal/testplugin"
)

// The plugin's own status, defined here only: the host learns its name
// from the handshake (pluginhost's TestPluginStatusNames).
var _ = rdmo.DefineStatus(testplugin.StatusRefused, testplugin.StatusRefusedName, "the test plugin refused on command")

// One of its ops' names, defined here only (TestPluginOpNames).
var _ = rdmo.DefineOp(testplugin.OpFetchAdd, testplugin.OpFetchAddName)

func main() {
	if p := os.Getenv("RDMO_TESTPLUGIN_CPUPROFILE"); p != "" {
		if f, err := os.Create(p); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer f.Close()
				defer pprof.StopCPUProfile()
			}
		}
	}
	plugin.Serve(testplugin.New())
}

//go:build !race

package pluginhost_test

const raceEnabled = false

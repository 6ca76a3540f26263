// Package ucxflag maps the rdmo binary's UCX flags onto UCX: -d/--device
// to UCX configuration, --sdk-log-level to UCX's log level, and the UCX
// version -v/--version prints.
package ucxflag

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/openrdmo/rdmo/ucp"
)

// shmTransports are UCX transports that move data through memory shared
// between processes of one host, not over a network device.
var shmTransports = map[string]bool{"sysv": true, "posix": true, "cma": true, "knem": true, "xpmem": true}

// DeviceConfig returns the UCX configuration entries (names without the
// UCX_ prefix) that make a process use the device name, as -d/--device
// gives it: a network device ("eth0", "lo", or an IB/RoCE device "mlx5_0:1";
// "mlx5_0" selects all its ports) restricts UCX_NET_DEVICES to it; "memory"
// (shared memory) restricts UCX_TLS to shared memory. An empty name returns
// nil: UCX chooses. An unknown name is an error that lists the devices UCX
// reports.
func DeviceConfig(name string) (map[string]string, error) {
	if name == "" {
		return nil, nil
	}
	// Look at every device, whatever UCX_TLS or UCX_NET_DEVICES the
	// environment has.
	ctx, err := ucp.NewContext(ucp.ContextOptions{Name: "rdmo-devices", Config: map[string]string{
		"TLS": "all", "NET_DEVICES": "all", "SHM_DEVICES": "all", "SELF_DEVICES": "all",
	}})
	if err != nil {
		return nil, fmt.Errorf("cannot list UCX devices: %w", err)
	}
	res := ctx.Resources()
	ctx.Close()

	byDev := map[string][]string{}
	for _, r := range res {
		if !slices.Contains(byDev[r.Device], r.Transport) {
			byDev[r.Device] = append(byDev[r.Device], r.Transport)
		}
	}
	var matched []string
	for dev := range byDev {
		if dev == name || strings.HasPrefix(dev, name+":") {
			matched = append(matched, dev)
		}
	}
	sort.Strings(matched)
	if len(matched) == 0 {
		var all []string
		for dev, tls := range byDev {
			if len(tls) == 1 && tls[0] == "self" {
				continue // the loopback pseudo-device
			}
			all = append(all, dev)
		}
		sort.Strings(all)
		if len(all) == 0 {
			return nil, fmt.Errorf("no device %q: UCX reports no devices", name)
		}
		return nil, fmt.Errorf("no device %q; devices UCX reports: %s", name, strings.Join(all, ", "))
	}
	network, shm := false, false
	for _, dev := range matched {
		for _, tl := range byDev[dev] {
			switch {
			case tl == "self":
			case shmTransports[tl]:
				shm = true
			default:
				network = true
			}
		}
	}
	switch {
	case network:
		return map[string]string{"NET_DEVICES": strings.Join(matched, ",")}, nil
	case shm:
		return map[string]string{"TLS": "shm,self"}, nil
	}
	return nil, fmt.Errorf("device %q carries only UCX's loopback transport (self): choose a network device or memory", name)
}

// ValidateDevice checks a -d/--device name against the devices UCX
// reports.
func ValidateDevice(name string) error {
	_, err := DeviceConfig(name)
	return err
}

// ConfigEnv turns UCX configuration entries into environment entries for a
// child process, in a stable order.
func ConfigEnv(cfg map[string]string) []string {
	var env []string
	for k, v := range cfg {
		env = append(env, "UCX_"+k+"="+v)
	}
	sort.Strings(env)
	return env
}

var ucxLevels = map[string]ucp.LogLevel{
	"fatal": ucp.LogFatal,
	"error": ucp.LogError,
	"warn":  ucp.LogWarn,
	"info":  ucp.LogInfo,
	"debug": ucp.LogDebug,
	"trace": ucp.LogTrace,
}

// ApplySDKLogLevel sets UCX's log level from its name: "fatal", "error",
// "warn", "info", "debug" or "trace".
func ApplySDKLogLevel(name string) error {
	l, ok := ucxLevels[strings.ToLower(name)]
	if !ok {
		return errors.New("unknown UCX log level " + fmt.Sprintf("%q", name) + "; valid: fatal, error, warn, info, debug, trace")
	}
	ucp.SetLogLevel(l)
	return nil
}

// UCXVersion is the version of the libucp the process runs against.
func UCXVersion() string {
	a, b, c := ucp.Version()
	return fmt.Sprintf("%d.%d.%d", a, b, c)
}

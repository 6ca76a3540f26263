package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
)

// Defaults.
const (
	DefaultOOBPort        = 18515 // the reference's out-of-band TCP port
	DefaultOps            = 100000
	DefaultAppendStrategy = AppendOwned
	DefaultDPUListen      = "127.0.0.1:18516"
	DefaultMaxWorkers     = 64

	// MaxDeviceNameLen is DOCA_DEVINFO_IBDEV_NAME_SIZE: device names are
	// shorter than this.
	MaxDeviceNameLen = 64
)

// Help groups: the usage text lists flags under these headings, as DOCA's
// does ("DOCA Flags", "Program Flags"), then rdmo's own.
const (
	GroupDOCAFlags    = "DOCA Flags"
	GroupProgramFlags = "Program Flags"
	GroupRDMOFlags    = "rdmo Flags"
	GroupServiceFlags = "Service Flags"
	GroupFlags        = "Flags"
)

// Flag annotations read by the help printer.
const (
	AnnotationGroup = "rdmo/group" // the help heading, one of the Group* constants
	AnnotationArg   = "rdmo/arg"   // the value placeholder, e.g. "<path>"
)

// Annotate sets the help heading and value placeholder of flag name in fs.
// arg may be "" for flags without a value placeholder.
func Annotate(fs *pflag.FlagSet, name, group, arg string) {
	_ = fs.SetAnnotation(name, AnnotationGroup, []string{group})
	if arg != "" {
		_ = fs.SetAnnotation(name, AnnotationArg, []string{arg})
	}
}

// Mode is the DOCA -m/--mode: which side of the demo this process runs.
type Mode string

// The modes.
const (
	ModeServer Mode = "server" // the target: owns the memory, spawns the RDMO worker
	ModeClient Mode = "client" // the initiator: sends RDMO requests
)

// Modes lists the valid modes.
var Modes = []Mode{ModeServer, ModeClient}

func (m Mode) String() string { return string(m) }

// Set parses s; it makes *Mode a pflag.Value. Like DOCA, the names are exact
// (lower case); anything else is an error listing the valid modes.
func (m *Mode) Set(s string) error {
	v, err := ParseMode(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Type is the placeholder pflag shows for the value.
func (m *Mode) Type() string { return "mode" }

// ParseMode parses "server" or "client".
func ParseMode(s string) (Mode, error) {
	switch v := Mode(strings.TrimSpace(s)); v {
	case ModeServer, ModeClient:
		return v, nil
	}
	return "", choiceError("mode", "modes", s, "server", "client")
}

func choiceError(what, plural, got string, valid ...string) error {
	msg := fmt.Sprintf("invalid %s %q; valid %s: %s", what, got, plural, strings.Join(valid, ", "))
	if got == "" {
		msg = fmt.Sprintf("empty %s; valid %s: %s", what, plural, strings.Join(valid, ", "))
	} else if s := suggest(got, valid...); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	return errors.New(msg)
}

// AppendStrategy selects how RDMO append handles a queue's tail.
type AppendStrategy string

// The append strategies.
const (
	// AppendOwned: the worker owns the tail of each queue it appends to
	// (the reference's behaviour: one GET on a cache miss, then cached).
	AppendOwned AppendStrategy = "owned"
	// AppendShared: the tail is shared with other writers and reserved with
	// a remote fetch-and-add per append.
	AppendShared AppendStrategy = "shared"
)

func (a AppendStrategy) String() string { return string(a) }

// Set parses s; it makes *AppendStrategy a pflag.Value.
func (a *AppendStrategy) Set(s string) error {
	switch v := AppendStrategy(strings.ToLower(strings.TrimSpace(s))); v {
	case AppendOwned, AppendShared:
		*a = v
		return nil
	}
	return choiceError("append strategy", "strategies", s, "owned", "shared")
}

// Type is the placeholder pflag shows for the value.
func (a *AppendStrategy) Type() string { return "strategy" }

// OOBProtocol is the out-of-band protocol -m client speaks to the server.
type OOBProtocol string

// The out-of-band protocols.
const (
	// OOBRDMO is rdmo's own (authenticated, framed; package host/oob).
	OOBRDMO OOBProtocol = "rdmo"
	// OOBDOCA is the reference's exchange (DOCA 3.0's urom_rdmo demo), to
	// run the reference demo against a DOCA server or rdmo's.
	OOBDOCA OOBProtocol = "doca"
)

func (p OOBProtocol) String() string { return string(p) }

// Set parses s; it makes *OOBProtocol a pflag.Value.
func (p *OOBProtocol) Set(s string) error {
	switch v := OOBProtocol(strings.ToLower(strings.TrimSpace(s))); v {
	case OOBRDMO, OOBDOCA:
		*p = v
		return nil
	}
	return choiceError("out-of-band protocol", "protocols", s, "rdmo", "doca")
}

// Type is the placeholder pflag shows for the value.
func (p *OOBProtocol) Type() string { return "protocol" }

// nameValue is a string that may not be blank when given.
type nameValue string

func (n nameValue) String() string { return string(n) }
func (n *nameValue) Type() string  { return "string" }
func (n *nameValue) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("empty name")
	}
	*n = nameValue(s)
	return nil
}

// portValue is a TCP port, 1..65535.
type portValue uint16

func (p portValue) String() string { return strconv.Itoa(int(p)) }
func (p *portValue) Type() string  { return "port" }
func (p *portValue) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("invalid port %q; want a number from 1 to 65535", s)
	}
	*p = portValue(n)
	return nil
}

// countValue is a whole number of at least 1.
type countValue int

func (c countValue) String() string { return strconv.Itoa(int(c)) }
func (c *countValue) Type() string  { return "N" }
func (c *countValue) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 {
		return fmt.Errorf("invalid count %q; want a whole number of at least 1", s)
	}
	*c = countValue(n)
	return nil
}

// PathList is a search path: a flag value splits on the OS list separator
// (':' on Linux) and repeated flags append; a params file may give a JSON
// array. It implements pflag.SliceValue.
type PathList []string

// pathListValue wraps a *PathList with the "first Set replaces the default"
// rule of pflag's slice values.
type pathListValue struct {
	p       *PathList
	changed bool
}

func (v *pathListValue) String() string { return strings.Join(*v.p, string(filepath.ListSeparator)) }
func (v *pathListValue) Type() string   { return "paths" }
func (v *pathListValue) Set(s string) error {
	var parts []string
	for _, e := range filepath.SplitList(s) {
		if e = strings.TrimSpace(e); e != "" {
			parts = append(parts, e)
		}
	}
	if len(parts) == 0 {
		return errors.New("empty search path")
	}
	if !v.changed {
		*v.p = nil
		v.changed = true
	}
	*v.p = append(*v.p, parts...)
	return nil
}
func (v *pathListValue) Append(s string) error { return v.Set(s) }
func (v *pathListValue) Replace(list []string) error {
	*v.p = nil
	v.changed = true
	for _, s := range list {
		if err := v.Set(s); err != nil {
			return err
		}
	}
	return nil
}
func (v *pathListValue) GetSlice() []string { return append([]string(nil), *v.p...) }

// PathListVar defines a flag of directories with the rule of
// --plugin-path: ':'-separated, repeatable, the first use replacing the
// default.
func PathListVar(fs *pflag.FlagSet, p *PathList, name, usage string) {
	fs.Var(&pathListValue{p: p}, name, usage)
}

// RegisterFlags adds -l/--log-level, --sdk-log-level and --log-format to fs
// (the rdmo binary registers them as persistent flags of the root command,
// so every subcommand has them).
func (c *LogConfig) RegisterFlags(fs *pflag.FlagSet) {
	fs.VarP(&c.Level, "log-level", "l", "Set the (numeric) log level for the program "+LogLevelHelp())
	Annotate(fs, "log-level", GroupDOCAFlags, "")
	fs.Var(&c.SDKLevel, "sdk-log-level", "Set the SDK (numeric) log level for the program "+LogLevelHelp())
	Annotate(fs, "sdk-log-level", GroupDOCAFlags, "")
	fs.Var(&c.Format, "log-format", "Log output format: console (readable) or json (one object per line)")
	Annotate(fs, "log-format", GroupRDMOFlags, "{console, json}")
}

// Config is the configuration of the DOCA-compatible root command (server
// and client modes) and of `rdmo bench`.
type Config struct {
	Log LogConfig

	ParamsFile     string         // -j/--json: the params file that was applied, if any
	Device         string         // -d/--device: IB device name ("" = let UCX choose)
	ServerName     string         // -s/--server-name: host of the server (client mode)
	Mode           Mode           // -m/--mode; "" only for bench (both sides in one process)
	OOBPort        uint16         // --oob-port: out-of-band TCP port
	OOBProtocol    OOBProtocol    // --oob-protocol: what -m client speaks on it
	UROMAddress    string         // --urom: UROM service host:port; "" = embedded service
	AppendStrategy AppendStrategy // --append-strategy
	Ops            int            // --ops: workload size
	SecretFile     string         // --secret-file: shared secret for authentication ("" = none)
	// Plugins (--plugins) are handlers the server's worker loads besides
	// append, flush and scatter: built-ins by name ("kv"), plugin binaries
	// as "plugin:NAME" (host/target Options.Plugins). PluginPath
	// (--plugin-path) is where the embedded service finds those binaries.
	Plugins    []string
	PluginPath PathList

	// Logger is built from Log by the rdmo binary before Run is called; it
	// is never nil inside a mode (App).
	Logger *zap.Logger
}

// DefaultConfig is the configuration before any flag or params file.
func DefaultConfig() Config {
	return Config{
		Log:            DefaultLogConfig(),
		OOBPort:        DefaultOOBPort,
		OOBProtocol:    OOBRDMO,
		AppendStrategy: DefaultAppendStrategy,
		Ops:            DefaultOps,
	}
}

// RegisterFlags adds -j/--json, the DOCA program flags (-d, -s, -m) and
// rdmo's flags (--oob-port, --urom, --append-strategy, --ops,
// --secret-file) to fs, bound to c. The log flags are separate (LogConfig).
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&c.ParamsFile, "json", "j", "", "Parse all command flags from an input json file")
	Annotate(fs, "json", GroupDOCAFlags, "<path>")
	fs.VarP((*nameValue)(&c.Device), "device", "d", "IB device name.")
	Annotate(fs, "device", GroupProgramFlags, "<IB device name>")
	fs.VarP((*nameValue)(&c.ServerName), "server-name", "s", "server name.")
	Annotate(fs, "server-name", GroupProgramFlags, "<server name>")
	fs.VarP(&c.Mode, "mode", "m", "Set mode type {server, client}")
	Annotate(fs, "mode", GroupProgramFlags, "{server, client}")

	fs.Var((*portValue)(&c.OOBPort), "oob-port", "TCP port of the out-of-band channel between server and client")
	Annotate(fs, "oob-port", GroupRDMOFlags, "<port>")
	fs.Var(&c.OOBProtocol, "oob-protocol", "Out-of-band protocol of -m client: rdmo, or doca to run the reference demo with DOCA's urom_rdmo exchange (the server tells them apart by itself)")
	Annotate(fs, "oob-protocol", GroupRDMOFlags, "{rdmo, doca}")
	fs.StringVar(&c.UROMAddress, "urom", c.UROMAddress, "UROM service address host:port (see rdmo dpu; "+BareUROMHelp+"); empty runs the service embedded in this process. Params file key: urom or urom-address")
	Annotate(fs, "urom", GroupRDMOFlags, "<host:port>")
	fs.Var(&c.AppendStrategy, "append-strategy", "How append treats a queue's tail: owned (the worker owns and caches it) or shared (other writers append to the same queue)")
	Annotate(fs, "append-strategy", GroupRDMOFlags, "{owned, shared}")
	fs.Var((*countValue)(&c.Ops), "ops", "Workload size: number of RDMO operations to issue")
	Annotate(fs, "ops", GroupRDMOFlags, "<N>")
	fs.StringVar(&c.SecretFile, "secret-file", c.SecretFile, "File holding the shared secret that authenticates server and client to each other, and the server and the UROM service at --urom (empty: no authentication)")
	Annotate(fs, "secret-file", GroupRDMOFlags, "<path>")
	fs.StringSliceVar(&c.Plugins, "plugins", nil, "Server: handlers the worker loads besides append, flush and scatter, ','-separated: built-ins by name (get, kv, ...), plugin binaries as plugin:NAME (empty: every built-in)")
	Annotate(fs, "plugins", GroupRDMOFlags, "<name[,name...]>")
	fs.Var(&pathListValue{p: &c.PluginPath}, "plugin-path", "Server with the embedded service: directories searched for rdmo-plugin-NAME binaries, ':'-separated; repeatable")
	Annotate(fs, "plugin-path", GroupRDMOFlags, "<dir[:dir...]>")
}

// Validate checks the values that single flags cannot: cross-flag rules,
// addresses, files, and the device (through ucx.ValidateDevice). With
// requireMode, -m/--mode must be set (the root command); bench allows an
// empty mode. Errors are usage errors.
func (c *Config) Validate(requireMode bool, ucx UCX) error {
	if !c.Log.Level.Valid() || !c.Log.SDKLevel.Valid() {
		return Usagef("invalid log level; valid levels: %s", validLogLevels())
	}
	switch c.Mode {
	case ModeServer, ModeClient:
	case "":
		if requireMode {
			return Usagef("no mode given: use -m/--mode {server, client} (or \"mode\" in the -j/--json params file)")
		}
	default:
		return UsageError(choiceError("mode", "modes", string(c.Mode), "server", "client"))
	}
	if c.Mode == ModeClient && strings.TrimSpace(c.ServerName) == "" {
		return Usagef("client mode needs -s/--server-name <server name> (the host running the server)")
	}
	if err := checkDevice(c.Device, ucx.ValidateDevice); err != nil {
		return err
	}
	if c.OOBPort == 0 {
		return Usagef("--oob-port: want a number from 1 to 65535")
	}
	if c.Ops < 1 {
		return Usagef("--ops: want a whole number of at least 1")
	}
	switch c.OOBProtocol {
	case OOBRDMO, "":
	case OOBDOCA:
		if c.Mode == ModeServer {
			return Usagef("--oob-protocol doca is for -m client: the server serves both protocols on its port and tells them apart by itself")
		}
		if c.SecretFile != "" {
			return Usagef("--oob-protocol doca has no authentication: it cannot be used with --secret-file")
		}
	default:
		return UsageError(choiceError("out-of-band protocol", "protocols", string(c.OOBProtocol), "rdmo", "doca"))
	}
	switch c.AppendStrategy {
	case AppendOwned, AppendShared:
	default:
		return UsageError(choiceError("append strategy", "strategies", string(c.AppendStrategy), "owned", "shared"))
	}
	if c.UROMAddress != "" {
		if err := checkHostPort("--urom", c.UROMAddress); err != nil {
			return err
		}
	}
	return checkFile("--secret-file", c.SecretFile)
}

// BareUROMHelp says what --urom given without a value means (see
// BareUROM).
const BareUROMHelp = "--urom alone: " + DefaultDPUListen + ", where rdmo dpu listens by default"

// BareUROM rewrites a command line's --urom without a value (the last
// argument, or followed by a flag) to --urom=DefaultDPUListen: the address
// `rdmo dpu` listens on by default. Everything after "--" stays as it is.
func BareUROM(args []string) []string {
	out := append([]string(nil), args...)
	for i, a := range out {
		if a == "--" {
			break
		}
		if a == "--urom" && (i+1 == len(out) || strings.HasPrefix(out[i+1], "-")) {
			out[i] = "--urom=" + DefaultDPUListen
		}
	}
	return out
}

// DPUConfig is the configuration of `rdmo dpu`, the UROM service daemon.
type DPUConfig struct {
	Log LogConfig

	ConfigFile  string   // --config: the params file that was applied, if any
	Listen      string   // --listen: host:port the service accepts hosts on
	PluginPath  PathList // --plugin-path: directories searched for plugins
	MaxWorkers  int      // --max-workers: worker processes the service may run at once
	MetricsAddr string   // --metrics-addr: host:port for metrics over HTTP ("" = off)
	SecretFile  string   // --secret-file: shared secret hosts must present ("" = none)

	// Worker: the limits of every worker process the service spawns (the
	// "worker" group of the --config file, or the --worker-* flags).
	Worker WorkerLimits

	Logger *zap.Logger // set before Run; never nil inside a mode (App)
}

// DefaultDPUConfig is the service configuration before flags and file.
func DefaultDPUConfig() DPUConfig {
	return DPUConfig{Log: DefaultLogConfig(), Listen: DefaultDPUListen, MaxWorkers: DefaultMaxWorkers, Worker: DefaultWorkerLimits()}
}

// RegisterFlags adds the service flags to fs, bound to c.
func (c *DPUConfig) RegisterFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.ConfigFile, "config", "", "Read the service flags from a JSON params file (same format as -j/--json; the worker limits also in a \"worker\" group: {\"worker\": {\"max-in-flight-per-rq\": 256}})")
	Annotate(fs, "config", GroupServiceFlags, "<path>")
	fs.StringVar(&c.Listen, "listen", c.Listen, "Address host:port the service accepts hosts on")
	Annotate(fs, "listen", GroupServiceFlags, "<host:port>")
	fs.Var(&pathListValue{p: &c.PluginPath}, "plugin-path", "Directories searched for plugins, ':'-separated; repeatable (empty: the built-in plugins)")
	Annotate(fs, "plugin-path", GroupServiceFlags, "<dir[:dir...]>")
	fs.Var((*countValue)(&c.MaxWorkers), "max-workers", "Most worker processes the service runs at once")
	Annotate(fs, "max-workers", GroupServiceFlags, "<N>")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "Serve /metrics, /healthz (liveness) and /readyz (readiness) over HTTP on host:port (empty: off)")
	Annotate(fs, "metrics-addr", GroupServiceFlags, "<host:port>")
	fs.StringVar(&c.SecretFile, "secret-file", c.SecretFile, "File holding the shared secret every host must prove before it is served; hosts use it with --secret-file (empty: any host that reaches --listen is served)")
	Annotate(fs, "secret-file", GroupServiceFlags, "<path>")
	c.Worker.RegisterFlags(fs)
}

// Validate checks the service configuration; errors are usage errors.
func (c *DPUConfig) Validate() error {
	if !c.Log.Level.Valid() || !c.Log.SDKLevel.Valid() {
		return Usagef("invalid log level; valid levels: %s", validLogLevels())
	}
	if err := checkListenAddr("--listen", c.Listen); err != nil {
		return err
	}
	if c.MetricsAddr != "" {
		if err := checkListenAddr("--metrics-addr", c.MetricsAddr); err != nil {
			return err
		}
	}
	if c.MaxWorkers < 1 {
		return Usagef("--max-workers: want a whole number of at least 1")
	}
	for _, dir := range c.PluginPath {
		st, err := os.Stat(dir)
		if err != nil {
			return Usagef("--plugin-path: %s: %v", dir, statReason(err))
		}
		if !st.IsDir() {
			return Usagef("--plugin-path: %s is not a directory", dir)
		}
	}
	if err := c.Worker.Validate(); err != nil {
		return err
	}
	return checkFile("--secret-file", c.SecretFile)
}

// PluginsConfig is the configuration of `rdmo plugins`.
type PluginsConfig struct {
	Log         LogConfig
	UROMAddress string      // --urom: the service to ask ("" = the embedded service)
	SecretFile  string      // --secret-file: the secret the service at --urom requires ("" = none)
	Logger      *zap.Logger // set before Run; never nil inside a mode (App)
}

// DefaultPluginsConfig is the plugins configuration before flags.
func DefaultPluginsConfig() PluginsConfig { return PluginsConfig{Log: DefaultLogConfig()} }

// RegisterFlags adds --urom and --secret-file to fs, bound to c.
func (c *PluginsConfig) RegisterFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.UROMAddress, "urom", c.UROMAddress, "UROM service address host:port to ask ("+BareUROMHelp+"); without --urom, lists the plugins built into this binary")
	Annotate(fs, "urom", GroupFlags, "<host:port>")
	fs.StringVar(&c.SecretFile, "secret-file", c.SecretFile, "File holding the shared secret the service at --urom requires (rdmo dpu --secret-file)")
	Annotate(fs, "secret-file", GroupFlags, "<path>")
}

// Validate checks the plugins configuration; errors are usage errors.
func (c *PluginsConfig) Validate() error {
	if c.UROMAddress != "" {
		if err := checkHostPort("--urom", c.UROMAddress); err != nil {
			return err
		}
	}
	return checkFile("--secret-file", c.SecretFile)
}

// WorkersConfig is the configuration of `rdmo workers`.
type WorkersConfig struct {
	Log         LogConfig
	UROMAddress string      // --urom: the service to ask (default DefaultDPUListen)
	SecretFile  string      // --secret-file: the secret the service at --urom requires ("" = none)
	Output      string      // --output: "table" (default) or "json"
	Logger      *zap.Logger // set before Run; never nil inside a mode (App)
}

// DefaultWorkersConfig is the workers configuration before flags: it
// asks the service at the address `rdmo dpu` listens on by default.
func DefaultWorkersConfig() WorkersConfig {
	return WorkersConfig{Log: DefaultLogConfig(), UROMAddress: DefaultDPUListen, Output: "table"}
}

// RegisterFlags adds --urom, --secret-file and -o/--output to fs, bound to c.
func (c *WorkersConfig) RegisterFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.UROMAddress, "urom", c.UROMAddress, "UROM service address host:port to ask (rdmo dpu --listen)")
	Annotate(fs, "urom", GroupFlags, "<host:port>")
	fs.StringVar(&c.SecretFile, "secret-file", c.SecretFile, "File holding the shared secret the service at --urom requires (rdmo dpu --secret-file)")
	Annotate(fs, "secret-file", GroupFlags, "<path>")
	fs.StringVarP(&c.Output, "output", "o", c.Output, "Output format: table (for people) or json (one array, for scripts)")
	Annotate(fs, "output", GroupFlags, "{table, json}")
}

// Validate checks the workers configuration; errors are usage errors.
func (c *WorkersConfig) Validate() error {
	if !c.Log.Level.Valid() || !c.Log.SDKLevel.Valid() {
		return Usagef("invalid log level; valid levels: %s", validLogLevels())
	}
	if c.UROMAddress == "" {
		return Usagef("--urom: empty address; want the host:port of the UROM service (rdmo dpu --listen; default %s)", DefaultDPUListen)
	}
	if err := checkHostPort("--urom", c.UROMAddress); err != nil {
		return err
	}
	switch c.Output {
	case "table", "json":
	default:
		return UsageError(choiceError("output format", "formats", c.Output, "table", "json"))
	}
	return checkFile("--secret-file", c.SecretFile)
}

func checkDevice(name string, validate func(string) error) error {
	if name == "" {
		return nil // not given: UCX chooses
	}
	if strings.TrimSpace(name) == "" {
		return Usagef("-d/--device: empty IB device name")
	}
	if len(name) >= MaxDeviceNameLen {
		return Usagef("-d/--device: IB device name longer than %d bytes", MaxDeviceNameLen-1)
	}
	if validate != nil {
		if err := validate(name); err != nil {
			return Usagef("-d/--device: %s", oneLine(err))
		}
	}
	return nil
}

func checkHostPort(flag, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return Usagef("%s: invalid address %q; want host:port", flag, addr)
	}
	_ = host
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return Usagef("%s: invalid port in %q; want a number from 1 to 65535", flag, addr)
	}
	return nil
}

// checkListenAddr is checkHostPort for an address to listen on, where port 0
// asks for any free port (an embedding host starts `rdmo dpu --listen
// 127.0.0.1:0` and reads the address the service announces).
func checkListenAddr(flag, addr string) error {
	if host, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
		_ = host
		return nil
	}
	return checkHostPort(flag, addr)
}

func checkFile(flag, path string) error {
	if path == "" {
		return nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return Usagef("%s: %s: %v", flag, path, statReason(err))
	}
	if st.IsDir() {
		return Usagef("%s: %s is a directory", flag, path)
	}
	return nil
}

func statReason(err error) error {
	var perr *os.PathError
	if errors.As(err, &perr) {
		return perr.Err
	}
	return err
}

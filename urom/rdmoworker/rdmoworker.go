// Package rdmoworker is the RDMO component as a UROM worker: the built-in
// op handlers, the factory a worker process builds its dpu.Worker with, and
// the handler that runs a host's commands (rdmo/command) on it.
package rdmoworker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/dpu"
	"github.com/openrdmo/rdmo/internal/limits"
	appendop "github.com/openrdmo/rdmo/plugins/append"
	"github.com/openrdmo/rdmo/plugins/flush"
	"github.com/openrdmo/rdmo/plugins/ops"
	"github.com/openrdmo/rdmo/plugins/scatter"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/rdmo/plugin/pluginhost"
	"github.com/openrdmo/rdmo/rdmo/plugin/wasmhost"
	"github.com/openrdmo/rdmo/urom"
	"github.com/openrdmo/rdmo/urom/service"
)

// Settings of every worker of a service (service.Config.WorkerSettings, set
// by the operator: `rdmo dpu`'s "worker" section), named like the dpu.Config
// limit they set (the worker limits table, internal/limits). Values are
// decimal numbers (drain-timeout a Go duration, "5s"); 0 (or a missing key)
// is the dpu default, a negative value or an unknown key makes the worker
// refuse its spec.
const (
	SettingMaxInFlightPerRQ    = limits.KeyMaxInFlightPerRQ    // dpu.Config.MaxInFlightPerRQ
	SettingMaxClients          = limits.KeyMaxClients          // dpu.Config.MaxClients
	SettingMaxRQsPerClient     = limits.KeyMaxRQsPerClient     // dpu.Config.MaxRQsPerClient
	SettingMaxRegionsPerClient = limits.KeyMaxRegionsPerClient // dpu.Config.MaxRegionsPerClient
	SettingMaxRendezvousFetch  = limits.KeyMaxRendezvousFetch  // dpu.Config.MaxRendezvousFetch
	SettingMaxEagerPayload     = limits.KeyMaxEagerPayload     // dpu.Config.MaxEagerPayload
	SettingMaxBatch            = limits.KeyMaxBatch            // dpu.Config.MaxBatch
	SettingDrainTimeout        = limits.KeyDrainTimeout        // dpu.Config.DrainTimeout
	SettingMaxWasmMemory       = limits.KeyMaxWasmMemory       // wasmhost.LoadOptions.MemoryLimit (not a dpu.Config field)
)

// ApplySettings sets the limits of cfg from a worker's settings
// (urom.WorkerSpec.Settings); see the Setting* keys.
func ApplySettings(cfg *dpu.Config, settings map[string]string) error {
	return limits.Apply(cfg, settings)
}

type builtin struct {
	info rdmo.HandlerInfo
	make func(cfg map[string]string) (rdmo.Handler, error)
}

var builtins = []builtin{
	{
		info: appendop.New(appendop.Options{}).Info(),
		make: func(cfg map[string]string) (rdmo.Handler, error) {
			s, err := ParseStrategy(cfg[command.ConfigAppendStrategy])
			if err != nil {
				return nil, err
			}
			return appendop.New(appendop.Options{Strategy: s}), nil
		},
	},
	{info: flush.New().Info(), make: func(map[string]string) (rdmo.Handler, error) { return flush.New(), nil }},
	{info: scatter.New(scatter.Options{}).Info(), make: func(map[string]string) (rdmo.Handler, error) {
		return scatter.New(scatter.Options{}), nil
	}},
}

// The operation pack (plugins/ops) is built in too. Its op ids (32..39)
// are its own, so the reference ops behave as before; a worker spawned
// without plugin names serves them besides append, flush and scatter.
func init() {
	for _, h := range ops.Handlers() {
		name := h.Info().Name
		builtins = append(builtins, builtin{info: h.Info(), make: func(map[string]string) (rdmo.Handler, error) {
			return ops.ByName(name), nil
		}})
	}
}

// ParseStrategy reads an append strategy name ("" is owned).
func ParseStrategy(s string) (appendop.Strategy, error) {
	switch strings.ToLower(s) {
	case "", "owned":
		return appendop.Owned, nil
	case "shared":
		return appendop.Shared, nil
	}
	return 0, fmt.Errorf("unknown append strategy %q (valid: owned, shared)", s)
}

// Builtins describes the handlers linked into the worker.
func Builtins() []urom.PluginInfo {
	var out []urom.PluginInfo
	for _, b := range builtins {
		out = append(out, urom.PluginInfo{Name: b.info.Name, Version: b.info.Version, Ops: b.info.Ops, OpNames: b.info.OpNames})
	}
	return out
}

// Probe starts a plugin binary once (or compiles and instantiates a
// WebAssembly module, rdmo-plugin-NAME.wasm) to read its name, version and
// ops.
func Probe(ctx context.Context, path string) (urom.PluginInfo, error) {
	if strings.HasSuffix(path, wasmhost.Suffix) {
		info, err := wasmhost.Probe(ctx, path, wasmhost.LoadOptions{CacheDir: wasmhost.DefaultCacheDir()})
		if err != nil {
			return urom.PluginInfo{}, err
		}
		return urom.PluginInfo{Name: info.Name, Version: info.Version, Ops: info.Ops, Path: path, OpNames: info.OpNames}, nil
	}
	h, err := pluginhost.Load(ctx, path, pluginhost.LoadOptions{})
	if err != nil {
		return urom.PluginInfo{}, err
	}
	defer h.Close()
	info := h.Info()
	return urom.PluginInfo{Name: info.Name, Version: info.Version, Ops: info.Ops, Path: path, OpNames: info.OpNames}, nil
}

// Factory builds a worker process's RDMO worker from its spec: built-in
// handlers linked in, the others loaded from their plugin binaries.
func Factory(ctx context.Context, spec urom.WorkerSpec, log *zap.Logger) (service.CommandHandler, error) {
	c := &commands{log: log}
	var handlers []rdmo.Handler
	for _, p := range spec.Plugins {
		if p.Builtin {
			b := findBuiltin(p.Name)
			if b == nil {
				c.closePlugins()
				return nil, fmt.Errorf("no built-in plugin %q in this worker", p.Name)
			}
			h, err := b.make(spec.Config)
			if err != nil {
				c.closePlugins()
				return nil, err
			}
			handlers = append(handlers, h)
			continue
		}
		name := p.Name
		if strings.HasSuffix(p.Path, wasmhost.Suffix) {
			h, err := loadWasm(ctx, p, spec.Settings, log)
			if err != nil {
				c.closePlugins()
				return nil, err
			}
			c.closers = append(c.closers, h)
			handlers = append(handlers, h)
			continue
		}
		// go-plugin's own lines carry a "plugin" key already: a second
		// one would be a duplicate JSON key.
		h, err := pluginhost.Load(ctx, p.Path, pluginhost.LoadOptions{
			Logger: log.With(zap.String("plugin_name", p.Name)), Name: p.Name, Version: p.Version,
			Env: configEnv(spec.Config),
			// The service counts these beyond this worker's life.
			OnFailure: func(string) { service.ReportPluginFailed(ctx, name) },
			OnRestart: func() { service.ReportPluginRestarted(ctx, name) },
		})
		if err != nil {
			c.closePlugins()
			return nil, fmt.Errorf("load plugin %s: %w", p.Path, err)
		}
		c.plugins = append(c.plugins, h)
		handlers = append(handlers, h)
	}
	// A worker that can hear no local peer any more (a shared-memory
	// receive queue blocked by a peer that died mid-send) ends its
	// process: its peers then see it gone instead of waiting for good.
	cfg := dpu.Config{Handlers: handlers, Logger: log, OnFatal: func(err error) { service.ReportFatal(ctx, err) }}
	if err := ApplySettings(&cfg, spec.Settings); err != nil {
		c.closePlugins()
		return nil, err
	}
	w, err := dpu.New(cfg)
	if err != nil {
		c.closePlugins()
		return nil, err
	}
	c.w = w
	return c, nil
}

// loadWasm loads a WebAssembly handler module into this worker process,
// its instances' memory capped by the max-wasm-memory setting.
func loadWasm(ctx context.Context, p urom.PluginInfo, settings map[string]string, log *zap.Logger) (*wasmhost.Handler, error) {
	var limit uint64
	if v := strings.TrimSpace(settings[SettingMaxWasmMemory]); v != "" {
		n, err := strconv.Atoi(v) // ApplySettings checked it
		if err != nil || n < 0 {
			return nil, fmt.Errorf("worker setting %s: invalid limit %q", SettingMaxWasmMemory, v)
		}
		limit = uint64(n)
	}
	name := p.Name
	h, err := wasmhost.Load(ctx, p.Path, wasmhost.LoadOptions{
		Logger: log.With(zap.String("plugin_name", p.Name)), Name: p.Name, Version: p.Version,
		MemoryLimit: limit, CacheDir: wasmhost.DefaultCacheDir(),
		OnFailure: func(string) { service.ReportPluginFailed(ctx, name) },
	})
	if err != nil {
		return nil, fmt.Errorf("load wasm module %s: %w", p.Path, err)
	}
	return h, nil
}

// configEnv passes the spawn configuration to plugin processes as
// RDMO_CONFIG_<KEY> variables (dashes become underscores).
func configEnv(cfg map[string]string) []string {
	var env []string
	for k, v := range cfg {
		env = append(env, "RDMO_CONFIG_"+strings.ToUpper(strings.ReplaceAll(k, "-", "_"))+"="+v)
	}
	return env
}

func findBuiltin(name string) *builtin {
	for i := range builtins {
		if builtins[i].info.Name == name {
			return &builtins[i]
		}
	}
	return nil
}

type commands struct {
	w       *dpu.Worker
	plugins []*pluginhost.Handler
	closers []*wasmhost.Handler
	log     *zap.Logger
}

func (c *commands) closePlugins() {
	for _, p := range c.plugins {
		p.Close()
	}
	for _, m := range c.closers {
		m.Close()
	}
}

func decode[T any](body msgpack.RawMessage) (T, error) {
	var v T
	err := msgpack.Unmarshal(body, &v)
	return v, err
}

// Handle runs one command. A command the worker refuses still answers with
// its Notification (Status says why): the host turns it into a typed error.
func (c *commands) Handle(ctx context.Context, kind string, body msgpack.RawMessage) (any, error) {
	var cmd command.Command
	var err error
	switch kind {
	case command.KindClientInit:
		cmd, err = decode[command.ClientInit](body)
	case command.KindRQCreate:
		cmd, err = decode[command.RQCreate](body)
	case command.KindRQDestroy:
		cmd, err = decode[command.RQDestroy](body)
	case command.KindMRReg:
		cmd, err = decode[command.MRReg](body)
	case command.KindMRDereg:
		cmd, err = decode[command.MRDereg](body)
	case command.KindStats:
		return c.w.Stats(), nil
	case command.KindRQFlushWait:
		fw, err := decode[command.FlushWait](body)
		if err != nil {
			return nil, fmt.Errorf("malformed %s: %w", kind, err)
		}
		wait := fw.Wait
		if wait <= 0 {
			wait = command.DefaultFlushWait
		}
		wctx, cancel := context.WithTimeout(ctx, min(wait, command.MaxFlushWait))
		ev, err := c.w.WaitFlush(wctx, fw.Client, fw.RQ, fw.After)
		cancel()
		if err != nil && !(errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil) {
			return nil, err
		}
		return ev, nil
	default:
		return nil, fmt.Errorf("unknown RDMO command %q", kind)
	}
	if err != nil {
		return nil, fmt.Errorf("malformed %s: %w", kind, err)
	}
	n, err := c.w.Do(ctx, cmd)
	var ce *command.CommandError
	if err != nil && !errors.As(err, &ce) {
		return nil, err
	}
	return n, nil
}

func (c *commands) Close() error {
	err := c.w.Close()
	c.closePlugins()
	return err
}

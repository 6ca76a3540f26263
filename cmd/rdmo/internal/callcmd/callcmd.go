// Package callcmd is the rdmo binary's `rdmo call`: it sets up a target (a
// registered region, a worker) and an initiator against a UROM service and
// calls one op, printing each answer's status, data and value.
package callcmd

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/cli"
	"github.com/openrdmo/rdmo/host/initiator"
	"github.com/openrdmo/rdmo/host/target"
	"github.com/openrdmo/rdmo/rdmo"
	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/urom"
)

// Config is `rdmo call`'s command line.
type Config struct {
	UROM       string   // --urom: a running service; empty: an embedded one
	SecretFile string   // --secret-file
	PluginPath []string // --plugin-path: the embedded service's plugin path
	Plugins    []string // --plugins: what the worker loads (target.Options.Plugins)
	Op         string   // --op NAME|ID
	Sub        string   // --sub: sub-header as u64 words
	SubHex     string   // --sub-hex: sub-header as hex
	PayloadHex string   // --payload-hex
	U64        string   // --u64: payload as u64 words
	Count      int      // --count
	RegionSize int      // --region-size
	Fill       string   // --fill: the region's first u64 words before the calls
	Timeout    time.Duration
}

// Command is the `rdmo call` subcommand; logCfg is the root's log flags.
func Command(stdout, stderr io.Writer, logCfg *cli.LogConfig, ucx cli.UCX) *cobra.Command {
	cfg := Config{Count: 1, RegionSize: 4096, Timeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "call",
		Short: "Call one op against a UROM service and print the answers",
		Long: "Sets up a target (a region of --region-size bytes, a worker on the UROM service at --urom,\n" +
			"or on an embedded one) and an initiator, calls --op --count times and prints each answer:\n" +
			"status, value (decimal and hex) and data (hex, and as u64 when 8 bytes).\n\n" +
			"--sub gives the sub-header as comma-separated u64 words; the words region and addr[+N]\n" +
			"stand for the registered region's id and an address in it:\n\n" +
			"  rdmo call --op fetch-add --sub region,addr,5 --count 3     # ops pack, op 33\n" +
			"  rdmo call --plugin-path DIR --plugins wasm:counter --op 16 --sub addr,region,1",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := cli.SetupLogging(*logCfg, stderr, ucx)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			return Run(cmd.Context(), cfg, stdout, log)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfg.UROM, "urom", "", "UROM service host:port to use; empty starts an embedded one (this binary's rdmo dpu)")
	fs.StringVar(&cfg.SecretFile, "secret-file", "", "File holding the shared secret the service at --urom requires")
	fs.StringSliceVar(&cfg.PluginPath, "plugin-path", nil, "Embedded service: directories searched for rdmo-plugin-NAME binaries and .wasm modules")
	fs.StringSliceVar(&cfg.Plugins, "plugins", nil, "Handlers the worker loads besides the built-in ones (e.g. plugin:counter, wasm:counter); empty: every built-in")
	fs.StringVar(&cfg.Op, "op", "", "Op to call: its id (>= 16) or name (fetch-add, kv-insert, a plugin's op name or handler name)")
	fs.StringVar(&cfg.Sub, "sub", "", "Sub-header as comma-separated u64 words; region and addr[+N] stand for the region's id and address")
	fs.StringVar(&cfg.SubHex, "sub-hex", "", "Sub-header as hex bytes (instead of --sub)")
	fs.StringVar(&cfg.PayloadHex, "payload-hex", "", "Eager payload as hex bytes")
	fs.StringVar(&cfg.U64, "u64", "", "Eager payload as comma-separated u64 words (instead of --payload-hex)")
	fs.IntVar(&cfg.Count, "count", cfg.Count, "Number of calls, one after the other")
	fs.IntVar(&cfg.RegionSize, "region-size", cfg.RegionSize, "Bytes of the target region")
	fs.StringVar(&cfg.Fill, "fill", "", "The region's first u64 words before the calls (comma-separated; addr[+N] allowed)")
	cli.DurationVar(fs, &cfg.Timeout, "timeout", "Bound of the whole run: "+cli.DurationHelp) // the rule of every duration flag
	return cmd
}

// Run runs `rdmo call`.
func Run(ctx context.Context, cfg Config, out io.Writer, log *zap.Logger) error {
	if cfg.Op == "" {
		return cli.Usagef("--op: required (an op id >= 16 or an op name)")
	}
	if cfg.Count < 1 || cfg.RegionSize < 8 {
		return cli.Usagef("--count must be at least 1 and --region-size at least 8")
	}
	if cfg.Sub != "" && cfg.SubHex != "" || cfg.PayloadHex != "" && cfg.U64 != "" {
		return cli.Usagef("give --sub or --sub-hex, and --payload-hex or --u64, not both")
	}
	secret, err := cli.LoadSecret(cfg.SecretFile)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	op, err := resolveOp(ctx, cfg, secret, log)
	if err != nil {
		return err
	}
	payload, err := parsePayload(cfg)
	if err != nil {
		return err
	}

	local, err := target.NewLocal(target.LocalOptions{Logger: log})
	if err != nil {
		return err
	}
	defer local.Close()
	mem, err := local.Allocate(cfg.RegionSize)
	if err != nil {
		return err
	}
	local.Start()
	topts := target.Options{Address: local.Address(), Plugins: cfg.Plugins, Logger: log, ServiceAddress: cfg.UROM, Secret: secret}
	if cfg.UROM == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		argv := []string{exe, "dpu"}
		for _, d := range cfg.PluginPath {
			argv = append(argv, "--plugin-path", d)
		}
		topts.Embedded = target.EmbeddedOptions{Command: argv, Logger: log}
	}
	tg, err := target.New(ctx, topts)
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	defer tg.Close()
	reg, err := tg.Register(ctx, mem)
	if err != nil {
		return fmt.Errorf("register the region: %w", err)
	}
	words := wordEnv{region: uint64(reg.ID), addr: reg.Base}
	if cfg.Fill != "" {
		fill, err := words.parse(cfg.Fill)
		if err != nil {
			return cli.Usagef("--fill: %v", err)
		}
		if len(fill)*8 > cfg.RegionSize {
			return cli.Usagef("--fill: %d words do not fit a region of %d bytes", len(fill), cfg.RegionSize)
		}
		for i, w := range fill {
			binary.LittleEndian.PutUint64(mem.Bytes()[8*i:], w)
		}
	}
	sub, err := parseSub(cfg, words)
	if err != nil {
		return err
	}
	caps := tg.WorkerCapabilities()
	in, err := initiator.New(initiator.Options{WorkerAddress: tg.WorkerAddress(), ClientID: tg.ClientID(), Logger: log,
		Aggregate: initiator.AggregateSupported(caps), GroupAcks: initiator.AckGroupSupported(caps),
		LargeBatches: initiator.LargeBatchSupported(caps), LargeEager: initiator.LargeEagerSupported(caps)})
	if err != nil {
		return fmt.Errorf("initiator: %w", err)
	}
	defer in.Close()
	if _, err := tg.CreateRQ(ctx, in.Address()); err != nil {
		return fmt.Errorf("request queue: %w", err)
	}
	fmt.Fprintf(out, "op %s on region %d [%#x, +%d), sub-header %s, payload %d bytes\n",
		rdmo.OpName(op), reg.ID, reg.Base, cfg.RegionSize, hexOr(sub), len(payload))
	failed, start := 0, time.Now()
	for i := range cfg.Count {
		res, err := in.Call(ctx, op, sub, payload)
		var re *initiator.RequestError
		switch {
		case errors.As(err, &re):
			failed++
			fmt.Fprintf(out, "call %d: status %s (%d): %s\n", i+1, re.Status.Name(), uint32(re.Status), re.Detail)
		case err != nil:
			return fmt.Errorf("call %d: %w", i+1, err)
		default:
			line := fmt.Sprintf("call %d: status ok value %d (%#x) data %s", i+1, res.Value, res.Value, hexOr(res.Data))
			if len(res.Data) == 8 {
				line += fmt.Sprintf(" (u64 %d)", binary.LittleEndian.Uint64(res.Data))
			}
			fmt.Fprintln(out, line)
		}
	}
	took := time.Since(start)
	fmt.Fprintf(out, "region's first u64 after the calls: %d\n", binary.LittleEndian.Uint64(mem.Bytes()))
	fmt.Fprintf(out, "%d calls in %v (%.1f µs per call, printing included)\n", cfg.Count, took.Round(time.Microsecond), float64(took.Microseconds())/float64(cfg.Count))
	if failed > 0 {
		return fmt.Errorf("%d of %d calls failed", failed, cfg.Count)
	}
	return nil
}

func hexOr(b []byte) string {
	if len(b) == 0 {
		return "-"
	}
	return hex.EncodeToString(b)
}

// resolveOp reads --op: an id, a name this binary knows (rdmo.DefineOp:
// the operation pack), or an op or handler name the service lists.
func resolveOp(ctx context.Context, cfg Config, secret []byte, log *zap.Logger) (uint32, error) {
	if n, err := strconv.ParseUint(cfg.Op, 0, 32); err == nil {
		if !rdmo.IsUserOp(uint32(n)) {
			return 0, cli.Usagef("--op %s: not a user op (>= %d); the reference ops have their own tools", cfg.Op, rdmo.OpUserBase)
		}
		return uint32(n), nil
	}
	for op := rdmo.OpUserBase; op < 1<<12; op++ {
		if name, ok := rdmo.DefinedOpName(op); ok && name == cfg.Op {
			return op, nil
		}
	}
	var plugins []urom.PluginInfo
	if cfg.UROM != "" {
		c, err := urom.Dial(ctx, cfg.UROM, urom.ClientOptions{ComponentVersion: command.ComponentVersion, Secret: secret, Logger: log})
		if err != nil {
			return 0, fmt.Errorf("UROM service at %s: %w", cfg.UROM, err)
		}
		plugins, err = c.Plugins(ctx)
		c.Close()
		if err != nil {
			return 0, err
		}
	}
	for _, p := range plugins {
		for op, name := range p.OpNames {
			if name == cfg.Op {
				return op, nil
			}
		}
		if p.Name == cfg.Op && len(p.Ops) == 1 && rdmo.IsUserOp(p.Ops[0]) {
			return p.Ops[0], nil
		}
	}
	where := "this binary's ops"
	if cfg.UROM != "" {
		where += " and the service's plugins"
	} else {
		where += " (give the op id for a plugin's op with an embedded service)"
	}
	return 0, cli.Usagef("--op %s: no such op in %s", cfg.Op, where)
}

// wordEnv resolves the symbolic words of --sub and --fill.
type wordEnv struct{ region, addr uint64 }

func (e wordEnv) parse(s string) ([]uint64, error) {
	var out []uint64
	for _, w := range strings.Split(s, ",") {
		w = strings.TrimSpace(w)
		switch {
		case w == "region":
			out = append(out, e.region)
		case w == "addr":
			out = append(out, e.addr)
		case strings.HasPrefix(w, "addr+"):
			n, err := strconv.ParseUint(w[5:], 0, 64)
			if err != nil {
				return nil, fmt.Errorf("%q: want addr+N", w)
			}
			out = append(out, e.addr+n)
		default:
			n, err := strconv.ParseUint(w, 0, 64)
			if err != nil {
				return nil, fmt.Errorf("%q: want a u64, region, addr or addr+N", w)
			}
			out = append(out, n)
		}
	}
	return out, nil
}

func parseSub(cfg Config, e wordEnv) ([]byte, error) {
	if cfg.SubHex != "" {
		b, err := hex.DecodeString(cfg.SubHex)
		if err != nil {
			return nil, cli.Usagef("--sub-hex: %v", err)
		}
		return b, nil
	}
	if cfg.Sub == "" {
		return nil, nil
	}
	ws, err := e.parse(cfg.Sub)
	if err != nil {
		return nil, cli.Usagef("--sub: %v", err)
	}
	var b []byte
	for _, w := range ws {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return b, nil
}

func parsePayload(cfg Config) ([]byte, error) {
	if cfg.PayloadHex != "" {
		b, err := hex.DecodeString(cfg.PayloadHex)
		if err != nil {
			return nil, cli.Usagef("--payload-hex: %v", err)
		}
		return b, nil
	}
	if cfg.U64 == "" {
		return nil, nil
	}
	var b []byte
	for _, w := range strings.Split(cfg.U64, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(w), 0, 64)
		if err != nil {
			return nil, cli.Usagef("--u64: %q is not a u64", w)
		}
		b = binary.LittleEndian.AppendUint64(b, n)
	}
	return b, nil
}

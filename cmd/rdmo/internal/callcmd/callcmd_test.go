package callcmd

import (
	"context"
	"encoding/binary"
	"testing"

	"go.uber.org/zap"

	"github.com/openrdmo/rdmo/cmd/rdmo/internal/cli"
	_ "github.com/openrdmo/rdmo/plugins/ops" // names fetch-add
)

func TestWords(t *testing.T) {
	e := wordEnv{region: 3, addr: 0x1000}
	got, err := e.parse("region, addr,addr+8,0x10,5")
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{3, 0x1000, 0x1008, 16, 5}
	if len(got) != len(want) {
		t.Fatalf("parse = %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("parse = %v, want %v", got, want)
		}
	}
	for _, bad := range []string{"", "addr+x", "-1", "regions"} {
		if _, err := e.parse(bad); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
	sub, err := parseSub(Config{Sub: "region,addr,1"}, e)
	if err != nil || len(sub) != 24 || binary.LittleEndian.Uint64(sub[8:]) != 0x1000 {
		t.Fatalf("parseSub = %x, %v", sub, err)
	}
	p, err := parsePayload(Config{U64: "1,2"})
	if err != nil || len(p) != 16 || p[8] != 2 {
		t.Fatalf("parsePayload = %x, %v", p, err)
	}
}

func TestOpAndUsage(t *testing.T) {
	ctx := context.Background()
	for arg, want := range map[string]uint32{"16": 16, "0x21": 33, "fetch-add": 33, "kv-insert": 39} {
		if op, err := resolveOp(ctx, Config{Op: arg}, nil, zap.NewNop()); err != nil || op != want {
			t.Errorf("--op %s: %d, %v; want %d", arg, op, err, want)
		}
	}
	for _, cfg := range []Config{
		{Op: "1", Count: 1, RegionSize: 8},       // a reference op
		{Op: "no-such", Count: 1, RegionSize: 8}, // unknown name
		{Count: 1, RegionSize: 8},                // no --op
		{Op: "16", Count: 0, RegionSize: 8},      // no call
		{Op: "16", Count: 1, RegionSize: 8, PayloadHex: "00", U64: "1"},
	} {
		if err := Run(ctx, cfg, nil, zap.NewNop()); err == nil || cli.ExitCode(err) != 2 {
			t.Errorf("Run(%+v) = %v, want a usage error", cfg, err)
		}
	}
}

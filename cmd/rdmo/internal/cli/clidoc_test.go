package cli

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// docs/CLI.md names every key of both params files, and its two sample
// files are accepted as written.
func TestCLIDoc(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	blocks := regexp.MustCompile("(?s)```jsonc\n(.*?)```").FindAllStringSubmatch(doc, -1)
	if len(blocks) != 2 {
		t.Fatalf("docs/CLI.md: %d jsonc samples, want 2 (-j, then rdmo dpu --config)", len(blocks))
	}

	fs, cfg := newRootFlags(t)
	pf, err := ParseParams("docs/CLI.md -j sample", []byte(blocks[0][1]))
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Apply(fs); err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != ModeServer || cfg.Log.SDKLevel != LogWarning || cfg.UROMAddress != "192.168.100.2:18516" || len(cfg.Plugins) != 2 {
		t.Errorf("the -j sample gives %+v", *cfg)
	}
	for _, k := range FileKeys(fs) {
		if _, ok := pf.Get(k); !ok && KeyAliases[k] == "" {
			t.Errorf("the -j sample lacks key %q", k)
		}
		if !strings.Contains(doc, "`"+k+"`") {
			t.Errorf("docs/CLI.md does not name the -j key %q", k)
		}
	}

	dfs, dcfg := newDPUFlags(t)
	pf, err = ParseParams("docs/CLI.md --config sample", []byte(blocks[1][1]))
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Apply(dfs); err != nil {
		t.Fatal(err)
	}
	if dcfg.Worker.MaxInFlightPerRQ != 256 || dcfg.Worker.DrainTimeout != 10*time.Second || dcfg.MetricsAddr != "0.0.0.0:9116" {
		t.Errorf("the --config sample gives %+v", *dcfg)
	}
	// The worker limits are listed by rdmo dpu -h and README, not here.
	for _, k := range FileKeys(dfs) {
		if !strings.HasPrefix(k, WorkerFlagPrefix) && !strings.Contains(doc, "`"+k+"`") {
			t.Errorf("docs/CLI.md does not name the --config key %q", k)
		}
	}
}

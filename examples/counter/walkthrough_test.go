package counter_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// TestWalkthrough runs the commands of docs/PLUGINS.md's walkthrough (the
// sh block after "<!-- walkthrough -->") as they stand: build rdmo, the
// plugin and counter-demo, then run the demo, which loads the plugin into
// an embedded service's worker and calls it. So the walkthrough cannot rot.
func TestWalkthrough(t *testing.T) {
	doc, err := os.ReadFile("../../docs/PLUGINS.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- walkthrough -->\\s*```sh\\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/PLUGINS.md has no walkthrough block")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var all []byte
	for _, line := range strings.Split(strings.TrimSpace(string(m[1])), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmd := exec.CommandContext(ctx, "sh", "-c", line)
		cmd.Dir = "../.."
		cmd.Env = append(append(os.Environ(), "DIR="+dir), ucptest.Transports[0].Env()...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		all = append(all, out...)
	}
	// The demo runs once per form (a plugin process, a WebAssembly
	// module): each time the counter holds one increment per call.
	forms := map[string]bool{}
	for _, got := range regexp.MustCompile(`counter \((\w+)\): (\d+) after (\d+) calls, \d+ calls/s`).FindAllSubmatch(all, -1) {
		if !bytes.Equal(got[2], got[3]) {
			t.Fatalf("demo output %q", got[0])
		}
		forms[string(got[1])] = true
	}
	if !forms["plugin"] || !forms["wasm"] {
		t.Fatalf("the walkthrough ran the demo for %v, want plugin and wasm; output:\n%s", forms, all)
	}
}

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
	var last []byte
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
		last = out
	}
	// The last command is the demo: the counter holds one increment per call.
	got := regexp.MustCompile(`counter: (\d+) after (\d+) calls, \d+ calls/s`).FindSubmatch(last)
	if got == nil || !bytes.Equal(got[1], got[2]) {
		t.Fatalf("demo output %q", last)
	}
}

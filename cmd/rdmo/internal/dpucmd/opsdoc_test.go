package dpucmd_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/openrdmo/rdmo/rdmo/command"
	"github.com/openrdmo/rdmo/urom/rdmoworker"
	"github.com/openrdmo/rdmo/urom/service"
)

type docMetric struct {
	typ    string
	labels []string
}

// readOperationsDoc reads the metrics table of docs/OPERATIONS.md.
func readOperationsDoc(t *testing.T) map[string]docMetric {
	t.Helper()
	b, err := os.ReadFile("../../../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "<!-- metrics table")
	end := strings.Index(text, "<!-- end of metrics table -->")
	if start < 0 || end < start {
		t.Fatal("docs/OPERATIONS.md has no metrics table between its markers")
	}
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\| (counter|gauge|histogram) \\|([^|]*)\\| .+ \\|$")
	out := map[string]docMetric{}
	for _, line := range strings.Split(text[start:end], "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("docs/OPERATIONS.md: malformed metrics row %q", line)
			continue
		}
		var labels []string
		for _, l := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(m[3], -1) {
			labels = append(labels, l[1])
		}
		if _, dup := out[m[1]]; dup {
			t.Errorf("docs/OPERATIONS.md lists %s twice", m[1])
		}
		out[m[1]] = docMetric{typ: m[2], labels: labels}
	}
	return out
}

// docs/OPERATIONS.md lists exactly the series the service (with the RDMO
// component, as `rdmo dpu` runs it) describes, with their labels; that
// what it serves has the documented types is TestOperatorView's part.
func TestOperationsDocListsEveryMetric(t *testing.T) {
	doc := readOperationsDoc(t)
	svc, err := service.New(context.Background(), service.Config{
		Listen: "127.0.0.1:0", Builtins: rdmoworker.Builtins(), Metrics: rdmoworker.Metrics(),
		WorkerCommand: []string{"true"}, ComponentVersion: command.ComponentVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ch := make(chan *prometheus.Desc)
	go func() {
		service.MetricsCollector(svc).Describe(ch)
		close(ch)
	}()
	desc := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	described := map[string]bool{}
	for d := range ch {
		m := desc.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read descriptor %s", d)
		}
		name := m[1]
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		described[name] = true
		dm, ok := doc[name]
		if !ok {
			t.Errorf("the service describes %s (labels %v), which docs/OPERATIONS.md does not list", name, labels)
			continue
		}
		if !slices.Equal(dm.labels, labels) {
			t.Errorf("%s: labels %v, docs/OPERATIONS.md says %v", name, labels, dm.labels)
		}
	}
	for name := range doc {
		if !described[name] {
			t.Errorf("docs/OPERATIONS.md lists %s, which the service does not describe", name)
		}
	}
}

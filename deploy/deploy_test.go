// Package deploy_test checks the deployment files against the rdmo binary,
// so a renamed flag or config key fails here instead of on an operator's
// machine.
package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/openrdmo/rdmo/internal/testproc"
	"go.yaml.in/yaml/v3"
)

// dpuFlags builds bin/rdmo and returns the long flags `rdmo dpu -h` lists.
func dpuFlags(t *testing.T) map[string]bool {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rdmo")
	if err := testproc.GoBuild(context.Background(), bin, "github.com/openrdmo/rdmo/cmd/rdmo"); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "dpu", "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("rdmo dpu -h: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["listen"] || !flags["secret-file"] {
		t.Fatalf("rdmo dpu -h lists no --listen/--secret-file; parsed %v from:\n%s", flags, out)
	}
	return flags
}

// checkArgs fails the test for every --flag in args that rdmo dpu lacks,
// and returns the flags used.
func checkArgs(t *testing.T, where string, args []string, known map[string]bool) map[string]string {
	t.Helper()
	used := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			val = args[i+1]
			i++
		}
		if !known[name] {
			t.Errorf("%s uses --%s, which rdmo dpu does not have", where, name)
		}
		used[name] = val
	}
	return used
}

// checkConfig fails the test for every key of a --config file that is not a
// flag of rdmo dpu (top level) or a --worker-* flag (the "worker" group).
func checkConfig(t *testing.T, where, text string, known map[string]bool) {
	t.Helper()
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("%s: config is not JSON: %v", where, err)
	}
	for k, v := range cfg {
		if k != "worker" {
			if !known[k] {
				t.Errorf("%s: config key %q is not a flag of rdmo dpu", where, k)
			}
			continue
		}
		var w map[string]any
		if err := json.Unmarshal(v, &w); err != nil {
			t.Fatalf("%s: worker group: %v", where, err)
		}
		for wk := range w {
			if !known["worker-"+wk] {
				t.Errorf("%s: worker setting %q has no --worker-%s flag", where, wk, wk)
			}
		}
	}
}

func TestSystemdUnit(t *testing.T) {
	known := dpuFlags(t)
	f, err := os.Open("systemd/rdmo-dpu.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sections := map[string]map[string]string{}
	var cur string
	var cont strings.Builder
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if cont.Len() > 0 || strings.HasSuffix(line, `\`) {
			cont.WriteString(strings.TrimSuffix(line, `\`) + " ")
			if strings.HasSuffix(line, `\`) {
				continue
			}
			line = strings.TrimSpace(cont.String())
			cont.Reset()
		}
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			cur = strings.Trim(line, "[]")
			sections[cur] = map[string]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || cur == "" {
				t.Fatalf("line %d: not key=value in a section: %q", n, line)
			}
			sections[cur][k] = v
		}
	}
	for _, s := range []string{"Unit", "Service", "Install"} {
		if sections[s] == nil {
			t.Errorf("no [%s] section", s)
		}
	}
	svc := sections["Service"]
	args := strings.Fields(svc["ExecStart"])
	if len(args) < 2 || !strings.HasSuffix(args[0], "/rdmo") || args[1] != "dpu" {
		t.Fatalf("ExecStart = %q, want /…/rdmo dpu …", svc["ExecStart"])
	}
	used := checkArgs(t, "ExecStart", args[2:], known)
	cred := svc["LoadCredential"]
	name, _, _ := strings.Cut(cred, ":")
	if name == "" || used["secret-file"] != "%d/"+name {
		t.Errorf("--secret-file %q must read the credential of LoadCredential=%q (%%d/%s)", used["secret-file"], cred, name)
	}
	if svc["Restart"] == "" || used["metrics-addr"] == "" || used["listen"] == "" {
		t.Errorf("the unit must set Restart=, --listen and --metrics-addr: %v / %v", svc, used)
	}
}

func TestKubernetesManifest(t *testing.T) {
	known := dpuFlags(t)
	f, err := os.Open("kubernetes/rdmo-dpu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port int    `yaml:"port"`
		} `yaml:"httpGet"`
	}
	type container struct {
		Name    string   `yaml:"name"`
		Command []string `yaml:"command"`
		Args    []string `yaml:"args"`
		Ports   []struct {
			ContainerPort int `yaml:"containerPort"`
		} `yaml:"ports"`
		LivenessProbe  *probe `yaml:"livenessProbe"`
		ReadinessProbe *probe `yaml:"readinessProbe"`
	}
	type doc struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Data map[string]string `yaml:"data"`
		Spec struct {
			Template struct {
				Spec struct {
					HostNetwork bool        `yaml:"hostNetwork"`
					Containers  []container `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	dec := yaml.NewDecoder(f)
	kinds := map[string]int{}
	for {
		var d doc
		if err := dec.Decode(&d); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("manifest: %v", err)
		}
		if d.APIVersion == "" || d.Kind == "" || d.Metadata.Name == "" {
			t.Fatalf("a document without apiVersion, kind or metadata.name: %+v", d)
		}
		kinds[d.Kind]++
		switch d.Kind {
		case "ConfigMap":
			for k, v := range d.Data {
				checkConfig(t, "ConfigMap "+k, v, known)
			}
		case "DaemonSet":
			ps := d.Spec.Template.Spec
			if !ps.HostNetwork {
				t.Error("the DaemonSet must use host networking (UCX needs the node's devices)")
			}
			if len(ps.Containers) != 1 {
				t.Fatalf("want one container, got %d", len(ps.Containers))
			}
			c := ps.Containers[0]
			if len(c.Command) != 1 || !strings.HasSuffix(c.Command[0], "/rdmo") || len(c.Args) == 0 || c.Args[0] != "dpu" {
				t.Fatalf("container runs %v %v, want rdmo dpu …", c.Command, c.Args)
			}
			used := checkArgs(t, "container args", c.Args[1:], known)
			_, metricsPort, _ := strings.Cut(used["metrics-addr"], ":")
			for what, p := range map[string]*probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
				if p == nil || p.HTTPGet.Path != what || metricsPort == "" || metricsPort != strconv.Itoa(p.HTTPGet.Port) {
					t.Errorf("probe %s must GET %s on the metrics port %q: %+v", what, what, metricsPort, p)
				}
			}
		}
	}
	for _, k := range []string{"Namespace", "ConfigMap", "DaemonSet"} {
		if kinds[k] != 1 {
			t.Errorf("want one %s, have %d", k, kinds[k])
		}
	}
}

// The README's Kubernetes steps create the namespace and the Secret the
// pods mount before they apply the manifest.
func TestReadmeSecretBeforeManifest(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	ns := strings.Index(text, "kubectl create namespace rdmo")
	secret := strings.Index(text, "kubectl -n rdmo create secret generic rdmo-dpu-secret")
	apply := strings.Index(text, "kubectl apply -f deploy/kubernetes/rdmo-dpu.yaml")
	if ns < 0 || secret < 0 || apply < 0 || !(ns < secret && secret < apply) {
		t.Errorf("deploy/README.md: want `kubectl create namespace rdmo`, then the Secret, then `kubectl apply` (at %d, %d, %d)", ns, secret, apply)
	}
}

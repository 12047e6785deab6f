package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/thinlvm/thinlvm/controller/csi"
	"github.com/thinlvm/thinlvm/lvmd/server"
	"github.com/thinlvm/thinlvm/node/golden"
	"github.com/thinlvm/thinlvm/node/lvmnode"
	"github.com/thinlvm/thinlvm/node/reconciler"
)

// promtool is built from its Go module by `make promtool`.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "thinlvm", "tools", "promtool")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("promtool: %v (make promtool builds it; make test-monitoring runs this test)", err)
	}
	return p
}

// ruleSpec is prometheusrule.yaml's spec: a Prometheus rule file.
func ruleSpec(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile("prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cr struct {
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &cr); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(cr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The alerts fire when docs/operations.md says they should, and not
// before (rules_test.yaml).
func TestAlerts(t *testing.T) {
	tool := promtool(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), ruleSpec(t), 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(tool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// descNames registers nothing: it records the metric names collectors
// describe.
type descNames map[string]bool

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d descNames) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d[m[1]] = true
		}
	}
	return nil
}
func (d descNames) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}
func (d descNames) Unregister(prometheus.Collector) bool { return false }

var metricName = regexp.MustCompile(`\bthinlvm_[a-z_]+`)

// Every thinlvm metric the alerts and the dashboard use is one thinlvm
// serves: a renamed metric fails here, not silently in a dashboard.
func TestRulesAndDashboardNameServedMetrics(t *testing.T) {
	served := descNames{}
	server.NewMetrics(served)
	golden.NewMetrics(served)
	reconciler.NewMetrics(served)
	csi.NewMetrics(served)
	csi.NewPhaseCollector(served, nil)
	lvmnode.NewSyncedGauge(served)
	if len(served) < 10 {
		t.Fatalf("only %d metrics described: %v", len(served), served)
	}
	dashboard, err := os.ReadFile("../chart/files/thinlvm-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"prometheusrule.yaml": string(ruleSpec(t)), "thinlvm-dashboard.json": string(dashboard)} {
		used := metricName.FindAllString(text, -1)
		if len(used) == 0 {
			t.Errorf("%s uses no thinlvm metric", what)
		}
		for _, m := range used {
			base := m
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if s, ok := strings.CutSuffix(m, suffix); ok && served[s] {
					base = s
				}
			}
			if !served[base] {
				t.Errorf("%s uses %s, which thinlvm does not serve", what, m)
			}
		}
	}
}

// The PodMonitors select the pods deploy/ makes, by a port they declare.
func TestPodMonitorsMatchTheWorkloads(t *testing.T) {
	data, err := os.ReadFile("podmonitors.yaml")
	if err != nil {
		t.Fatal(err)
	}
	workloads := map[string]string{"node": "../node/daemonset.yaml", "controller": "../controller/deployment.yaml", "scheduler": "../scheduler/deployment.yaml"}
	found := 0
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var pm struct {
			Spec struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				Endpoints []struct {
					Port string `json:"port"`
					Path string `json:"path"`
				} `json:"podMetricsEndpoints"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &pm); err != nil {
			t.Fatal(err)
		}
		component := pm.Spec.Selector.MatchLabels["app.kubernetes.io/component"]
		file, ok := workloads[component]
		if !ok {
			t.Errorf("a PodMonitor selects component %q, which deploy/ does not run", component)
			continue
		}
		found++
		tmpl := podTemplate(t, file)
		for k, v := range pm.Spec.Selector.MatchLabels {
			if tmpl.Labels[k] != v {
				t.Errorf("%s's pods are labelled %s=%q, the PodMonitor selects %q", file, k, tmpl.Labels[k], v)
			}
		}
		var ports []string
		for _, c := range tmpl.Spec.Containers {
			for _, p := range c.Ports {
				ports = append(ports, p.Name)
			}
		}
		for _, e := range pm.Spec.Endpoints {
			if !slices.Contains(ports, e.Port) {
				t.Errorf("the PodMonitor of %s scrapes port %q, which its pods do not declare (%v)", component, e.Port, ports)
			}
		}
	}
	if found != len(workloads) {
		t.Errorf("%d PodMonitors for %d workloads", found, len(workloads))
	}
}

func podTemplate(t *testing.T, file string) corev1.PodTemplateSpec {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var w appsv1.Deployment // a DaemonSet's spec.template reads the same
	if err := yaml.Unmarshal(data, &w); err != nil {
		t.Fatal(err)
	}
	return w.Spec.Template
}

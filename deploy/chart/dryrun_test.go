package chart

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// notInTestBed are the kinds of other projects' CRDs that the test API
// server does not have (no Go module here ships them): the template tests
// check those objects, the dry run cannot.
var notInTestBed = map[string]string{
	"PodMonitor":      "the Prometheus Operator's CRD",
	"PrometheusRule":  "the Prometheus Operator's CRD (its spec is checked by promtool: make test-monitoring)",
	"VolumePopulator": "volume-data-source-validator's CRD",
}

// TestServerDryRun renders the chart as `helm install` would for the test
// API server (its version and APIs) and has the server validate every
// object with a server-side dry-run apply: schemas, CEL rules and
// admission, after the chart's CRDs and the VolumeSnapshot CRDs are
// installed. KUBEBUILDER_ASSETS names kube-apiserver and etcd (make
// test-unit builds them).
func TestServerDryRun(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run through make test-unit, which builds kube-apiserver and etcd")
	}
	snapshots, err := snapshotCRDs()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{"crds", snapshots},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()

	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	version, err := disc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	// The APIs the server serves, as Helm's .Capabilities.APIVersions has
	// them (group/version/Kind), for the templates that test them.
	_, lists, err := disc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	var apis []string
	for _, l := range lists {
		for _, r := range l.APIResources {
			apis = append(apis, l.GroupVersion+"/"+r.Kind)
		}
	}
	values := KustomizeValues()
	values["namespace"] = map[string]any{"create": false}
	objs := objects(t, version.GitVersion, values, apis...)

	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// As helm install --create-namespace.
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	kinds := map[string]int{}
	for _, o := range objs {
		if why, ok := notInTestBed[o.GetKind()]; ok {
			t.Logf("not dry-run: %s %s (%s)", o.GetKind(), o.GetName(), why)
			continue
		}
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s %s: the server does not serve it: %v", gvk, o.GetName(), err)
			continue
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == "namespace" {
			r = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
			if o.GetNamespace() != ns && !(o.GetNamespace() == "kube-system" && strings.HasPrefix(o.GetName(), "thinlvm-scheduler-")) {
				t.Errorf("%s %s: namespace %q, not the release's", gvk.Kind, o.GetName(), o.GetNamespace())
			}
		}
		if _, err := r.Apply(ctx, o.GetName(), &o, metav1.ApplyOptions{FieldManager: "helm", Force: true, DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("%s %s: %v", gvk.Kind, o.GetName(), err)
			continue
		}
		kinds[gvk.Kind]++
	}
	for _, want := range []string{"DaemonSet", "Deployment", "CSIDriver", "StorageClass", "VolumeSnapshotClass", "ValidatingAdmissionPolicy", "ClusterRole", "NetworkPolicy", "ConfigMap"} {
		if kinds[want] == 0 {
			t.Errorf("no %s dry-run (dry-run: %v)", want, kinds)
		}
	}
	t.Logf("Kubernetes %s accepted: %v", version.GitVersion, kinds)
}

// snapshotCRDs is the directory of the VolumeSnapshot CRDs in the
// external-snapshotter client module that the test cluster's add-ons
// (e2e/cluster/addons) build the snapshotter from.
func snapshotCRDs() (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kubernetes-csi/external-snapshotter/client/v8")
	cmd.Dir = filepath.Join("..", "..", "e2e", "cluster", "addons")
	out, err := cmd.Output()
	if err != nil {
		return "", err
	}
	return filepath.Join(strings.TrimSpace(string(out)), "config", "crd"), nil
}

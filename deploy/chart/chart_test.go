package chart

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const ns = "thinlvm-system"

// objects renders the chart with values for a cluster of Kubernetes
// version kube and returns its objects.
func objects(t *testing.T, kube string, values map[string]any, apis ...string) []unstructured.Unstructured {
	t.Helper()
	objs, err := render(kube, values, apis...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func render(kube string, values map[string]any, apis ...string) ([]unstructured.Unstructured, error) {
	c, err := Load(".")
	if err != nil {
		return nil, err
	}
	files, err := Render(context.Background(), c, Options{Namespace: ns, KubeVersion: kube, APIVersions: apis, Values: values})
	if err != nil {
		return nil, err
	}
	var out []unstructured.Unstructured
	for file, docs := range files {
		for _, doc := range strings.Split(docs, "\n---\n") {
			var u unstructured.Unstructured
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			if u.Object != nil {
				out = append(out, u)
			}
		}
	}
	return out, nil
}

// named returns the objects of a kind, by name.
func named(objs []unstructured.Unstructured, kind string) map[string]unstructured.Unstructured {
	out := map[string]unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetKind() == kind {
			out[o.GetName()] = o
		}
	}
	return out
}

func names[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// images are the images of a pod template's containers, by container.
func images(t *testing.T, o unstructured.Unstructured) map[string]string {
	t.Helper()
	cs, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if err != nil || len(cs) == 0 {
		t.Fatalf("%s %s: no containers (%v)", o.GetKind(), o.GetName(), err)
	}
	out := map[string]string{}
	for _, c := range cs {
		c := c.(map[string]any)
		out[c["name"].(string)] = c["image"].(string)
	}
	return out
}

func str(t *testing.T, o unstructured.Unstructured, path ...string) string {
	t.Helper()
	v, _, err := unstructured.NestedString(o.Object, path...)
	if err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return v
}

func TestLint(t *testing.T) {
	for _, kube := range []string{"v1.34.0", "v1.37.0"} {
		kv, err := common.ParseKubeVersion(kube)
		if err != nil {
			t.Fatal(err)
		}
		for _, values := range []map[string]any{nil, KustomizeValues()} {
			res := lint.RunAll(".", values, ns, lint.WithKubeVersion(kv))
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("%s, values %v: %s", kube, values, m)
				} else {
					t.Logf("%s: %s", kube, m)
				}
			}
		}
	}
}

// TestSchedulerPerMinor: the scheduler image is the cluster's minor's,
// clamped to those thinlvm builds, unless kubernetesMinor names one.
func TestSchedulerPerMinor(t *testing.T) {
	for kube, tag := range map[string]string{
		"v1.34.1": "v0.1.0-k8s1.34", "v1.35.0": "v0.1.0-k8s1.35",
		"v1.36.3": "v0.1.0-k8s1.36", "v1.37.2": "v0.1.0-k8s1.37", "v1.40.0": "v0.1.0-k8s1.37",
	} {
		d := named(objects(t, kube, nil), "Deployment")["thinlvm-scheduler"]
		if got, want := images(t, d)["thinlvm-scheduler"], "ghcr.io/thinlvm/thinlvm-scheduler:"+tag; got != want {
			t.Errorf("Kubernetes %s: scheduler image %s, want %s", kube, got, want)
		}
	}
	if _, err := render("v1.33.5", nil); err == nil || !strings.Contains(err.Error(), "kubeVersion") {
		t.Errorf("Kubernetes 1.33: %v, want the chart's kubeVersion refusal", err)
	}
	d := named(objects(t, "v1.37.0", map[string]any{"scheduler": map[string]any{"kubernetesMinor": "1.35"}}), "Deployment")["thinlvm-scheduler"]
	if got := images(t, d)["thinlvm-scheduler"]; !strings.HasSuffix(got, ":v0.1.0-k8s1.35") {
		t.Errorf("kubernetesMinor 1.35: scheduler image %s", got)
	}
}

// TestPools: one DaemonSet and one lvmd ConfigMap per pool, on the pool's
// nodes only, each pod reading its own pool's device classes.
func TestPools(t *testing.T) {
	values := map[string]any{"node": map[string]any{"pools": []any{
		map[string]any{"name": "default", "nodeSelector": map[string]any{"thinlvm.io/storage": "nvme"},
			"deviceClasses": []any{map[string]any{"name": "ssd", "volumeGroup": "vg0", "thinPool": "pool0", "default": true}}},
		map[string]any{"name": "hdd", "nodeSelector": map[string]any{"thinlvm.io/storage": "hdd"},
			"tolerations":   []any{map[string]any{"key": "storage", "operator": "Equal", "value": "hdd", "effect": "NoSchedule"}},
			"deviceClasses": []any{map[string]any{"name": "hdd", "volumeGroup": "vg-hdd", "thinPool": "thin"}}},
	}}}
	objs := objects(t, "v1.37.0", values)
	ds := named(objs, "DaemonSet")
	if got := names(ds); !slices.Equal(got, []string{"thinlvm-node", "thinlvm-node-hdd"}) {
		t.Fatalf("DaemonSets %v, want one per pool", got)
	}
	cms := named(objs, "ConfigMap")
	checksums := map[string]bool{}
	for ds, want := range map[string]struct{ pool, storage, cm, vg string }{
		"thinlvm-node":     {"default", "nvme", "thinlvm-lvmd", "vg0"},
		"thinlvm-node-hdd": {"hdd", "hdd", "thinlvm-lvmd-hdd", "vg-hdd"},
	} {
		d := named(objs, "DaemonSet")[ds]
		if got := str(t, d, "spec", "template", "spec", "nodeSelector", "thinlvm.io/storage"); got != want.storage {
			t.Errorf("%s: nodeSelector storage=%q, want %q", ds, got, want.storage)
		}
		sel, _, _ := unstructured.NestedStringMap(d.Object, "spec", "selector", "matchLabels")
		if sel["thinlvm.io/node-pool"] != want.pool {
			t.Errorf("%s: selector %v does not name pool %s (the pools' DaemonSets would share pods)", ds, sel, want.pool)
		}
		vols, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
		var cm string
		for _, v := range vols {
			if c, ok := v.(map[string]any)["configMap"].(map[string]any); ok {
				cm = c["name"].(string)
			}
		}
		if cm != want.cm {
			t.Errorf("%s: mounts ConfigMap %q, want %q", ds, cm, want.cm)
		}
		if conf := str(t, cms[want.cm], "data", "lvmd.yaml"); !strings.Contains(conf+"\n", "volumeGroup: "+want.vg+"\n") {
			t.Errorf("%s: lvmd.yaml names no VG %s:\n%s", want.cm, want.vg, conf)
		}
		checksums[str(t, d, "spec", "template", "metadata", "annotations", "checksum/lvmd-config")] = true
	}
	if len(checksums) != 2 {
		t.Errorf("the pools' pods carry one lvmd-config checksum: a changed class list would not restart them")
	}
	tol, _, _ := unstructured.NestedSlice(ds["thinlvm-node-hdd"].Object, "spec", "template", "spec", "tolerations")
	if len(tol) != 1 || tol[0].(map[string]any)["key"] != "storage" {
		t.Errorf("thinlvm-node-hdd: tolerations %v, want the pool's", tol)
	}
	if _, ok := ds["thinlvm-node"].Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["tolerations"]; ok {
		t.Errorf("thinlvm-node: tolerations set, the pool has none")
	}

	for name, pools := range map[string][]any{
		"two pools named alike":  {map[string]any{"name": "a", "deviceClasses": []any{map[string]any{"name": "x"}}}, map[string]any{"name": "a", "deviceClasses": []any{map[string]any{"name": "y"}}}},
		"a pool without classes": {map[string]any{"name": "a"}},
		"a name not a label":     {map[string]any{"name": "A_b", "deviceClasses": []any{map[string]any{"name": "x"}}}},
	} {
		if _, err := render("v1.37.0", map[string]any{"node": map[string]any{"pools": pools}}); err == nil {
			t.Errorf("%s: rendered", name)
		}
	}
}

// TestNoScheduler: scheduler.enabled false installs no scheduler, and the
// rest stands.
func TestNoScheduler(t *testing.T) {
	objs := objects(t, "v1.37.0", map[string]any{"scheduler": map[string]any{"enabled": false}, "monitoring": map[string]any{"enabled": true}})
	for _, o := range objs {
		if strings.Contains(o.GetName(), "scheduler") || o.GetLabels()["app.kubernetes.io/component"] == "scheduler" {
			t.Errorf("%s %s installed without the scheduler", o.GetKind(), o.GetName())
		}
	}
	if got := names(named(objs, "Deployment")); !slices.Equal(got, []string{"thinlvm-controller"}) {
		t.Errorf("Deployments %v", got)
	}
	if len(named(objs, "DaemonSet")) != 1 || len(named(objs, "StorageClass")) != 3 {
		t.Errorf("without the scheduler: %d DaemonSets, %d StorageClasses", len(named(objs, "DaemonSet")), len(named(objs, "StorageClass")))
	}
}

// TestMonitoring: off, no Prometheus Operator object; on, the PodMonitors
// (the scheduler's too), the rule and the dashboard carry the labels a
// kube-prometheus-stack selects.
func TestMonitoring(t *testing.T) {
	for _, o := range objects(t, "v1.37.0", nil) {
		if strings.HasPrefix(o.GetAPIVersion(), "monitoring.coreos.com/") || o.GetLabels()["grafana_dashboard"] != "" {
			t.Errorf("monitoring off: %s %s", o.GetKind(), o.GetName())
		}
	}
	objs := objects(t, "v1.37.0", map[string]any{"monitoring": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus-stack"}}})
	pms := named(objs, "PodMonitor")
	for _, want := range []string{"thinlvm-controller", "thinlvm-node", "thinlvm-scheduler"} {
		if _, ok := pms[want]; !ok {
			t.Errorf("no PodMonitor %s (have %v)", want, names(pms))
		}
	}
	rules := named(objs, "PrometheusRule")
	if len(rules) != 1 {
		t.Fatalf("PrometheusRules %v", names(rules))
	}
	for _, o := range append(slices.Collect(maps.Values(pms)), rules[names(rules)[0]]) {
		if o.GetLabels()["release"] != "kube-prometheus-stack" {
			t.Errorf("%s %s: labels %v, no release", o.GetKind(), o.GetName(), o.GetLabels())
		}
		if o.GetNamespace() != ns {
			t.Errorf("%s %s in namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}
	var dashboards int
	for _, cm := range named(objs, "ConfigMap") {
		if cm.GetLabels()["grafana_dashboard"] == "1" {
			dashboards++
			if data, _, _ := unstructured.NestedStringMap(cm.Object, "data"); !strings.Contains(fmt.Sprint(data), `"title"`) {
				t.Errorf("dashboard ConfigMap %s holds no dashboard", cm.GetName())
			}
		}
	}
	if dashboards != 1 {
		t.Errorf("%d dashboard ConfigMaps", dashboards)
	}
}

// TestOtherNamespace: installed in another namespace, nothing names
// thinlvm-system, and the rules' jobs are the release namespace's.
func TestOtherNamespace(t *testing.T) {
	c, err := Load(".")
	if err != nil {
		t.Fatal(err)
	}
	files, err := Render(context.Background(), c, Options{Namespace: "storage", KubeVersion: "v1.37.0", Values: KustomizeValues(),
		APIVersions: []string{"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"}})
	if err != nil {
		t.Fatal(err)
	}
	for file, objs := range files {
		for i, line := range strings.Split(objs, "\n") {
			if strings.Contains(line, "thinlvm-system") && !strings.HasPrefix(strings.TrimSpace(line), "#") {
				t.Errorf("%s:%d: %s", file, i+1, line)
			}
		}
	}
	rule := files["monitoring/prometheusrule.yaml"]
	if !strings.Contains(rule, `job="storage/thinlvm-controller"`) || strings.Contains(rule, "thinlvm-system") {
		t.Errorf("the rules in namespace storage:\n%.600s", rule)
	}
}

// TestImages: registry, tag, digests, pull policy and secrets reach every
// thinlvm container; the sidecars' images are left as set.
func TestImages(t *testing.T) {
	const d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	objs := objects(t, "v1.36.0", map[string]any{
		"image":      map[string]any{"registry": "registry.example.internal/storage", "tag": "v9.9.9", "pullPolicy": "Always", "pullSecrets": []any{"regcred"}},
		"controller": map[string]any{"digest": d},
		"node":       map[string]any{"lvmd": map[string]any{"digest": d}},
		"scheduler":  map[string]any{"digests": map[string]any{"1.35": d}}, // another minor's
	})
	want := map[string]string{
		"Deployment/thinlvm-controller/thinlvm-controller": "registry.example.internal/storage/thinlvm-controller@" + d,
		"Deployment/thinlvm-scheduler/thinlvm-scheduler":   "registry.example.internal/storage/thinlvm-scheduler:v9.9.9-k8s1.36",
		"DaemonSet/thinlvm-node/thinlvm-node":              "registry.example.internal/storage/thinlvm-node:v9.9.9",
		"DaemonSet/thinlvm-node/lvmd":                      "registry.example.internal/storage/thinlvm-lvmd@" + d,
	}
	for _, o := range objs {
		if o.GetKind() != "Deployment" && o.GetKind() != "DaemonSet" {
			continue
		}
		for c, img := range images(t, o) {
			key := o.GetKind() + "/" + o.GetName() + "/" + c
			if w, ok := want[key]; ok {
				if img != w {
					t.Errorf("%s: image %s, want %s", key, img, w)
				}
				delete(want, key)
			} else if !strings.HasPrefix(img, "registry.k8s.io/sig-storage/") {
				t.Errorf("%s: image %s", key, img)
			}
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			c := c.(map[string]any)
			if strings.HasPrefix(c["image"].(string), "registry.example.internal/") && c["imagePullPolicy"] != "Always" {
				t.Errorf("%s/%s: imagePullPolicy %v", o.GetName(), c["name"], c["imagePullPolicy"])
			}
		}
		if s := fmt.Sprint(o.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["imagePullSecrets"]); !strings.Contains(s, "regcred") {
			t.Errorf("%s %s: imagePullSecrets %s", o.GetKind(), o.GetName(), s)
		}
	}
	for key := range want {
		t.Errorf("no container %s", key)
	}
	sched := named(objects(t, "v1.35.2", map[string]any{"scheduler": map[string]any{"digests": map[string]any{"1.35": d, "1.37": "sha256:37"}}}), "Deployment")["thinlvm-scheduler"]
	if got, w := images(t, sched)["thinlvm-scheduler"], "ghcr.io/thinlvm/thinlvm-scheduler@"+d; got != w {
		t.Errorf("1.35 with each minor's digest: scheduler image %s, want %s", got, w)
	}
}

// TestKubeletDir: a kubelet root elsewhere moves every kubelet path of the
// node pods.
func TestKubeletDir(t *testing.T) {
	objs := objects(t, "v1.37.0", map[string]any{"node": map[string]any{"kubeletDir": "/var/lib/k0s/kubelet/"}})
	ds := named(objs, "DaemonSet")["thinlvm-node"]
	spec := fmt.Sprint(ds.Object["spec"])
	if strings.Contains(spec, "/var/lib/kubelet") {
		t.Errorf("the node DaemonSet still names /var/lib/kubelet: %s", spec)
	}
	for _, want := range []string{"path:/var/lib/k0s/kubelet/plugins/thinlvm.io ", "path:/var/lib/k0s/kubelet/plugins_registry ", "path:/var/lib/k0s/kubelet ",
		"mountPath:/var/lib/k0s/kubelet ", "--kubelet-csi-path=/var/lib/k0s/kubelet/plugins/thinlvm.io/csi.sock"} {
		if !strings.Contains(spec, want) {
			t.Errorf("the node DaemonSet does not name %s", want)
		}
	}
}

// TestOptionalParts: the scheduler-name policy only where the cluster
// serves MutatingAdmissionPolicy; the populators and the namespace only
// when asked.
func TestOptionalParts(t *testing.T) {
	kinds := func(objs []unstructured.Unstructured) map[string]bool {
		out := map[string]bool{}
		for _, o := range objs {
			out[o.GetKind()] = true
		}
		return out
	}
	on := map[string]any{"scheduler": map[string]any{"namePolicy": map[string]any{"enabled": true}},
		"volumePopulators": map[string]any{"enabled": true}, "namespace": map[string]any{"create": true}}
	if k := kinds(objects(t, "v1.35.0", on)); k["MutatingAdmissionPolicy"] || !k["VolumePopulator"] || !k["Namespace"] {
		t.Errorf("on a cluster without MutatingAdmissionPolicy: kinds %v", names(k))
	}
	if k := kinds(objects(t, "v1.37.0", on, "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy")); !k["MutatingAdmissionPolicy"] || !k["MutatingAdmissionPolicyBinding"] {
		t.Errorf("on a cluster with MutatingAdmissionPolicy: kinds %v", names(k))
	}
	if k := kinds(objects(t, "v1.37.0", nil, "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy")); k["MutatingAdmissionPolicy"] || k["VolumePopulator"] || k["Namespace"] {
		t.Errorf("defaults: kinds %v", names(k))
	}
	ns := named(objects(t, "v1.37.0", on), "Namespace")[ns]
	if ns.GetLabels()["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace labels %v", ns.GetLabels())
	}
}

// TestStorageClasses: the classes' parameters, a golden-image class, and
// the VolumeSnapshotClass off.
func TestStorageClasses(t *testing.T) {
	objs := objects(t, "v1.37.0", map[string]any{
		"storageClasses": []any{
			map[string]any{"name": "fast", "fsType": "xfs", "deviceClass": "ssd", "default": true},
			map[string]any{"name": "ubuntu", "goldenImage": "ubuntu-24-04"},
		},
		"volumeSnapshotClass": map[string]any{"enabled": false},
	})
	scs := named(objs, "StorageClass")
	if got := names(scs); !slices.Equal(got, []string{"fast", "ubuntu"}) {
		t.Fatalf("StorageClasses %v", got)
	}
	fast := scs["fast"]
	if str(t, fast, "provisioner") != "thinlvm.io" || str(t, fast, "volumeBindingMode") != "WaitForFirstConsumer" ||
		fast.GetAnnotations()["storageclass.kubernetes.io/is-default-class"] != "true" ||
		str(t, fast, "parameters", "csi.storage.k8s.io/fstype") != "xfs" {
		t.Errorf("class fast: %v", fast.Object)
	}
	if p, _, _ := unstructured.NestedStringMap(scs["ubuntu"].Object, "parameters"); !strings.Contains(fmt.Sprint(p), "ubuntu-24-04") {
		t.Errorf("class ubuntu names no golden image: %v", p)
	}
	if len(named(objs, "VolumeSnapshotClass")) != 0 {
		t.Errorf("a VolumeSnapshotClass with volumeSnapshotClass.enabled false")
	}
}

// TestExtraArgs: node.extraArgs and node.lvmd.extraArgs come after each
// container's own args.
func TestExtraArgs(t *testing.T) {
	ds := named(objects(t, "v1.37.0", map[string]any{"node": map[string]any{
		"extraArgs": []any{"--lvmnode-interval=5s", "--golden-retry=1m"},
		"lvmd":      map[string]any{"extraArgs": []any{"--command-timeout=5m"}},
	}}), "DaemonSet")["thinlvm-node"]
	cs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	want := map[string][]string{"thinlvm-node": {"--lvmnode-interval=5s", "--golden-retry=1m"}, "lvmd": {"--command-timeout=5m"}}
	for _, c := range cs {
		c := c.(map[string]any)
		args, _, _ := unstructured.NestedStringSlice(c, "args")
		w := want[c["name"].(string)]
		if len(args) < len(w) || !slices.Equal(args[len(args)-len(w):], w) {
			t.Errorf("container %s: args %v, want them to end with %v", c["name"], args, w)
		}
		delete(want, c["name"].(string))
	}
	if len(want) > 0 {
		t.Errorf("no containers %v", want)
	}
}

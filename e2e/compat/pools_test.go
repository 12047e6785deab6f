package compat_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/thinlvm/thinlvm/e2e/cluster"
)

// The pools of TestNodePools: the default pool as values.yaml has it,
// kept off the nodes labelled for the second (pools must not share a
// node), and a pool hdd on those nodes only, with a class of its own.
const pools = `[
 {"name": "default", "tolerations": [{"operator": "Exists"}],
  "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "thinlvm.io/test-storage", "operator": "NotIn", "values": ["hdd"]}]}]}}},
  "deviceClasses": [{"name": "ssd", "volumeGroup": "vg0", "thinPool": "pool0", "default": true, "overprovisionRatio": 4,
    "dataHighWatermarkPercent": 90, "metadataHighWatermarkPercent": 80}]},
 {"name": "hdd", "nodeSelector": {"thinlvm.io/test-storage": "hdd"},
  "deviceClasses": [{"name": "hdd", "volumeGroup": "vg-hdd", "thinPool": "thin"}]}]`

// A second node pool, added as docs/install.md says (helm upgrade with
// node.pools; on a kustomize install, the pool's objects rendered by helm
// template and applied), runs its DaemonSet's pods on the nodes its
// selector names and nowhere else, reading its own lvmd classes; with
// Helm, the default pool's pods leave those nodes.
func TestNodePools(t *testing.T) {
	hdd := bareNode("pool-hdd", map[string]string{"thinlvm.io/test-storage": "hdd"})
	other := bareNode("pool-other", nil)
	if err := k.CreateAll(ctx, hdd, other); err != nil {
		t.Fatal(err)
	}
	defer cleanup(t, hdd, other)

	if k.Kustomize {
		out, err := k.Helm(ctx, "template", cluster.Release, k.Chart, "--namespace", cluster.Namespace, "--kube-version", serverVersion(t).GitVersion,
			"--set-json", "node.pools="+pools, "--show-only", "templates/node/daemonset.yaml", "--show-only", "templates/node/lvmd-config.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var pool []string
		for _, doc := range strings.Split(string(out), "\n---\n") {
			if strings.Contains(doc, "name: thinlvm-node-hdd\n") || strings.Contains(doc, "name: thinlvm-lvmd-hdd\n") {
				pool = append(pool, doc)
			}
		}
		if len(pool) != 2 {
			t.Fatalf("helm template rendered %d objects of pool hdd, want its DaemonSet and ConfigMap:\n%s", len(pool), out)
		}
		if err := k.ApplyYAML(ctx, []byte(strings.Join(pool, "\n---\n"))); err != nil {
			t.Fatal(err)
		}
		defer cleanup(t, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: "thinlvm-node-hdd"}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: "thinlvm-lvmd-hdd"}})
	} else {
		if _, err := k.Helm(ctx, "upgrade", cluster.Release, k.Chart, "--namespace", cluster.Namespace, "--reuse-values", "--set-json", "node.pools="+pools); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if _, err := k.Helm(ctx, "rollback", cluster.Release, "--namespace", cluster.Namespace); err != nil {
				t.Error(err)
			}
		}()
	}

	cm := &corev1.ConfigMap{}
	if err := k.Client.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: "thinlvm-lvmd-hdd"}, cm); err != nil {
		t.Fatal(err)
	}
	if conf := cm.Data["lvmd.yaml"]; !strings.Contains(conf, "volumeGroup: vg-hdd") {
		t.Errorf("pool hdd's lvmd.yaml: %s", conf)
	}
	settled(t, "thinlvm-node-hdd", 1)
	if on := poolNodes(t, "hdd"); len(on) != 1 || on[0] != hdd.Name {
		t.Errorf("pool hdd's pods on %v, want on %s only", on, hdd.Name)
	}
	if k.Kustomize {
		return
	}
	settled(t, "thinlvm-node", 0)
	on := poolNodes(t, "default")
	for _, n := range on {
		if n == hdd.Name {
			t.Errorf("the default pool keeps a pod on %s, pool hdd's node (its pods on %v)", n, on)
		}
	}
	if !strings.Contains(fmt.Sprint(on), other.Name) {
		t.Errorf("the default pool has no pod on %s (its pods on %v)", other.Name, on)
	}
}

// bareNode is a kwok node with no thinlvm pod run for it: the DaemonSets'
// placement is what is looked at.
func bareNode(name string, labels map[string]string) *corev1.Node {
	l := map[string]string{"kubernetes.io/hostname": name, "type": "kwok", "kubernetes.io/os": "linux"}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110")}},
	}
}

// settled waits until a DaemonSet's controller has placed its current
// template's pods on every node it should (at least min) and they are
// Ready.
func settled(t *testing.T, name string, min int32) {
	t.Helper()
	ds := &appsv1.DaemonSet{}
	if err := k.WaitFor(ctx, "DaemonSet "+name+" to settle", 3*time.Minute, func() (bool, error) {
		if err := k.Client.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: name}, ds); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		s := ds.Status
		return s.ObservedGeneration == ds.Generation && s.DesiredNumberScheduled >= min && s.UpdatedNumberScheduled == s.DesiredNumberScheduled &&
			s.CurrentNumberScheduled == s.DesiredNumberScheduled && s.NumberReady == s.DesiredNumberScheduled, nil
	}); err != nil {
		t.Fatalf("%v (status %+v)", err, ds.Status)
	}
}

// poolNodes are the nodes of a pool's pods that are not on their way out.
func poolNodes(t *testing.T, pool string) []string {
	t.Helper()
	pods := &corev1.PodList{}
	if err := k.Client.List(ctx, pods, client.InNamespace(cluster.Namespace), client.MatchingLabels{"thinlvm.io/node-pool": pool}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp.IsZero() {
			out = append(out, p.Spec.NodeName)
		}
	}
	return out
}

package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
)

// TestJoined: the kubelet joined as itself, found thinlvm's plugin through
// its plugin watcher (the agent's registration socket) and wrote what a
// driver's registration makes: the CSINode entry with the topology key,
// and the node's topology label from NodeGetInfo.
func TestJoined(t *testing.T) {
	ctx := context.Background()
	csiNode := &storagev1.CSINode{}
	if err := k.Client.Get(ctx, client.ObjectKey{Name: Node}, csiNode); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(csiNode.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == thinlvmv1.DriverName })
	if i < 0 {
		t.Fatalf("CSINode %s has no %s driver: %+v", Node, thinlvmv1.DriverName, csiNode.Spec.Drivers)
	}
	if d := csiNode.Spec.Drivers[i]; d.NodeID != Node || !slices.Contains(d.TopologyKeys, thinlvmv1.TopologyKey) {
		t.Errorf("CSINode driver %+v: want node ID %s and topology key %s", d, Node, thinlvmv1.TopologyKey)
	}
	node := &corev1.Node{}
	if err := k.Client.Get(ctx, client.ObjectKey{Name: Node}, node); err != nil {
		t.Fatal(err)
	}
	if node.Labels[thinlvmv1.TopologyKey] != Node {
		t.Errorf("node label %s = %q, want %q (from NodeGetInfo)", thinlvmv1.TopologyKey, node.Labels[thinlvmv1.TopologyKey], Node)
	}
	if _, fake := node.Annotations["kwok.x-k8s.io/node"]; fake {
		t.Errorf("node %s is kwok's", Node)
	}
	if v := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(v, "containerd://2.") {
		t.Errorf("container runtime %q, want containerd 2", v)
	}
	// The DaemonSet's pod runs there, every container ready, as the
	// kubelet reports it.
	pods := &corev1.PodList{}
	if err := k.Client.List(ctx, pods, client.InNamespace(cluster.Namespace), client.MatchingFields{"spec.nodeName": Node}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
		t.Fatalf("thinlvm's pods on %s: %+v", Node, podPhases(pods.Items))
	}
	for _, cs := range pods.Items[0].Status.ContainerStatuses {
		if !cs.Ready {
			t.Errorf("container %s of %s not ready: %+v", cs.Name, pods.Items[0].Name, cs.State)
		}
	}
}

// TestFilesystemVolume: a pod writes to an xfs volume, is deleted; the next
// pod on the node reads the same bytes.
func TestFilesystemVolume(t *testing.T) {
	ctx := context.Background()
	claim := cluster.Claim("fs-data", cluster.FilesystemClass, "1Gi", false)
	if err := k.Client.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteClaim(t, claim) })
	wrote := runPod(t, "fs-writer", false, "dd if=/dev/urandom of=/v0/data bs=1M count=8 2>/dev/null && sync && sha256sum /v0/data", "fs-data")
	read := runPod(t, "fs-reader", false, "sha256sum /v0/data", "fs-data")
	if wrote == "" || wrote != read {
		t.Errorf("wrote %q, read %q", wrote, read)
	}
}

// runPod runs script (busybox sh) in a pod on the real node with the
// claims at /v0, /v1, ... (devices there, with block), waits for it to
// succeed, deletes it and returns its output (its termination message).
func runPod(t *testing.T, name string, block bool, script string, claims ...string) string {
	t.Helper()
	ctx := context.Background()
	pod := cluster.Pod(name, block, cluster.OnNode(Node), claims...)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(1))
	c := &pod.Spec.Containers[0]
	c.Image = cluster.BusyboxImage
	c.Command = []string{"/bin/sh", "-c", "(" + script + ") > /dev/termination-log 2>&1"}
	if err := k.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	defer deletePod(t, pod)
	var out string
	err := k.WaitFor(ctx, "pod "+name+" to finish", 5*time.Minute, func() (bool, error) {
		if err := k.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.State.Terminated != nil {
				out = strings.TrimSpace(cs.State.Terminated.Message)
			}
		}
		switch pod.Status.Phase {
		case corev1.PodSucceeded:
			return true, nil
		case corev1.PodFailed:
			return false, fmt.Errorf("pod %s failed: %s", name, out)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v; pod status %+v", err, pod.Status)
	}
	return out
}

func deletePod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	if err := client.IgnoreNotFound(k.Client.Delete(ctx, pod)); err != nil {
		t.Error(err)
	}
	if err := k.WaitGone(ctx, 3*time.Minute, pod); err != nil {
		t.Error(err)
	}
}

func deleteClaim(t *testing.T, claim *corev1.PersistentVolumeClaim) {
	t.Helper()
	ctx := context.Background()
	if err := client.IgnoreNotFound(k.Client.Delete(ctx, claim)); err != nil {
		t.Error(err)
	}
	if err := k.WaitGone(ctx, 3*time.Minute, claim); err != nil {
		t.Error(err)
	}
}

func podPhases(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name+"="+string(p.Status.Phase))
	}
	return out
}

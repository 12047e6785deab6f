package migration_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/thinlvm/thinlvm/e2e/cluster"
)

// The kubectl plugin's move and evacuate, run as a user runs them (the
// binary, the cluster's kubeconfig) on the two real-LVM nodes.

// buildPlugin builds kubectl-thinlvm once for the suite.
var buildPlugin = sync.OnceValues(func() (string, error) {
	path := filepath.Join(tb.Dir, "kubectl-thinlvm")
	build := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/kubectl-thinlvm")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		return "", errors.New(string(out) + err.Error())
	}
	return path, nil
})

// plugin is the suite's kubectl-thinlvm.
func plugin(t testing.TB) string {
	t.Helper()
	path, err := buildPlugin()
	if err != nil {
		t.Fatalf("building kubectl-thinlvm: %v", err)
	}
	return path
}

// kubectlThinLVM runs the plugin to its end.
func kubectlThinLVM(t testing.TB, args ...string) (string, error) {
	t.Helper()
	out, err := exec.CommandContext(ctx, plugin(t), append([]string{"--kubeconfig", tb.Kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// killedAtNewStep runs the plugin and SIGKILLs it once it prints a step
// done that no earlier run printed (seen holds those, and gains it). It
// returns what the run printed and whether it ended by itself first, with
// its error.
func killedAtNewStep(t testing.TB, seen map[string]bool, args ...string) (lines []string, ended bool, err error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, plugin(t), append([]string{"--kubeconfig", tb.Kubeconfig}, args...)...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if strings.HasSuffix(line, ": done") && !seen[line] {
			seen[line] = true
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return lines, false, nil
		}
	}
	return lines, true, cmd.Wait()
}

func getClaim(t testing.TB, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	c := &corev1.PersistentVolumeClaim{}
	if err := tb.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, c); err != nil {
		t.Fatal(err)
	}
	return c
}

// deletePod deletes a pod and waits until it is gone.
func deletePod(t testing.TB, name string) {
	t.Helper()
	if err := tb.DeleteAndWait(ctx, time.Minute, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// hasLV tells whether a node's VG holds an LV.
func hasLV(t testing.TB, node, lv string) bool {
	t.Helper()
	lvs, err := tb.VMs[node].LVS(ctx, "vg0", "lv_tags")
	if err != nil {
		t.Fatal(err)
	}
	_, ok := lvs[lv]
	return ok
}

// A stopped VM's disk moved to the other node by `kubectl thinlvm move`,
// the command killed after each step it finished (each once) and run again: at every
// kill the data is on one node or the other, and the end is the same as an
// uninterrupted move's: the claim of the same name Bound on the other node
// with the same bytes, the old volume gone, nothing of the move left.
func TestPluginMove(t *testing.T) {
	disk(t, "vm-root", sharedClass, "1Gi", nodeA, nil)
	src := bound(t, "vm-root", 3*time.Minute)
	write(t, nodeA, src.Status.VolumeID, 128, 16)
	want := checksum(t, nodeA, src.Status.VolumeID)
	first := getClaim(t, "vm-root")

	if out, err := kubectlThinLVM(t, "move", "vm-root", "--to", nodeB); err == nil || !strings.Contains(out, "in use by pod(s) vm-root") {
		t.Fatalf("a move of a claim whose pod runs: %v\n%s", err, out)
	}
	deletePod(t, "vm-root")
	// What the plugin writes carries its name as the field manager (the API
	// server takes it from the user agent); the controllers write these
	// objects too, so their resource versions prove nothing.
	wroteBy := func(o client.Object) (plugin []string, others []string) {
		for _, f := range o.GetManagedFields() {
			entry := fmt.Sprintf("%s %s %s", f.Manager, f.Operation, f.Time)
			if f.Manager == "kubectl-thinlvm" {
				plugin = append(plugin, entry)
			} else {
				others = append(others, entry)
			}
		}
		return plugin, others
	}
	out, err := kubectlThinLVM(t, "move", "vm-root", "--to", nodeB, "--dry-run")
	if err != nil || !strings.Contains(out, "would create claim default/vm-root-move-") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	pv := &corev1.PersistentVolume{}
	if err := tb.Client.Get(ctx, types.NamespacedName{Name: first.Spec.VolumeName}, pv); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{getClaim(t, "vm-root"), pv} {
		if plugin, others := wroteBy(o); len(plugin) > 0 {
			t.Errorf("the dry run wrote %T %s: %v (others: %v)", o, o.GetName(), plugin, others)
		}
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Errorf("after the dry run the volume's reclaim policy is %s", pv.Spec.PersistentVolumeReclaimPolicy)
	}
	claims := &corev1.PersistentVolumeClaimList{}
	if err := tb.Client.List(ctx, claims, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		if strings.HasPrefix(c.Name, "vm-root-move-") {
			t.Errorf("the dry run made claim %s", c.Name)
		}
	}

	ended, seen := false, map[string]bool{}
	for k := 1; !ended && k < 20; k++ {
		var lines []string
		lines, ended, err = killedAtNewStep(t, seen, "move", "vm-root", "--to", nodeB)
		t.Logf("run %d (killed: %v): %s", k, !ended, lines[len(lines)-1])
		if ended && err != nil {
			t.Fatalf("run %d: %v\n%s", k, err, strings.Join(lines, "\n"))
		}
		if hasLV(t, nodeA, src.Status.VolumeID) {
			continue
		}
		// The old LV is gone only after the claim is Bound to the copy.
		c := getClaim(t, "vm-root")
		if c.Status.Phase != corev1.ClaimBound || c.Spec.VolumeName == first.Spec.VolumeName {
			t.Fatalf("after run %d the old LV is gone and claim vm-root is %s on %q: data lost", k, c.Status.Phase, c.Spec.VolumeName)
		}
	}
	if !ended {
		t.Fatal("the move did not end in 19 runs")
	}
	// Of the 8 steps (hold, clone, record, delete the clone's claim and the
	// claim, make it again, the old volume's policy, the new one's), a
	// kill may land after the next one is done too; most must be seen.
	if len(seen) < 6 {
		t.Errorf("the runs were killed after %d distinct steps, want at least 6 of the 8: %v", len(seen), seen)
	}

	c := getClaim(t, "vm-root")
	if c.UID == first.UID || c.Spec.VolumeName == first.Spec.VolumeName || c.Status.Phase != corev1.ClaimBound {
		t.Fatalf("claim vm-root: %s on %s (it was %s), want Bound to a new volume", c.Status.Phase, c.Spec.VolumeName, first.Spec.VolumeName)
	}
	lv := bound(t, "vm-root", time.Minute)
	if lv.Spec.NodeName != nodeB {
		t.Fatalf("the claim's volume is on %s, want %s", lv.Spec.NodeName, nodeB)
	}
	if got := checksum(t, nodeB, lv.Status.VolumeID); got != want {
		t.Errorf("the moved volume's checksum %s differs from the source's %s", got, want)
	}
	pv = &corev1.PersistentVolume{}
	if err := tb.Client.Get(ctx, types.NamespacedName{Name: c.Spec.VolumeName}, pv); err != nil {
		t.Fatal(err)
	}
	if plugin, _ := wroteBy(pv); len(plugin) == 0 {
		t.Errorf("the moved volume names no field manager kubectl-thinlvm: the dry run's check above sees nothing: %v", pv.ManagedFields)
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Errorf("the new volume's reclaim policy is %s, want the class's Delete", pv.Spec.PersistentVolumeReclaimPolicy)
	}
	for k := range pv.Annotations {
		if strings.HasPrefix(k, "thinlvm.io/move") {
			t.Errorf("the new volume keeps the move's annotation %s", k)
		}
	}
	if err := tb.WaitFor(ctx, "the old volume to be deleted", 3*time.Minute, func() (bool, error) {
		err := tb.Client.Get(ctx, types.NamespacedName{Name: first.Spec.VolumeName}, &corev1.PersistentVolume{})
		return apierrors.IsNotFound(err) && !hasLV(t, nodeA, src.Status.VolumeID), client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectlThinLVM(t, "move", "vm-root", "--to", nodeB); err != nil || !strings.Contains(out, "nothing to move") {
		t.Errorf("the move run again: %v\n%s", err, out)
	}
	// The VM starts again: its pod goes where the volume now is.
	if err := tb.Client.Create(ctx, cluster.Pod("vm-root", true, nil, "vm-root")); err != nil {
		t.Fatal(err)
	}
	waitPodOn(t, client.MatchingLabels{}, "vm-root", nodeB)
	remove(t, "vm-root")
}

// waitPodOn waits until a pod (named, or the one the labels select) is
// scheduled on node.
func waitPodOn(t testing.TB, sel client.MatchingLabels, name, node string) {
	t.Helper()
	if err := tb.WaitFor(ctx, "the pod of "+name+" on "+node, 3*time.Minute, func() (bool, error) {
		pods := &corev1.PodList{}
		if err := tb.Client.List(ctx, pods, client.InNamespace("default"), sel); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if (len(sel) > 0 || p.Name == name) && p.DeletionTimestamp == nil && p.Spec.NodeName == node {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// `kubectl thinlvm evacuate` of a node with four VM disks, one of them a
// single-replica Deployment's: the node cordoned, the four moved to the
// other node (two at a time), the Deployment stopped for its disk's move
// and started again, its pod on the other node.
func TestPluginEvacuate(t *testing.T) {
	names := []string{"ev-0", "ev-1", "ev-2", "ev-3"}
	for _, n := range names {
		disk(t, n, sharedClass, "1Gi", nodeA, nil)
	}
	t.Cleanup(func() {
		node := &corev1.Node{}
		if err := tb.Client.Get(ctx, types.NamespacedName{Name: nodeA}, node); err == nil && node.Spec.Unschedulable {
			node.Spec.Unschedulable = false
			if err := tb.Client.Update(ctx, node); err != nil {
				t.Errorf("uncordon %s: %v", nodeA, err)
			}
		}
	})
	lvs := map[string]string{}
	for _, n := range names {
		lvs[n] = bound(t, n, 3*time.Minute).Status.VolumeID
		deletePod(t, n)
	}
	write(t, nodeA, lvs["ev-0"], 64, 8)
	want := checksum(t, nodeA, lvs["ev-0"])
	// ev-0 is the disk of a Deployment of one replica, running on nodeA
	// (where its volume is).
	tmpl := cluster.Pod("app", true, nil, "ev-0")
	tmpl.Labels = map[string]string{"app": "ev-0"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "ev-0", Namespace: "default"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}}}
	d.Spec.Template.Name, d.Spec.Template.Namespace = "", ""
	if err := tb.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	waitPodOn(t, tmpl.Labels, "ev-0", nodeA)

	out, err := kubectlThinLVM(t, "evacuate", nodeA, "--scale-down", "--timeout", "15m")
	t.Logf("evacuate:\n%s", out)
	if err != nil {
		t.Fatalf("evacuate: %v", err)
	}
	node := &corev1.Node{}
	if err := tb.Client.Get(ctx, types.NamespacedName{Name: nodeA}, node); err != nil || !node.Spec.Unschedulable {
		t.Errorf("%s is not cordoned (%v)", nodeA, err)
	}
	for _, n := range names {
		lv := bound(t, n, time.Minute)
		if lv.Spec.NodeName != nodeB {
			t.Errorf("claim %s is on %s, want %s", n, lv.Spec.NodeName, nodeB)
		}
		if n == "ev-0" {
			if got := checksum(t, nodeB, lv.Status.VolumeID); got != want {
				t.Errorf("ev-0's checksum %s differs from the source's %s", got, want)
			}
		}
		if !strings.Contains(out, n) {
			t.Errorf("the report does not name %s", n)
		}
	}
	if strings.Count(out, " moved\n") != len(names) {
		t.Errorf("the report says moved %d times, want %d", strings.Count(out, " moved\n"), len(names))
	}
	if err := tb.Client.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 1 || d.Annotations["thinlvm.io/stopped-for-move"] != "" || d.Annotations["thinlvm.io/stopped-from"] != "" {
		t.Errorf("deployment ev-0 after the evacuation: %d replicas, annotations %v", *d.Spec.Replicas, d.Annotations)
	}
	waitPodOn(t, tmpl.Labels, "ev-0", nodeB)
	if err := tb.Client.Delete(ctx, d); err != nil {
		t.Error(err)
	}
	if err := tb.WaitFor(ctx, "deployment ev-0's pods to be gone", 2*time.Minute, func() (bool, error) {
		pods := &corev1.PodList{}
		err := tb.Client.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels(tmpl.Labels))
		return len(pods.Items) == 0, err
	}); err != nil {
		t.Fatal(err)
	}
	remove(t, names...)
}

package cluster_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/thinlvm/thinlvm/e2e/cluster"
)

var labelled = cluster.Labelled

func addNodes(t testing.TB, prefix, label string, n int, size uint64) []string {
	t.Helper()
	names, err := k.AddLabelledNodes(ctx, prefix, label, slices.Repeat([]uint64{size}, n)...)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// placement returns where each of the pods runs (waiting for all).
func placement(t testing.TB, pods []string) map[string]int {
	t.Helper()
	per := map[string]int{}
	for _, p := range pods {
		per[running(t, p).Spec.NodeName]++
	}
	return per
}

// A burst of 30 pods on 3 nodes with room for 10 volumes each: the
// scheduler's reservations, not luck, keep every node within its room, so
// no node ever refuses a volume.
func TestSchedulerBurstNeverOversubscribes(t *testing.T) {
	// Pools of 2.5 GiB with deploy/'s overprovision ratio of 4: room for
	// ten 1 GiB volumes each.
	nodes := addNodes(t, "burst", "burst", 3, 10<<30/4)
	var pods []string
	for i := range 30 {
		name := fmt.Sprintf("burst-%02d", i)
		pods = append(pods, name)
		create(t, pvc(name, storageClass, "1Gi", false), pod(name, false, labelled("burst"), name))
	}
	per := placement(t, pods)
	for _, n := range nodes {
		if per[n] != 10 {
			t.Errorf("placement %v: want 10 pods on each node", per)
			break
		}
	}
	// A 31st pod has no room anywhere: it waits, its claim unprovisioned.
	create(t, pvc("burst-extra", storageClass, "1Gi", false), pod("burst-extra", false, labelled("burst"), "burst-extra"))
	time.Sleep(5 * time.Second)
	extra := &corev1.Pod{}
	if err := k.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "burst-extra"}, extra); err != nil {
		t.Fatal(err)
	}
	if extra.Spec.NodeName != "" {
		t.Errorf("the 31st pod was placed on %s", extra.Spec.NodeName)
	}
	events := &corev1.EventList{}
	if err := k.Client.List(ctx, events, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if strings.HasPrefix(e.InvolvedObject.Name, "burst") && e.Reason == "ProvisioningFailed" && strings.Contains(e.Message, "ResourceExhausted") {
			t.Errorf("a node refused a volume: it was oversubscribed: %s", e.Message)
		}
	}
	var objs []client.Object
	for _, p := range append(pods, "burst-extra") {
		objs = append(objs, pod(p, false, nil), pvc(p, "", "1Gi", false))
	}
	deleteAll(t, objs...)
}

// The thinlvm scheduler dies after it wrote a claim's selected node and
// before it bound the pod; the claim is then provisioned and bound without
// it. The next leader finds a pod whose only thinlvm claim is bound: it
// schedules it to the claim's node (it used to fail it for good with "read
// ThinLVM/demand: not found").
func TestSchedulerKilledBetweenClaimAndPodBinding(t *testing.T) {
	var scheds []string
	for _, p := range k.Procs() {
		if strings.HasPrefix(p, "thinlvm-scheduler@") {
			scheds = append(scheds, p)
		}
	}
	if len(scheds) != 2 {
		t.Fatalf("thinlvm scheduler processes %v, want the Deployment's 2", scheds)
	}
	restarted := false
	defer func() {
		if !restarted {
			for _, s := range scheds {
				_ = k.Restart(s, nil)
			}
		}
	}()
	create(t, pvc("killed-data", storageClass, "1Gi", false), pod("killed", false, nil, "killed-data"))
	claim := &corev1.PersistentVolumeClaim{}
	waitFor(t, "the scheduler to select a node for the claim", 2*time.Minute, func() (bool, error) {
		err := k.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "killed-data"}, claim)
		return err == nil && claim.Annotations["volume.kubernetes.io/selected-node"] != "", err
	})
	for _, s := range scheds { // the leader, and the standby that would take over
		k.Crash(s)
	}
	p := &corev1.Pod{}
	if err := k.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "killed"}, p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Fatalf("the pod was bound to %s before the scheduler was killed: the claim bound faster than it was polled", p.Spec.NodeName)
	}
	_, pv := bound(t, "killed-data")
	for _, s := range scheds {
		if err := k.Restart(s, nil); err != nil {
			t.Fatal(err)
		}
	}
	restarted = true
	if got := running(t, "killed").Spec.NodeName; got != pvNode(pv) {
		t.Errorf("pod on %s, its volume on %s", got, pvNode(pv))
	}
	events := &corev1.EventList{}
	if err := k.Client.List(ctx, events, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Name == "killed" && e.Reason == "FailedScheduling" && strings.Contains(e.Message, "ThinLVM") {
			t.Errorf("the ThinLVM plugin failed the pod: %s", e.Message)
		}
	}
	deleteAll(t, pod("killed", false, nil), pvc("killed-data", "", "1Gi", false))
}

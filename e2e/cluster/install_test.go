package cluster_test

import (
	"fmt"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/thinlvm/thinlvm/e2e/cluster"
)

// deploy/ as `kubectl apply -k` installed it: the Deployments' and the
// DaemonSet's pods are Running (kwok reports their status; the harness runs
// their programs), the leader-elected components hold their leases, and
// every process the harness started for them still runs.
func TestInstallRuns(t *testing.T) {
	pods := &corev1.PodList{}
	if err := k.Client.List(ctx, pods, client.InNamespace(cluster.Namespace)); err != nil {
		t.Fatal(err)
	}
	nodes := &corev1.NodeList{}
	if err := k.Client.List(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	exists := map[string]bool{}
	for _, n := range nodes.Items {
		exists[n.Name] = true
	}
	count := map[string]int{}
	live := pods.Items[:0]
	for _, p := range pods.Items {
		if !p.DeletionTimestamp.IsZero() || !exists[p.Spec.NodeName] {
			continue // a deleted node's pod on its way out
		}
		live = append(live, p)
		count[p.Labels["app.kubernetes.io/component"]]++
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s is %s", p.Name, p.Status.Phase)
		}
	}
	pods.Items = live
	// Every container states what it needs and the most memory it may
	// take: a leak in one cannot starve the node it shares.
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			r := c.Resources
			if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
				t.Errorf("pod %s container %s: requests %v, limits %v: want cpu and memory requests and a memory limit", p.Name, c.Name, r.Requests, r.Limits)
			}
		}
	}
	if count["controller"] != 2 || count["scheduler"] != 2 || count["node"] < 3 {
		t.Errorf("pods per component %v: want 2 controllers, 2 schedulers, one node pod per node", count)
	}
	for _, l := range []types.NamespacedName{{Namespace: cluster.Namespace, Name: "thinlvm-controller"}, {Namespace: "kube-system", Name: "thinlvm-scheduler"}} {
		lease := &coordinationv1.Lease{}
		if err := k.Client.Get(ctx, l, lease); err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			t.Errorf("lease %s: %v, holder %v", l, err, lease.Spec.HolderIdentity)
		}
	}
	// The processes of the pods that exist (a deleted node's are gone
	// with it); the VM node's run in the VM.
	started := map[string]bool{}
	for _, p := range k.Procs() {
		started[p] = true
	}
	running := 0
	for _, p := range pods.Items {
		for _, ct := range p.Spec.Containers {
			name := ct.Name + "@" + p.Name
			if !started[name] {
				continue
			}
			running++
			if !k.Alive(name) {
				t.Errorf("%s exited:\n%s", name, k.Log(name))
			}
		}
	}
	if running < 10 {
		t.Errorf("%d processes run for the install's pods, want the controllers', schedulers' and fake nodes'", running)
	}
}

// Each component's ServiceAccount can do what it needs and no more: a few
// verbs it must not have, asked of the API server's authorizer.
func TestLeastPrivilege(t *testing.T) {
	sa := func(name string) string { return "system:serviceaccount:" + cluster.Namespace + ":" + name }
	for _, tt := range []struct {
		user                          string
		verb, group, resource, namesp string
		allowed                       bool
	}{
		{sa("thinlvm-node"), "patch", "thinlvm.io", "lvmnodes/status", "", true},
		{sa("thinlvm-node"), "patch", "thinlvm.io", "lvmnodes", "", false},
		{sa("thinlvm-node"), "create", "", "persistentvolumes", "", false},
		{sa("thinlvm-node"), "list", "", "secrets", "default", false},
		{sa("thinlvm-node"), "create", "thinlvm.io", "logicalvolumes", "", false},
		{sa("thinlvm-controller"), "create", "thinlvm.io", "logicalvolumes", "", true},
		{sa("thinlvm-controller"), "list", "", "secrets", "default", false},
		{sa("thinlvm-controller"), "delete", "", "nodes", "", false},
		{sa("thinlvm-scheduler"), "list", "thinlvm.io", "lvmnodes", "", true},
		{sa("thinlvm-scheduler"), "update", "thinlvm.io", "lvmnodes", "", false},
		{sa("thinlvm-scheduler"), "create", "", "persistentvolumes", "", false},
	} {
		t.Run(fmt.Sprintf("%s %s %s", strings.TrimPrefix(tt.user, "system:serviceaccount:"), tt.verb, tt.resource), func(t *testing.T) {
			resource, sub, _ := strings.Cut(tt.resource, "/")
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: tt.user,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + cluster.Namespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: tt.verb, Group: tt.group, Resource: resource, Subresource: sub,
					Namespace: tt.namesp}}}
			if err := k.Client.Create(ctx, sar); err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed != tt.allowed {
				t.Errorf("allowed %t, want %t (%s)", sar.Status.Allowed, tt.allowed, sar.Status.Reason)
			}
		})
	}
}

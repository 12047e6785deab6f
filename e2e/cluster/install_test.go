package cluster_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"

	"github.com/thinlvm/thinlvm/e2e/cluster"
)

// deploy/ as `kubectl apply -k` installed it: the Deployments' and the
// DaemonSet's pods are Running (the real node's kubelet runs its pod; on
// the simulated nodes kwok reports their status and the harness runs their
// programs), the leader-elected components hold their leases, and every
// process the harness started for them still runs.
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
	// with it); the real node's are its kubelet's, ready.
	if p := nodePluginPod(t); !podReady(p) {
		t.Errorf("thinlvm's pod on the real node is not ready: %+v", p.Status.ContainerStatuses)
	}
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
		{sa("thinlvm-node"), "create", "authentication.k8s.io", "tokenreviews", "", true}, // its metrics' callers (metrics-rbac.yaml)
		{sa("thinlvm-node"), "create", "", "serviceaccounts/token", "thinlvm-system", false},
		{sa("thinlvm-controller"), "create", "thinlvm.io", "logicalvolumes", "", true},
		{sa("thinlvm-controller"), "list", "", "secrets", "default", false},
		{sa("thinlvm-controller"), "delete", "", "nodes", "", false},
		{sa("thinlvm-controller"), "get", "", "persistentvolumeclaims", "default", true}, // the claim's UID, for its Event
		{sa("thinlvm-controller"), "create", "events.k8s.io", "events", "default", true},
		{sa("thinlvm-controller"), "create", "", "persistentvolumeclaims", cluster.Namespace, true}, // the populator's prime claims
		{sa("thinlvm-controller"), "create", "", "persistentvolumeclaims", "default", false},
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

// A node agent acts only for its own node: with its pod-bound token (which
// names its node), node-a's agent is refused on node-b's LogicalVolume and
// LVMNode by deploy/'s ValidatingAdmissionPolicy, though RBAC lets it patch
// both kinds; on its own objects it goes through. A token of the same
// ServiceAccount bound to no pod (so naming no node) may write nothing.
func TestNodeIdentity(t *testing.T) {
	pods := &corev1.PodList{}
	if err := k.Client.List(ctx, pods, client.InNamespace(cluster.Namespace), client.MatchingLabels{"app.kubernetes.io/component": "node"}); err != nil {
		t.Fatal(err)
	}
	var agent *corev1.Pod
	for i := range pods.Items {
		if pods.Items[i].Spec.NodeName == "node-a" && pods.Items[i].DeletionTimestamp.IsZero() {
			agent = &pods.Items[i]
		}
	}
	if agent == nil {
		t.Fatal("no node pod on node-a")
	}
	cs, err := kubernetes.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	clientWith := func(bound *authenticationv1.BoundObjectReference) client.Client {
		t.Helper()
		tr, err := cs.CoreV1().ServiceAccounts(cluster.Namespace).CreateToken(ctx, agent.Spec.ServiceAccountName,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: bound}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg := rest.AnonymousClientConfig(k.Config)
		cfg.BearerToken = tr.Status.Token
		c, err := client.New(cfg, client.Options{Scheme: cluster.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	nodeA := clientWith(&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: agent.Name, UID: agent.UID})
	unbound := clientWith(nil)

	lvs := map[string]*thinlvmv1.LogicalVolume{}
	for _, n := range []string{"node-a", "node-b"} {
		lv := &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: "identity-" + n},
			Spec: thinlvmv1.LogicalVolumeSpec{Name: "identity-" + n, NodeName: n, Size: resource.MustParse("16Mi")}}
		create(t, lv)
		lvs[n] = lv
	}
	defer deleteAll(t, lvs["node-a"], lvs["node-b"])
	touch := func(c client.Client, obj client.Object, status bool) error {
		if err := k.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		switch o := obj.(type) {
		case *thinlvmv1.LogicalVolume:
			if status {
				o.Status.VolumeID = "forged"
			} else {
				o.Finalizers = nil // what leaks an LV
			}
		case *thinlvmv1.LVMNode:
			for i := range o.Status.DeviceClasses {
				o.Status.DeviceClasses[i].Available = resource.MustParse("1Pi") // room to attract pods
			}
		}
		if status {
			return c.Status().Patch(ctx, obj, patch)
		}
		return c.Patch(ctx, obj, patch)
	}
	refused := func(what string, err error, want string) {
		t.Helper()
		if err == nil || !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want refused with %q", what, err, want)
		}
	}
	refused("node-a strips node-b's LogicalVolume's finalizer", touch(nodeA, &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: "identity-node-b"}}, false),
		"may change only LogicalVolumes of its own node")
	refused("node-a writes node-b's LogicalVolume status", touch(nodeA, &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: "identity-node-b"}}, true),
		"may change only LogicalVolumes of its own node")
	refused("node-a writes node-b's LVMNode", touch(nodeA, &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}, true),
		"may change only its own LVMNode")
	refused("a token naming no node", touch(unbound, &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: "identity-node-a"}}, true),
		"names no node")
	// Its own objects: the status write goes through (the agent rewrites
	// it on its next reconcile).
	if err := touch(nodeA, &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: "identity-node-a"}}, true); err != nil {
		t.Errorf("node-a writes its own LogicalVolume status: %v", err)
	}
	own := &thinlvmv1.LVMNode{}
	if err := k.Client.Get(ctx, types.NamespacedName{Name: "node-a"}, own); err != nil {
		t.Fatal(err)
	}
	if err := nodeA.Status().Patch(ctx, own, client.MergeFrom(own.DeepCopy())); err != nil {
		t.Errorf("node-a writes its own LVMNode status: %v", err)
	}
	ln := &thinlvmv1.LVMNode{}
	if err := k.Client.Get(ctx, types.NamespacedName{Name: "node-b"}, ln); err != nil {
		t.Fatal(err)
	}
	for _, dc := range ln.Status.DeviceClasses {
		if dc.Available.Cmp(resource.MustParse("1Pi")) == 0 {
			t.Errorf("node-b's LVMNode advertises the forged room: %+v", dc)
		}
	}
}

// Metrics are served over HTTPS to callers the API server authenticates
// and authorizes: nobody without a token, a ServiceAccount without the
// thinlvm-metrics-reader role is refused; one bound to it reads the
// controller's metrics, the node agent's and lvmd's (through the agent).
func TestMetricsAreAuthenticated(t *testing.T) {
	addr := func(prefix string) string {
		t.Helper()
		for _, p := range k.Procs() {
			if !strings.HasPrefix(p, prefix) || !k.Alive(p) {
				continue
			}
			for _, a := range k.Args(p) {
				if v, ok := strings.CutPrefix(a, "--metrics-bind-address="); ok {
					return v
				}
			}
		}
		t.Fatalf("no running %s* with --metrics-bind-address", prefix)
		return ""
	}
	controller, agent := addr("thinlvm-controller@"), addr("thinlvm-node@")
	cs, err := kubernetes.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		t.Helper()
		if err := cluster.IgnoreAlreadyExists(k.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: sa}})); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	reader := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-metrics-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "thinlvm-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "prometheus"}}}
	if err := cluster.IgnoreAlreadyExists(k.Client.Create(ctx, reader)); err != nil {
		t.Fatal(err)
	}
	defer deleteAll(t, reader)
	allowed, stranger := token("prometheus"), token("stranger")
	// The servers' certificates are self-signed; what is tested is who may
	// read, and everything stays on 127.0.0.1.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(url, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct{ url, metric string }{
		{"https://" + controller + "/metrics", "thinlvm_controller_"},
		{"https://" + agent + "/metrics", "controller_runtime_reconcile_total"},
		{"https://" + agent + "/metrics/lvmd", "thinlvm_lvmd_"},
	} {
		if code, _ := get(tc.url, ""); code != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d, want 401", tc.url, code)
		}
		if code, _ := get(tc.url, stranger); code != http.StatusForbidden {
			t.Errorf("%s as a ServiceAccount without the reader role: %d, want 403", tc.url, code)
		}
		// RBAC caches settle within a second or two.
		var code int
		var body string
		waitFor(t, tc.url+" for the reader", 30*time.Second, func() (bool, error) {
			code, body = get(tc.url, allowed)
			return code == http.StatusOK, nil
		})
		if !strings.Contains(body, tc.metric) {
			t.Errorf("%s: no %s metrics in %d bytes", tc.url, tc.metric, len(body))
		}
	}
	if strings.HasPrefix(controller, "0.0.0.0") || !strings.HasPrefix(controller, "127.0.0.1:") {
		t.Errorf("the harness serves the controller's metrics on %s, want loopback", controller)
	}
}

package compat_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8sversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
)

var (
	minor     = flag.String("compat.minor", "", "the Kubernetes minor whose control plane to run (1.34, 1.35, 1.36); empty: the product's (the newest)")
	kustomize = flag.Bool("compat.kustomize", false, "install with kubectl apply -k deploy/ (deploy/k8s<minor>) instead of the Helm chart")

	k   *cluster.Cluster
	ctx = context.Background()
)

// TestMain starts the minor's control plane and installs thinlvm on it:
// the simulated nodes are each test's own.
func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	start, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	tb, err := cluster.StartTestbed(start, cluster.TestbedOptions{Log: os.Stderr, NoVM: true, K8sMinor: *minor, Kustomize: *kustomize})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: Kubernetes %s: %v\n", version(), err)
		return 1
	}
	defer tb.Stop()
	k = tb.Cluster
	code := m.Run()
	if code != 0 {
		tb.DumpLogs(os.Stderr)
	}
	return code
}

func version() string {
	if *minor == "" {
		return "(the product's minor)"
	}
	return *minor
}

// The API server is the minor's, and the install on it is whole: the
// CRDs established, the node-identity admission policy and its binding
// in place, and the scheduler Deployment runs the minor's scheduler image.
func TestInstalledOnTheMinor(t *testing.T) {
	v := serverVersion(t)
	if *minor != "" && !strings.HasPrefix(v.GitVersion, "v"+*minor+".") {
		t.Errorf("kube-apiserver %s, want %s", v.GitVersion, *minor)
	}
	t.Logf("kube-apiserver %s", v.GitVersion)
	crds := &unstructured.UnstructuredList{}
	crds.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinitionList"})
	if err := k.Client.List(ctx, crds); err != nil {
		t.Fatal(err)
	}
	ours := 0
	for _, crd := range crds.Items {
		if group, _, _ := unstructured.NestedString(crd.Object, "spec", "group"); group != thinlvmv1.GroupVersion.Group {
			continue
		}
		ours++
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		established := false
		for _, c := range conds {
			m, _ := c.(map[string]any)
			established = established || m["type"] == "Established" && m["status"] == "True"
		}
		if !established {
			t.Errorf("CRD %s not established: %v", crd.GetName(), conds)
		}
	}
	if ours != 4 {
		t.Errorf("%d thinlvm CRDs, want 4", ours)
	}
	policies := &admissionregistrationv1.ValidatingAdmissionPolicyList{}
	if err := k.Client.List(ctx, policies); err != nil {
		t.Fatal(err)
	}
	bindings := &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{}
	if err := k.Client.List(ctx, bindings); err != nil {
		t.Fatal(err)
	}
	if len(policies.Items) == 0 || len(bindings.Items) == 0 {
		t.Errorf("%d ValidatingAdmissionPolicies, %d bindings: want the node-identity policy and its binding", len(policies.Items), len(bindings.Items))
	}
	for _, p := range policies.Items {
		if tc := p.Status.TypeChecking; tc != nil && len(tc.ExpressionWarnings) > 0 {
			t.Errorf("policy %s: the API server's type check warns: %+v", p.Name, tc.ExpressionWarnings)
		}
	}
	d := &appsv1.Deployment{}
	if err := k.Client.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: "thinlvm-scheduler"}, d); err != nil {
		t.Fatal(err)
	}
	want := "-k8s" + *minor
	if *minor == "" {
		want = "-k8s1.37"
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, want) {
		t.Errorf("the scheduler Deployment runs %s, want the image tagged ...%s", img, want)
	}
}

// addNodes adds simulated nodes labelled label=true with the given thin
// pool sizes, each reporting its capacity.
func addNodes(t *testing.T, prefix, label string, sizes ...uint64) []string {
	t.Helper()
	names, err := k.AddLabelledNodes(ctx, prefix, label, sizes...)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// running waits until the pod runs and returns it.
func running(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	if err := k.WaitFor(ctx, "pod "+name+" to run", 3*time.Minute, func() (bool, error) {
		err := k.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, p)
		return err == nil && p.Status.Phase == corev1.PodRunning, client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatal(err)
	}
	return p
}

// placedAndBound waits until the pod runs and its claim is bound, and
// returns the pod's node, which must be the volume's.
func placedAndBound(t *testing.T, pod, claim string) string {
	t.Helper()
	node := running(t, pod).Spec.NodeName
	v, err := k.WaitBound(ctx, "default", claim, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if v.LV.Spec.NodeName != node {
		t.Errorf("claim %s: volume on %s, pod on %s", claim, v.LV.Spec.NodeName, node)
	}
	return node
}

func cleanup(t *testing.T, objs ...client.Object) {
	t.Helper()
	if err := k.DeleteAndWait(ctx, 2*time.Minute, objs...); err != nil {
		t.Error(err)
	}
}

// A WaitForFirstConsumer VM disk made from a golden image lands on a node
// that holds the image's base (Ready on 2 of 4 nodes), and binds. The
// simulated nodes have no devices to populate a base into, so the two
// holders get a sealed base LV in their simulated lvm; their agents find
// and report it as they would a populated one.
func TestGoldenVMDiskOnTheBaseNode(t *testing.T) {
	nodes := addNodes(t, "gold", "gold", 0, 0, 0, 0)
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: "http://127.0.0.1:1/unreachable.img", SHA256: strings.Repeat("0", 64)}},
		Size:   resource.MustParse("2Gi")}}
	if err := k.CreateAll(ctx, gi); err != nil {
		t.Fatal(err)
	}
	defer cleanup(t, gi)
	for _, n := range nodes[:2] {
		if err := k.AddFakeBase(n, gi); err != nil {
			t.Fatal(err)
		}
	}
	// Any change of the GoldenImage makes every agent look at its bases.
	patch := client.MergeFrom(gi.DeepCopy())
	gi.Annotations = map[string]string{"test/touch": "1"}
	if err := k.Client.Patch(ctx, gi, patch); err != nil {
		t.Fatal(err)
	}
	if err := k.WaitFor(ctx, "the GoldenImage Ready on 2 nodes", time.Minute, func() (bool, error) {
		err := k.Client.Get(ctx, client.ObjectKeyFromObject(gi), gi)
		return err == nil && gi.Status.ReadyNodes == 2, err
	}); err != nil {
		t.Fatal(err)
	}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "thinlvm-golden"}, Provisioner: thinlvmv1.DriverName,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), Parameters: map[string]string{"thinlvm.io/golden-image": "ubuntu"}}
	if err := cluster.IgnoreAlreadyExists(k.Client.Create(ctx, sc)); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := k.WaitCapacityFor(ctx, n, sc.Name); err != nil {
			t.Fatal(err)
		}
	}
	var objs []client.Object
	per := map[string]int{}
	for i := range 4 {
		name := fmt.Sprintf("vm-disk-%d", i)
		claim, pod := cluster.Claim(name, sc.Name, "10Gi", true), cluster.Pod(name, true, cluster.Labelled("gold"), name)
		objs = append(objs, pod, claim)
		if err := k.CreateAll(ctx, claim, pod); err != nil {
			t.Fatal(err)
		}
		per[placedAndBound(t, name, name)]++ // one VM at a time, as a user starts them
	}
	if per[nodes[0]] != 2 || per[nodes[1]] != 2 {
		t.Errorf("placement %v: want 2 VM disks on each of %s and %s (the base's nodes)", per, nodes[0], nodes[1])
	}
	cleanup(t, objs...)
}

// A database's claim goes to the node with the most room left (deploy/'s
// capacityStrategy LeastAllocated; with deploy/'s overprovision ratio of 4
// a 20 GiB claim leaves 50, 92 and 83% of the three nodes), and binds
// there.
func TestDatabaseClaimOnTheRoomiestNode(t *testing.T) {
	nodes := addNodes(t, "db", "db", 10<<30, 60<<30, 30<<30)
	claim, pod := cluster.Claim("db-data", cluster.FilesystemClass, "20Gi", false), cluster.Pod("db", false, cluster.Labelled("db"), "db-data")
	if err := k.CreateAll(ctx, claim, pod); err != nil {
		t.Fatal(err)
	}
	defer cleanup(t, pod, claim)
	if got := placedAndBound(t, "db", "db-data"); got != nodes[1] {
		t.Errorf("the database is on %s, want %s (the largest thin pool, 60 GiB; the others 10 and 30)", got, nodes[1])
	}
}

// A pod made again for its bound claims (a StatefulSet pod re-created, a
// VM restarted on its disk) is scheduled again, to the claims' node.
func TestPodWithBoundClaimsSchedulesAgain(t *testing.T) {
	addNodes(t, "again", "again", 0, 0)
	claims := []client.Object{cluster.Claim("again-root", cluster.BlockClass, "2Gi", true), cluster.Claim("again-data", cluster.BlockClass, "1Gi", true)}
	pod := cluster.Pod("again", true, cluster.Labelled("again"), "again-root", "again-data")
	if err := k.CreateAll(ctx, append(claims, pod)...); err != nil {
		t.Fatal(err)
	}
	defer cleanup(t, append([]client.Object{pod}, claims...)...)
	first := placedAndBound(t, "again", "again-root")
	if err := k.DeleteAndWait(ctx, 2*time.Minute, pod); err != nil {
		t.Fatal(err)
	}
	pod = cluster.Pod("again", true, cluster.Labelled("again"), "again-root", "again-data")
	if err := k.CreateAll(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := placedAndBound(t, "again", "again-data"); got != first {
		t.Errorf("the re-created pod is on %s, its volumes on %s", got, first)
	}
}

// The optional scheduler-name policy (deploy/scheduler-name). From 1.36
// the API server serves MutatingAdmissionPolicy: a pod created in a
// labelled namespace gets schedulerName thinlvm-scheduler; one that names
// another scheduler keeps it; a pod in an unlabelled namespace keeps the
// default. Before 1.36 (a beta API, off by default) the policy does not
// apply, and kubectl says why: the documented degradation.
func TestSchedulerNamePolicy(t *testing.T) {
	v := serverVersion(t)
	served := !(v.Major == "1" && (strings.HasPrefix(v.Minor, "34") || strings.HasPrefix(v.Minor, "35")))
	err := k.ApplyKustomization(ctx, deployPath("scheduler-name"))
	if !served {
		if err == nil || !strings.Contains(err.Error(), "MutatingAdmissionPolicy") {
			t.Fatalf("Kubernetes %s.%s: applying the policy: %v; want kubectl to refuse a MutatingAdmissionPolicy it does not serve", v.Major, v.Minor, err)
		}
		t.Logf("Kubernetes %s.%s does not serve MutatingAdmissionPolicy v1: %v", v.Major, v.Minor, err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, o := range []client.Object{&admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "thinlvm-scheduler-name"}},
			&admissionregistrationv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "thinlvm-scheduler-name"}}} {
			if err := k.Client.Delete(ctx, o); err != nil {
				t.Error(err)
			}
		}
	}()
	labelled := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vms", Labels: map[string]string{"thinlvm.io/scheduler": "thinlvm-scheduler"}}}
	plain := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}
	if err := k.CreateAll(ctx, labelled, plain); err != nil {
		t.Fatal(err)
	}
	defer cleanup(t, labelled, plain)
	for _, ns := range []string{labelled.Name, plain.Name} {
		if err := k.WaitFor(ctx, "the default ServiceAccount of "+ns, time.Minute, func() (bool, error) {
			err := k.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
			return err == nil, client.IgnoreNotFound(err)
		}); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(ns, name, scheduler string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{SchedulerName: scheduler,
			// Nothing places it: a toleration-free pod asking for a node
			// label no node has stays Pending whichever scheduler has it.
			NodeSelector: map[string]string{"thinlvm.io/test": "nowhere"},
			Containers:   []corev1.Container{{Name: "c", Image: "pause"}}}}
	}
	// The policy's type check and its informer take a moment after it is
	// made: the first pod is retried until the policy has it.
	var got corev1.Pod
	if err := k.WaitFor(ctx, "the policy to set a pod's scheduler", time.Minute, func() (bool, error) {
		p := pod(labelled.Name, "", "")
		p.GenerateName = "vm-launcher-"
		if err := k.Client.Create(ctx, p); err != nil {
			return false, err
		}
		got = *p
		if p.Spec.SchedulerName == "thinlvm-scheduler" {
			return true, nil
		}
		return false, k.Client.Delete(ctx, p)
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{pod(labelled.Name, "other", "my-scheduler"), "my-scheduler"},
		{pod(labelled.Name, "defaulted", ""), "thinlvm-scheduler"},
		{pod(plain.Name, "elsewhere", ""), "default-scheduler"},
	} {
		if err := k.Client.Create(ctx, c.pod); err != nil {
			t.Fatal(err)
		}
		if c.pod.Spec.SchedulerName != c.want {
			t.Errorf("pod %s/%s: schedulerName %q, want %q", c.pod.Namespace, c.pod.Name, c.pod.Spec.SchedulerName, c.want)
		}
	}
	t.Logf("pod %s/%s: schedulerName %s", got.Namespace, got.Name, got.Spec.SchedulerName)
}

// deployPath is a directory of the repository's deploy/.
func deployPath(dir string) string {
	p, err := filepath.Abs(filepath.Join("..", "..", "deploy", dir))
	if err != nil {
		panic(err)
	}
	return p
}

// serverVersion is the API server's version, as discovery reports it.
func serverVersion(t *testing.T) *k8sversion.Info {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

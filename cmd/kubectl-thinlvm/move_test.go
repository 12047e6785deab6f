package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/testutil"
)

// The moves themselves (the copy, the claim bound again, the old volume
// deleted, a kill at each step) run on real-LVM nodes in e2e/migration;
// here, what each command refuses and what a dry run prints, on objects as
// thinlvm and the controllers leave them.

// seedMoves makes namespace moving's claims on node-a, their pods and
// workloads, and node-c with room; it removes them when the test ends.
func seedMoves(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c := env.Client
	q := resource.MustParse
	var made []client.Object
	create := func(o client.Object) {
		t.Helper()
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		made = append(made, o)
	}
	t.Cleanup(func() {
		for _, o := range made {
			forceDelete(t, o)
		}
	})
	if err := client.IgnoreAlreadyExists(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "moving"}})); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"node-a", "node-c"} {
		create(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}}
	create(ln)
	ln.Status.DeviceClasses = []thinlvmv1.DeviceClassStatus{{Name: "ssd", Default: true, VolumeGroup: "vg0", ThinPool: "pool0",
		PoolSize: q("80Gi"), Available: q("40Gi"), DataPercent: "1.00", MetadataPercent: "1.00", OverprovisionRatio: "2"}}
	if err := c.Status().Update(ctx, ln); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"db", "bare", "web", "foreign", "pending"} {
		driver := thinlvmv1.DriverName
		if name == "foreign" {
			driver = "other.example"
		}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "moving"}, Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To("thinlvm"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q("8Gi")}}}}
		if name != "pending" {
			pvc.Spec.VolumeName = "pv-moving-" + name
		}
		create(pvc)
		if name == "pending" {
			continue
		}
		pvc.Status.Phase = corev1.ClaimBound
		if err := c.Status().Update(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvc.Spec.VolumeName}, Spec: corev1.PersistentVolumeSpec{
			Capacity: corev1.ResourceList{corev1.ResourceStorage: q("8Gi")}, AccessModes: pvc.Spec.AccessModes, StorageClassName: "thinlvm",
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "moving", Name: name, UID: pvc.UID},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: pvc.Spec.VolumeName}}}}
		create(pv)
		pv.Status.Phase = corev1.VolumeBound
		if err := c.Status().Update(ctx, pv); err != nil {
			t.Fatal(err)
		}
		create(&thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: pv.Name}, Spec: thinlvmv1.LogicalVolumeSpec{
			Name: pv.Name, NodeName: "node-a", DeviceClass: "ssd", Size: q("8Gi"),
			Source: &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceGoldenImage, Name: "ubuntu-24.04"}}})
	}
	// Pods: bare-pod (no controller) uses bare; db-0 is deployment/db's (one
	// replica), web-0 deployment/web's (three).
	for _, w := range []struct {
		name     string
		replicas int32
	}{{"db", 1}, {"web", 3}} {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: "moving"}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(w.replicas), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name}},
			Template: podTemplate(w.name)}}
		create(d)
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: w.name + "-6f", Namespace: "moving",
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
			Spec: appsv1.ReplicaSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template}}
		create(rs)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: w.name + "-0", Namespace: "moving", Labels: map[string]string{"app": w.name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
			Spec: podTemplate(w.name).Spec}
		create(pod)
	}
	create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare-pod", Namespace: "moving"}, Spec: podTemplate("bare").Spec})
}

// forceDelete deletes an object, finalizers and all: no controller here
// removes the API server's protections.
func forceDelete(t *testing.T, o client.Object) {
	t.Helper()
	ctx, c := context.Background(), env.Client
	if c.Get(ctx, client.ObjectKeyFromObject(o), o) == nil && len(o.GetFinalizers()) > 0 {
		o.SetFinalizers(nil)
		if err := client.IgnoreNotFound(c.Update(ctx, o)); err != nil {
			t.Error(err)
		}
	}
	if err := client.IgnoreNotFound(c.Delete(ctx, o)); err != nil {
		t.Error(err)
	}
}

func podTemplate(claim string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": claim}}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
		Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}}
}

// versions are the resource versions of every object a move or an
// evacuation may change.
func versions(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range []client.ObjectList{&corev1.PersistentVolumeClaimList{}, &corev1.PersistentVolumeList{}, &corev1.PodList{},
		&corev1.NodeList{}, &appsv1.DeploymentList{}, &thinlvmv1.LogicalVolumeList{}} {
		if err := env.Client.List(context.Background(), l); err != nil {
			t.Fatal(err)
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range items {
			o := item.(client.Object)
			out[fmt.Sprintf("%T %s/%s", o, o.GetNamespace(), o.GetName())] = o.GetResourceVersion()
		}
	}
	return out
}

func TestMoveRefusals(t *testing.T) {
	seedMoves(t)
	before := versions(t)
	for _, c := range []struct{ args, want string }{
		{"move -n moving nothere --to node-c", "claim moving/nothere not found"},
		{"move -n moving pending --to node-c", "claim moving/pending is Pending, not Bound: it has no volume to move yet"},
		{"move -n moving foreign --to node-c", "claim moving/foreign's persistentvolume/pv-moving-foreign is not thinlvm's"},
		{"move -n moving db --to node-x", "node node-x does not run thinlvm (no LVMNode node-x)"},
		{"move -n moving db --to node-b", "node node-b's device class ssd has room for 0, the volume is 8Gi"},
		{"move -n moving db --to node-c", "claim moving/db is in use by pod(s) db-0: stop them first"},
		{"move -n moving bare --to node-c --scale-down", "pod bare-pod: it has no controller: delete it yourself"},
		{"move -n moving web --to node-c --scale-down", "pod web-0: deployment/web has 3 replicas, not one"},
		{"move -n moving db", `required flag(s) "to" not set`},
		{"evacuate node-x", "node node-x not found"},
		{"evacuate node-a --parallel 0", "--parallel 0: want at least 1"},
		{"evacuate node-a --to node-a", "--to names the node evacuated, node-a"},
	} {
		t.Run(c.args, func(t *testing.T) {
			_, _, err := kubectl(t, strings.Fields(c.args)...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v, want an error with %q", err, c.want)
			}
		})
	}
	out, _, err := kubectl(t, "move", "-n", "moving", "db", "--to", "node-a")
	if err != nil || out != "claim moving/db is on node node-a: nothing to move\n" {
		t.Errorf("a move to the claim's own node: %q, %v", out, err)
	}
	if after := versions(t); !maps.Equal(before, after) {
		t.Errorf("a refused move changed objects: %v, then %v", before, after)
	}
}

// A dry run prints each step it would take, and changes nothing.
func TestMoveDryRun(t *testing.T) {
	seedMoves(t)
	before := versions(t)
	for _, c := range []struct{ name, args string }{
		{"move-dry-run", "move -n moving db --to node-c --scale-down --dry-run"},
		{"evacuate-dry-run", "evacuate node-a --scale-down --dry-run --parallel 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, err := kubectl(t, strings.Fields(c.args)...)
			if c.name == "evacuate-dry-run" {
				// bare's and web's pods cannot be stopped: refused, reported.
				if err == nil || !strings.Contains(err.Error(), "2 of 3 claims on node node-a were not moved") {
					t.Errorf("evacuate: %v, want 2 of 3 claims not moved", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			golden(t, c.name, out+"--- stderr\n"+errOut)
		})
	}
	if after := versions(t); !maps.Equal(before, after) {
		t.Errorf("a dry run changed objects: %v, then %v", before, after)
	}
}

// pluginClient is the client the plugin makes from the test's kubeconfig
// (its RESTMapper finds kinds served after it starts).
func pluginClient(t *testing.T) client.Client {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(true)
	flags.KubeConfig = &kubeconfig
	c, err := (&options{config: flags}).client()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// installKubeVirtCRDs serves KubeVirt's two kinds the plugin reads.
func installKubeVirtCRDs(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join("testdata", "kubevirt-crds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		crd := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &crd.Object); err != nil {
			t.Fatal(err)
		}
		if err := client.IgnoreAlreadyExists(env.Client.Create(ctx, crd)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "KubeVirt's kinds to be served", func() bool {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(virtualMachine.GroupVersion().WithKind("VirtualMachineList"))
		return pluginClient(t).List(ctx, l) == nil
	})
}

// A move with --scale-down stops a KubeVirt VirtualMachine (run strategy
// Halted, what it was kept) and, when the pods are gone, holds the old
// volume and makes the clone on the target. The copy never comes here (no
// provisioner): the move times out, and says a run again goes on waiting.
func TestMoveStopsAVirtualMachine(t *testing.T) {
	seedMoves(t)
	installKubeVirtCRDs(t)
	ctx := context.Background()
	c := env.Client
	vm := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"runStrategy": "Always"}}}
	vm.SetGroupVersionKind(virtualMachine)
	vm.SetNamespace("moving")
	vm.SetName("vm1")
	if err := c.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	vmi := &unstructured.Unstructured{Object: map[string]any{}}
	vmi.SetGroupVersionKind(virtualMachineInstance)
	vmi.SetNamespace("moving")
	vmi.SetName("vm1")
	vmi.SetOwnerReferences([]metav1.OwnerReference{*metav1.NewControllerRef(vm, virtualMachine)})
	if err := c.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	launcher := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-vm1-x7k2p", Namespace: "moving",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vmi, virtualMachineInstance)}}, Spec: podTemplate("bare").Spec}
	if err := c.Create(ctx, launcher); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, o := range []client.Object{launcher, vmi, vm} {
			_ = c.Delete(ctx, o)
		}
	})
	// bare-pod uses the claim too, and has no controller: out of the way.
	if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare-pod", Namespace: "moving"}}); err != nil {
		t.Fatal(err)
	}

	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, _, err := kubectl(t, "move", "-n", "moving", "bare", "--to", "node-c", "--scale-down", "--timeout", "20s")
		done <- result{out, err}
	}()
	// KubeVirt's part: the VM halted, its launcher pod goes.
	testutil.Eventually(t, "the VM to be halted", func() bool {
		got := vm.DeepCopy()
		if c.Get(ctx, client.ObjectKeyFromObject(vm), got) != nil {
			return false
		}
		s, _, _ := unstructured.NestedString(got.Object, "spec", "runStrategy")
		return s == "Halted"
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
		t.Fatal(err)
	}
	if a := vm.GetAnnotations(); a[annStoppedFor] != "bare" || a[annStoppedFrom] != "runStrategy=Always" {
		t.Errorf("the halted VM's annotations: %v", a)
	}
	if err := c.Delete(ctx, launcher); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err == nil || !strings.Contains(r.err.Error(), "run the move again to go on waiting") {
		t.Fatalf("the move without a provisioner: %v, want a timeout waiting for the copy\n%s", r.err, r.out)
	}
	pv := &corev1.PersistentVolume{}
	if err := c.Get(ctx, client.ObjectKey{Name: "pv-moving-bare"}, pv); err != nil {
		t.Fatal(err)
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain || pv.Annotations[annMoveReclaim] != "Delete" {
		t.Errorf("the old volume: reclaim policy %s, annotations %v; want Retain, and Delete kept", pv.Spec.PersistentVolumeReclaimPolicy, pv.Annotations)
	}
	clone := &corev1.PersistentVolumeClaim{}
	name := (&moveRun{claimRun: claimRun{ns: "moving", claim: "bare"}}).cloneName()
	if err := c.Get(ctx, client.ObjectKey{Namespace: "moving", Name: name}, clone); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forceDelete(t, clone) })
	if a := clone.Annotations; a[annMoveOf] != "moving/bare" || a[annMoveTo] != "node-c" || a[annSelectedNode] != "node-c" ||
		clone.Spec.DataSource == nil || clone.Spec.DataSource.Name != "bare" || clone.Spec.Resources.Requests.Storage().String() != "8Gi" {
		t.Errorf("the clone claim: %v %+v", clone.Annotations, clone.Spec)
	}
	// Run again toward another node: refused, naming the move begun.
	if _, _, err := kubectl(t, "move", "-n", "moving", "bare", "--to", "node-a"); err == nil || !strings.Contains(err.Error(), "a move of moving/bare to node node-c has begun") {
		t.Errorf("a second move to another node: %v", err)
	}
}

// What stop changes, start sets back, for each kind; two claims of one
// workload moved at once: the workload starts when the second is done.
func TestStopAndStart(t *testing.T) {
	seedMoves(t)
	installKubeVirtCRDs(t)
	ctx := context.Background()
	cfg := pluginClient(t)
	m := &mover{c: cfg, out: io.Discard}
	d := &appsv1.Deployment{}
	if err := cfg.Get(ctx, client.ObjectKey{Namespace: "moving", Name: "db"}, d); err != nil {
		t.Fatal(err)
	}
	vm := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"running": true}}}
	vm.SetGroupVersionKind(virtualMachine)
	vm.SetNamespace("moving")
	vm.SetName("vm2")
	if err := cfg.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cfg.Delete(ctx, vm) })
	one, two := &moveRun{claimRun: claimRun{mover: m, ns: "moving", claim: "db"}}, &moveRun{claimRun: claimRun{mover: m, ns: "moving", claim: "web"}}
	for _, w := range []workload{{d}, {vm}} {
		for _, r := range []*moveRun{one, two} {
			if err := r.stop(ctx, w); err != nil {
				t.Fatalf("stop %s for %s: %v", w, r.claim, err)
			}
		}
	}
	if err := cfg.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 0 || d.Annotations[annStoppedFor] != "db,web" || d.Annotations[annStoppedFrom] != "1" {
		t.Errorf("the stopped Deployment: %d replicas, %v", *d.Spec.Replicas, d.Annotations)
	}
	if err := cfg.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := unstructured.NestedString(vm.Object, "spec", "runStrategy"); s != "Halted" || vm.GetAnnotations()[annStoppedFrom] != "running=true" {
		t.Errorf("the stopped VM: run strategy %q, %v", s, vm.GetAnnotations())
	}
	if _, found, _ := unstructured.NestedBool(vm.Object, "spec", "running"); found {
		t.Error("the stopped VM keeps spec.running beside its run strategy")
	}
	// The first move done: both stay stopped.
	if err := one.startWorkloads(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 0 || d.Annotations[annStoppedFor] != "web" {
		t.Errorf("after the first move: %d replicas, %v", *d.Spec.Replicas, d.Annotations)
	}
	// The second: both start, as they were.
	if err := two.startWorkloads(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 1 || d.Annotations[annStoppedFor] != "" || d.Annotations[annStoppedFrom] != "" {
		t.Errorf("after both moves: %d replicas, %v", *d.Spec.Replicas, d.Annotations)
	}
	if err := cfg.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
		t.Fatal(err)
	}
	running, _, _ := unstructured.NestedBool(vm.Object, "spec", "running")
	_, hasStrategy, _ := unstructured.NestedString(vm.Object, "spec", "runStrategy")
	if !running || hasStrategy || len(vm.GetAnnotations()) != 0 {
		t.Errorf("the VM after both moves: running %v, run strategy set %v, annotations %v", running, hasStrategy, vm.GetAnnotations())
	}
}

// evacuate's placement: largest claims first, a node holding the claim's
// golden base before a roomier one, the room each placement takes
// counted, --to limiting the nodes, a claim no node has room for
// reported.
func TestEvacuatePlacement(t *testing.T) {
	ctx := context.Background()
	q := resource.MustParse
	gi := &thinlvmv1.GoldenImage{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "ubuntu-24.04"}, gi); err != nil {
		t.Fatal(err)
	}
	for _, n := range []struct {
		name, room string
		base       bool
	}{{"node-p", "10Gi", true}, {"node-q", "30Gi", false}} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}
		ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: n.name}}
		for _, o := range []client.Object{node, ln} {
			if err := env.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { forceDelete(t, o) })
		}
		ln.Status.DeviceClasses = []thinlvmv1.DeviceClassStatus{{Name: "ssd", Default: true, Available: q(n.room)}}
		if n.base {
			ln.Status.GoldenBases = []thinlvmv1.GoldenBaseStatus{{Name: gi.Name, LV: thinlvmv1.BaseLVName(gi), DeviceClass: "ssd", State: thinlvmv1.GoldenBaseReady}}
		}
		if err := env.Client.Status().Update(ctx, ln); err != nil {
			t.Fatal(err)
		}
	}
	m := &mover{c: pluginClient(t), out: io.Discard}
	todo := func() []*evacuation {
		return []*evacuation{
			{ns: "p", claim: "disk-1", class: "ssd", size: q("8Gi"), base: "ubuntu-24.04"},
			{ns: "p", claim: "disk-2", class: "ssd", size: q("8Gi"), base: "ubuntu-24.04"},
			{ns: "p", claim: "data", class: "ssd", size: q("8Gi")},
			{ns: "p", claim: "big", class: "", size: q("20Gi")},
		}
	}
	got := func(es []*evacuation) map[string]string {
		out := map[string]string{}
		for _, e := range es {
			out[e.claim] = e.to
			if e.to == "" {
				out[e.claim] = e.result
			}
		}
		return out
	}
	all := todo()
	if err := m.placeAll(ctx, "node-a", nil, all); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"big": "node-q", "disk-1": "node-p", "disk-2": "node-q", "data": `no node has room for 8Gi in device class "ssd"`}
	if g := got(all); !maps.Equal(g, want) {
		t.Errorf("placements %v, want %v", g, want)
	}
	only := todo()
	if err := m.placeAll(ctx, "node-a", []string{"node-q"}, only); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"big": "node-q", "disk-1": "node-q", "disk-2": `no node has room for 8Gi in device class "ssd"`, "data": `no node has room for 8Gi in device class "ssd"`}
	if g := got(only); !maps.Equal(g, want) {
		t.Errorf("with --to node-q: placements %v, want %v", g, want)
	}
	if err := m.placeAll(ctx, "node-a", []string{"node-z"}, todo()); err == nil || !strings.Contains(err.Error(), "node node-z, which does not exist") {
		t.Errorf("--to an unknown node: %v", err)
	}
}

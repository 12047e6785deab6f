package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/controller/reconciler"
	"github.com/thinlvm/thinlvm/internal/envtest"
	"github.com/thinlvm/thinlvm/internal/testutil"
)

var k8s client.Client

// stillRunning is a node whose agent outlives its Node: before every write
// of the node cleanup to one of its LogicalVolumes, liveAgent acts on it as
// the agent does.
const stillRunning = "still-running"

// agentLooks counts liveAgent's turns.
var agentLooks atomic.Int32

// liveAgent does what a live node agent does to a LogicalVolume of its
// node: it puts its finalizer back on one that is not being deleted.
func liveAgent(ctx context.Context, obj client.Object) {
	if lv, ok := obj.(*thinlvmv1.LogicalVolume); !ok || lv.Spec.NodeName != stillRunning {
		return
	}
	agentLooks.Add(1)
	lv := &thinlvmv1.LogicalVolume{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), lv); err != nil || !lv.DeletionTimestamp.IsZero() || controllerutil.ContainsFinalizer(lv, thinlvmv1.LogicalVolumeFinalizer) {
		return
	}
	patch := client.MergeFrom(lv.DeepCopy())
	controllerutil.AddFinalizer(lv, thinlvmv1.LogicalVolumeFinalizer)
	_ = k8s.Patch(ctx, lv, patch)
}

// agentBetween runs liveAgent before each write of the client it wraps.
type agentBetween struct{ client.Client }

func (c agentBetween) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	liveAgent(ctx, obj)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c agentBetween) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	liveAgent(ctx, obj)
	return c.Client.Update(ctx, obj, opts...)
}

func (c agentBetween) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	liveAgent(ctx, obj)
	return c.Client.Delete(ctx, obj, opts...)
}

func TestMain(m *testing.M) {
	// The VolumeSnapshot CRDs, before the manager: the GoldenImage
	// reconciler watches VolumeSnapshots when the API server serves them.
	o := envtest.Options{BeforeManager: func(env *envtest.Env) error { return installSnapshotCRDs(env.Config) }}
	envtest.MainWithManager(m, o, func(_ context.Context, env *envtest.Env, mgr ctrl.Manager) error {
		k8s = env.Client
		return errors.Join(
			(&reconciler.NodeReconciler{Client: agentBetween{mgr.GetClient()}, APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr),
			(&reconciler.GoldenImageReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr),
			(&reconciler.GoldenImageChannelReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("thinlvm-controller")}).SetupWithManager(mgr))
	})
}

func TestDeletedNodeIsCleanedUp(t *testing.T) {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lost"}}
	kept := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}
	// A Node an earlier version held: the finalizer is taken off.
	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{reconciler.NodeFinalizer}}}
	for _, o := range []client.Object{node, kept, old, &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: "lost"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "default"}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}},
	} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	claim := &corev1.PersistentVolumeClaim{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: "default", Name: "data"}, claim); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-lost"}, Spec: corev1.PersistentVolumeSpec{
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		ClaimRef:               &corev1.ObjectReference{Namespace: "default", Name: "data", UID: claim.UID},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: thinlvmv1.DriverName, VolumeHandle: "pvc-lost"}},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: thinlvmv1.TopologyKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"lost"}}}}}}},
	}}
	lv := &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-lost", Finalizers: []string{thinlvmv1.LogicalVolumeFinalizer}},
		Spec: thinlvmv1.LogicalVolumeSpec{Name: "pvc-lost", NodeName: "lost", Size: resource.MustParse("1Gi")}}
	other := &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-kept", Finalizers: []string{thinlvmv1.LogicalVolumeFinalizer}},
		Spec: thinlvmv1.LogicalVolumeSpec{Name: "pvc-kept", NodeName: "elsewhere", Size: resource.MustParse("1Gi")}}
	// Claims the cleanup leaves: one bound to a thinlvm PV of another node,
	// one to another driver's PV pinned to the lost node by thinlvm's key.
	var keptPVs []client.Object
	for _, c := range []struct{ claim, driver, node string }{{"kept-data", thinlvmv1.DriverName, "elsewhere"}, {"foreign-data", "other.csi.example.com", "lost"}} {
		claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: c.claim, Namespace: "default"}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if err := k8s.Create(ctx, claim); err != nil {
			t.Fatal(err)
		}
		kept := pv.DeepCopy()
		kept.Name, kept.Spec.ClaimRef = "pv-"+c.claim, &corev1.ObjectReference{Namespace: "default", Name: c.claim, UID: claim.UID}
		kept.Spec.CSI.Driver, kept.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values = c.driver, []string{c.node}
		keptPVs = append(keptPVs, kept)
	}
	for _, o := range append([]client.Object{pv, lv, other}, keptPVs...) {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "the old finalizer removed", func() bool {
		return k8s.Get(ctx, types.NamespacedName{Name: "held"}, old) == nil && len(old.Finalizers) == 0
	})
	time.Sleep(300 * time.Millisecond)
	for _, n := range []*corev1.Node{node, kept} {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(n), n); err != nil || len(n.Finalizers) != 0 {
			t.Errorf("node %s has finalizers %v (%v): thinlvm holds no Node", n.Name, n.Finalizers, err)
		}
	}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "pvc-lost"}, lv); err != nil || !lv.DeletionTimestamp.IsZero() {
		t.Fatalf("a live node's LogicalVolume was deleted: %v", err)
	}

	if err := k8s.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the node to go at once (no finalizer)", func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "lost"}, &corev1.Node{}))
	})
	testutil.Eventually(t, "the LogicalVolume to go", func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "pvc-lost"}, &thinlvmv1.LogicalVolume{}))
	})
	testutil.Eventually(t, "the claim to be deleted", func() bool {
		c := &corev1.PersistentVolumeClaim{}
		err := k8s.Get(ctx, types.NamespacedName{Namespace: "default", Name: "data"}, c)
		return apierrors.IsNotFound(err) || err == nil && !c.DeletionTimestamp.IsZero()
	})
	if err := k8s.Get(ctx, types.NamespacedName{Name: "pvc-kept"}, other); err != nil || !other.DeletionTimestamp.IsZero() {
		t.Errorf("another node's LogicalVolume was touched: %v", err)
	}
	for _, name := range []string{"kept-data", "foreign-data"} {
		c := &corev1.PersistentVolumeClaim{}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, c); err != nil || !c.DeletionTimestamp.IsZero() {
			t.Errorf("claim %s, not bound to a thinlvm volume of the lost node, was deleted: %v", name, err)
		}
	}
}

// A node deleted while the controller was down: its LogicalVolumes, seen at
// start, are cleaned up.
func TestNodeDeletedWhileDownIsCleanedUp(t *testing.T) {
	ctx := context.Background()
	lv := &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-orphan", Finalizers: []string{thinlvmv1.LogicalVolumeFinalizer}},
		Spec: thinlvmv1.LogicalVolumeSpec{Name: "pvc-orphan", NodeName: "gone-before", Size: resource.MustParse("1Gi")}}
	if err := k8s.Create(ctx, lv); err != nil { // its Node does not exist: as if deleted while nobody watched
		t.Fatal(err)
	}
	testutil.Eventually(t, "the orphan LogicalVolume to go", func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "pvc-orphan"}, &thinlvmv1.LogicalVolume{}))
	})
}

// A Node deleted while its agent still runs: the agent puts its finalizer
// back on every LogicalVolume of its node that is not being deleted, and
// here it does so before each write of the cleanup (agentBetween). No
// LogicalVolume may be left Terminating with the finalizer: once the agent
// is gone, nobody would remove it.
func TestCleanupRacesALiveAgent(t *testing.T) {
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: stillRunning}}); err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := range n {
		name := fmt.Sprintf("pvc-race-%d", i)
		lv := &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{thinlvmv1.LogicalVolumeFinalizer}},
			Spec: thinlvmv1.LogicalVolumeSpec{Name: name, NodeName: stillRunning, Size: resource.MustParse("1Gi")}}
		if err := k8s.Create(ctx, lv); err != nil {
			t.Fatal(err)
		}
	}
	if err := k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: stillRunning}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := range n {
		name := fmt.Sprintf("pvc-race-%d", i)
		for {
			lv := &thinlvmv1.LogicalVolume{}
			err := k8s.Get(ctx, types.NamespacedName{Name: name}, lv)
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("LogicalVolume %s left (deletionTimestamp %v, finalizers %v, %v)", name, lv.DeletionTimestamp, lv.Finalizers, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if got := agentLooks.Load(); got < n {
		t.Errorf("the agent looked %d times between the cleanup's writes, want at least %d", got, n)
	}
}

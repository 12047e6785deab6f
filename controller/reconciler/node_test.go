package reconciler_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/controller/reconciler"
	"github.com/thinlvm/thinlvm/e2e/envtest"
)

var k8s client.Client

func TestMain(m *testing.M) {
	env, err := envtest.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		os.Exit(1)
	}
	k8s = env.Client
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err == nil {
		err = (&reconciler.NodeReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr)
	}
	if err == nil {
		err = (&reconciler.GoldenImageReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() { _ = mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	_ = env.Stop()
	os.Exit(code)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
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
	for _, o := range []client.Object{pv, lv, other} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the old finalizer removed", func() bool {
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
	eventually(t, "the node to go at once (no finalizer)", func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "lost"}, &corev1.Node{}))
	})
	eventually(t, "the LogicalVolume to go", func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "pvc-lost"}, &thinlvmv1.LogicalVolume{}))
	})
	eventually(t, "the claim to be deleted", func() bool {
		c := &corev1.PersistentVolumeClaim{}
		err := k8s.Get(ctx, types.NamespacedName{Namespace: "default", Name: "data"}, c)
		return apierrors.IsNotFound(err) || err == nil && !c.DeletionTimestamp.IsZero()
	})
	if err := k8s.Get(ctx, types.NamespacedName{Name: "pvc-kept"}, other); err != nil || !other.DeletionTimestamp.IsZero() {
		t.Errorf("another node's LogicalVolume was touched: %v", err)
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
	eventually(t, "the orphan LogicalVolume to go", func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Name: "pvc-orphan"}, &thinlvmv1.LogicalVolume{}))
	})
}

package populator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/controller/cachetest"
	"github.com/thinlvm/thinlvm/controller/populator"
	"github.com/thinlvm/thinlvm/internal/envtest"
	"github.com/thinlvm/thinlvm/internal/testutil"
)

// The populator runs against a real API server. There is no
// kube-controller-manager: the tests take the PV controller's and the
// provisioner's steps themselves (a PV bound to the prime claim, the
// tenant's claim bound to the PV handed to it).
const ns = "thinlvm-system"

var (
	k8s client.Client
	// direct is a populator the tests call, beside the one the manager
	// runs, to see what one reconcile does.
	direct *populator.Reconciler
)

func TestMain(m *testing.M) {
	// The alpha gate lets a claim's dataSourceRef name a namespace, which
	// the populator refuses.
	envtest.MainWithManager(m, envtest.Options{FeatureGates: "CrossNamespaceVolumeDataSource=true"}, func(ctx context.Context, env *envtest.Env, mgr ctrl.Manager) error {
		k8s = env.Client
		// Retry is long: what wakes a waiting claim here is a watch.
		if err := (&populator.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("thinlvm-controller"),
			Namespace: ns, Retry: time.Hour}).SetupWithManager(mgr); err != nil {
			return err
		}
		direct = &populator.Reconciler{Client: k8s, APIReader: k8s, Recorder: mgr.GetEventRecorder("thinlvm-controller"), Namespace: ns}
		wfc, imm := storagev1.VolumeBindingWaitForFirstConsumer, storagev1.VolumeBindingImmediate
		for _, o := range []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "thin"}, Provisioner: thinlvmv1.DriverName, VolumeBindingMode: &wfc},
			&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "thin-now"}, Provisioner: thinlvmv1.DriverName, VolumeBindingMode: &imm},
			&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Provisioner: "ebs.csi.aws.com", VolumeBindingMode: &imm},
		} {
			if err := k8s.Create(ctx, o); err != nil {
				return err
			}
		}
		return nil
	})
}

func image(t *testing.T, name string) {
	t.Helper()
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: "http://127.0.0.1:1/" + name, SHA256: strings.Repeat("d", 64)}},
		Size:   resource.MustParse("2Gi")}}
	if err := k8s.Create(context.Background(), gi); err != nil {
		t.Fatal(err)
	}
}

// tenantClaim makes a claim in namespace whose dataSourceRef names a
// thinlvm object of kind.
func tenantClaim(t *testing.T, namespace, name, class, kind, source string) *corev1.PersistentVolumeClaim {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("3Gi")}},
			StorageClassName: ptr.To(class),
			VolumeMode:       ptr.To(corev1.PersistentVolumeBlock),
			DataSourceRef:    &corev1.TypedObjectReference{APIGroup: ptr.To(thinlvmv1.GroupVersion.Group), Kind: kind, Name: source},
		}}
	if err := k8s.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	return pvc
}

func get(t *testing.T, key types.NamespacedName) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{}
	if err := k8s.Get(context.Background(), key, pvc); err != nil {
		t.Fatal(err)
	}
	return pvc
}

// primeOf waits for the claim's prime claim.
func primeOf(t *testing.T, claim *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	t.Helper()
	prime := &corev1.PersistentVolumeClaim{}
	testutil.Eventually(t, "the prime claim is made", func() bool {
		return k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: populator.PrimeName(claim.UID)}, prime) == nil
	})
	return prime
}

// primeGone tells whether the prime claim is deleted: gone, or held only
// by kubernetes.io/pvc-protection, which no controller here removes.
func primeGone(claim *corev1.PersistentVolumeClaim) bool {
	prime := &corev1.PersistentVolumeClaim{}
	err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: populator.PrimeName(claim.UID)}, prime)
	return apierrors.IsNotFound(err) || err == nil && !prime.DeletionTimestamp.IsZero()
}

// finalizerGone tells whether the populator's finalizer left the claim (or
// the claim is gone).
func finalizerGone(t *testing.T, claim *corev1.PersistentVolumeClaim) bool {
	pvc := &corev1.PersistentVolumeClaim{}
	err := k8s.Get(context.Background(), client.ObjectKeyFromObject(claim), pvc)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err != nil || !controllerutil.ContainsFinalizer(pvc, populator.Finalizer)
}

// provision does what the provisioner and the PV controller do for a
// prime claim: a thinlvm PV bound to it, with the class's reclaim policy,
// and the claim bound to the PV.
func provision(t *testing.T, prime *corev1.PersistentVolumeClaim, node string) *corev1.PersistentVolume {
	t.Helper()
	ctx := context.Background()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-" + string(prime.UID), Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": thinlvmv1.DriverName}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("3Gi")},
			AccessModes:                   prime.Spec.AccessModes,
			VolumeMode:                    prime.Spec.VolumeMode,
			StorageClassName:              *prime.Spec.StorageClassName,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: prime.Namespace, Name: prime.Name, UID: prime.UID},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: thinlvmv1.DriverName, VolumeHandle: "pvc-" + string(prime.UID)}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: thinlvmv1.TopologyKey, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}},
		},
	}
	if err := k8s.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	bind(t, prime, pv.Name)
	return pv
}

// bind binds a claim to a PV as the PV controller does: spec.volumeName,
// then status.phase Bound.
func bind(t *testing.T, claim *corev1.PersistentVolumeClaim, pv string) {
	t.Helper()
	ctx := context.Background()
	pvc := get(t, client.ObjectKeyFromObject(claim))
	pvc.Spec.VolumeName = pv
	if err := k8s.Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimBound
	if err := k8s.Status().Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
}

// events are the notes of the Events with reason on the claim.
func events(t *testing.T, claim *corev1.PersistentVolumeClaim, reason string) []string {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := k8s.List(context.Background(), list, client.InNamespace(claim.Namespace)); err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.UID == claim.UID && e.Reason == reason {
			notes = append(notes, e.Note)
		}
	}
	return notes
}

func waitEvent(t *testing.T, claim *corev1.PersistentVolumeClaim, reason string, says ...string) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("a %s Event saying %q on the claim", reason, says), func() bool {
		return slices.ContainsFunc(events(t, claim, reason), func(note string) bool {
			return !slices.ContainsFunc(says, func(s string) bool { return !strings.Contains(note, s) })
		})
	})
}

// A WaitForFirstConsumer claim from a GoldenImage: the finalizer and the
// image come first, the prime claim once the scheduler chose the node, on
// that node; its PV is handed to the claim with its reclaim policy and
// provisioner, and once the claim is bound the prime claim and the
// finalizer go.
func TestPopulateOnTheSelectedNode(t *testing.T) {
	ctx := context.Background()
	image(t, "vm-image")
	claim := tenantClaim(t, "tenant-a", "root-disk", "thin", thinlvmv1.KindGoldenImage, "vm-image")
	key := client.ObjectKeyFromObject(claim)
	testutil.Eventually(t, "the claim has the finalizer and its image", func() bool {
		pvc := get(t, key)
		return controllerutil.ContainsFinalizer(pvc, populator.Finalizer) && pvc.Annotations[thinlvmv1.GoldenImageAnnotation] == "vm-image"
	})
	// No node yet: no prime claim (it is made only after the node is).
	if !primeGone(claim) {
		t.Fatal("a prime claim was made before the scheduler chose a node")
	}
	pvc := get(t, key)
	pvc.Annotations[populator.SelectedNodeAnnotation] = "node-1"
	if err := k8s.Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	prime := primeOf(t, claim)
	want := corev1.PersistentVolumeClaimSpec{
		AccessModes:      claim.Spec.AccessModes,
		Resources:        claim.Spec.Resources,
		StorageClassName: ptr.To("thin"),
		VolumeMode:       ptr.To(corev1.PersistentVolumeBlock),
	}
	if diff := cmp.Diff(want, prime.Spec); diff != "" {
		t.Errorf("prime claim's spec (-want +got):\n%s", diff)
	}
	for k, v := range map[string]string{thinlvmv1.PopulateGoldenImageAnnotation: "vm-image", populator.SelectedNodeAnnotation: "node-1",
		populator.ClaimAnnotation: "tenant-a/root-disk"} {
		if prime.Annotations[k] != v {
			t.Errorf("prime claim's annotation %s = %q, want %q", k, prime.Annotations[k], v)
		}
	}
	if prime.Labels[populator.ClaimUIDLabel] != string(claim.UID) || prime.Labels[populator.ClaimNamespaceLabel] != "tenant-a" {
		t.Errorf("prime claim's labels %v do not point at the claim", prime.Labels)
	}
	waitEvent(t, claim, populator.ReasonPopulating, "vm-image", "node-1")

	pv := provision(t, prime, "node-1")
	testutil.Eventually(t, "the PV is handed to the claim", func() bool {
		got := &corev1.PersistentVolume{}
		if err := k8s.Get(ctx, types.NamespacedName{Name: pv.Name}, got); err != nil {
			t.Fatal(err)
		}
		pv = got
		r := got.Spec.ClaimRef
		return r != nil && r.Namespace == "tenant-a" && r.Name == "root-disk" && r.UID == claim.UID
	})
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.Annotations["pv.kubernetes.io/provisioned-by"] != thinlvmv1.DriverName {
		t.Errorf("handed PV: reclaim policy %s, annotations %v; want Delete, provisioned by %s (deleting the claim deletes the LV)",
			pv.Spec.PersistentVolumeReclaimPolicy, pv.Annotations, thinlvmv1.DriverName)
	}
	// The prime claim stays until the claim is bound.
	if primeGone(claim) || finalizerGone(t, claim) {
		t.Fatal("the prime claim or the finalizer went before the claim was bound")
	}
	bind(t, claim, pv.Name)
	testutil.Eventually(t, "the prime claim and the finalizer go", func() bool { return primeGone(claim) && finalizerGone(t, claim) })
	waitEvent(t, claim, populator.ReasonPopulated, "vm-image", pv.Name)
}

// A channel is resolved once, when the claim is first seen: the channel
// moving before the claim's node is chosen leaves the claim on its image;
// a claim made after the move gets the new one. An Immediate class needs
// no node.
func TestChannelResolvedOnce(t *testing.T) {
	ctx := context.Background()
	image(t, "os-v1")
	image(t, "os-v2")
	ch := &thinlvmv1.GoldenImageChannel{ObjectMeta: metav1.ObjectMeta{Name: "os"}, Spec: thinlvmv1.GoldenImageChannelSpec{GoldenImage: "os-v1"}}
	if err := k8s.Create(ctx, ch); err != nil {
		t.Fatal(err)
	}
	early := tenantClaim(t, "tenant-b", "early", "thin", thinlvmv1.KindGoldenImageChannel, "os")
	testutil.Eventually(t, "the claim records os-v1", func() bool {
		return get(t, client.ObjectKeyFromObject(early)).Annotations[thinlvmv1.GoldenImageAnnotation] == "os-v1"
	})
	ch.Spec.GoldenImage = "os-v2"
	if err := k8s.Update(ctx, ch); err != nil {
		t.Fatal(err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pvc := get(t, client.ObjectKeyFromObject(early))
		pvc.Annotations[populator.SelectedNodeAnnotation] = "node-2"
		return k8s.Update(ctx, pvc)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := primeOf(t, early).Annotations[thinlvmv1.PopulateGoldenImageAnnotation]; got != "os-v1" {
		t.Errorf("the early claim's prime claim is made from %s, want os-v1 (resolved before the channel moved)", got)
	}

	late := tenantClaim(t, "tenant-b", "late", "thin-now", thinlvmv1.KindGoldenImageChannel, "os")
	prime := primeOf(t, late)
	if got := prime.Annotations[thinlvmv1.PopulateGoldenImageAnnotation]; got != "os-v2" {
		t.Errorf("the late claim's prime claim is made from %s, want os-v2", got)
	}
	if n, ok := prime.Annotations[populator.SelectedNodeAnnotation]; ok {
		t.Errorf("an Immediate claim's prime claim names node %q", n)
	}
	waitEvent(t, late, populator.ReasonPopulating, "os-v2", "a node the provisioner picks")
}

// A claim made right after its channel moved gets the new version even
// when the populator's cache has not delivered the move yet: the channel
// is read from the API server when a claim is resolved. The claim is made
// in the manager's populator's own namespace, which that one leaves alone,
// and is reconciled here by a populator whose cache shows the channel as
// it was before the move.
func TestChannelMoveNotYetInTheCache(t *testing.T) {
	ctx := context.Background()
	image(t, "web-v1")
	image(t, "web-v2")
	ch := &thinlvmv1.GoldenImageChannel{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: thinlvmv1.GoldenImageChannelSpec{GoldenImage: "web-v1"}}
	if err := k8s.Create(ctx, ch); err != nil {
		t.Fatal(err)
	}
	before := ch.DeepCopy()
	ch.Spec.GoldenImage = "web-v2"
	if err := k8s.Update(ctx, ch); err != nil {
		t.Fatal(err)
	}
	const heldNS = "thinlvm-held"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: heldNS}}); err != nil {
		t.Fatal(err)
	}
	held := &populator.Reconciler{Client: cachetest.Held{Client: k8s, Before: before}, APIReader: k8s, Recorder: direct.Recorder, Namespace: heldNS}
	claim := tenantClaim(t, ns, "after-the-move", "thin-now", thinlvmv1.KindGoldenImageChannel, "web")
	if _, err := held.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(claim)}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, client.ObjectKeyFromObject(claim)).Annotations[thinlvmv1.GoldenImageAnnotation]; got != "web-v2" {
		t.Errorf("the claim records %q, want web-v2 (the channel moved before the claim was made)", got)
	}
	prime := &corev1.PersistentVolumeClaim{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: heldNS, Name: populator.PrimeName(claim.UID)}, prime); err != nil {
		t.Fatal(err)
	}
	if got := prime.Annotations[thinlvmv1.PopulateGoldenImageAnnotation]; got != "web-v2" {
		t.Errorf("the prime claim is made from %q, want web-v2", got)
	}
}

// A claim whose channel's version was deleted (the channel moved on and
// the old image went) before the claim got its volume takes the channel's
// current version instead of waiting for the deleted one.
func TestDeletedVersionResolvedAgain(t *testing.T) {
	ctx := context.Background()
	image(t, "db-v1")
	image(t, "db-v2")
	ch := &thinlvmv1.GoldenImageChannel{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: thinlvmv1.GoldenImageChannelSpec{GoldenImage: "db-v1"}}
	if err := k8s.Create(ctx, ch); err != nil {
		t.Fatal(err)
	}
	claim := tenantClaim(t, "tenant-b", "stale", "thin", thinlvmv1.KindGoldenImageChannel, "db")
	testutil.Eventually(t, "the claim records db-v1", func() bool {
		return get(t, client.ObjectKeyFromObject(claim)).Annotations[thinlvmv1.GoldenImageAnnotation] == "db-v1"
	})
	ch.Spec.GoldenImage = "db-v2"
	if err := k8s.Update(ctx, ch); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "db-v1"}}); err != nil {
		t.Fatal(err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pvc := get(t, client.ObjectKeyFromObject(claim))
		pvc.Annotations[populator.SelectedNodeAnnotation] = "node-2"
		return k8s.Update(ctx, pvc)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := primeOf(t, claim).Annotations[thinlvmv1.PopulateGoldenImageAnnotation]; got != "db-v2" {
		t.Errorf("the prime claim is made from %s, want db-v2 (db-v1 was deleted)", got)
	}
}

// A claim whose GoldenImage or channel does not exist waits with a Warning
// Event and no finalizer; the object's creation wakes it.
func TestMissingSourceWaits(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ kind, name string }{{thinlvmv1.KindGoldenImage, "later-image"}, {thinlvmv1.KindGoldenImageChannel, "later-channel"}} {
		t.Run(tc.kind, func(t *testing.T) {
			claim := tenantClaim(t, "tenant-c", strings.ToLower(tc.kind), "thin-now", tc.kind, tc.name)
			waitEvent(t, claim, populator.ReasonWaitingForGoldenImage, tc.name, "not found")
			if !finalizerGone(t, claim) || !primeGone(claim) {
				t.Fatal("a claim whose source is missing got the finalizer or a prime claim")
			}
			if tc.kind == thinlvmv1.KindGoldenImageChannel {
				ch := &thinlvmv1.GoldenImageChannel{ObjectMeta: metav1.ObjectMeta{Name: tc.name}, Spec: thinlvmv1.GoldenImageChannelSpec{GoldenImage: "later-channel-v1"}}
				if err := k8s.Create(ctx, ch); err != nil {
					t.Fatal(err)
				}
				waitEvent(t, claim, populator.ReasonWaitingForGoldenImage, "later-channel-v1", "of GoldenImageChannel later-channel")
				image(t, "later-channel-v1")
			} else {
				image(t, tc.name)
			}
			primeOf(t, claim)
			if finalizerGone(t, claim) {
				t.Error("a prime claim was made for a claim without the finalizer")
			}
		})
	}
}

// A claim deleted before it is bound leaves nothing: its prime claim is
// deleted (its PV goes with it, or, handed to the claim already, is
// released with the claim), and its finalizer is removed.
func TestDeletedBeforeBinding(t *testing.T) {
	ctx := context.Background()
	image(t, "gone-image")
	for _, stage := range []string{"prime claim unbound", "PV handed over"} {
		t.Run(stage, func(t *testing.T) {
			claim := tenantClaim(t, "tenant-d", strings.ToLower(strings.ReplaceAll(stage, " ", "-")), "thin-now", thinlvmv1.KindGoldenImage, "gone-image")
			prime := primeOf(t, claim)
			if stage == "PV handed over" {
				pv := provision(t, prime, "node-3")
				testutil.Eventually(t, "the PV is handed to the claim", func() bool {
					got := &corev1.PersistentVolume{}
					return k8s.Get(ctx, types.NamespacedName{Name: pv.Name}, got) == nil && got.Spec.ClaimRef.UID == claim.UID
				})
			}
			if err := k8s.Delete(ctx, claim); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the prime claim and the finalizer go", func() bool { return primeGone(claim) && finalizerGone(t, claim) })
		})
	}
}

// The provisioner gave up on the selected node (it removed the annotation
// from the prime claim): the prime claim goes and the tenant's claim goes
// back to the scheduler.
func TestRescheduled(t *testing.T) {
	ctx := context.Background()
	image(t, "full-node-image")
	claim := tenantClaim(t, "tenant-e", "disk", "thin", thinlvmv1.KindGoldenImage, "full-node-image")
	testutil.Eventually(t, "the claim has the finalizer", func() bool { return !finalizerGone(t, claim) })
	pvc := get(t, client.ObjectKeyFromObject(claim))
	pvc.Annotations[populator.SelectedNodeAnnotation] = "full-node"
	if err := k8s.Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	prime := primeOf(t, claim)
	delete(prime.Annotations, populator.SelectedNodeAnnotation)
	if err := k8s.Update(ctx, prime); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the claim goes back to the scheduler", func() bool {
		_, ok := get(t, client.ObjectKeyFromObject(claim)).Annotations[populator.SelectedNodeAnnotation]
		return !ok && primeGone(claim)
	})
	waitEvent(t, claim, populator.ReasonRescheduling, "full-node")
}

// Claims the populator leaves alone: a namespaced dataSourceRef (refused
// with an Event), and a class of another provisioner.
func TestNotPopulated(t *testing.T) {
	ctx := context.Background()
	image(t, "any-image")
	crossNS := tenantClaim(t, "tenant-f", "cross", "thin-now", thinlvmv1.KindGoldenImage, "any-image")
	crossNS.Spec.DataSourceRef.Namespace = ptr.To("elsewhere")
	ref := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "cross-ns", Namespace: "tenant-f"}, Spec: crossNS.Spec}
	ref.Spec.DataSource = nil
	if err := k8s.Create(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if got := get(t, client.ObjectKeyFromObject(ref)).Spec.DataSourceRef.Namespace; got == nil || *got != "elsewhere" {
		t.Fatalf("the API server dropped the dataSourceRef's namespace (%v): the test needs CrossNamespaceVolumeDataSource", got)
	}
	waitEvent(t, ref, populator.ReasonInvalidDataSource, "cluster-scoped", "elsewhere")
	if !finalizerGone(t, ref) || !primeGone(ref) {
		t.Error("a namespaced dataSourceRef got the finalizer or a prime claim")
	}

	// A reconcile of the claim, called here rather than awaited, does
	// nothing to it.
	foreign := tenantClaim(t, "tenant-f", "foreign", "other", thinlvmv1.KindGoldenImage, "any-image")
	res, err := direct.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(foreign)})
	if err != nil || res != (ctrl.Result{}) {
		t.Errorf("Reconcile: %v %v", res, err)
	}
	if !finalizerGone(t, foreign) || !primeGone(foreign) {
		t.Error("a claim of another provisioner's class got the finalizer or a prime claim")
	}
}

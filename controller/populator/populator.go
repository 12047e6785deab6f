package populator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// Finalizer keeps a claim the populator works on until its prime claim is
// deleted.
const Finalizer = "thinlvm.io/populate"

// What a prime claim (the claim the populator makes in its namespace)
// carries to point back at the tenant's claim: labels with its UID and
// namespace, and an annotation with namespace/name (a claim's name may be
// longer than a label value).
const (
	ClaimUIDLabel       = "thinlvm.io/populate-for-uid"
	ClaimNamespaceLabel = "thinlvm.io/populate-for-namespace"
	ClaimAnnotation     = "thinlvm.io/populate-for"
)

// SelectedNodeAnnotation is the node kube-scheduler chose for a
// WaitForFirstConsumer claim; the external-provisioner removes it from a
// claim it cannot provision there.
const SelectedNodeAnnotation = "volume.kubernetes.io/selected-node"

// primePrefix prefixes a prime claim's name; the tenant claim's UID
// follows.
const primePrefix = "populate-"

// Reasons of the Events on a tenant's claim.
const (
	// ReasonPopulating: the prime claim was made; the note names the
	// GoldenImage and the node.
	ReasonPopulating = "Populating"
	// ReasonPopulated: the claim is bound to the populated volume.
	ReasonPopulated = "Populated"
	// ReasonWaitingForGoldenImage: the GoldenImage or channel the claim
	// names does not exist (yet); the claim waits for it.
	ReasonWaitingForGoldenImage = "WaitingForGoldenImage"
	// ReasonInvalidDataSource: the claim's dataSourceRef cannot be
	// populated (it names a namespace).
	ReasonInvalidDataSource = "InvalidDataSource"
	// ReasonRescheduling: the provisioner gave up on the selected node;
	// the claim goes back to the scheduler.
	ReasonRescheduling = "Rescheduling"
)

// dataSourceIndex indexes claims by the thinlvm object their dataSourceRef
// names ("<kind>/<name>").
const dataSourceIndex = "thinlvm.io/dataSourceRef"

// Reconciler populates claims whose dataSourceRef names a GoldenImage or a
// GoldenImageChannel, in a StorageClass of thinlvm, the way
// lib-volume-populator does, without a populator pod: for each such claim
// it makes a prime claim in Namespace, annotated with the GoldenImage
// (thinlvm.io/populate-golden-image), which the CSI controller makes as a
// thin snapshot of the image's base on the node the tenant's claim was
// scheduled to; then it points the prime claim's PV at the tenant's claim,
// and kube-controller-manager binds them. Requests are tenant claims.
type Reconciler struct {
	// Client reads claims, StorageClasses, GoldenImages and channels from
	// the manager's cache and writes claims and PVs.
	Client client.Client
	// APIReader reads past the cache what must be current: a prime claim's
	// PV (it was just made), and the channel a claim is resolved through
	// (a claim made right after its channel moved gets the new version,
	// whichever of the two events the cache delivers first).
	APIReader client.Reader
	// Recorder puts Events on the tenant's claims.
	Recorder events.EventRecorder
	// Namespace is the controller's namespace, where prime claims are made
	// (the CSI controller honours their annotation only there).
	Namespace string
	// Retry is how soon a claim waiting for a missing GoldenImage,
	// channel or StorageClass is looked at again, besides the watches on
	// them; default 1m.
	Retry time.Duration
}

// Tenant claims: the finalizer and the resolved image; prime claims are
// made only in the controller's namespace (kustomize sets the Role's).
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=thinlvm-system,resources=persistentvolumeclaims,verbs=create
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=thinlvm.io,resources=goldenimages;goldenimagechannels,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler: it watches claims with a
// thinlvm dataSourceRef (or its finalizer), the prime claims in Namespace,
// and GoldenImages and channels, which wake the claims that wait for them.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Namespace == "" {
		return errors.New("populator: the controller's namespace is not set")
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.PersistentVolumeClaim{}, dataSourceIndex, func(o client.Object) []string {
		pvc, ok := o.(*corev1.PersistentVolumeClaim)
		if !ok {
			return nil
		}
		ref := thinlvmv1.ImageDataSource(pvc)
		if ref == nil {
			return nil
		}
		keys := []string{ref.Kind + "/" + ref.Name}
		if img := pvc.Annotations[thinlvmv1.GoldenImageAnnotation]; img != "" && ref.Kind == thinlvmv1.KindGoldenImageChannel {
			keys = append(keys, thinlvmv1.KindGoldenImage+"/"+img)
		}
		return keys
	}); err != nil {
		return fmt.Errorf("index claims by data source: %w", err)
	}
	tenant := predicate.NewPredicateFuncs(func(o client.Object) bool {
		pvc, ok := o.(*corev1.PersistentVolumeClaim)
		return ok && pvc.Namespace != r.Namespace && (thinlvmv1.ImageDataSource(pvc) != nil || controllerutil.ContainsFinalizer(pvc, Finalizer))
	})
	prime := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == r.Namespace && o.GetLabels()[ClaimUIDLabel] != ""
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("populator").
		For(&corev1.PersistentVolumeClaim{}, builder.WithPredicates(tenant)).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if key, ok := tenantOf(o); ok {
				return []reconcile.Request{{NamespacedName: key}}
			}
			return nil
		}), builder.WithPredicates(prime)).
		Watches(&thinlvmv1.GoldenImage{}, r.waitingFor(thinlvmv1.KindGoldenImage)).
		Watches(&thinlvmv1.GoldenImageChannel{}, r.waitingFor(thinlvmv1.KindGoldenImageChannel)).
		Complete(r)
}

// waitingFor maps a GoldenImage or channel to the unbound claims that may
// wait for it: those whose dataSourceRef names it, and for a GoldenImage
// those of the channels that point at it, or that resolved to it.
func (r *Reconciler) waitingFor(kind string) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		keys := []string{kind + "/" + o.GetName()}
		if kind == thinlvmv1.KindGoldenImage {
			channels := &thinlvmv1.GoldenImageChannelList{}
			if err := r.Client.List(ctx, channels); err != nil {
				log.FromContext(ctx).Error(err, "list GoldenImageChannels")
			}
			for _, ch := range channels.Items {
				if ch.Spec.GoldenImage == o.GetName() {
					keys = append(keys, thinlvmv1.KindGoldenImageChannel+"/"+ch.Name)
				}
			}
		}
		var reqs []reconcile.Request
		for _, key := range keys {
			claims := &corev1.PersistentVolumeClaimList{}
			if err := r.Client.List(ctx, claims, client.MatchingFields{dataSourceIndex: key}); err != nil {
				log.FromContext(ctx).Error(err, "list the claims of a data source", "source", key)
				continue
			}
			for i := range claims.Items {
				if c := &claims.Items[i]; c.Spec.VolumeName == "" {
					reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)})
				}
			}
		}
		return reqs
	})
}

// PrimeName is the name of the prime claim of the claim with uid.
func PrimeName(uid types.UID) string { return primePrefix + string(uid) }

// tenantOf is the tenant claim a prime claim was made for.
func tenantOf(o client.Object) (types.NamespacedName, bool) {
	ns, name, ok := strings.Cut(o.GetAnnotations()[ClaimAnnotation], "/")
	return types.NamespacedName{Namespace: ns, Name: name}, ok && ns != "" && name != ""
}

func (r *Reconciler) retry() time.Duration {
	if r.Retry > 0 {
		return r.Retry
	}
	return time.Minute
}

// Reconcile implements reconcile.Reconciler. Each call takes the claim one
// step; the watches bring it back for the next.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Namespace == r.Namespace {
		return ctrl.Result{}, nil // prime claims are not populated themselves
	}
	claim := &corev1.PersistentVolumeClaim{}
	if err := r.Client.Get(ctx, req.NamespacedName, claim); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ref := thinlvmv1.ImageDataSource(claim)
	switch {
	case !claim.DeletionTimestamp.IsZero():
		return ctrl.Result{}, r.finish(ctx, claim, false)
	case claim.Spec.VolumeName != "":
		if claim.Status.Phase != corev1.ClaimBound {
			return ctrl.Result{}, nil // the PV controller completes the binding
		}
		return ctrl.Result{}, r.finish(ctx, claim, true)
	case ref == nil:
		return ctrl.Result{}, r.finish(ctx, claim, false) // not ours (any more)
	case ref.Namespace != nil && *ref.Namespace != "":
		r.Recorder.Eventf(claim, nil, corev1.EventTypeWarning, ReasonInvalidDataSource, "Populate",
			"%s %s is cluster-scoped: a dataSourceRef to it names no namespace (it names %q)", ref.Kind, ref.Name, *ref.Namespace)
		return ctrl.Result{}, nil
	}
	if claim.Spec.StorageClassName == nil || *claim.Spec.StorageClassName == "" {
		return ctrl.Result{}, nil
	}
	sc := &storagev1.StorageClass{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: *claim.Spec.StorageClassName}, sc); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{RequeueAfter: r.retry()}, nil // as the PV controller, wait for the class
		}
		return ctrl.Result{}, fmt.Errorf("get StorageClass %s: %w", *claim.Spec.StorageClassName, err)
	}
	if sc.Provisioner != thinlvmv1.DriverName {
		return ctrl.Result{}, nil
	}
	image, err := r.resolve(ctx, claim, ref)
	if err != nil {
		return ctrl.Result{}, err
	}
	if image == "" {
		return ctrl.Result{RequeueAfter: r.retry()}, nil
	}
	if err := r.claimFor(ctx, claim, image); err != nil {
		return ctrl.Result{}, err
	}
	wfc := sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
	node := claim.Annotations[SelectedNodeAnnotation]
	if wfc && node == "" {
		return ctrl.Result{}, nil // the scheduler picks the node when a pod uses the claim
	}
	return ctrl.Result{}, r.populate(ctx, claim, image, wfc, node)
}

// resolve names the GoldenImage a claim's volume is made from: the one its
// dataSourceRef names, or the one its channel pointed at when first
// resolved (GoldenImageAnnotation), unless that one is deleted since. "" when the GoldenImage or channel is
// missing: the claim gets a Warning Event and waits for it, as Kubernetes
// leaves a claim whose populator source is missing.
func (r *Reconciler) resolve(ctx context.Context, claim *corev1.PersistentVolumeClaim, ref *corev1.TypedObjectReference) (string, error) {
	name := ref.Name
	if ref.Kind == thinlvmv1.KindGoldenImageChannel {
		name = claim.Annotations[thinlvmv1.GoldenImageAnnotation]
		if name != "" {
			// The version resolved before is deleted (the channel moved on
			// and its old image went) before this claim got a volume: the
			// channel's current one, rather than waiting for ever.
			old := &thinlvmv1.GoldenImage{}
			err := r.Client.Get(ctx, types.NamespacedName{Name: name}, old)
			if apierrors.IsNotFound(err) || err == nil && !old.DeletionTimestamp.IsZero() {
				name = ""
			}
		}
		if name == "" {
			// Read once per claim, from the API server: the cache may not
			// have the channel's last move yet, and what is resolved here
			// is recorded on the claim for good.
			ch := &thinlvmv1.GoldenImageChannel{}
			if err := r.APIReader.Get(ctx, types.NamespacedName{Name: ref.Name}, ch); err != nil {
				if apierrors.IsNotFound(err) {
					r.Recorder.Eventf(claim, &thinlvmv1.GoldenImageChannel{ObjectMeta: metav1.ObjectMeta{Name: ref.Name}}, corev1.EventTypeWarning,
						ReasonWaitingForGoldenImage, "Populate", "GoldenImageChannel %s not found: the claim waits for it", ref.Name)
					return "", nil
				}
				return "", fmt.Errorf("get GoldenImageChannel %s: %w", ref.Name, err)
			}
			name = ch.Spec.GoldenImage
		}
	}
	gi := &thinlvmv1.GoldenImage{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, gi); err != nil {
		if apierrors.IsNotFound(err) {
			via := ""
			if ref.Kind == thinlvmv1.KindGoldenImageChannel {
				via = fmt.Sprintf(" (of GoldenImageChannel %s)", ref.Name)
			}
			// Related names the missing object: Events of one reason about
			// one claim are counted as one unless it differs.
			r.Recorder.Eventf(claim, &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: name}}, corev1.EventTypeWarning,
				ReasonWaitingForGoldenImage, "Populate", "GoldenImage %s%s not found: the claim waits for it", name, via)
			return "", nil
		}
		return "", fmt.Errorf("get GoldenImage %s: %w", name, err)
	}
	return name, nil
}

// claimFor records the resolved GoldenImage on the claim and adds the
// finalizer, in one patch, before anything is made for it.
func (r *Reconciler) claimFor(ctx context.Context, claim *corev1.PersistentVolumeClaim, image string) error {
	if claim.Annotations[thinlvmv1.GoldenImageAnnotation] == image && controllerutil.ContainsFinalizer(claim, Finalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if claim.Annotations == nil {
		claim.Annotations = map[string]string{}
	}
	claim.Annotations[thinlvmv1.GoldenImageAnnotation] = image
	controllerutil.AddFinalizer(claim, Finalizer)
	if err := r.Client.Patch(ctx, claim, patch); err != nil {
		return fmt.Errorf("annotate claim %s/%s with GoldenImage %s: %w", claim.Namespace, claim.Name, image, err)
	}
	return nil
}

// populate takes a claim with its image (and, in a WaitForFirstConsumer
// class, its node) one step: make the prime claim; once it is bound, point
// its PV at the claim.
func (r *Reconciler) populate(ctx context.Context, claim *corev1.PersistentVolumeClaim, image string, wfc bool, node string) error {
	logger := log.FromContext(ctx)
	key := types.NamespacedName{Namespace: r.Namespace, Name: PrimeName(claim.UID)}
	prime := &corev1.PersistentVolumeClaim{}
	err := r.Client.Get(ctx, key, prime)
	if apierrors.IsNotFound(err) {
		return r.createPrime(ctx, claim, image, wfc, node)
	}
	if err != nil {
		return fmt.Errorf("get prime claim %s: %w", key, err)
	}
	if !prime.DeletionTimestamp.IsZero() {
		return nil // its deletion brings the claim back
	}
	if prime.Spec.VolumeName == "" {
		primeNode := prime.Annotations[SelectedNodeAnnotation]
		switch {
		case wfc && primeNode == "":
			// The provisioner could not make the volume on the node and
			// gave the prime claim back to a scheduler that never sees it:
			// the tenant's claim goes back to kube-scheduler instead.
			if err := r.deletePrime(ctx, claim); err != nil {
				return err
			}
			patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
			delete(claim.Annotations, SelectedNodeAnnotation)
			if err := r.Client.Patch(ctx, claim, patch); err != nil {
				return fmt.Errorf("give claim %s/%s back to the scheduler: %w", claim.Namespace, claim.Name, err)
			}
			r.Recorder.Eventf(claim, prime, corev1.EventTypeNormal, ReasonRescheduling, "Populate",
				"the volume could not be made on node %s: the claim goes back to the scheduler", node)
			logger.V(2).Info("claim rescheduled", "pvc", klog.KObj(claim), "node", node)
		case wfc && primeNode != node:
			// The scheduler chose another node since: start again there.
			return r.deletePrime(ctx, claim)
		}
		return nil
	}
	pv := &corev1.PersistentVolume{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: prime.Spec.VolumeName}, pv); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // the prime claim's next change brings the claim back
		}
		return fmt.Errorf("get PV %s of prime claim %s: %w", prime.Spec.VolumeName, key, err)
	}
	ref := pv.Spec.ClaimRef
	if ref != nil && ref.Namespace == claim.Namespace && ref.Name == claim.Name && ref.UID == claim.UID {
		return nil // kube-controller-manager binds the claim
	}
	// Only a thinlvm volume made for this prime claim is handed over.
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != thinlvmv1.DriverName || ref == nil || ref.UID != prime.UID {
		return fmt.Errorf("PV %s of prime claim %s is not a thinlvm volume bound to it: not handing it to claim %s/%s", pv.Name, key, claim.Namespace, claim.Name)
	}
	patch := client.MergeFromWithOptions(pv.DeepCopy(), client.MergeFromWithOptimisticLock{})
	pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
		Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID, ResourceVersion: claim.ResourceVersion}
	if err := r.Client.Patch(ctx, pv, patch); err != nil {
		return fmt.Errorf("hand PV %s to claim %s/%s: %w", pv.Name, claim.Namespace, claim.Name, err)
	}
	logger.V(2).Info("volume handed to the claim", "pvc", klog.KObj(claim), "pv", klog.KObj(pv))
	return nil
}

// createPrime makes the prime claim: the tenant claim's class, access
// modes, size and volume mode, no data source, its node, and the
// GoldenImage for the CSI controller.
func (r *Reconciler) createPrime(ctx context.Context, claim *corev1.PersistentVolumeClaim, image string, wfc bool, node string) error {
	prime := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      PrimeName(claim.UID),
			Namespace: r.Namespace,
			Labels:    map[string]string{ClaimUIDLabel: string(claim.UID), ClaimNamespaceLabel: claim.Namespace},
			Annotations: map[string]string{
				thinlvmv1.PopulateGoldenImageAnnotation: image,
				ClaimAnnotation:                         claim.Namespace + "/" + claim.Name,
			},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      claim.Spec.AccessModes,
			Resources:        claim.Spec.Resources,
			StorageClassName: claim.Spec.StorageClassName,
			VolumeMode:       claim.Spec.VolumeMode,
		},
	}
	if wfc {
		prime.Annotations[SelectedNodeAnnotation] = node
	}
	if err := r.Client.Create(ctx, prime); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil // made by an earlier call the cache does not show yet
		}
		return fmt.Errorf("create prime claim %s/%s: %w", prime.Namespace, prime.Name, err)
	}
	where := "a node the provisioner picks"
	if wfc {
		where = "node " + node
	}
	r.Recorder.Eventf(claim, prime, corev1.EventTypeNormal, ReasonPopulating, "Populate",
		"populating from GoldenImage %s on %s (prime claim %s/%s)", image, where, prime.Namespace, prime.Name)
	log.FromContext(ctx).V(2).Info("populating", "pvc", klog.KObj(claim), "goldenImage", image, "node", node, "prime", klog.KObj(prime))
	return nil
}

// deletePrime deletes a claim's prime claim, if there is one. A prime
// claim still bound to its PV takes the PV with it (the class's reclaim
// policy); one whose PV was handed to the claim leaves it be.
func (r *Reconciler) deletePrime(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	prime := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: PrimeName(claim.UID)}}
	if err := r.Client.Delete(ctx, prime); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete prime claim %s/%s: %w", prime.Namespace, prime.Name, err)
	}
	return nil
}

// finish deletes the prime claim and removes the finalizer: the claim is
// bound (populated), deleted, or no longer the populator's.
func (r *Reconciler) finish(ctx context.Context, claim *corev1.PersistentVolumeClaim, populated bool) error {
	if !controllerutil.ContainsFinalizer(claim, Finalizer) {
		return nil
	}
	if err := r.deletePrime(ctx, claim); err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(claim, Finalizer)
	if err := r.Client.Patch(ctx, claim, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("remove finalizer %s from claim %s/%s: %w", Finalizer, claim.Namespace, claim.Name, err)
	}
	if populated {
		r.Recorder.Eventf(claim, nil, corev1.EventTypeNormal, ReasonPopulated, "Populate",
			"populated from GoldenImage %s: bound to PV %s", claim.Annotations[thinlvmv1.GoldenImageAnnotation], claim.Spec.VolumeName)
	}
	log.FromContext(ctx).V(2).Info("population finished", "pvc", klog.KObj(claim), "populated", populated)
	return nil
}

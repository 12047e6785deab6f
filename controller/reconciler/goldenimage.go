package reconciler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// maxListedNodes bounds the node names a status lists (its count counts
// them all).
const maxListedNodes = 100

// Field indexes of the GoldenImage reconciler's cache: the images that
// wait for a claim or a VolumeSnapshot ("namespace/name") to resolve, and
// the LVMNodes that report a base of an image (baseImages).
const (
	indexWaitingForClaim    = "thinlvm.io/waiting-for-claim"
	indexWaitingForSnapshot = "thinlvm.io/waiting-for-snapshot"
	indexImageBases         = "thinlvm.io/image-bases"
)

// baseImages is the names of the GoldenImages an LVMNode reports a base
// of, in any state, each once: the key of the LVMNode indexes. An entry
// counts for an image only when its LV is the image's too
// (LVMNodeStatus.Base), which the reader checks: the index narrows the
// nodes to look at, it does not decide.
func baseImages(o client.Object) []string {
	n, ok := o.(*thinlvmv1.LVMNode)
	if !ok {
		return nil
	}
	var names []string
	for _, b := range n.Status.GoldenBases {
		if !slices.Contains(names, b.Name) {
			names = append(names, b.Name)
		}
	}
	return names
}

// nodesWithBase reads from the cache, through the index named index
// (baseImages), the LVMNodes that report a base of the image named image.
// They are not copied: the caller only reads them.
func nodesWithBase(ctx context.Context, c client.Reader, index, image string) ([]thinlvmv1.LVMNode, error) {
	list := &thinlvmv1.LVMNodeList{}
	if err := c.List(ctx, list, client.MatchingFields{index: image}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list the LVMNodes with a base of GoldenImage %s: %w", image, err)
	}
	return list.Items, nil
}

// GoldenImageReconciler keeps each GoldenImage's status (the nodes' golden
// bases from their LVMNode status, the channels that point at it, the
// volume a pvc or volumeSnapshot source resolves to) and its metadata: the
// finalizer that keeps an image a channel points at, and the labels that
// record which channels have pointed at it.
type GoldenImageReconciler struct {
	Client client.Client
	// APIReader reads past the cache what resolving a source needs (claims,
	// PVs, StorageClasses, VolumeSnapshots and their contents,
	// LogicalVolumes: each is read once per image, until it resolves, so
	// none of them is cached whole for this), and confirms that no channel
	// points at an image before its finalizer goes.
	APIReader client.Reader
}

// +kubebuilder:rbac:groups=thinlvm.io,resources=goldenimages,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=thinlvm.io,resources=goldenimages/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=thinlvm.io,resources=goldenimagechannels,verbs=get;list;watch
// +kubebuilder:rbac:groups=thinlvm.io,resources=lvmnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=thinlvm.io,resources=logicalvolumes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get
// +kubebuilder:rbac:groups=snapshot.storage.k8s.io,resources=volumesnapshots,verbs=get;list;watch
// +kubebuilder:rbac:groups=snapshot.storage.k8s.io,resources=volumesnapshotcontents,verbs=get

// SetupWithManager registers the reconciler: GoldenImages; the images an
// LVMNode reports bases of, before and after, when its bases change (a
// base that left a node is named in the old object only); the images a GoldenImageChannel points or
// pointed at when its spec changes or it goes; and an image waiting for
// its source when that claim or VolumeSnapshot changes. The claims and
// snapshots are watched as metadata only. Without the VolumeSnapshot API
// at start, snapshot sources are looked at again with a backoff instead.
func (r *GoldenImageReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.APIReader == nil {
		return errors.New("GoldenImageReconciler needs an APIReader")
	}
	ctx := context.Background()
	indexer := mgr.GetFieldIndexer()
	if err := indexer.IndexField(ctx, &thinlvmv1.GoldenImage{}, indexWaitingForClaim, func(o client.Object) []string {
		gi := o.(*thinlvmv1.GoldenImage)
		if gi.Spec.Source.PVC == nil || gi.Status.SourceVolume != nil {
			return nil
		}
		return []string{claimKey(gi.Spec.Source.PVC)}
	}); err != nil {
		return fmt.Errorf("index GoldenImages by claim: %w", err)
	}
	if err := indexer.IndexField(ctx, &thinlvmv1.GoldenImage{}, indexWaitingForSnapshot, func(o client.Object) []string {
		gi := o.(*thinlvmv1.GoldenImage)
		if gi.Spec.Source.VolumeSnapshot == nil || gi.Status.SourceVolume != nil {
			return nil
		}
		return []string{claimKey(gi.Spec.Source.VolumeSnapshot)}
	}); err != nil {
		return fmt.Errorf("index GoldenImages by VolumeSnapshot: %w", err)
	}
	if err := indexer.IndexField(ctx, &thinlvmv1.LVMNode{}, indexImageBases, baseImages); err != nil {
		return fmt.Errorf("index LVMNodes by golden base: %w", err)
	}
	ofBases := func(_ context.Context, o client.Object) []reconcile.Request {
		names := baseImages(o)
		reqs := make([]reconcile.Request, 0, len(names))
		for _, n := range names {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: n}})
		}
		return reqs
	}
	waiting := func(index string) handler.MapFunc {
		return func(ctx context.Context, o client.Object) []reconcile.Request {
			list := &thinlvmv1.GoldenImageList{}
			if err := r.Client.List(ctx, list, client.MatchingFields{index: o.GetNamespace() + "/" + o.GetName()}); err != nil {
				return nil
			}
			reqs := make([]reconcile.Request, 0, len(list.Items))
			for _, gi := range list.Items {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: gi.Name}})
			}
			return reqs
		}
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("goldenimage-status").
		For(&thinlvmv1.GoldenImage{}). // every change, its status too (statusWrite)
		Watches(&thinlvmv1.LVMNode{}, handler.EnqueueRequestsFromMapFunc(ofBases), builder.WithPredicates(basesChanged)).
		Watches(&thinlvmv1.GoldenImageChannel{}, handler.EnqueueRequestsFromMapFunc(r.imagesOfChannel), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesMetadata(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(waiting(indexWaitingForClaim)))
	vs := &metav1.PartialObjectMetadata{}
	vs.SetGroupVersionKind(volumeSnapshotGVK)
	switch _, err := mgr.GetRESTMapper().RESTMapping(volumeSnapshotGVK.GroupKind(), volumeSnapshotGVK.Version); {
	case err == nil:
		b = b.WatchesMetadata(vs, handler.EnqueueRequestsFromMapFunc(waiting(indexWaitingForSnapshot)))
	case meta.IsNoMatchError(err):
		mgr.GetLogger().Info("the API server serves no VolumeSnapshots: GoldenImages of volumeSnapshot sources are looked at again with a backoff",
			"groupVersion", volumeSnapshotGVK.GroupVersion().String())
	default:
		return fmt.Errorf("look up the VolumeSnapshot API: %w", err)
	}
	return b.Complete(r)
}

// basesChanged passes an LVMNode update only when its golden bases changed.
var basesChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*thinlvmv1.LVMNode)
		n, ok2 := e.ObjectNew.(*thinlvmv1.LVMNode)
		return !ok1 || !ok2 || !basesEqual(o.Status.GoldenBases, n.Status.GoldenBases)
	},
}

// imagesOfChannel maps a channel to the image its spec names and the
// images labelled as its versions (a deleted channel's labels are taken
// off).
func (r *GoldenImageReconciler) imagesOfChannel(ctx context.Context, o client.Object) []reconcile.Request {
	ch, ok := o.(*thinlvmv1.GoldenImageChannel)
	if !ok {
		return nil
	}
	names := sets.New(ch.Spec.GoldenImage)
	list := &thinlvmv1.GoldenImageList{}
	if err := r.Client.List(ctx, list, client.HasLabels{thinlvmv1.ChannelLabel(ch.UID)}); err == nil {
		for _, gi := range list.Items {
			names.Insert(gi.Name)
		}
	}
	reqs := make([]reconcile.Request, 0, names.Len())
	for _, n := range sets.List(names) {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: n}})
	}
	return reqs
}

func basesEqual(a, b []thinlvmv1.GoldenBaseStatus) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].LV != b[i].LV || a[i].State != b[i].State || a[i].Message != b[i].Message {
			return false
		}
	}
	return true
}

// Reconcile implements reconcile.Reconciler.
func (r *GoldenImageReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	gi := &thinlvmv1.GoldenImage{}
	if err := r.Client.Get(ctx, req.NamespacedName, gi); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	channels := &thinlvmv1.GoldenImageChannelList{}
	if err := r.Client.List(ctx, channels); err != nil {
		return ctrl.Result{}, fmt.Errorf("list GoldenImageChannels: %w", err)
	}
	gone, err := r.syncMetadata(ctx, gi, channels.Items)
	if err != nil || gone {
		return ctrl.Result{}, err
	}
	nodes, err := nodesWithBase(ctx, r.Client, indexImageBases, gi.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	sourceVolume := gi.Status.SourceVolume
	var problem *sourceProblem
	if gi.Spec.Source.FromVolume() && sourceVolume == nil {
		if sourceVolume, problem, err = r.resolveSource(ctx, gi); err != nil {
			return ctrl.Result{}, err
		}
	}
	st := summarize(gi, nodes, problem)
	st.Channels = pointingAt(gi.Name, channels.Items)
	st.SourceVolume = sourceVolume
	var res ctrl.Result
	if problem != nil && problem.reason == thinlvmv1.ReasonSourceNotReady {
		// The watches on claims and VolumeSnapshots wake the image when
		// its source changes; this is the net under them (the LogicalVolume
		// not Ready yet, no VolumeSnapshot API at start): the longer the
		// image has waited, the longer until the next look.
		c := meta.FindStatusCondition(st.Conditions, thinlvmv1.ConditionImageReady)
		res.RequeueAfter = min(max(time.Since(c.LastTransitionTime.Time), 5*time.Second), 5*time.Minute)
	}
	if equalStatus(gi.Status, st) {
		return res, nil
	}
	// Written only onto the object it was worked out from: the cache may
	// lag the write of another turn (statusWrite), and a source volume,
	// once resolved, is written once and never changed.
	patch := client.MergeFromWithOptions(gi.DeepCopy(), client.MergeFromWithOptimisticLock{})
	gi.Status = st
	if err := r.Client.Status().Patch(ctx, gi, patch); err != nil {
		return res, statusWrite(err, "GoldenImage", gi.Name)
	}
	return res, nil
}

// summarize is the status the nodes' bases make (every field but Channels
// and SourceVolume), with the Ready and Degraded conditions set from them;
// Ready is False for a source problem whatever the nodes report. nodes are
// those that report a base of gi's name (or more); they are sorted here
// and only read.
func summarize(gi *thinlvmv1.GoldenImage, nodes []thinlvmv1.LVMNode, problem *sourceProblem) thinlvmv1.GoldenImageStatus {
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	var st thinlvmv1.GoldenImageStatus
	st.Conditions = slices.Clone(gi.Status.Conditions)
	st.LastError = gi.Status.LastError
	var failures []string
	for _, n := range nodes {
		b := n.Status.Base(gi)
		if b == nil {
			continue
		}
		switch b.State {
		case thinlvmv1.GoldenBaseReady:
			st.ReadyNodes++
			if len(st.Nodes) < maxListedNodes {
				st.Nodes = append(st.Nodes, n.Name)
			}
		case thinlvmv1.GoldenBasePopulating:
			st.PopulatingNodes++
		case thinlvmv1.GoldenBaseFailed:
			st.FailedNodes++
			failures = append(failures, fmt.Sprintf("node %s: %s", n.Name, b.Message))
		}
	}
	if len(failures) > 0 {
		st.LastError = failures[len(failures)-1]
	}
	st.ObservedGeneration = gi.Generation
	ready := metav1.Condition{Type: thinlvmv1.ConditionImageReady, Status: metav1.ConditionFalse, Reason: thinlvmv1.ReasonNoReadyBase,
		Message: "no node holds a Ready base yet", ObservedGeneration: gi.Generation}
	if st.ReadyNodes > 0 {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, thinlvmv1.ReasonBaseReady, fmt.Sprintf("%d node(s) hold a Ready base", st.ReadyNodes)
	} else if st.PopulatingNodes > 0 {
		ready.Reason, ready.Message = thinlvmv1.ReasonPopulating, fmt.Sprintf("%d node(s) populating", st.PopulatingNodes)
	}
	if problem != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, problem.reason, problem.message
	}
	degraded := metav1.Condition{Type: thinlvmv1.ConditionImageDegraded, Status: metav1.ConditionFalse, Reason: thinlvmv1.ReasonNoFailure,
		ObservedGeneration: gi.Generation}
	if st.FailedNodes > 0 {
		degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionTrue, thinlvmv1.ReasonPopulationFailed, fmt.Sprintf("%d node(s) failed; %s", st.FailedNodes, st.LastError)
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	meta.SetStatusCondition(&st.Conditions, degraded)
	return st
}

// pointingAt is the sorted names of the channels whose spec names image:
// the channels being deleted are gone for it already.
func pointingAt(image string, channels []thinlvmv1.GoldenImageChannel) []string {
	var names []string
	for _, ch := range channels {
		if ch.Spec.GoldenImage == image && ch.DeletionTimestamp.IsZero() {
			names = append(names, ch.Name)
		}
	}
	sort.Strings(names)
	return names
}

// syncMetadata puts the channel finalizer on gi while a channel points at
// it and takes it off as soon as none does, labels gi as a version of each
// channel that points at it, and takes off the labels of channels that are
// gone. gone tells that gi was being deleted and nothing holds it any more.
//
// The finalizer comes off a deleted image only after a read past the cache
// found no channel that points at it: the cache may not have seen a channel
// that was just pointed at the image. It never sticks: a channel that moves
// on or goes (or is being deleted) wakes the image it named.
func (r *GoldenImageReconciler) syncMetadata(ctx context.Context, gi *thinlvmv1.GoldenImage, channels []thinlvmv1.GoldenImageChannel) (gone bool, err error) {
	deleting := !gi.DeletionTimestamp.IsZero()
	orig := gi.DeepCopy()
	known := sets.New[string]()
	pointed := false
	for _, ch := range channels {
		known.Insert(string(ch.UID))
		if ch.Spec.GoldenImage != gi.Name || !ch.DeletionTimestamp.IsZero() {
			continue
		}
		pointed = true
		if key := thinlvmv1.ChannelLabel(ch.UID); !deleting && !hasKey(gi.Labels, key) {
			value := ch.Name
			if len(validation.IsValidLabelValue(value)) > 0 {
				value = ""
			}
			metav1.SetMetaDataLabel(&gi.ObjectMeta, key, value)
		}
	}
	var stale []string
	for key := range gi.Labels {
		if uid, ok := strings.CutPrefix(key, thinlvmv1.ChannelLabelPrefix); ok && !known.Has(uid) {
			stale = append(stale, uid)
		}
	}
	releasing := deleting && !pointed && controllerutil.ContainsFinalizer(gi, thinlvmv1.GoldenImageChannelFinalizer)
	if releasing || len(stale) > 0 {
		live := &thinlvmv1.GoldenImageChannelList{}
		if err := r.APIReader.List(ctx, live); err != nil {
			return false, fmt.Errorf("list GoldenImageChannels: %w", err)
		}
		for _, ch := range live.Items {
			known.Insert(string(ch.UID))
			if releasing && ch.Spec.GoldenImage == gi.Name && ch.DeletionTimestamp.IsZero() {
				releasing = false
			}
		}
	}
	switch {
	case pointed && !deleting:
		controllerutil.AddFinalizer(gi, thinlvmv1.GoldenImageChannelFinalizer)
	case !pointed && (!deleting || releasing):
		controllerutil.RemoveFinalizer(gi, thinlvmv1.GoldenImageChannelFinalizer)
	}
	for _, uid := range stale {
		if !known.Has(uid) {
			delete(gi.Labels, thinlvmv1.ChannelLabelPrefix+uid)
		}
	}
	if !equalMetadata(orig, gi) {
		if err := r.Client.Patch(ctx, gi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return false, fmt.Errorf("update GoldenImage %s finalizer and channel labels: %w", gi.Name, err)
		}
	}
	return deleting && len(gi.Finalizers) == 0, nil
}

func hasKey(m map[string]string, key string) bool {
	_, ok := m[key]
	return ok
}

func equalMetadata(a, b *thinlvmv1.GoldenImage) bool {
	if len(a.Labels) != len(b.Labels) || !slices.Equal(a.Finalizers, b.Finalizers) {
		return false
	}
	for k, v := range a.Labels {
		if w, ok := b.Labels[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func equalStatus(a, b thinlvmv1.GoldenImageStatus) bool {
	if a.ReadyNodes != b.ReadyNodes || a.PopulatingNodes != b.PopulatingNodes || a.FailedNodes != b.FailedNodes ||
		a.LastError != b.LastError || a.ObservedGeneration != b.ObservedGeneration || len(a.Conditions) != len(b.Conditions) ||
		!slices.Equal(a.Nodes, b.Nodes) || !slices.Equal(a.Channels, b.Channels) || !equalSourceVolume(a.SourceVolume, b.SourceVolume) {
		return false
	}
	for _, c := range a.Conditions {
		d := meta.FindStatusCondition(b.Conditions, c.Type)
		if d == nil || d.Status != c.Status || d.Reason != c.Reason || d.Message != c.Message {
			return false
		}
	}
	return true
}

func equalSourceVolume(a, b *thinlvmv1.SourceVolumeStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.LogicalVolume == b.LogicalVolume && a.NodeName == b.NodeName && a.Size.Cmp(b.Size) == 0
}

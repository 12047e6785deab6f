package reconciler

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// Field indexes of the channel reconciler's cache: LogicalVolumes by the
// GoldenImage they are made from, and LVMNodes by the images they report
// bases of (baseImages; the GoldenImage reconciler keeps an index of its
// own, as either runs without the other).
const (
	indexGoldenImageSource = "thinlvm.io/golden-image-source"
	indexChannelBases      = "thinlvm.io/channel-bases"
)

// GoldenImageChannelReconciler writes each GoldenImageChannel's status: its
// current GoldenImage and the earlier ones that still exist, with the nodes
// that hold their bases and the volumes made from them. The earlier ones
// are the images labelled with the channel's UID (ChannelLabel), which
// GoldenImageReconciler puts on every image a channel points at.
type GoldenImageChannelReconciler struct {
	Client client.Client
	// Recorder, when set, records a Warning on a channel whose current
	// GoldenImage does not exist, when it starts pointing at nothing.
	Recorder events.EventRecorder
}

// +kubebuilder:rbac:groups=thinlvm.io,resources=goldenimagechannels,verbs=get;list;watch
// +kubebuilder:rbac:groups=thinlvm.io,resources=goldenimagechannels/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=thinlvm.io,resources=goldenimages,verbs=get;list;watch
// +kubebuilder:rbac:groups=thinlvm.io,resources=lvmnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=thinlvm.io,resources=logicalvolumes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler: channels; the channels of a
// GoldenImage (those pointing or that pointed at it) when it is made,
// deleted or labelled, when a volume is made from it or deleted, or when
// an LVMNode's base of it changes.
func (r *GoldenImageChannelReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &thinlvmv1.LogicalVolume{}, indexGoldenImageSource, func(o client.Object) []string {
		lv := o.(*thinlvmv1.LogicalVolume)
		if lv.Spec.Source == nil || lv.Spec.Source.Kind != thinlvmv1.SourceGoldenImage {
			return nil
		}
		return []string{lv.Spec.Source.Name}
	}); err != nil {
		return fmt.Errorf("index LogicalVolumes by GoldenImage: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &thinlvmv1.LVMNode{}, indexChannelBases, baseImages); err != nil {
		return fmt.Errorf("index LVMNodes by golden base: %w", err)
	}
	// The channels of each image the node reports a base of, before and
	// after the change (a base that left the node is in the old object).
	ofBases := func(ctx context.Context, o client.Object) []reconcile.Request {
		var reqs []reconcile.Request
		for _, name := range baseImages(o) {
			gi := &thinlvmv1.GoldenImage{}
			if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, gi); err != nil && !apierrors.IsNotFound(err) {
				continue
			}
			for _, req := range r.channelsOf(ctx, name, gi.Labels) {
				if !slices.Contains(reqs, req) {
					reqs = append(reqs, req)
				}
			}
		}
		return reqs
	}
	ofImage := func(ctx context.Context, o client.Object) []reconcile.Request {
		gi, ok := o.(*thinlvmv1.GoldenImage)
		if !ok {
			return nil
		}
		return r.channelsOf(ctx, gi.Name, gi.Labels)
	}
	ofVolume := func(ctx context.Context, o client.Object) []reconcile.Request {
		lv, ok := o.(*thinlvmv1.LogicalVolume)
		if !ok || lv.Spec.Source == nil || lv.Spec.Source.Kind != thinlvmv1.SourceGoldenImage {
			return nil
		}
		gi := &thinlvmv1.GoldenImage{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: lv.Spec.Source.Name}, gi); err != nil && !apierrors.IsNotFound(err) {
			return nil
		}
		return r.channelsOf(ctx, lv.Spec.Source.Name, gi.Labels)
	}
	// A volume's source never changes: only its making and its going
	// change a count.
	madeOrGone := predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}
	// Every change of a channel, its status too: a status written from a
	// cache that lagged (compared with, or patched onto, an older status)
	// is looked at again once the cache has the written one (statusWrite).
	return ctrl.NewControllerManagedBy(mgr).
		Named("goldenimagechannel-status").
		For(&thinlvmv1.GoldenImageChannel{}).
		Watches(&thinlvmv1.GoldenImage{}, handler.EnqueueRequestsFromMapFunc(ofImage),
			builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Watches(&thinlvmv1.LVMNode{}, handler.EnqueueRequestsFromMapFunc(ofBases), builder.WithPredicates(basesChanged)).
		Watches(&thinlvmv1.LogicalVolume{}, handler.EnqueueRequestsFromMapFunc(ofVolume), builder.WithPredicates(madeOrGone)).
		Complete(r)
}

// channelsOf is the channels that point at the image named image, or whose
// label it carries.
func (r *GoldenImageChannelReconciler) channelsOf(ctx context.Context, image string, labels map[string]string) []reconcile.Request {
	list := &thinlvmv1.GoldenImageChannelList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, ch := range list.Items {
		if ch.Spec.GoldenImage == image || hasKey(labels, thinlvmv1.ChannelLabel(ch.UID)) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: ch.Name}})
		}
	}
	return reqs
}

// Reconcile implements reconcile.Reconciler.
func (r *GoldenImageChannelReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ch := &thinlvmv1.GoldenImageChannel{}
	if err := r.Client.Get(ctx, req.NamespacedName, ch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ch.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	current := &thinlvmv1.GoldenImage{}
	found := true
	if err := r.Client.Get(ctx, types.NamespacedName{Name: ch.Spec.GoldenImage}, current); apierrors.IsNotFound(err) {
		found = false
	} else if err != nil {
		return ctrl.Result{}, fmt.Errorf("get GoldenImage %s: %w", ch.Spec.GoldenImage, err)
	}
	earlier := &thinlvmv1.GoldenImageList{}
	if err := r.Client.List(ctx, earlier, client.HasLabels{thinlvmv1.ChannelLabel(ch.UID)}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list GoldenImages of channel %s: %w", ch.Name, err)
	}
	// The newest version first: images are made one version after the
	// other, and names that tell versions apart mostly sort by age too.
	sort.Slice(earlier.Items, func(i, j int) bool {
		a, b := earlier.Items[i].CreationTimestamp, earlier.Items[j].CreationTimestamp
		if !a.Equal(&b) {
			return b.Before(&a)
		}
		return earlier.Items[i].Name > earlier.Items[j].Name
	})
	var st thinlvmv1.GoldenImageChannelStatus
	cur := thinlvmv1.ChannelVersion{GoldenImage: ch.Spec.GoldenImage, Current: true}
	var err error
	if found {
		if cur.ReadyNodes, cur.Nodes, err = r.readyNodes(ctx, current); err != nil {
			return ctrl.Result{}, err
		}
	}
	if cur.Volumes, err = r.volumes(ctx, ch.Spec.GoldenImage); err != nil {
		return ctrl.Result{}, err
	}
	st.Versions = append(st.Versions, cur)
	for i := range earlier.Items {
		gi := &earlier.Items[i]
		if gi.Name == ch.Spec.GoldenImage {
			continue
		}
		v := thinlvmv1.ChannelVersion{GoldenImage: gi.Name}
		if v.ReadyNodes, v.Nodes, err = r.readyNodes(ctx, gi); err != nil {
			return ctrl.Result{}, err
		}
		if v.Volumes, err = r.volumes(ctx, gi.Name); err != nil {
			return ctrl.Result{}, err
		}
		st.Versions = append(st.Versions, v)
	}
	st.ObservedGeneration = ch.Generation
	st.Conditions = slices.Clone(ch.Status.Conditions)
	ready := metav1.Condition{Type: thinlvmv1.ConditionChannelReady, Status: metav1.ConditionTrue, Reason: thinlvmv1.ReasonBaseReady,
		Message: fmt.Sprintf("%d node(s) hold a Ready base of GoldenImage %s", cur.ReadyNodes, cur.GoldenImage), ObservedGeneration: ch.Generation}
	switch {
	case !found:
		ready.Status, ready.Reason = metav1.ConditionFalse, thinlvmv1.ReasonGoldenImageNotFound
		ready.Message = fmt.Sprintf("GoldenImage %s does not exist: volumes made through the channel fail until it does", cur.GoldenImage)
	case cur.ReadyNodes == 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, thinlvmv1.ReasonNoReadyBase
		ready.Message = fmt.Sprintf("no node holds a Ready base of GoldenImage %s yet", cur.GoldenImage)
	}
	was := meta.FindStatusCondition(ch.Status.Conditions, thinlvmv1.ConditionChannelReady)
	meta.SetStatusCondition(&st.Conditions, ready)
	if equalChannelStatus(ch.Status, st) {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFromWithOptions(ch.DeepCopy(), client.MergeFromWithOptimisticLock{})
	ch.Status = st
	if err := r.Client.Status().Patch(ctx, ch, patch); err != nil {
		return ctrl.Result{}, statusWrite(err, "GoldenImageChannel", ch.Name)
	}
	// Told once per turn to a missing image, after the status says so.
	if !found && r.Recorder != nil && (was == nil || was.Reason != thinlvmv1.ReasonGoldenImageNotFound || was.Message != ready.Message) {
		r.Recorder.Eventf(ch, nil, corev1.EventTypeWarning, thinlvmv1.ReasonGoldenImageNotFound, "Resolve", "%s", ready.Message)
	}
	return ctrl.Result{}, nil
}

// readyNodes counts the nodes whose base of gi is Ready and names the
// first maxListedNodes of them by name, from the LVMNodes that report a
// base of its name.
func (r *GoldenImageChannelReconciler) readyNodes(ctx context.Context, gi *thinlvmv1.GoldenImage) (int32, []string, error) {
	nodes, err := nodesWithBase(ctx, r.Client, indexChannelBases, gi.Name)
	if err != nil {
		return 0, nil, err
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	n, names := readyNodes(gi, nodes)
	return n, names, nil
}

// readyNodes counts the nodes whose base of gi is Ready and names the
// first maxListedNodes of them (nodes are sorted).
func readyNodes(gi *thinlvmv1.GoldenImage, nodes []thinlvmv1.LVMNode) (int32, []string) {
	var n int32
	var names []string
	for i := range nodes {
		if nodes[i].Status.BaseState(gi) != thinlvmv1.GoldenBaseReady {
			continue
		}
		n++
		if len(names) < maxListedNodes {
			names = append(names, nodes[i].Name)
		}
	}
	return n, names
}

// volumes counts the LogicalVolumes made from the GoldenImage image.
func (r *GoldenImageChannelReconciler) volumes(ctx context.Context, image string) (int32, error) {
	list := &thinlvmv1.LogicalVolumeList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{indexGoldenImageSource: image}, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("list LogicalVolumes of GoldenImage %s: %w", image, err)
	}
	return int32(min(len(list.Items), math.MaxInt32)), nil
}

func equalChannelStatus(a, b thinlvmv1.GoldenImageChannelStatus) bool {
	if a.ObservedGeneration != b.ObservedGeneration || len(a.Versions) != len(b.Versions) || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Versions {
		x, y := a.Versions[i], b.Versions[i]
		if x.GoldenImage != y.GoldenImage || x.Current != y.Current || x.ReadyNodes != y.ReadyNodes || x.Volumes != y.Volumes || !slices.Equal(x.Nodes, y.Nodes) {
			return false
		}
	}
	for _, c := range a.Conditions {
		d := meta.FindStatusCondition(b.Conditions, c.Type)
		if d == nil || d.Status != c.Status || d.Reason != c.Reason || d.Message != c.Message {
			return false
		}
	}
	return true
}

// statusWrite is what a reconciler returns for a failed status patch. A
// status is patched only onto the version it was compared with
// (MergeFromWithOptimisticLock): a merge patch made from an older version
// would leave the fields that version already had as the server has them,
// and an equal status compared with an older one would not be written at
// all. A conflict means the cache has not delivered a newer version yet;
// that version's update event brings the object back (the reconcilers
// watch every change of their object), so it is no error.
func statusWrite(err error, kind, name string) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return fmt.Errorf("update %s %s status: %w", kind, name, err)
}

package reconciler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/jobs"
	"github.com/thinlvm/thinlvm/node/lvmd"
	"github.com/thinlvm/thinlvm/node/transfer"
)

// Finalizer keeps a LogicalVolume until its node's agent removed the LV.
const Finalizer = thinlvmv1.LogicalVolumeFinalizer

// OwnerTagPrefix prefixes the lvm tag that names an LV's LogicalVolume.
const OwnerTagPrefix = thinlvmv1.OwnerTagPrefix

// LogicalVolumeReconciler reconciles the LogicalVolumes of one node.
type LogicalVolumeReconciler struct {
	Client   client.Client
	LVMD     lvmd.Client
	NodeName string
	// RetryAfter is how long to wait before retrying a request lvmd refused
	// for lack of space; default one minute.
	RetryAfter time.Duration
	// APIReader, when set, runs the start-up sweep of orphan LVs (LVs whose
	// LogicalVolume no longer exists): it confirms past the cache that an
	// object is gone before its LV is removed.
	APIReader client.Reader
	// Recorder, when set, reports each orphan LV the sweep removed (or
	// failed to) as an Event on this node's LVMNode.
	Recorder events.EventRecorder
	// Metrics, when set, counts the orphan LVs removed.
	Metrics *Metrics
	// Copier, when set, makes clones and restores of volumes of other nodes
	// by copying their data from there; without it they are refused.
	Copier *transfer.Copier
	// CopyPoll is how often the status of a running copy is updated;
	// default two seconds.
	CopyPoll time.Duration

	copies  jobs.Set[*copyState]
	wakeups chan event.GenericEvent

	// sweeping is held by the sweep while it removes an orphan LV, and
	// shared by every reconcile.
	sweeping sync.RWMutex
}

// +kubebuilder:rbac:groups=thinlvm.io,resources=logicalvolumes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=thinlvm.io,resources=logicalvolumes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=thinlvm.io,resources=logicalvolumes/finalizers,verbs=update
// +kubebuilder:rbac:groups=thinlvm.io,resources=goldenimages,verbs=get;list;watch
// +kubebuilder:rbac:groups=thinlvm.io,resources=lvmnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler for this node's LogicalVolumes,
// and wakes those waiting for a golden base when this node's LVMNode
// reports its bases changed. With an APIReader it also registers the
// start-up sweep of orphan LVs.
func (r *LogicalVolumeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.APIReader != nil {
		if err := mgr.Add(manager.RunnableFunc(r.sweep)); err != nil {
			return err
		}
	}
	onNode := predicate.NewPredicateFuncs(func(o client.Object) bool {
		lv, ok := o.(*thinlvmv1.LogicalVolume)
		return ok && lv.Spec.NodeName == r.NodeName
	})
	// Copies run past their reconcile; they end with the manager (their
	// LVs removed: the next start copies again).
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.copies.StopAll()
		return nil
	})); err != nil {
		return err
	}
	thisNode := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == r.NodeName })
	r.wakeups = make(chan event.GenericEvent, 64)
	return ctrl.NewControllerManagedBy(mgr).
		Named("logicalvolume").
		For(&thinlvmv1.LogicalVolume{}, builder.WithPredicates(onNode)).
		Watches(&thinlvmv1.LVMNode{}, handler.EnqueueRequestsFromMapFunc(r.waitingForBase), builder.WithPredicates(thisNode)).
		WatchesRawSource(source.Channel(r.wakeups, &handler.EnqueueRequestForObject{})).
		// A copy from another node runs in the background: reconciles of
		// other volumes go on beside the ones that poll it.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
}

// wake reconciles the LogicalVolume name soon: its copy ended.
func (r *LogicalVolumeReconciler) wake(name string) {
	if r.wakeups == nil {
		return
	}
	select {
	case r.wakeups <- event.GenericEvent{Object: &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
	default: // the poll finds it
	}
}

func (r *LogicalVolumeReconciler) copyPoll() time.Duration {
	if r.CopyPoll > 0 {
		return r.CopyPoll
	}
	return 2 * time.Second
}

// waitingForBase lists this node's LogicalVolumes that wait for a golden
// base, for a change of the node's LVMNode: its bases are reported there.
// The agent's cache holds only this node's volumes (agent.Cache).
func (r *LogicalVolumeReconciler) waitingForBase(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &thinlvmv1.LogicalVolumeList{}
	if err := r.Client.List(ctx, list); err != nil {
		log.FromContext(ctx).Error(err, "list LogicalVolumes waiting for a golden base")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		lv := &list.Items[i]
		if lv.Spec.NodeName != r.NodeName || lv.Spec.Source == nil || lv.Spec.Source.Kind != thinlvmv1.SourceGoldenImage {
			continue
		}
		if c := meta.FindStatusCondition(lv.Status.Conditions, thinlvmv1.ConditionReady); c == nil || c.Reason == thinlvmv1.ReasonWaitingForBase {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: lv.Name}})
		}
	}
	return reqs
}

// Reconcile implements reconcile.Reconciler.
func (r *LogicalVolumeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// The sweep never removes an LV while a reconcile may be using it.
	r.sweeping.RLock()
	defer r.sweeping.RUnlock()
	logger := log.FromContext(ctx)
	lv := &thinlvmv1.LogicalVolume{}
	if err := r.Client.Get(ctx, req.NamespacedName, lv); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if lv.Spec.NodeName != r.NodeName {
		return ctrl.Result{}, nil
	}
	if !lv.DeletionTimestamp.IsZero() {
		err := r.finalize(ctx, lv)
		var kept *refusalError
		if errors.As(err, &kept) {
			// The LV is kept on purpose (an adoption not done): say why,
			// and look again later.
			logger.Info("logical volume deleted, its LV kept", "lv", thinlvmv1.LVName(lv), "reason", kept.reason, "message", kept.msg)
			return ctrl.Result{RequeueAfter: r.retryAfter()}, r.setStatus(ctx, lv, nil, err)
		}
		return ctrl.Result{}, err
	}
	// The finalizer goes on before the LV is made: an object deleted in the
	// middle of a create still gets its LV removed.
	if !controllerutil.ContainsFinalizer(lv, Finalizer) {
		patch := client.MergeFrom(lv.DeepCopy())
		controllerutil.AddFinalizer(lv, Finalizer)
		if err := r.Client.Patch(ctx, lv, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}

	out, err := r.ensure(ctx, lv)
	if err != nil {
		reason := reasonOf(err)
		logger.Info("logical volume failed", "lv", thinlvmv1.LVName(lv), "reason", reason, "error", status.Convert(err).Message())
		if serr := r.setStatus(ctx, lv, nil, err); serr != nil {
			return ctrl.Result{}, errors.Join(err, serr)
		}
		switch _, retry := thinlvmv1.Failure(reason); retry {
		case thinlvmv1.RetryOnSpecChange:
			// The spec must change first: the update will requeue it.
			return ctrl.Result{}, nil
		case thinlvmv1.RetryAfterDelay:
			return ctrl.Result{RequeueAfter: r.retryAfter()}, nil
		}
		return ctrl.Result{}, err
	}
	switch {
	case out.waiting != "":
		// The LVMNode's next report of its bases wakes it (waitingForBase);
		// the requeue is a safety net only.
		return ctrl.Result{RequeueAfter: r.retryAfter()}, r.setWaiting(ctx, lv, out.waiting)
	case out.copying != nil:
		return ctrl.Result{RequeueAfter: r.copyPoll()}, r.setCopying(ctx, lv, out.copying)
	}
	return ctrl.Result{}, r.setStatus(ctx, lv, out.vol, nil)
}

// outcome is where ensure left a LogicalVolume that did not fail: made
// (vol), waiting for its golden base (waiting says why), or being copied
// from another node (copying, the copy's progress). A failure is an error.
type outcome struct {
	vol     *pb.LogicalVolume
	waiting string
	copying *thinlvmv1.TransferStatus
}

func (r *LogicalVolumeReconciler) retryAfter() time.Duration {
	if r.RetryAfter > 0 {
		return r.RetryAfter
	}
	return time.Minute
}

// ensure makes the LV exist with the spec's size; lvmd's calls are
// idempotent, so ensure is too.
func (r *LogicalVolumeReconciler) ensure(ctx context.Context, lv *thinlvmv1.LogicalVolume) (outcome, error) {
	name := thinlvmv1.LVName(lv)
	size := uint64(lv.Spec.Size.Value())
	tags := []string{OwnerTagPrefix + lv.Name}
	var vol *pb.LogicalVolume
	existing, err := r.LVMD.GetLV(ctx, &pb.GetLVRequest{Name: name, DeviceClass: lv.Spec.DeviceClass})
	switch {
	case err == nil:
		vol = existing.GetVolume()
		if !ownedBy(vol, lv) {
			// Two LogicalVolumes whose names derive to one LV name
			// ("snapshot-x" and "tl-snapshot-x"): the first keeps it.
			return outcome{}, refuse(thinlvmv1.ReasonConflict, "LV %s belongs to another LogicalVolume (tags %v)", name, vol.GetTags())
		}
		if incomplete(vol) || r.copies.Get(lv.Name) != nil {
			// A copy from another node made it: running, ended, or
			// interrupted by a restart of this agent.
			out, err := r.copyFrom(ctx, lv, vol)
			if err != nil || out.vol == nil {
				return out, err
			}
			vol = out.vol
		}
	case status.Code(err) != codes.NotFound:
		return outcome{}, err
	case lv.Spec.Adopt:
		// Another driver's LV, taken over where it is; lvmd refuses one
		// that is not in the class (ForeignLV) and a missing one
		// (SourceNotFound).
		resp, err := r.LVMD.AdoptLV(ctx, &pb.AdoptLVRequest{Name: name, DeviceClass: lv.Spec.DeviceClass, Tags: tags})
		if err != nil {
			return outcome{}, err
		}
		vol = resp.GetVolume()
	case lv.Spec.Source == nil:
		resp, err := r.LVMD.CreateLV(ctx, &pb.CreateLVRequest{Name: name, DeviceClass: lv.Spec.DeviceClass, SizeBytes: size, Tags: tags})
		if err != nil {
			return outcome{}, err
		}
		vol = resp.GetVolume()
	default:
		src, err := r.sourceLV(ctx, lv)
		switch {
		case err != nil:
			return outcome{}, err
		case src.waiting != "":
			return outcome{waiting: src.waiting}, nil
		case src.remote != nil:
			out, err := r.copyFrom(ctx, lv, nil)
			if err != nil || out.vol == nil {
				return out, err
			}
			vol = out.vol
		default:
			resp, err := r.LVMD.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: name, DeviceClass: lv.Spec.DeviceClass,
				SourceName: src.lv, SizeBytes: size, ReadOnly: lv.Spec.AccessType == thinlvmv1.AccessReadOnly, Tags: tags})
			if err != nil {
				return outcome{}, err
			}
			vol = resp.GetVolume()
		}
	}
	if vol.GetSizeBytes() < size {
		resp, err := r.LVMD.ResizeLV(ctx, &pb.ResizeLVRequest{Name: name, DeviceClass: lv.Spec.DeviceClass, SizeBytes: size})
		if err != nil {
			return outcome{}, err
		}
		vol = resp.GetVolume()
	}
	return outcome{vol: vol}, nil
}

// refusalError is the reconciler's own verdict on a LogicalVolume, with the
// condition reason it reports; lvmd's errors carry a gRPC code instead,
// which reasonOf maps.
type refusalError struct{ reason, msg string }

func (e *refusalError) Error() string { return e.msg }

func refuse(reason, format string, args ...any) error {
	return &refusalError{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// reasonOf is the Failed condition's reason for an error of ensure: the
// reconciler's own refusal's, else the one for lvmd's gRPC code. It is the
// node agent's only mapping from codes to reasons.
func reasonOf(err error) string {
	var r *refusalError
	if errors.As(err, &r) {
		return r.reason
	}
	// lvmd's reason, where one code covers several refusals.
	switch pb.ReasonOf(err) {
	case pb.ErrorReason_ERROR_REASON_NOT_MANAGED:
		return thinlvmv1.ReasonForeignLV
	case pb.ErrorReason_ERROR_REASON_DEVICE_CLASS_UNAVAILABLE:
		return thinlvmv1.ReasonDeviceClassUnavailable
	case pb.ErrorReason_ERROR_REASON_THICK:
		return thinlvmv1.ReasonUnsupported
	case pb.ErrorReason_ERROR_REASON_POOL_NOT_ACTIVE, pb.ErrorReason_ERROR_REASON_METADATA_SNAPSHOT_HELD:
		return thinlvmv1.ReasonLVMFailed
	}
	switch status.Code(err) {
	case codes.ResourceExhausted:
		return thinlvmv1.ReasonNoSpace
	case codes.NotFound:
		// ensure makes its own LV when GetLV finds none, so lvmd's
		// NotFound names a snapshot's source (or an LV removed behind
		// the agent's back, which the next attempt makes again).
		return thinlvmv1.ReasonSourceNotFound
	case codes.InvalidArgument:
		return thinlvmv1.ReasonInvalidSpec
	case codes.OutOfRange:
		return thinlvmv1.ReasonSizeOutOfRange
	case codes.AlreadyExists:
		return thinlvmv1.ReasonConflict
	case codes.FailedPrecondition:
		// An lvmd without reasons: its only FailedPrecondition on this
		// path was a foreign LV.
		return thinlvmv1.ReasonForeignLV
	case codes.Unimplemented:
		return thinlvmv1.ReasonUnsupported
	case codes.Unavailable:
		return thinlvmv1.ReasonLVMDUnavailable
	case codes.DeadlineExceeded, codes.Canceled:
		return thinlvmv1.ReasonLVMTimeout
	}
	return thinlvmv1.ReasonLVMFailed
}

// baseLV resolves a GoldenImage source to its sealed base on this node, or
// says why the volume waits for it: the golden reconciler is making it.
func (r *LogicalVolumeReconciler) baseLV(ctx context.Context, lv *thinlvmv1.LogicalVolume) (base *pb.LogicalVolume, waiting string, err error) {
	name := lv.Spec.Source.Name
	gi := &thinlvmv1.GoldenImage{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, gi); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", refuse(thinlvmv1.ReasonSourceNotFound, "GoldenImage %s not found", name)
		}
		return nil, "", err
	}
	if gi.Spec.DeviceClass != lv.Spec.DeviceClass {
		return nil, "", refuse(thinlvmv1.ReasonSourceMismatch, "GoldenImage %s is in device class %q, not %q", name, gi.Spec.DeviceClass, lv.Spec.DeviceClass)
	}
	resp, err := r.LVMD.GetLV(ctx, &pb.GetLVRequest{Name: thinlvmv1.BaseLVName(gi), DeviceClass: lv.Spec.DeviceClass})
	if err == nil && resp.GetVolume().GetReadOnly() {
		return resp.GetVolume(), "", nil
	}
	if err != nil && status.Code(err) != codes.NotFound {
		return nil, "", err
	}
	ln := &thinlvmv1.LVMNode{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: r.NodeName}, ln); err == nil {
		switch b := ln.Status.Base(gi); {
		case b == nil:
		case b.State == thinlvmv1.GoldenBaseFailed:
			return nil, "", refuse(thinlvmv1.ReasonBaseFailed, "golden base of %s failed on node %s: %s", name, r.NodeName, b.Message)
		case b.State == thinlvmv1.GoldenBasePopulating:
			// The progress is in the LVMNode and the GoldenImage: copied
			// into every waiting volume it would cost a write per volume
			// per progress report.
			return nil, fmt.Sprintf("waiting for the golden base of %s: populating on node %s (progress in LVMNode %s)", name, r.NodeName, r.NodeName), nil
		}
	}
	return nil, fmt.Sprintf("waiting for the golden base of %s to be made on node %s", name, r.NodeName), nil
}

// foundSource is what sourceLV found a volume's source to be: an LV on this
// node (lv), a LogicalVolume whose data is copied (remote: on another node,
// or a thick LV on this one), or a golden base not made yet (waiting says
// why).
type foundSource struct {
	lv      string
	remote  *thinlvmv1.LogicalVolume
	waiting string
}

// sourceLV resolves a volume's source.
func (r *LogicalVolumeReconciler) sourceLV(ctx context.Context, lv *thinlvmv1.LogicalVolume) (foundSource, error) {
	src := lv.Spec.Source
	switch src.Kind {
	case thinlvmv1.SourceVolume, thinlvmv1.SourceSnapshot:
	case thinlvmv1.SourceGoldenImage:
		base, waiting, err := r.baseLV(ctx, lv)
		if err != nil || waiting != "" {
			return foundSource{waiting: waiting}, err
		}
		return foundSource{lv: base.GetName()}, nil
	default:
		return foundSource{}, refuse(thinlvmv1.ReasonUnsupported, "source kind %s is not supported by this node agent", src.Kind)
	}
	from := &thinlvmv1.LogicalVolume{}
	if err := r.getLV(ctx, src.Name, from); err != nil {
		if apierrors.IsNotFound(err) {
			return foundSource{}, refuse(thinlvmv1.ReasonSourceNotFound, "source LogicalVolume %s not found", src.Name)
		}
		return foundSource{}, err
	}
	if from.Spec.DeviceClass != lv.Spec.DeviceClass {
		return foundSource{}, refuse(thinlvmv1.ReasonSourceMismatch, "source LogicalVolume %s is in device class %q, not %q", src.Name, from.Spec.DeviceClass, lv.Spec.DeviceClass)
	}
	if from.Spec.NodeName != lv.Spec.NodeName {
		return foundSource{remote: from}, nil
	}
	// The source LV is found by the source object's identity (its name
	// and the owner tag its agent put on the LV), never by a status field
	// another writer could set to a third tenant's LV.
	name := thinlvmv1.LVName(from)
	got, err := r.LVMD.GetLV(ctx, &pb.GetLVRequest{Name: name, DeviceClass: from.Spec.DeviceClass})
	if status.Code(err) == codes.NotFound {
		return foundSource{}, refuse(thinlvmv1.ReasonSourceNotFound, "source LogicalVolume %s is not made yet", src.Name)
	}
	if err != nil {
		return foundSource{}, err
	}
	if !ownedBy(got.GetVolume(), from) {
		return foundSource{}, refuse(thinlvmv1.ReasonSourceMismatch, "LV %s is not the LV of source LogicalVolume %s (tags %v)", name, src.Name, got.GetVolume().GetTags())
	}
	if got.GetVolume().GetThick() {
		// No thin snapshot of a thick LV: a clone copies it, through this
		// node's own transfer endpoint as from another node's.
		if lv.Spec.Role == thinlvmv1.RoleSnapshot {
			return foundSource{}, refuse(thinlvmv1.ReasonUnsupported, "device class %s is thick: its volumes have no snapshots", lv.Spec.DeviceClass)
		}
		return foundSource{remote: from}, nil
	}
	return foundSource{lv: name}, nil
}

// getLV reads the LogicalVolume name: from the cache, which holds only this
// node's volumes, else from the API server (a source on another node).
func (r *LogicalVolumeReconciler) getLV(ctx context.Context, name string, lv *thinlvmv1.LogicalVolume) error {
	err := r.Client.Get(ctx, types.NamespacedName{Name: name}, lv)
	if apierrors.IsNotFound(err) && r.APIReader != nil {
		err = r.APIReader.Get(ctx, types.NamespacedName{Name: name}, lv)
	}
	return err
}

// remoteSource is the source LogicalVolume on another node that lv's LV is
// being copied from.
func (r *LogicalVolumeReconciler) remoteSource(ctx context.Context, lv *thinlvmv1.LogicalVolume) (*thinlvmv1.LogicalVolume, error) {
	src, err := r.sourceLV(ctx, lv)
	if err != nil {
		return nil, err
	}
	if src.remote == nil {
		return nil, refuse(thinlvmv1.ReasonConflict, "LV %s is marked %q but its source is neither on another node nor thick", thinlvmv1.LVName(lv), thinlvmv1.IncompleteTag)
	}
	return src.remote, nil
}

// ownedBy tells whether vol is the LV of lv: its agent tags every LV it
// makes with the LogicalVolume's name.
func ownedBy(vol *pb.LogicalVolume, lv *thinlvmv1.LogicalVolume) bool {
	return slices.Contains(vol.GetTags(), OwnerTagPrefix+lv.Name)
}

// setStatus writes the outcome of a reconcile: vol on success, err on
// failure (vol nil).
func (r *LogicalVolumeReconciler) setStatus(ctx context.Context, lv *thinlvmv1.LogicalVolume, vol *pb.LogicalVolume, err error) error {
	old := lv.DeepCopy()
	st := &lv.Status
	st.ObservedGeneration = lv.Generation
	if err == nil {
		st.VolumeID = vol.GetName()
		q := resource.NewQuantity(int64(vol.GetSizeBytes()), resource.BinarySI)
		st.CurrentSize = q
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: thinlvmv1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: thinlvmv1.ReasonCreated, Message: fmt.Sprintf("lv %s/%s is %s", vol.GetVolumeGroup(), vol.GetName(), q), ObservedGeneration: lv.Generation})
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: thinlvmv1.ConditionFailed, Status: metav1.ConditionFalse,
			Reason: thinlvmv1.ReasonSucceeded, ObservedGeneration: lv.Generation})
	} else {
		reason := reasonOf(err)
		msg := status.Convert(err).Message()
		ready := metav1.ConditionFalse
		if st.VolumeID != "" && meta.IsStatusConditionTrue(st.Conditions, thinlvmv1.ConditionReady) && reason != thinlvmv1.ReasonSourceNotFound {
			ready = metav1.ConditionTrue // the LV exists; a failed resize does not unmake it
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: thinlvmv1.ConditionReady, Status: ready,
			Reason: reason, Message: msg, ObservedGeneration: lv.Generation})
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: thinlvmv1.ConditionFailed, Status: metav1.ConditionTrue,
			Reason: reason, Message: msg, ObservedGeneration: lv.Generation})
	}
	return r.patchStatus(ctx, old, lv)
}

// setCopying reports a LogicalVolume whose data is being copied from its
// source's node: not Ready, not Failed, with the copy's progress.
func (r *LogicalVolumeReconciler) setCopying(ctx context.Context, lv *thinlvmv1.LogicalVolume, transfer *thinlvmv1.TransferStatus) error {
	old := lv.DeepCopy()
	st := &lv.Status
	st.ObservedGeneration = lv.Generation
	st.Transfer = transfer.DeepCopy()
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: thinlvmv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: thinlvmv1.ReasonCopying, Message: copyingMessage(transfer), ObservedGeneration: lv.Generation})
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: thinlvmv1.ConditionFailed, Status: metav1.ConditionFalse,
		Reason: thinlvmv1.ReasonCopying, ObservedGeneration: lv.Generation})
	return r.patchStatus(ctx, old, lv)
}

// setWaiting reports a LogicalVolume waiting for its golden base: not
// Ready, and not Failed either, so the controller keeps waiting.
func (r *LogicalVolumeReconciler) setWaiting(ctx context.Context, lv *thinlvmv1.LogicalVolume, msg string) error {
	old := lv.DeepCopy()
	st := &lv.Status
	st.ObservedGeneration = lv.Generation
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: thinlvmv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: thinlvmv1.ReasonWaitingForBase, Message: msg, ObservedGeneration: lv.Generation})
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: thinlvmv1.ConditionFailed, Status: metav1.ConditionFalse,
		Reason: thinlvmv1.ReasonWaitingForBase, ObservedGeneration: lv.Generation})
	return r.patchStatus(ctx, old, lv)
}

// patchStatus writes lv's status if it differs from old's: an empty merge
// patch is a write all the same.
func (r *LogicalVolumeReconciler) patchStatus(ctx context.Context, old, lv *thinlvmv1.LogicalVolume) error {
	if equality.Semantic.DeepEqual(old.Status, lv.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, lv, client.MergeFrom(old)); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	return nil
}

// finalize removes the LV and then the finalizer.
func (r *LogicalVolumeReconciler) finalize(ctx context.Context, lv *thinlvmv1.LogicalVolume) error {
	if !controllerutil.ContainsFinalizer(lv, Finalizer) {
		return nil
	}
	// A copy into it ends first (and removes its LV).
	r.copies.Stop(lv.Name)
	// Only this object's own LV goes: an LV of that name made for another
	// LogicalVolume stays (see ownedBy), as if this one had none.
	name := thinlvmv1.LVName(lv)
	got, err := r.LVMD.GetLV(ctx, &pb.GetLVRequest{Name: name, DeviceClass: lv.Spec.DeviceClass})
	if claim := lv.Annotations[thinlvmv1.AdoptOfAnnotation]; err == nil && ownedBy(got.GetVolume(), lv) && lv.Spec.Adopt && claim != "" {
		// Taken over, and the adoption not done: the claim may still be
		// bound to the other driver's volume of this LV, or about to be
		// bound to this one. The data stays until the adoption ends or an
		// administrator removes the annotation.
		return refuse(thinlvmv1.ReasonConflict, "LV %s was taken over for claim %s, whose adoption is not done: it holds that claim's data and is kept; remove the annotation %s to let the deletion remove it",
			name, claim, thinlvmv1.AdoptOfAnnotation)
	}
	if err == nil && ownedBy(got.GetVolume(), lv) {
		_, err = r.LVMD.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name, DeviceClass: lv.Spec.DeviceClass})
	}
	switch status.Code(err) {
	case codes.OK, codes.NotFound:
	case codes.InvalidArgument:
		// lvmd checks the request before any lvm command, and the LV name
		// is ours and valid: the device class is one lvmd does not know,
		// so no LV of this object can exist. Keeping the finalizer would
		// leave the object Terminating for good.
		log.FromContext(ctx).Info("logical volume has no LV to remove", "lv", name, "deviceClass", lv.Spec.DeviceClass, "reason", status.Convert(err).Message())
	default:
		return fmt.Errorf("remove lv %s: %w", name, err)
	}
	patch := client.MergeFrom(lv.DeepCopy())
	controllerutil.RemoveFinalizer(lv, Finalizer)
	if err := r.Client.Patch(ctx, lv, patch); err != nil {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	log.FromContext(ctx).Info("logical volume removed", "lv", name)
	return nil
}

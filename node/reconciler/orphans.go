package reconciler

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// sweep removes, once at start, the LVs whose LogicalVolume no longer
// exists: objects deleted while the agent was down or its Node gone (the
// controller's node cleanup takes the finalizer off then). It considers
// only LVs an agent made for a LogicalVolume (one owner tag, and the name
// derived from it); golden bases and anything else lvmd holds stay. The
// object's absence is confirmed past the cache; an object that exists, on
// whatever node, keeps its LV.
func (r *LogicalVolumeReconciler) sweep(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("orphan-sweep")
	ctx = log.IntoContext(ctx, logger)
	var vols []*pb.LogicalVolume
	for {
		resp, err := r.LVMD.ListLVs(ctx, &pb.ListLVsRequest{})
		if err == nil {
			vols = resp.GetVolumes()
			break
		}
		logger.Info("list LVs failed; retrying", "error", err.Error())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
	for _, v := range vols {
		owner, ok := ownerOf(v)
		if !ok {
			continue
		}
		removed, err := r.removeOrphan(ctx, v, owner)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			logger.Error(err, "orphan LV not removed; the next start tries again", "lv", v.GetName(), "deviceClass", v.GetDeviceClass(), "logicalVolume", klog.KRef("", owner))
			r.event(ctx, owner, corev1.EventTypeWarning, "OrphanLVRemoveFailed", "node %s: LV %s/%s of LogicalVolume %s not checked or not removed: %v",
				r.NodeName, v.GetVolumeGroup(), v.GetName(), owner, err)
		case removed:
			logger.Info("orphan LV removed", "lv", v.GetName(), "deviceClass", v.GetDeviceClass(), "logicalVolume", klog.KRef("", owner))
			r.Metrics.orphanRemoved()
			r.event(ctx, owner, corev1.EventTypeNormal, "OrphanLVRemoved", "node %s: removed LV %s/%s of LogicalVolume %s, which no longer exists",
				r.NodeName, v.GetVolumeGroup(), v.GetName(), owner)
		}
	}
	return nil
}

// ownerOf is the name of the LogicalVolume an agent made v for: its one
// owner tag, on an LV named after it (LVNameOf). Anything else is not the
// agent's to remove.
func ownerOf(v *pb.LogicalVolume) (string, bool) {
	owner, n := "", 0
	for _, t := range v.GetTags() {
		if strings.HasPrefix(t, thinlvmv1.BaseTagPrefix) {
			return "", false // a golden base: node/golden's
		}
		if name, ok := strings.CutPrefix(t, OwnerTagPrefix); ok {
			owner, n = name, n+1
		}
	}
	if n != 1 || owner == "" || v.GetName() != thinlvmv1.LVNameOf(owner) {
		return "", false
	}
	return owner, true
}

// removeOrphan removes v if its LogicalVolume owner does not exist. It
// holds off the reconciler meanwhile: an object made again under that
// name waits until its old LV is gone, then gets a new one.
func (r *LogicalVolumeReconciler) removeOrphan(ctx context.Context, v *pb.LogicalVolume, owner string) (bool, error) {
	r.sweeping.Lock()
	defer r.sweeping.Unlock()
	// Again under the lock: a reconcile since the list may have removed it.
	got, err := r.LVMD.GetLV(ctx, &pb.GetLVRequest{Name: v.GetName(), DeviceClass: v.GetDeviceClass()})
	if status.Code(err) == codes.NotFound {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get lv %s: %w", v.GetName(), err)
	}
	if o, ok := ownerOf(got.GetVolume()); !ok || o != owner {
		return false, nil
	}
	obj := &thinlvmv1.LogicalVolume{}
	err = r.APIReader.Get(ctx, types.NamespacedName{Name: owner}, obj)
	if err == nil {
		if obj.Spec.NodeName != r.NodeName {
			log.FromContext(ctx).Info("LV's LogicalVolume is on another node; left alone", "lv", v.GetName(), "logicalVolume", klog.KObj(obj), "objectNode", obj.Spec.NodeName)
		}
		return false, nil
	}
	if !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("get LogicalVolume %s: %w", owner, err)
	}
	if _, err := r.LVMD.RemoveLV(ctx, &pb.RemoveLVRequest{Name: v.GetName(), DeviceClass: v.GetDeviceClass()}); err != nil {
		return false, fmt.Errorf("remove lv %s: %w", v.GetName(), err)
	}
	return true, nil
}

// event reports on this node's LVMNode (by name, if the agent has not
// published it yet), related to the LogicalVolume owner: one Event per LV,
// where the recorder would fold Events that differ only in their note
// into one series.
func (r *LogicalVolumeReconciler) event(ctx context.Context, owner, kind, reason, format string, args ...any) {
	if r.Recorder == nil {
		return
	}
	gv := thinlvmv1.GroupVersion.String()
	var regarding runtime.Object = &corev1.ObjectReference{APIVersion: gv, Kind: "LVMNode", Name: r.NodeName}
	ln := &thinlvmv1.LVMNode{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: r.NodeName}, ln); err == nil {
		regarding = ln
	} else if !apierrors.IsNotFound(err) {
		log.FromContext(ctx).Info("LVMNode not read for an event", "error", err.Error())
	}
	related := &corev1.ObjectReference{APIVersion: gv, Kind: "LogicalVolume", Name: owner}
	r.Recorder.Eventf(regarding, related, kind, reason, "RemoveOrphanLV", format, args...)
}

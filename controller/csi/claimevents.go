package csi

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// The claim's name and namespace, which the provisioner adds to
// CreateVolume's parameters with --extra-create-metadata.
const (
	pvcNameParameter      = "csi.storage.k8s.io/pvc/name"
	pvcNamespaceParameter = "csi.storage.k8s.io/pvc/namespace"
)

// Reasons of the Events a claim gets while its volume is made.
const (
	// ReasonWaitingForGoldenBase: the volume waits for its node's golden
	// base.
	ReasonWaitingForGoldenBase = "WaitingForGoldenBase"
	// ReasonCopyingFromNode: the volume's data is being copied from its
	// source's node; one Event at the start and one at each quarter.
	ReasonCopyingFromNode = "CopyingFromNode"
	// ReasonCopiedFromNode: the copy is complete.
	ReasonCopiedFromNode = "CopiedFromNode"
)

// claimEvents returns the function a CreateVolume's wait calls with each
// state of its LogicalVolume short of done, and with the done one: it puts
// Events on the claim when the volume starts waiting for its golden base,
// and as a copy from another node starts, passes each quarter and ends,
// which the provisioner would otherwise not show until the call returns.
// Without a recorder, or a claim named in params, it does nothing.
func (s *ControllerServer) claimEvents(ctx context.Context, params map[string]string) func(*thinlvmv1.LogicalVolume) {
	name, namespace := params[pvcNameParameter], params[pvcNamespaceParameter]
	told := map[string]bool{}
	event := func(lv *thinlvmv1.LogicalVolume, key, reason, format string, args ...any) {
		if told[key] || s.Recorder == nil || s.APIReader == nil || name == "" || namespace == "" {
			return
		}
		told[key] = true
		pvc := &corev1.PersistentVolumeClaim{}
		if err := s.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, pvc); err != nil {
			log.FromContext(ctx).V(2).Info("no Event for the claim", "pvc", types.NamespacedName{Namespace: namespace, Name: name}, "error", err.Error())
			return
		}
		s.Recorder.Eventf(pvc, lv, corev1.EventTypeNormal, reason, "Provision", format, args...)
	}
	return func(lv *thinlvmv1.LogicalVolume) {
		c := meta.FindStatusCondition(lv.Status.Conditions, thinlvmv1.ConditionReady)
		t := lv.Status.Transfer
		switch {
		case c != nil && c.Reason == thinlvmv1.ReasonWaitingForBase:
			event(lv, "base", ReasonWaitingForGoldenBase, "volume %s waits on node %s: %s", lv.Name, lv.Spec.NodeName, c.Message)
		case c != nil && c.Reason == thinlvmv1.ReasonCopying && t != nil:
			quarter := 0
			if t.BytesTotal > 0 {
				quarter = int(min(3, t.BytesDone*4/t.BytesTotal))
			}
			if quarter == 0 {
				event(lv, "copy", ReasonCopyingFromNode, "volume %s on node %s: copying its data from node %s", lv.Name, lv.Spec.NodeName, t.SourceNode)
				return
			}
			event(lv, fmt.Sprint("copy", quarter), ReasonCopyingFromNode, "volume %s on node %s: %d%% copied from node %s (%s mode, %d of %d bytes, %d bytes/s)",
				lv.Name, lv.Spec.NodeName, quarter*25, t.SourceNode, t.Mode, t.BytesDone, t.BytesTotal, t.BytesPerSecond)
		case c != nil && c.Status == metav1.ConditionTrue && t != nil && t.CompletionTime != nil:
			took := ""
			if t.StartTime != nil {
				took = fmt.Sprintf(" in %s", t.CompletionTime.Sub(t.StartTime.Time).Round(100*time.Millisecond))
			}
			event(lv, "copied", ReasonCopiedFromNode, "volume %s on node %s: copied from node %s%s (%s mode: %d bytes copied, %d sent)",
				lv.Name, lv.Spec.NodeName, t.SourceNode, took, t.Mode, t.BytesDone, t.BytesSent)
		}
	}
}

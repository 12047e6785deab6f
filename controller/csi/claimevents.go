package csi

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
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

// ReasonWaitingForGoldenBase is the reason of the Event a claim gets while
// its volume waits for its node's golden base.
const ReasonWaitingForGoldenBase = "WaitingForGoldenBase"

// claimEvents returns the function a CreateVolume's wait calls with each
// state of its LogicalVolume short of done: it puts one Event on the claim
// when the volume starts waiting for its golden base, which the provisioner
// would otherwise not show until the call times out. Without a recorder,
// or a claim named in params, it does nothing.
func (s *ControllerServer) claimEvents(ctx context.Context, params map[string]string) func(*thinlvmv1.LogicalVolume) {
	name, namespace := params[pvcNameParameter], params[pvcNamespaceParameter]
	told := false
	return func(lv *thinlvmv1.LogicalVolume) {
		if told || s.Recorder == nil || s.APIReader == nil || name == "" || namespace == "" {
			return
		}
		c := meta.FindStatusCondition(lv.Status.Conditions, thinlvmv1.ConditionReady)
		if c == nil || c.Reason != thinlvmv1.ReasonWaitingForBase {
			return
		}
		told = true
		pvc := &corev1.PersistentVolumeClaim{}
		if err := s.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, pvc); err != nil {
			log.FromContext(ctx).V(2).Info("no Event for the claim", "pvc", types.NamespacedName{Namespace: namespace, Name: name}, "error", err.Error())
			return
		}
		s.Recorder.Eventf(pvc, lv, corev1.EventTypeNormal, ReasonWaitingForGoldenBase, "Provision",
			"volume %s waits on node %s: %s", lv.Name, lv.Spec.NodeName, c.Message)
	}
}

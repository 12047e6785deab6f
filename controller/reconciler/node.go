package reconciler

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// NodeFinalizer holds a Node that runs thinlvm until its volumes are
// cleaned up.
const NodeFinalizer = "thinlvm.io/node"

// NodeReconciler cleans up after deleted nodes.
type NodeReconciler struct {
	Client client.Client
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=thinlvm.io,resources=logicalvolumes,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=thinlvm.io,resources=lvmnodes,verbs=get;list;watch

// SetupWithManager registers the reconciler: Nodes, and the Node of every
// LVMNode (an LVMNode marks a node that runs thinlvm).
func (r *NodeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("node-cleanup").
		For(&corev1.Node{}).
		Watches(&thinlvmv1.LVMNode{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
		})).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *NodeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, req.NamespacedName, node); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if node.DeletionTimestamp.IsZero() {
		if controllerutil.ContainsFinalizer(node, NodeFinalizer) {
			return ctrl.Result{}, nil
		}
		// Only nodes that run thinlvm (have an LVMNode) are held.
		err := r.Client.Get(ctx, req.NamespacedName, &thinlvmv1.LVMNode{})
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		patch := client.MergeFrom(node.DeepCopy())
		controllerutil.AddFinalizer(node, NodeFinalizer)
		return ctrl.Result{}, r.Client.Patch(ctx, node, patch)
	}
	if !controllerutil.ContainsFinalizer(node, NodeFinalizer) {
		return ctrl.Result{}, nil
	}
	if err := r.cleanup(ctx, node.Name); err != nil {
		return ctrl.Result{}, err
	}
	patch := client.MergeFrom(node.DeepCopy())
	controllerutil.RemoveFinalizer(node, NodeFinalizer)
	if err := r.Client.Patch(ctx, node, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("remove node finalizer: %w", err)
	}
	log.FromContext(ctx).Info("volumes of deleted node cleaned up", "node", klog.KObj(node))
	return ctrl.Result{}, nil
}

// cleanup deletes the PVCs bound to thinlvm PVs of the node, then the
// node's LogicalVolumes (removing the agent's finalizer: the agent is gone).
func (r *NodeReconciler) cleanup(ctx context.Context, node string) error {
	pvs := &corev1.PersistentVolumeList{}
	if err := r.Client.List(ctx, pvs); err != nil {
		return fmt.Errorf("list PVs: %w", err)
	}
	var errs []error
	for i := range pvs.Items {
		pv := &pvs.Items[i]
		if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != thinlvmv1.DriverName || !onNode(pv, node) || pv.Spec.ClaimRef == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		pvc.Namespace, pvc.Name = pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name
		if err := r.Client.Delete(ctx, pvc, client.Preconditions{UID: &pv.Spec.ClaimRef.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("delete PVC %s/%s: %w", pvc.Namespace, pvc.Name, err))
		}
	}
	lvs := &thinlvmv1.LogicalVolumeList{}
	if err := r.Client.List(ctx, lvs); err != nil {
		return errors.Join(append(errs, fmt.Errorf("list LogicalVolumes: %w", err))...)
	}
	for i := range lvs.Items {
		lv := &lvs.Items[i]
		if lv.Spec.NodeName != node {
			continue
		}
		if controllerutil.ContainsFinalizer(lv, thinlvmv1.LogicalVolumeFinalizer) {
			patch := client.MergeFrom(lv.DeepCopy())
			controllerutil.RemoveFinalizer(lv, thinlvmv1.LogicalVolumeFinalizer)
			if err := r.Client.Patch(ctx, lv, patch); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("remove finalizer of LogicalVolume %s: %w", lv.Name, err))
				continue
			}
		}
		if err := r.Client.Delete(ctx, lv); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete LogicalVolume %s: %w", lv.Name, err))
		}
	}
	return errors.Join(errs...)
}

// onNode tells whether a PV's node affinity pins it to node by thinlvm's
// topology key.
func onNode(pv *corev1.PersistentVolume, node string) bool {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return false
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == thinlvmv1.TopologyKey && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 && e.Values[0] == node {
				return true
			}
		}
	}
	return false
}

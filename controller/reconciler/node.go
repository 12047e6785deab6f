package reconciler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// NodeFinalizer is the finalizer earlier versions put on every Node that
// ran thinlvm; the reconciler now only removes it. Nothing of thinlvm holds
// a Node: uninstalling it leaves no finalizer behind.
const NodeFinalizer = "thinlvm.io/node"

// NodeReconciler cleans up after deleted nodes: once the API server says a
// Node is gone, the claims bound to thinlvm volumes pinned to it and its
// LogicalVolumes are deleted (the node's agent and disks went with it).
// Requests are node names: a Node's deletion, and the node of every
// LogicalVolume when the controller starts (a node deleted while it was
// down).
type NodeReconciler struct {
	Client client.Client
	// APIReader confirms that a Node is gone past the cache: a Node the
	// cache has not seen yet must not look deleted.
	APIReader client.Reader

	// indexer indexes PVs by node at the first cleanup (SetupWithManager).
	indexer client.FieldIndexer
	// pvsIndexed is set once the index is on the PV informer; guarded by
	// pvsMu.
	pvsMu      sync.Mutex
	pvsIndexed bool
}

// Field indexes of the node cleanup: LogicalVolumes by spec.nodeName, and
// thinlvm PVs by the node their affinity pins them to (pvNodes).
const (
	indexLVNode = "thinlvm.io/lv-node"
	indexPVNode = "thinlvm.io/pv-node"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=thinlvm.io,resources=logicalvolumes,verbs=get;list;watch;update;patch;delete

// SetupWithManager registers the reconciler and the index of
// LogicalVolumes by node. The index of PVs by node is put on at the first
// cleanup: the controller caches no PV until a node is lost (PVs of every
// driver, and an informer known at start would be synced before the CSI
// service answers).
func (r *NodeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.indexer = mgr.GetFieldIndexer()
	if err := r.indexer.IndexField(context.Background(), &thinlvmv1.LogicalVolume{}, indexLVNode, func(o client.Object) []string {
		if n := o.(*thinlvmv1.LogicalVolume).Spec.NodeName; n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index LogicalVolumes by node: %w", err)
	}
	lvCreated := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return true },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	// A Node matters when it goes, or when it still has the old finalizer:
	// not at each of its status updates. Nodes are cached as metadata only
	// (their name and finalizers are all the cleanup reads): a whole Node,
	// with its images and conditions, weighs kilobytes, times every node
	// of the cluster.
	nodeEvents := predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return controllerutil.ContainsFinalizer(e.Object, NodeFinalizer) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return controllerutil.ContainsFinalizer(e.ObjectNew, NodeFinalizer) },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("node-cleanup").
		For(&corev1.Node{}, builder.OnlyMetadata, builder.WithPredicates(nodeEvents)).
		Watches(&thinlvmv1.LogicalVolume{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			lv, ok := o.(*thinlvmv1.LogicalVolume)
			if !ok || lv.Spec.NodeName == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: lv.Spec.NodeName}}}
		}), builder.WithPredicates(lvCreated)).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *NodeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	err := r.Client.Get(ctx, req.NamespacedName, node)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, req.NamespacedName, node) // the cache may lag a new Node
	}
	if err == nil {
		if !controllerutil.ContainsFinalizer(node, NodeFinalizer) {
			return ctrl.Result{}, nil
		}
		patch := client.MergeFrom(node.DeepCopy())
		controllerutil.RemoveFinalizer(node, NodeFinalizer)
		if err := r.Client.Patch(ctx, node, patch); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("remove the finalizer an earlier version added: %w", err)
		}
		return ctrl.Result{}, nil
	}
	if !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("get node %s: %w", req.Name, err)
	}
	n, err := r.cleanup(ctx, req.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if n > 0 {
		log.FromContext(ctx).Info("volumes of deleted node cleaned up", "node", klog.KRef("", req.Name), "logicalVolumes", n)
	}
	return ctrl.Result{}, nil
}

// cleanup deletes the PVCs bound to thinlvm PVs of the node, then the
// node's LogicalVolumes, and removes the agent's finalizer from them: the
// agent is gone with its disks. It returns how many LogicalVolumes it
// deleted. Both are read from the cache through the node's index entries:
// the cost is the node's volumes, not the cluster's.
func (r *NodeReconciler) cleanup(ctx context.Context, node string) (int, error) {
	if err := r.indexPVs(ctx); err != nil {
		return 0, err
	}
	pvs := &corev1.PersistentVolumeList{}
	if err := r.Client.List(ctx, pvs, client.MatchingFields{indexPVNode: node}); err != nil {
		return 0, fmt.Errorf("list PVs of node %s: %w", node, err)
	}
	var errs []error
	for i := range pvs.Items {
		pv := &pvs.Items[i]
		if pv.Spec.ClaimRef == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		pvc.Namespace, pvc.Name = pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name
		if err := r.Client.Delete(ctx, pvc, client.Preconditions{UID: &pv.Spec.ClaimRef.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("delete PVC %s/%s: %w", pvc.Namespace, pvc.Name, err))
		}
	}
	lvs := &thinlvmv1.LogicalVolumeList{}
	if err := r.Client.List(ctx, lvs, client.MatchingFields{indexLVNode: node}); err != nil {
		return 0, errors.Join(append(errs, fmt.Errorf("list LogicalVolumes of node %s: %w", node, err))...)
	}
	deleted := 0
	for i := range lvs.Items {
		lv := &lvs.Items[i]
		// Deleted first, the finalizer taken off second: an agent still
		// running (its Node deleted under it) puts the finalizer back on
		// an object that is not being deleted, and the API server refuses
		// new finalizers once it is. The other way round, the agent could
		// re-add it in between and leave the object Terminating for good.
		if err := r.Client.Delete(ctx, lv); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete LogicalVolume %s: %w", lv.Name, err))
			continue
		}
		if err := r.removeFinalizer(ctx, lv); err != nil {
			errs = append(errs, fmt.Errorf("remove finalizer of LogicalVolume %s: %w", lv.Name, err))
			continue
		}
		deleted++
	}
	return deleted, errors.Join(errs...)
}

// removeFinalizer takes the agent's finalizer off a deleted LogicalVolume.
// It reads the object past the cache and patches with its resourceVersion
// (the agent may be removing the finalizer itself), retrying on conflict;
// an object already gone is done.
func (r *NodeReconciler) removeFinalizer(ctx context.Context, lv *thinlvmv1.LogicalVolume) error {
	key := client.ObjectKeyFromObject(lv)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &thinlvmv1.LogicalVolume{}
		if err := r.APIReader.Get(ctx, key, cur); err != nil {
			return err
		}
		if !controllerutil.ContainsFinalizer(cur, thinlvmv1.LogicalVolumeFinalizer) {
			return nil
		}
		patch := client.MergeFromWithOptions(cur.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(cur, thinlvmv1.LogicalVolumeFinalizer)
		return r.Client.Patch(ctx, cur, patch)
	})
	return client.IgnoreNotFound(err)
}

// indexPVs puts the index of PVs by node on the PV informer, once; the
// informer starts then (List waits for its sync).
func (r *NodeReconciler) indexPVs(ctx context.Context) error {
	r.pvsMu.Lock()
	defer r.pvsMu.Unlock()
	if r.pvsIndexed {
		return nil
	}
	if r.indexer == nil {
		return errors.New("the node cleanup has no field indexer: SetupWithManager was not called")
	}
	if err := r.indexer.IndexField(ctx, &corev1.PersistentVolume{}, indexPVNode, pvNodes); err != nil {
		return fmt.Errorf("index PVs by node: %w", err)
	}
	r.pvsIndexed = true
	return nil
}

// pvNodes is the nodes a thinlvm PV's node affinity pins it to by
// thinlvm's topology key: the single value of an In requirement of any of
// its terms, each once. Another driver's PV has none.
func pvNodes(o client.Object) []string {
	pv, ok := o.(*corev1.PersistentVolume)
	if !ok || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != thinlvmv1.DriverName || pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return nil
	}
	var nodes []string
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == thinlvmv1.TopologyKey && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 && !slices.Contains(nodes, e.Values[0]) {
				nodes = append(nodes, e.Values[0])
			}
		}
	}
	return nodes
}

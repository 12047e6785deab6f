package reconciler

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// GoldenImageReconciler sums up the nodes' golden bases (LVMNode status)
// in each GoldenImage's status.
type GoldenImageReconciler struct {
	Client client.Client
}

// +kubebuilder:rbac:groups=thinlvm.io,resources=goldenimages,verbs=get;list;watch
// +kubebuilder:rbac:groups=thinlvm.io,resources=goldenimages/status,verbs=get;update;patch

// SetupWithManager registers the reconciler: GoldenImages, and every
// GoldenImage when an LVMNode's bases change (a base that left a node is
// named nowhere any more).
func (r *GoldenImageReconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := func(ctx context.Context, _ client.Object) []reconcile.Request {
		list := &thinlvmv1.GoldenImageList{}
		if err := r.Client.List(ctx, list); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, gi := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: gi.Name}})
		}
		return reqs
	}
	basesChanged := predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*thinlvmv1.LVMNode)
			n, ok2 := e.ObjectNew.(*thinlvmv1.LVMNode)
			return !ok1 || !ok2 || !basesEqual(o.Status.GoldenBases, n.Status.GoldenBases)
		},
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("goldenimage-status").
		For(&thinlvmv1.GoldenImage{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&thinlvmv1.LVMNode{}, handler.EnqueueRequestsFromMapFunc(all), builder.WithPredicates(basesChanged)).
		Complete(r)
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
	nodes := &thinlvmv1.LVMNodeList{}
	if err := r.Client.List(ctx, nodes); err != nil {
		return ctrl.Result{}, err
	}
	sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
	var st thinlvmv1.GoldenImageStatus
	st.Conditions = slices.Clone(gi.Status.Conditions)
	st.LastError = gi.Status.LastError
	var failures []string
	for _, n := range nodes.Items {
		b := n.Status.Base(gi)
		if b == nil {
			continue
		}
		switch b.State {
		case thinlvmv1.GoldenBaseReady:
			st.ReadyNodes++
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
	ready := metav1.Condition{Type: thinlvmv1.ConditionImageReady, Status: metav1.ConditionFalse, Reason: "NoReadyBase",
		Message: "no node holds a Ready base yet", ObservedGeneration: gi.Generation}
	if st.ReadyNodes > 0 {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, "BaseReady", fmt.Sprintf("%d node(s) hold a Ready base", st.ReadyNodes)
	} else if st.PopulatingNodes > 0 {
		ready.Reason, ready.Message = "Populating", fmt.Sprintf("%d node(s) populating", st.PopulatingNodes)
	}
	degraded := metav1.Condition{Type: thinlvmv1.ConditionImageDegraded, Status: metav1.ConditionFalse, Reason: "NoFailure",
		ObservedGeneration: gi.Generation}
	if st.FailedNodes > 0 {
		degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionTrue, "PopulationFailed", fmt.Sprintf("%d node(s) failed; %s", st.FailedNodes, st.LastError)
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	meta.SetStatusCondition(&st.Conditions, degraded)
	if equalStatus(gi.Status, st) {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFrom(gi.DeepCopy())
	gi.Status = st
	if err := r.Client.Status().Patch(ctx, gi, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("update GoldenImage %s status: %w", gi.Name, err)
	}
	return ctrl.Result{}, nil
}

func equalStatus(a, b thinlvmv1.GoldenImageStatus) bool {
	if a.ReadyNodes != b.ReadyNodes || a.PopulatingNodes != b.PopulatingNodes || a.FailedNodes != b.FailedNodes ||
		a.LastError != b.LastError || a.ObservedGeneration != b.ObservedGeneration || len(a.Conditions) != len(b.Conditions) {
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

package plugin

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// EventsToRegister names the cluster events that can make a pod this
// plugin rejected schedulable, each with a queueing hint that tells the
// scheduler whether this one can: an LVMNode that gained room, a device
// class or a golden base (node agents rewrite their LVMNode every few
// seconds, mostly with nothing new for a waiting pod); a GoldenImage or
// GoldenImageChannel made or whose spec changed; one of the pod's own
// claims made or changed. Reservations that settle are no event: held
// pods are moved back by the plugin itself (reactivate).
func (p *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.EventResource("lvmnodes.v1alpha1.thinlvm.io"), ActionType: fwk.Add | fwk.Update}, QueueingHintFn: p.lvmNodeHint.helps},
		{Event: fwk.ClusterEvent{Resource: fwk.EventResource("goldenimages.v1alpha1.thinlvm.io"), ActionType: fwk.Add | fwk.Update}, QueueingHintFn: specChangeHelps[thinlvmv1.GoldenImage]},
		{Event: fwk.ClusterEvent{Resource: fwk.EventResource("goldenimagechannels.v1alpha1.thinlvm.io"), ActionType: fwk.Add | fwk.Update}, QueueingHintFn: specChangeHelps[thinlvmv1.GoldenImageChannel]},
		{Event: fwk.ClusterEvent{Resource: fwk.PersistentVolumeClaim, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: claimChangeHelps},
	}, nil
}

// lvmNodeChangeHelps queues a pod when an LVMNode is new, or when a
// device class of it is new, has more room, a larger pool, room for more
// volumes in its VG's metadata area or is no longer full, or when the
// node holds a golden base it did not (the pod's volumes then need less
// room there, and its locality score changes). Usage that only grew
// helps no pod.
func lvmNodeChangeHelps(logger klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	change, node, err := lvmNodeChange(oldObj, newObj)
	return verdict(logger, pod, change, node, err)
}

// lvmNodeChange says what of an LVMNode's change may make a waiting pod
// schedulable, "" when nothing: its verdict does not depend on the pod.
func lvmNodeChange(oldObj, newObj any) (change, node string, err error) {
	newNode, err := as[thinlvmv1.LVMNode](newObj)
	if err != nil {
		return "", "", err
	}
	if oldObj == nil {
		return "LVMNode added", newNode.Name, nil
	}
	oldNode, err := as[thinlvmv1.LVMNode](oldObj)
	if err != nil {
		return "", "", err
	}
	if why := roomGained(NewNodeState(oldNode), NewNodeState(newNode)); why != "" {
		return why, newNode.Name, nil
	}
	held := map[baseKey]bool{}
	for _, k := range heldBases(oldNode) {
		held[k] = true
	}
	for _, k := range heldBases(newNode) {
		if !held[k] {
			return "golden base " + k.name + " held", newNode.Name, nil
		}
	}
	return "", newNode.Name, nil
}

// verdict is a queueing hint from what lvmNodeChange found.
func verdict(logger klog.Logger, pod *corev1.Pod, change, node string, err error) (fwk.QueueingHint, error) {
	if err != nil {
		return fwk.Queue, err
	}
	if change == "" {
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("LVMNode change may make the pod schedulable", "pod", klog.KObj(pod), "node", node, "change", change)
	return fwk.Queue, nil
}

// lvmNodeHint is lvmNodeChangeHelps that keeps its finding for the last
// event: the scheduler asks once per waiting pod, every time with the same
// two objects, and the finding does not depend on the pod. Without it
// each pod's call converted both unstructured LVMNodes again.
type lvmNodeHint struct {
	mu           sync.Mutex
	old, cur     any // the last event's objects (pointers: compared by identity)
	change, node string
	err          error
}

func (h *lvmNodeHint) helps(logger klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	if !isPointer(oldObj) || !isPointer(newObj) {
		return lvmNodeChangeHelps(logger, pod, oldObj, newObj)
	}
	h.mu.Lock()
	if h.cur == nil || h.old != oldObj || h.cur != newObj {
		h.old, h.cur = oldObj, newObj
		h.change, h.node, h.err = lvmNodeChange(oldObj, newObj)
	}
	change, node, err := h.change, h.node, h.err
	h.mu.Unlock()
	return verdict(logger, pod, change, node, err)
}

// isPointer tells whether an event's object can be kept and compared by
// identity (nil, for an Add's old object, can).
func isPointer(obj any) bool {
	switch obj.(type) {
	case nil, *unstructured.Unstructured, *thinlvmv1.LVMNode:
		return true
	}
	return false
}

// roomGained says how a device class of the node can take more than it
// could, "" when none can.
func roomGained(old, cur *NodeState) string {
	for i := range cur.classes {
		c := &cur.classes[i]
		o := old.class(c.name)
		switch {
		case o == nil:
			return "device class " + c.name + " added"
		case c.isDefault && !o.isDefault:
			return "device class " + c.name + " became the default"
		case c.available > o.available:
			return "more room in device class " + c.name
		case c.capacity > o.capacity:
			return "larger thin pool in device class " + c.name
		case o.full && !c.full:
			return "device class " + c.name + " takes volumes again"
		case c.lvsLeft > o.lvsLeft:
			return "room for more volumes in device class " + c.name
		}
	}
	return ""
}

// specChangeHelps queues a pod when a GoldenImage or GoldenImageChannel is
// made or its spec changes (its generation): what a claim's volume is made
// from, in which class, and how large its base is are all in the spec.
// Status updates (a population's progress) change nothing this plugin
// reads: the bases nodes hold are in their LVMNodes.
func specChangeHelps[T any, PT interface {
	*T
	GetGeneration() int64
}](_ klog.Logger, _ *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	if oldObj == nil {
		return fwk.Queue, nil
	}
	o, err := as[T](oldObj)
	if err != nil {
		return fwk.Queue, err
	}
	n, err := as[T](newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if PT(o).GetGeneration() == PT(n).GetGeneration() {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// claimChangeHelps queues a pod when one of its own claims is made or
// changes (a generic ephemeral volume's too); other claims are no
// business of its.
func claimChangeHelps(_ klog.Logger, pod *corev1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	pvc, ok := newObj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return fwk.Queue, fmt.Errorf("expected a PersistentVolumeClaim, got %T", newObj)
	}
	if pvc.Namespace != pod.Namespace {
		return fwk.QueueSkip, nil
	}
	for _, v := range podClaims(pod) {
		if v.claim == pvc.Name {
			return fwk.Queue, nil
		}
	}
	return fwk.QueueSkip, nil
}

// as is an event's object as *T: the scheduler hands a custom resource's
// events over as unstructured objects, tests typed ones.
func as[T any](obj any) (*T, error) {
	switch o := obj.(type) {
	case *T:
		return o, nil
	case *unstructured.Unstructured:
		v, err := typed[T](o)
		if err != nil {
			return nil, err
		}
		return v.(*T), nil
	default:
		return nil, fmt.Errorf("expected a %T, got %T", new(T), obj)
	}
}

package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/sizes"
)

// settleAfter is how long after its LV is made a reservation still counts:
// the node agent publishes a change within seconds (its interval is 2s by
// default), after which the LVMNode's room already excludes the volume.
const settleAfter = 5 * time.Second

// settled tells whether a reservation shows in the LVMNode: the LV of every
// claim is made (its LogicalVolume Ready) and the node has reported since,
// or long enough ago that it must have. A claim deleted meanwhile will
// never be made: it holds nothing.
func (p *Plugin) settled(r reservation, ln *thinlvmv1.LVMNode) bool {
	for _, c := range r.claims {
		ns, name, _ := strings.Cut(c, "/")
		pvc, err := p.lister.PVC(ns, name)
		if apierrors.IsNotFound(err) || err == nil && pvc.DeletionTimestamp != nil {
			continue
		}
		if err != nil || pvc.Spec.VolumeName == "" {
			return false
		}
		pv, err := p.lister.PV(pvc.Spec.VolumeName)
		if err != nil || pv.Spec.CSI == nil {
			return false
		}
		lv, err := p.lister.LogicalVolume(pv.Spec.CSI.VolumeHandle)
		if err != nil {
			return false
		}
		ready := meta.FindStatusCondition(lv.Status.Conditions, thinlvmv1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionTrue {
			return false
		}
		reported := ln.Status.UpdateTime != nil && ln.Status.UpdateTime.Unix() > ready.LastTransitionTime.Unix()
		if !reported && p.ledger.now().Sub(ready.LastTransitionTime.Time) < settleAfter {
			return false
		}
	}
	return true
}

// Filter drops nodes without thinlvm, without the device class, or without
// room for the pod's volumes plus the golden bases they lack. Its room is
// what the LVMNode reports less what the ledger promised to pods the
// report does not show yet.
func (p *Plugin) Filter(_ context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	d, st := demandFrom(state)
	if st != nil || d == nil {
		return st
	}
	node := ni.Node().Name
	n, err := p.lister.Node(node)
	if err != nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node does not run thinlvm (no LVMNode)")
	}
	for _, cd := range d.classes {
		c := n.class(cd.class)
		if c == nil {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("node has no thinlvm device class %q", cd.class))
		}
		held := p.ledger.reserved(node, c.name)
		if st := p.filterFull(pod, n.LVMNode, c, d, cd, held.lvs); st != nil {
			return st
		}
		// The bases the node lacks are populated there first (no image, no
		// second look for the class: Filter runs for every node).
		need := cd.bytes
		if len(d.images) > 0 {
			need = sizes.Add(need, n.LVMNode.Status.MissingBases(cd.class, d.images...))
		}
		if need > c.capacity {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("thinlvm device class %q holds at most %d bytes, the pod needs %d", c.name, c.capacity, need))
		}
		if free := c.available - held.bytes; need > free {
			if need <= c.available {
				p.hold(pod) // only reservations in flight stand in the way
			}
			return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("thinlvm device class %q has %d bytes free, the pod needs %d", c.name, max(free, 0), need))
		}
	}
	return nil
}

// filterFull refuses a device class that takes no new volumes whatever
// their size: its thin pool over its high-water mark (lvmd's limit on the
// pool's data and metadata use) or unhealthy, or its VG's metadata area
// without room for the pod's new volumes, the bases the node lacks and
// the heldLVs promised to other pods. Unschedulable, not unresolvable:
// removals or a grown pool make room.
func (p *Plugin) filterFull(pod *corev1.Pod, ln *thinlvmv1.LVMNode, c *classState, d *demand, cd classDemand, heldLVs int) *fwk.Status {
	dc := c.status
	if c.full {
		state := "over its high-water mark"
		if dc.PoolHealth != "" {
			state = string(dc.PoolHealth)
		}
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("thinlvm device class %q takes no new volumes: thin pool %s is %s (data %s%%, metadata %s%%)",
			dc.Name, dc.VolumeGroup+"/"+dc.ThinPool, state, dc.DataPercent, dc.MetadataPercent))
	}
	if c.lvsLeft < 0 {
		return nil // not reported (an older node agent): lvmd still refuses
	}
	need := cd.lvs
	for _, gi := range d.images {
		if ln.Status.MissingBases(cd.class, gi) > 0 {
			need++
		}
	}
	if left := c.lvsLeft - heldLVs; need > left {
		if need <= c.lvsLeft {
			p.hold(pod) // only reservations in flight stand in the way
		}
		m := dc.VGMetadata
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("thinlvm device class %q: the metadata area of volume group %q has room for %d more volumes (%s of %s free), the pod needs %d",
			dc.Name, dc.VolumeGroup, max(left, 0), m.Free.String(), m.Size.String(), need))
	}
	return nil
}

// Reserve holds the pod's bytes on the node until its LVMNode shows them.
func (p *Plugin) Reserve(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, node string) *fwk.Status {
	d, st := demandFrom(state)
	if st != nil || d == nil {
		return st
	}
	n, err := p.lister.Node(node)
	if err != nil {
		return fwk.AsStatus(err)
	}
	bytes, lvs := map[string]int64{}, map[string]int{}
	for _, cd := range d.classes {
		if c := n.class(cd.class); c != nil {
			bytes[c.name] += cd.bytes
			lvs[c.name] += cd.lvs
		}
	}
	p.ledger.reserve(pod.UID, reservation{node: node, bytes: bytes, lvs: lvs, claims: d.claims})
	klog.FromContext(ctx).V(4).Info("Reserved thinlvm bytes", "pod", klog.KObj(pod), "node", klog.KRef("", node), "bytes", bytes)
	return nil
}

// Unreserve drops the pod's reservation.
func (p *Plugin) Unreserve(ctx context.Context, _ fwk.CycleState, pod *corev1.Pod, node string) {
	p.ledger.release(pod.UID)
	klog.FromContext(ctx).V(4).Info("Released thinlvm reservation", "pod", klog.KObj(pod), "node", klog.KRef("", node))
}

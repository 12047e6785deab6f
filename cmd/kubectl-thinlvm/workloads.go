package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KubeVirt's kinds, read unstructured: the plugin does not depend on
// KubeVirt's Go modules, and a cluster without KubeVirt serves neither.
var (
	virtualMachine         = schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachine"}
	virtualMachineInstance = schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachineInstance"}
)

// workload is what runs a claim's pod and the move can stop and start
// again: a Deployment or StatefulSet of one replica, a KubeVirt
// VirtualMachine.
type workload struct {
	obj client.Object
}

func (w workload) String() string {
	switch w.obj.(type) {
	case *appsv1.Deployment:
		return "deployment/" + w.obj.GetName()
	case *appsv1.StatefulSet:
		return "statefulset/" + w.obj.GetName()
	default:
		return "virtualmachine/" + w.obj.GetName()
	}
}

// toStop are the workloads to stop for the move, and the pods that use
// the claim; it refuses a claim that pods use, naming them, unless
// --scale-down is given and each pod's workload can be stopped.
func (r *moveRun) toStop(ctx context.Context) ([]workload, []string, error) {
	pods, err := podsUsing(ctx, r.c, r.ns, r.claim)
	if err != nil || len(pods) == 0 {
		return nil, nil, err
	}
	if !r.scaleDown {
		return nil, nil, fmt.Errorf("claim %s is in use by pod(s) %s: stop them first (--scale-down stops a Deployment or StatefulSet of one replica, or a KubeVirt VirtualMachine, and starts it again after the move)",
			r.key(), strings.Join(pods, ", "))
	}
	var stop []workload
	var cannot []string
	for _, name := range pods {
		w, why, err := r.workloadOf(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		if why != "" {
			cannot = append(cannot, fmt.Sprintf("pod %s: %s", name, why))
		} else if !slices.ContainsFunc(stop, func(s workload) bool { return s.String() == w.String() }) {
			stop = append(stop, w)
		}
	}
	if len(cannot) > 0 {
		return nil, nil, fmt.Errorf("claim %s is in use by pods the move cannot stop: %s", r.key(), strings.Join(cannot, "; "))
	}
	return stop, pods, nil
}

// stopWorkloads stops the workloads and waits until the pods are gone.
func (r *moveRun) stopWorkloads(ctx context.Context, stop []workload, pods []string) error {
	if len(pods) == 0 {
		return nil
	}
	if r.dryRun {
		r.stopped = stop
	}
	for _, w := range stop {
		if err := r.step("stop "+w.String(), func() error { return r.stop(ctx, w) }); err != nil {
			return err
		}
	}
	return r.step(fmt.Sprintf("wait for pod(s) %s to end", strings.Join(pods, ", ")), func() error {
		return wait.PollUntilContextCancel(ctx, r.poll, true, func(ctx context.Context) (bool, error) {
			left, err := podsUsing(ctx, r.c, r.ns, r.claim)
			return len(left) == 0, err
		})
	})
}

// workloadOf is the workload that runs a pod, or why the move cannot stop
// it.
func (r *moveRun) workloadOf(ctx context.Context, name string) (workload, string, error) {
	pod := &corev1.Pod{}
	if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: name}, pod); err != nil {
		return workload{}, "", fmt.Errorf("reading pod %s/%s: %w", r.ns, name, err)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return workload{}, "it has no controller: delete it yourself", nil
	}
	switch gv, _ := schema.ParseGroupVersion(ref.APIVersion); {
	case gv.Group == "apps" && ref.Kind == "ReplicaSet":
		rs := &appsv1.ReplicaSet{}
		if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: ref.Name}, rs); err != nil {
			return workload{}, "", fmt.Errorf("reading replicaset/%s: %w", ref.Name, err)
		}
		owner := metav1.GetControllerOf(rs)
		if owner == nil || owner.Kind != "Deployment" {
			return workload{}, fmt.Sprintf("replicaset/%s belongs to no Deployment", rs.Name), nil
		}
		d := &appsv1.Deployment{}
		if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: owner.Name}, d); err != nil {
			return workload{}, "", fmt.Errorf("reading deployment/%s: %w", owner.Name, err)
		}
		if n := replicas(d.Spec.Replicas, d.Annotations); n != 1 {
			return workload{}, fmt.Sprintf("deployment/%s has %d replicas, not one", d.Name, n), nil
		}
		return workload{d}, "", nil
	case gv.Group == "apps" && ref.Kind == "StatefulSet":
		s := &appsv1.StatefulSet{}
		if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: ref.Name}, s); err != nil {
			return workload{}, "", fmt.Errorf("reading statefulset/%s: %w", ref.Name, err)
		}
		if n := replicas(s.Spec.Replicas, s.Annotations); n != 1 {
			return workload{}, fmt.Sprintf("statefulset/%s has %d replicas, not one", s.Name, n), nil
		}
		if p := s.Spec.PersistentVolumeClaimRetentionPolicy; p != nil && p.WhenScaled == appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
			return workload{}, fmt.Sprintf("statefulset/%s deletes its claims when scaled down (persistentVolumeClaimRetentionPolicy.whenScaled: Delete)", s.Name), nil
		}
		return workload{s}, "", nil
	case gv.Group == virtualMachineInstance.Group && ref.Kind == virtualMachineInstance.Kind:
		vmi := &unstructured.Unstructured{}
		vmi.SetGroupVersionKind(virtualMachineInstance)
		if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: ref.Name}, vmi); err != nil {
			return workload{}, "", fmt.Errorf("reading virtualmachineinstance/%s: %w", ref.Name, err)
		}
		owner := metav1.GetControllerOf(vmi)
		if owner == nil || owner.Kind != virtualMachine.Kind {
			return workload{}, fmt.Sprintf("virtualmachineinstance/%s belongs to no VirtualMachine: delete it yourself", vmi.GetName()), nil
		}
		vm := &unstructured.Unstructured{}
		vm.SetGroupVersionKind(virtualMachine)
		if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: owner.Name}, vm); err != nil {
			return workload{}, "", fmt.Errorf("reading virtualmachine/%s: %w", owner.Name, err)
		}
		return workload{vm}, "", nil
	default:
		return workload{}, fmt.Sprintf("its controller %s/%s is not a Deployment, StatefulSet or VirtualMachine", strings.ToLower(ref.Kind), ref.Name), nil
	}
}

// replicas is a Deployment's or StatefulSet's replicas, or the replicas
// it had when a move stopped it.
func replicas(n *int32, annotations map[string]string) int32 {
	if s, ok := annotations[annStoppedFrom]; ok {
		if v, err := strconv.Atoi(s); err == nil {
			return int32(v)
		}
	}
	if n == nil {
		return 1
	}
	return *n
}

// stop records on a workload the claim it is stopped for and what to set
// again, then stops it. Two claims of one workload moved at once each add
// their name; the last to finish starts it.
func (r *moveRun) stop(ctx context.Context, w workload) error {
	obj := w.obj
	return patchFresh(ctx, r.c, obj, func() error {
		ann := obj.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		claims := splitClaims(ann[annStoppedFor])
		if !slices.Contains(claims, r.claim) {
			claims = append(claims, r.claim)
		}
		ann[annStoppedFor] = strings.Join(claims, ",")
		switch o := obj.(type) {
		case *appsv1.Deployment:
			if _, ok := ann[annStoppedFrom]; !ok {
				ann[annStoppedFrom] = strconv.Itoa(int(replicas(o.Spec.Replicas, nil)))
			}
			o.Spec.Replicas = new(int32)
		case *appsv1.StatefulSet:
			if _, ok := ann[annStoppedFrom]; !ok {
				ann[annStoppedFrom] = strconv.Itoa(int(replicas(o.Spec.Replicas, nil)))
			}
			o.Spec.Replicas = new(int32)
		case *unstructured.Unstructured:
			if _, ok := ann[annStoppedFrom]; !ok {
				ann[annStoppedFrom] = runStrategy(o)
			}
			unstructured.RemoveNestedField(o.Object, "spec", "running")
			if err := unstructured.SetNestedField(o.Object, "Halted", "spec", "runStrategy"); err != nil {
				return err
			}
		}
		obj.SetAnnotations(ann)
		return nil
	})
}

// runStrategy is a VirtualMachine's run strategy, as annStoppedFrom keeps
// it: "runStrategy=X" or, from the older field, "running=true|false".
func runStrategy(vm *unstructured.Unstructured) string {
	if s, ok, _ := unstructured.NestedString(vm.Object, "spec", "runStrategy"); ok {
		return "runStrategy=" + s
	}
	running, _, _ := unstructured.NestedBool(vm.Object, "spec", "running")
	return "running=" + strconv.FormatBool(running)
}

func splitClaims(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// startWorkloads starts again what a move of the claim stopped, once no
// other move holds it.
func (r *moveRun) startWorkloads(ctx context.Context) error {
	var all []client.Object
	deployments := &appsv1.DeploymentList{}
	sets := &appsv1.StatefulSetList{}
	vms := &unstructured.UnstructuredList{}
	vms.SetGroupVersionKind(virtualMachine.GroupVersion().WithKind("VirtualMachineList"))
	for _, l := range []client.ObjectList{deployments, sets, vms} {
		if err := r.c.List(ctx, l, client.InNamespace(r.ns)); err != nil {
			if l == vms && (meta.IsNoMatchError(err) || apierrors.IsNotFound(err)) {
				continue // no KubeVirt here
			}
			return fmt.Errorf("listing workloads in %s: %w", r.ns, err)
		}
	}
	for i := range deployments.Items {
		all = append(all, &deployments.Items[i])
	}
	for i := range sets.Items {
		all = append(all, &sets.Items[i])
	}
	for i := range vms.Items {
		all = append(all, &vms.Items[i])
	}
	if r.dryRun {
		for _, w := range r.stopped {
			r.say("would start %s again", w)
		}
	}
	for _, obj := range all {
		if !slices.Contains(splitClaims(obj.GetAnnotations()[annStoppedFor]), r.claim) {
			continue
		}
		w := workload{obj}
		if err := r.step("start "+w.String()+" again", func() error { return r.start(ctx, w) }); err != nil {
			return err
		}
	}
	return nil
}

// start drops the claim from a stopped workload's record and, when no
// other claim's move holds it, sets back what stop changed.
func (r *moveRun) start(ctx context.Context, w workload) error {
	obj := w.obj
	return patchFresh(ctx, r.c, obj, func() error {
		ann := obj.GetAnnotations()
		claims := slices.DeleteFunc(splitClaims(ann[annStoppedFor]), func(c string) bool { return c == r.claim })
		if len(claims) > 0 {
			ann[annStoppedFor] = strings.Join(claims, ",")
		} else {
			from := ann[annStoppedFrom]
			delete(ann, annStoppedFor)
			delete(ann, annStoppedFrom)
			switch o := obj.(type) {
			case *appsv1.Deployment:
				o.Spec.Replicas = new(int32(replicas(nil, map[string]string{annStoppedFrom: from})))
			case *appsv1.StatefulSet:
				o.Spec.Replicas = new(int32(replicas(nil, map[string]string{annStoppedFrom: from})))
			case *unstructured.Unstructured:
				field, value, _ := strings.Cut(from, "=")
				unstructured.RemoveNestedField(o.Object, "spec", "runStrategy")
				var err error
				if field == "running" {
					err = unstructured.SetNestedField(o.Object, value == "true", "spec", "running")
				} else {
					err = unstructured.SetNestedField(o.Object, value, "spec", "runStrategy")
				}
				if err != nil {
					return err
				}
			}
		}
		obj.SetAnnotations(ann)
		return nil
	})
}

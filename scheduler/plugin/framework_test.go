package plugin

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/scheduler"
	kubeschedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	deployscheduler "github.com/thinlvm/thinlvm/deploy/scheduler"
	"github.com/thinlvm/thinlvm/scheduler/apis/config"
	_ "github.com/thinlvm/thinlvm/scheduler/apis/config/scheme" // decodes ThinLVMArgs
)

// deployedProfiles are the profiles of deploy/'s KubeSchedulerConfiguration,
// defaulted as kube-scheduler defaults them: the in-tree plugins
// (VolumeBinding among them) around ThinLVM.
func deployedProfiles(t *testing.T) []kubeschedulerconfig.KubeSchedulerProfile {
	t.Helper()
	data, err := deployscheduler.Profile()
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := kubeschedulerscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*kubeschedulerconfig.KubeSchedulerConfiguration).Profiles
}

// boundClaim is a thinlvm claim already bound to a volume on node, as the
// provisioner and the PV controller leave it.
func boundClaim(f *fakeLister, name, node string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	f.addClaim(name, "thin", "1Gi")
	pvc := f.pvcs["default/"+name]
	pvc.UID = types.UID("uid-" + name)
	pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pvc.Spec.VolumeName = "pv-" + name
	pvc.Annotations = map[string]string{"pv.kubernetes.io/bind-completed": "yes", "volume.kubernetes.io/selected-node": node}
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: pvc.Spec.AccessModes,
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            pvc.Spec.AccessModes,
			StorageClassName:       "thin",
			ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: thinlvmv1.DriverName, VolumeHandle: "lv-" + name}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: thinlvmv1.TopologyKey, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound},
	}
	f.pvs[pv.Name] = pv
	return pvc, pv
}

// TestScheduleWithBoundClaims runs the plugin inside kube-scheduler itself
// (scheduler.New with deploy/'s profile, so the in-tree plugins and the
// framework's own extension-point order), over a fake clientset: a pod
// whose thinlvm claims are all bound (a StatefulSet pod re-created, a VM
// restarted on its root disk), a pod with no thinlvm claim, and a pod with
// a bound and an unbound claim each schedule.
func TestScheduleWithBoundClaims(t *testing.T) {
	f := newFake()
	nodes := []string{"node-a", "node-b"}
	objs := []runtime.Object{f.scs["thin"]}
	for _, n := range nodes {
		f.addNode(n, "100Gi", "100Gi")
		alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110")}
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, UID: types.UID(n),
			Labels: map[string]string{"kubernetes.io/hostname": n, thinlvmv1.TopologyKey: n}},
			Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc}})
	}
	for _, c := range []struct{ claim, node string }{{"db-0", "node-b"}, {"root-disk", "node-b"}, {"logs", "node-a"}} {
		pvc, pv := boundClaim(f, c.claim, c.node)
		objs = append(objs, pvc, pv)
	}
	f.addClaim("scratch", "thin", "1Gi")
	f.pvcs["default/scratch"].Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	objs = append(objs, f.pvcs["default/scratch"])

	// As the API server would: VolumeBinding's assume cache (1.34) parses
	// the claims' and volumes' resourceVersion.
	for _, o := range objs {
		if m, ok := o.(metav1.Object); ok && m.GetResourceVersion() == "" {
			m.SetResourceVersion("1")
		}
	}
	client := clientsetfake.NewClientset(objs...)
	var mu sync.Mutex
	bindings := map[string]string{}
	failures := map[string]string{}
	selected := map[string]string{}
	client.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(clienttesting.CreateAction).GetObject().(*corev1.Binding)
		mu.Lock()
		bindings[b.Name] = b.Target.Name
		mu.Unlock()
		return true, b, nil
	})
	// VolumeBinding's PreBind writes the selected node on an unbound WFC
	// claim and waits for the provisioner (there is none here): that write
	// means the pod came through Reserve and Permit on that node.
	client.PrependReactor("update", "persistentvolumeclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		pvc := a.(clienttesting.UpdateAction).GetObject().(*corev1.PersistentVolumeClaim)
		if n := pvc.Annotations["volume.kubernetes.io/selected-node"]; n != "" {
			mu.Lock()
			selected[pvc.Name] = n
			mu.Unlock()
		}
		return false, nil, nil
	})

	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	stopEvents, err := broadcaster.StartEventWatcher(func(obj runtime.Object) {
		if e, ok := obj.(*eventsv1.Event); ok && e.Reason == "FailedScheduling" {
			mu.Lock()
			failures[e.Regarding.Name] = e.Note
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stopEvents()
	factory := informers.NewSharedInformerFactory(client, 0)
	sched, err := scheduler.New(ctx, client, factory, nil, profile.NewRecorderFactory(broadcaster),
		scheduler.WithProfiles(deployedProfiles(t)...),
		scheduler.WithFrameworkOutOfTreeRegistry(frameworkruntime.Registry{
			Name: func(_ context.Context, obj runtime.Object, _ handle) (fwPlugin, error) {
				args, ok := obj.(*config.ThinLVMArgs)
				if !ok {
					return nil, fmt.Errorf("args are %T", obj)
				}
				return NewWithLister(args, f), nil
			},
		}))
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	if err := sched.WaitForHandlersSync(ctx); err != nil {
		t.Fatal(err)
	}
	go sched.Run(ctx)

	pods := map[string][]string{
		"db-0":     {"db-0"},              // a StatefulSet pod re-created for its claim
		"vm":       {"root-disk", "logs"}, // bound on two nodes: VolumeBinding keeps it off both
		"plain":    nil,                   // no claim at all
		"mixed":    {"root-disk", "scratch"},
		"restarts": {"root-disk"},
	}
	for name, claims := range pods {
		p := podWith(name, claims...)
		p.Spec.SchedulerName = "thinlvm-scheduler"
		p.Spec.Containers = []corev1.Container{{Name: "c", Image: "pause"}}
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"db-0": "node-b", "restarts": "node-b"}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		done := len(bindings) >= 3 && selected["scratch"] != "" && failures["vm"] != ""
		mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	got := map[string]string{"db-0": bindings["db-0"], "restarts": bindings["restarts"]}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("pods with only bound thinlvm claims (-want +got):\n%s\nscheduling failures: %v", d, failures)
	}
	if bindings["plain"] == "" {
		t.Errorf("the pod without claims was not bound; failures: %v", failures)
	}
	if selected["scratch"] != "node-b" {
		t.Errorf("the mixed pod's unbound claim: selected node %q, want node-b (its bound claim's node); failures: %v", selected["scratch"], failures)
	}
	// The one pod that cannot run fails for the right reason, not for a
	// missing cycle state.
	if msg := failures["vm"]; !strings.Contains(msg, "didn't match PersistentVolume's node affinity") {
		t.Errorf("the pod whose claims are on two nodes: failure %q, want the PVs' node affinity", msg)
	}
	for pod, msg := range failures {
		if strings.Contains(msg, string(stateKey)) || strings.Contains(msg, "not found") {
			t.Errorf("pod %s failed on the plugin's cycle state: %s", pod, msg)
		}
	}
}

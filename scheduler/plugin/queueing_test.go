package plugin

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// ephemeralPod is a pod with a generic ephemeral volume; Kubernetes names
// its claim <pod>-<volume> and makes the pod its owner.
func ephemeralPod(name, volume string) *corev1.Pod {
	pod := podWith(name)
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{
		Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{}}}})
	return pod
}

func lvmNode(available string, mutate ...func(*thinlvmv1.LVMNode)) *thinlvmv1.LVMNode {
	ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: thinlvmv1.LVMNodeStatus{
		DeviceClasses: []thinlvmv1.DeviceClassStatus{{Name: "ssd", Default: true, Available: resource.MustParse(available),
			PoolSize: resource.MustParse("20Gi"), OverprovisionRatio: "1", VGMetadata: &thinlvmv1.VGMetadataStatus{LVsLeft: 100}}},
		UpdateTime: &metav1.Time{Time: time.Unix(1000, 0)},
	}}
	for _, m := range mutate {
		m(ln)
	}
	return ln
}

func unstructuredOf(t *testing.T, obj any) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// An LVMNode's change requeues a pod this plugin rejected only when it can
// help: node agents rewrite their LVMNodes every few seconds.
func TestLVMNodeChangeHint(t *testing.T) {
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", UID: "u1"}, Spec: thinlvmv1.GoldenImageSpec{Size: resource.MustParse("4Gi")}}
	base := func(state thinlvmv1.GoldenBaseState) func(*thinlvmv1.LVMNode) {
		return func(ln *thinlvmv1.LVMNode) {
			ln.Status.GoldenBases = []thinlvmv1.GoldenBaseStatus{goldenBase(gi, state)}
		}
	}
	later := func(ln *thinlvmv1.LVMNode) { ln.Status.UpdateTime = &metav1.Time{Time: time.Unix(2000, 0)} }
	for _, c := range []struct {
		name     string
		old, cur *thinlvmv1.LVMNode
		want     fwk.QueueingHint
	}{
		{"added", nil, lvmNode("1Gi"), fwk.Queue},
		{"heartbeat only", lvmNode("5Gi"), lvmNode("5Gi", later), fwk.QueueSkip},
		{"less room", lvmNode("5Gi"), lvmNode("4Gi", later), fwk.QueueSkip},
		{"more room", lvmNode("4Gi"), lvmNode("5Gi", later), fwk.Queue},
		{"larger pool", lvmNode("4Gi"), lvmNode("4Gi", func(ln *thinlvmv1.LVMNode) { ln.Status.DeviceClasses[0].PoolSize = resource.MustParse("40Gi") }), fwk.Queue},
		{"no longer full", lvmNode("4Gi", func(ln *thinlvmv1.LVMNode) { ln.Status.DeviceClasses[0].OverHighWatermark = true }), lvmNode("4Gi"), fwk.Queue},
		{"now full", lvmNode("4Gi"), lvmNode("4Gi", func(ln *thinlvmv1.LVMNode) { ln.Status.DeviceClasses[0].OverHighWatermark = true }), fwk.QueueSkip},
		{"room for more LVs", lvmNode("4Gi"), lvmNode("4Gi", func(ln *thinlvmv1.LVMNode) { ln.Status.DeviceClasses[0].VGMetadata.LVsLeft = 200 }), fwk.Queue},
		{"class added", lvmNode("4Gi"), lvmNode("4Gi", func(ln *thinlvmv1.LVMNode) {
			ln.Status.DeviceClasses = append(ln.Status.DeviceClasses, thinlvmv1.DeviceClassStatus{Name: "hdd", Available: resource.MustParse("1Gi"), PoolSize: resource.MustParse("1Gi"), OverprovisionRatio: "1"})
		}), fwk.Queue},
		{"base now held", lvmNode("4Gi"), lvmNode("4Gi", base(thinlvmv1.GoldenBasePopulating)), fwk.Queue},
		{"base ready, was populating", lvmNode("4Gi", base(thinlvmv1.GoldenBasePopulating)), lvmNode("4Gi", base(thinlvmv1.GoldenBaseReady)), fwk.QueueSkip},
		{"base failed", lvmNode("4Gi", base(thinlvmv1.GoldenBasePopulating)), lvmNode("4Gi", base(thinlvmv1.GoldenBaseFailed)), fwk.QueueSkip},
	} {
		t.Run(c.name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			var old any
			if c.old != nil {
				old = c.old
			}
			got, err := lvmNodeChangeHelps(logger, podWith("p", "a"), old, c.cur)
			if err != nil || got != c.want {
				t.Errorf("hint = %v, %v; want %v", got, err, c.want)
			}
			// The scheduler hands custom resources' events over unstructured.
			if c.old != nil {
				old = unstructuredOf(t, c.old)
			}
			cur := unstructuredOf(t, c.cur)
			got, err = lvmNodeChangeHelps(logger, podWith("p", "a"), old, cur)
			if err != nil || got != c.want {
				t.Errorf("unstructured: hint = %v, %v; want %v", got, err, c.want)
			}
			// As registered: the finding kept for the event.
			var h lvmNodeHint
			for _, pod := range []string{"p", "q"} {
				if got, err = h.helps(logger, podWith(pod, "a"), old, cur); err != nil || got != c.want {
					t.Errorf("registered hint, pod %s: %v, %v; want %v", pod, got, err, c.want)
				}
			}
		})
	}
	logger, _ := ktesting.NewTestContext(t)
	if got, err := lvmNodeChangeHelps(logger, podWith("p", "a"), nil, &corev1.Pod{}); err == nil || got != fwk.Queue {
		t.Errorf("a Pod as the LVMNode: %v, %v; want Queue and an error", got, err)
	}
}

// The registered LVMNode hint decides once per event: the scheduler asks
// for every waiting pod with the same two objects.
func TestLVMNodeHintOncePerEvent(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	var h lvmNodeHint
	old, cur := unstructuredOf(t, lvmNode("4Gi")), unstructuredOf(t, lvmNode("5Gi"))
	if got, err := h.helps(logger, podWith("p", "a"), old, cur); err != nil || got != fwk.Queue {
		t.Fatalf("more room: %v, %v; want Queue", got, err)
	}
	// The same event for the next pod is not read again: were it, the
	// change below (less room, in the same object) would say QueueSkip.
	cur.Object["status"].(map[string]any)["deviceClasses"].([]any)[0].(map[string]any)["available"] = "3Gi"
	if got, err := h.helps(logger, podWith("q", "a"), old, cur); err != nil || got != fwk.Queue {
		t.Errorf("the same event for pod q: %v, %v; want Queue, as for pod p", got, err)
	}
	// The next event (new objects) is read.
	if got, err := h.helps(logger, podWith("q", "a"), cur, unstructuredOf(t, lvmNode("3Gi"))); err != nil || got != fwk.QueueSkip {
		t.Errorf("the next event, no more room: %v, %v; want QueueSkip", got, err)
	}
	// Objects that are not pointers are read every time.
	if got, err := h.helps(logger, podWith("q", "a"), *lvmNode("4Gi"), *lvmNode("5Gi")); err == nil || got != fwk.Queue {
		t.Errorf("LVMNode values: %v, %v; want Queue and an error", got, err)
	}
}

func TestSpecChangeHint(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	gi := func(gen int64) *thinlvmv1.GoldenImage {
		return &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", Generation: gen}}
	}
	hint := specChangeHelps[thinlvmv1.GoldenImage]
	if got, _ := hint(logger, podWith("p"), nil, gi(1)); got != fwk.Queue {
		t.Errorf("image made: %v, want Queue", got)
	}
	if got, _ := hint(logger, podWith("p"), gi(1), gi(1)); got != fwk.QueueSkip {
		t.Errorf("status update: %v, want QueueSkip", got)
	}
	if got, _ := hint(logger, podWith("p"), unstructuredOf(t, gi(1)), unstructuredOf(t, gi(2))); got != fwk.Queue {
		t.Errorf("spec changed: %v, want Queue", got)
	}
	ch := func(gen int64) *thinlvmv1.GoldenImageChannel {
		return &thinlvmv1.GoldenImageChannel{ObjectMeta: metav1.ObjectMeta{Name: "stable", Generation: gen}}
	}
	if got, _ := specChangeHelps[thinlvmv1.GoldenImageChannel](logger, podWith("p"), ch(3), ch(4)); got != fwk.Queue {
		t.Errorf("channel moved: %v, want Queue", got)
	}
}

func TestClaimChangeHint(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	claim := func(ns, name string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		pvc  *corev1.PersistentVolumeClaim
		want fwk.QueueingHint
	}{
		{"its claim", podWith("p", "a", "b"), claim("default", "b"), fwk.Queue},
		{"another claim", podWith("p", "a"), claim("default", "b"), fwk.QueueSkip},
		{"its claim's name in another namespace", podWith("p", "a"), claim("other", "a"), fwk.QueueSkip},
		{"its generic ephemeral volume's claim", ephemeralPod("vm", "disk"), claim("default", "vm-disk"), fwk.Queue},
	} {
		if got, err := claimChangeHelps(logger, c.pod, nil, c.pvc); err != nil || got != c.want {
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}

func TestEventsHaveHints(t *testing.T) {
	events, err := NewWithLister(defaultArgs(), newFake()).EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.QueueingHintFn == nil {
			t.Errorf("%s: no queueing hint: every change would requeue every pod this plugin rejected", e.Event.Resource)
		}
	}
}

// A generic ephemeral volume's claim counts in the pod's demand; a claim of
// that name that the pod does not own does not.
func TestDemandOfGenericEphemeralVolumes(t *testing.T) {
	f := newFake()
	f.addClaim("vm-disk", "thin", "3Gi")
	pod := ephemeralPod("vm", "disk")
	p := NewWithLister(defaultArgs(), f)
	d, err := p.demandOf(pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.bytes) != 0 {
		t.Errorf("a claim the pod does not own counted: %v", d.bytes)
	}
	f.pvcs["default/vm-disk"].OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "vm", UID: pod.UID, Controller: ptr.To(true)}}
	if d, err = p.demandOf(pod); err != nil {
		t.Fatal(err)
	}
	if got := d.bytes[""]; got != 3<<30 {
		t.Errorf("demand of the pod's ephemeral claim = %d bytes, want 3Gi", got)
	}
}

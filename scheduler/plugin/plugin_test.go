package plugin

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/scheduler/apis/config"
)

// fakeLister is the plugin's view of the cluster, set by each test.
type fakeLister struct {
	pvcs      map[string]*corev1.PersistentVolumeClaim
	pvs       map[string]*corev1.PersistentVolume
	scs       map[string]*storagev1.StorageClass
	nodes     map[string]*thinlvmv1.LVMNode
	lvs       map[string]*thinlvmv1.LogicalVolume
	images    map[string]*thinlvmv1.GoldenImage
	channels  map[string]*thinlvmv1.GoldenImageChannel
	snapshots map[string]string
}

func (f *fakeLister) GoldenImage(name string) (*thinlvmv1.GoldenImage, error) {
	return get(f.images, "goldenimages", name)
}

func (f *fakeLister) GoldenImageChannel(name string) (*thinlvmv1.GoldenImageChannel, error) {
	return get(f.channels, "goldenimagechannels", name)
}

func notFound(what, name string) error {
	return apierrors.NewNotFound(thinlvmv1.GroupVersion.WithResource(what).GroupResource(), name)
}

func get[T any](m map[string]*T, what, key string) (*T, error) {
	if v, ok := m[key]; ok {
		return v, nil
	}
	return nil, notFound(what, key)
}

func (f *fakeLister) PVC(ns, name string) (*corev1.PersistentVolumeClaim, error) {
	return get(f.pvcs, "persistentvolumeclaims", ns+"/"+name)
}
func (f *fakeLister) PV(name string) (*corev1.PersistentVolume, error) {
	return get(f.pvs, "persistentvolumes", name)
}
func (f *fakeLister) StorageClass(name string) (*storagev1.StorageClass, error) {
	return get(f.scs, "storageclasses", name)
}

// Node works the state out at every call: tests change f.nodes in place.
func (f *fakeLister) Node(name string) (*NodeState, error) {
	ln, err := get(f.nodes, "lvmnodes", name)
	if err != nil {
		return nil, err
	}
	return NewNodeState(ln), nil
}
func (f *fakeLister) BaseHolders(gi *thinlvmv1.GoldenImage) (holders, nodes int) {
	for _, n := range f.nodes {
		if n.Status.BaseState(gi).Held() {
			holders++
		}
	}
	return holders, len(f.nodes)
}
func (f *fakeLister) LogicalVolume(name string) (*thinlvmv1.LogicalVolume, error) {
	return get(f.lvs, "logicalvolumes", name)
}
func (f *fakeLister) SnapshotHandle(ns, name string) (string, error) {
	return f.snapshots[ns+"/"+name], nil
}

func newFake() *fakeLister {
	wfc := storagev1.VolumeBindingWaitForFirstConsumer
	imm := storagev1.VolumeBindingImmediate
	return &fakeLister{
		pvcs: map[string]*corev1.PersistentVolumeClaim{}, pvs: map[string]*corev1.PersistentVolume{},
		scs: map[string]*storagev1.StorageClass{
			"thin":   {ObjectMeta: metav1.ObjectMeta{Name: "thin"}, Provisioner: thinlvmv1.DriverName, VolumeBindingMode: &wfc},
			"golden": {ObjectMeta: metav1.ObjectMeta{Name: "golden"}, Provisioner: thinlvmv1.DriverName, VolumeBindingMode: &wfc, Parameters: map[string]string{GoldenImageParameter: "ubuntu"}},
			"now":    {ObjectMeta: metav1.ObjectMeta{Name: "now"}, Provisioner: thinlvmv1.DriverName, VolumeBindingMode: &imm},
			"other":  {ObjectMeta: metav1.ObjectMeta{Name: "other"}, Provisioner: "ebs.csi.aws.com", VolumeBindingMode: &wfc},
		},
		nodes: map[string]*thinlvmv1.LVMNode{}, lvs: map[string]*thinlvmv1.LogicalVolume{}, snapshots: map[string]string{},
	}
}

func (f *fakeLister) addNode(name, available, pool string, bases ...thinlvmv1.GoldenBaseStatus) {
	f.nodes[name] = &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: thinlvmv1.LVMNodeStatus{
		DeviceClasses: []thinlvmv1.DeviceClassStatus{{Name: "ssd", Default: true, Available: resource.MustParse(available),
			PoolSize: resource.MustParse(pool), OverprovisionRatio: "1"}},
		GoldenBases: bases,
		UpdateTime:  &metav1.Time{Time: time.Now()},
	}}
}

// addImage makes a GoldenImage of size in device class ("" for each
// node's default).
func (f *fakeLister) addImage(name, uid, class, size string) *thinlvmv1.GoldenImage {
	if f.images == nil {
		f.images = map[string]*thinlvmv1.GoldenImage{}
	}
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)},
		Spec: thinlvmv1.GoldenImageSpec{DeviceClass: class, Size: resource.MustParse(size)}}
	f.images[name] = gi
	return gi
}

// goldenBase is a node's entry for gi's base, as the node agent writes it.
func goldenBase(gi *thinlvmv1.GoldenImage, state thinlvmv1.GoldenBaseState) thinlvmv1.GoldenBaseStatus {
	return thinlvmv1.GoldenBaseStatus{Name: gi.Name, LV: thinlvmv1.BaseLVName(gi), DeviceClass: gi.Spec.DeviceClass, Size: gi.Spec.Size, State: state}
}

func (f *fakeLister) addClaim(name, class, size string) {
	f.pvcs["default/"+name] = &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(class),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}}}
}

func podWith(uid string, claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: uid, UID: types.UID(uid)}}
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return p
}

func defaultArgs() *config.ThinLVMArgs {
	return &config.ThinLVMArgs{CapacityStrategy: config.LeastAllocated, CapacityWeight: 1, LocalityWeight: 2,
		ReservationTTL: metav1.Duration{Duration: time.Minute}}
}

func nodeInfo(name string) fwk.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return ni
}

// cycle runs PreFilter and Filter on every node and returns the state and
// the status per node.
func cycle(t *testing.T, p *Plugin, pod *corev1.Pod, nodes ...string) (fwk.CycleState, *preFilterResult, map[string]*fwk.Status) {
	t.Helper()
	state := framework.NewCycleState()
	res, st := p.PreFilter(context.Background(), state, pod, nil)
	if !st.IsSuccess() {
		return state, res, map[string]*fwk.Status{"prefilter": st}
	}
	out := map[string]*fwk.Status{}
	for _, n := range nodes {
		out[n] = p.Filter(context.Background(), state, pod, nodeInfo(n))
	}
	return state, res, out
}

func TestPreFilterSkipsPodsWithoutThinlvmClaims(t *testing.T) {
	f := newFake()
	f.addClaim("ebs", "other", "1Gi")
	f.addClaim("immediate", "now", "1Gi")
	f.addClaim("bound", "thin", "1Gi")
	f.pvcs["default/bound"].Spec.VolumeName = "pv-1"
	p := NewWithLister(defaultArgs(), f)
	for _, pod := range []*corev1.Pod{podWith("none"), podWith("a", "ebs"), podWith("b", "immediate"), podWith("c", "bound"), podWith("d", "missing")} {
		_, st := p.PreFilter(context.Background(), framework.NewCycleState(), pod, nil)
		if st.Code() != fwk.Skip {
			t.Errorf("pod %s: %v, want Skip", pod.Name, st)
		}
	}
}

func TestFilterByRoom(t *testing.T) {
	f := newFake()
	f.addNode("n1", "10Gi", "10Gi")
	f.addNode("n2", "2Gi", "10Gi")
	f.addClaim("data", "thin", "3Gi")
	f.addClaim("logs", "thin", "2Gi")
	p := NewWithLister(defaultArgs(), f)
	_, _, st := cycle(t, p, podWith("p", "data", "logs"), "n1", "n2", "n-without-thinlvm")
	if !st["n1"].IsSuccess() {
		t.Errorf("n1 (10Gi free, 5Gi needed): %v", st["n1"])
	}
	if st["n2"].Code() != fwk.Unschedulable || !strings.Contains(st["n2"].Message(), "needs 5368709120") {
		t.Errorf("n2 (2Gi free): %v", st["n2"])
	}
	if st["n-without-thinlvm"].Code() != fwk.UnschedulableAndUnresolvable {
		t.Errorf("a node without LVMNode: %v", st["n-without-thinlvm"])
	}
}

// A burst of 30 pods of 1Gi on 3 nodes with room for 10 each: each pod is
// reserved where the scores say, before any LVMNode shows it. No node gets
// more than its room, and the 31st pod fits nowhere.
func TestReserveStopsOversubscription(t *testing.T) {
	f := newFake()
	nodes := []string{"n1", "n2", "n3"}
	for _, n := range nodes {
		f.addNode(n, "10Gi", "10Gi")
	}
	p := NewWithLister(defaultArgs(), f)
	placed := map[string]int{}
	for i := range 31 {
		claim := fmt.Sprintf("c%d", i)
		f.addClaim(claim, "thin", "1Gi")
		pod := podWith(fmt.Sprintf("pod-%d", i), claim)
		state, _, st := cycle(t, p, pod, nodes...)
		best, bestScore := "", int64(-1)
		for _, n := range nodes {
			if !st[n].IsSuccess() {
				continue
			}
			s, sst := p.Score(context.Background(), state, pod, nodeInfo(n))
			if !sst.IsSuccess() {
				t.Fatal(sst)
			}
			if s > bestScore {
				best, bestScore = n, s
			}
		}
		if i == 30 {
			if best != "" {
				t.Errorf("the 31st pod fits on %s: oversubscribed", best)
			}
			break
		}
		if best == "" {
			t.Fatalf("pod %d fits nowhere; placed %v", i, placed)
		}
		if st := p.Reserve(context.Background(), state, pod, best); !st.IsSuccess() {
			t.Fatal(st)
		}
		placed[best]++
	}
	for _, n := range nodes {
		if placed[n] != 10 {
			t.Errorf("placed %v: want 10 per node (spread, no oversubscription)", placed)
			break
		}
	}
	// Unreserve gives the room back.
	p.Unreserve(context.Background(), nil, podWith("pod-0"), "")
	f.addClaim("late", "thin", "1Gi")
	_, _, st := cycle(t, p, podWith("late-pod", "late"), nodes...)
	fits := 0
	for _, n := range nodes {
		if st[n].IsSuccess() {
			fits++
		}
	}
	if fits != 1 {
		t.Errorf("after one Unreserve, %d nodes fit 1Gi, want 1", fits)
	}
}

// A reservation ends when the LVMNode reports after the volume was made,
// or when its TTL passes.
func TestReservationSettles(t *testing.T) {
	f := newFake()
	f.addNode("n1", "10Gi", "10Gi")
	f.addClaim("a", "thin", "6Gi")
	args := defaultArgs()
	p := NewWithLister(args, f)
	p.ledger.recheck = 0 // ask every cycle: this test follows each step
	state, _, _ := cycle(t, p, podWith("pa", "a"), "n1")
	p.Reserve(context.Background(), state, podWith("pa", "a"), "n1")
	f.addClaim("b", "thin", "6Gi")
	if _, _, st := cycle(t, p, podWith("pb", "b"), "n1"); st["n1"].IsSuccess() {
		t.Fatal("the reserved 6Gi were not held")
	}
	// The claim binds to a Ready LV; until the node reports after it, the
	// reservation holds.
	f.pvcs["default/a"].Spec.VolumeName = "pv-a"
	f.pvs["pv-a"] = &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-a"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: thinlvmv1.DriverName, VolumeHandle: "pvc-a"}}}}
	readyAt := metav1.NewTime(time.Now().Add(-time.Second))
	f.lvs["pvc-a"] = &thinlvmv1.LogicalVolume{Status: thinlvmv1.LogicalVolumeStatus{Conditions: []metav1.Condition{
		{Type: thinlvmv1.ConditionReady, Status: metav1.ConditionTrue, LastTransitionTime: readyAt}}}}
	f.nodes["n1"].Status.UpdateTime = &metav1.Time{Time: readyAt.Add(-time.Minute)}
	if _, _, st := cycle(t, p, podWith("pb", "b"), "n1"); st["n1"].IsSuccess() || p.ledger.len() != 1 {
		t.Fatal("a reservation was dropped before the node reported the volume")
	}
	// The node's next report shows 4Gi.
	f.nodes["n1"].Status.UpdateTime = &metav1.Time{Time: readyAt.Add(2 * time.Second)}
	f.nodes["n1"].Status.DeviceClasses[0].Available = resource.MustParse("4Gi")
	if _, _, st := cycle(t, p, podWith("pb", "b"), "n1"); st["n1"].IsSuccess() {
		t.Error("6Gi fit into 4Gi")
	}
	if p.ledger.len() != 0 {
		t.Error("a reservation the LVMNode shows was kept: it would count twice")
	}
	// A claim deleted before it was made holds nothing.
	state, _, _ = cycle(t, p, podWith("pb", "b"), "n1")
	p.Reserve(context.Background(), state, podWith("pb", "b"), "n1")
	delete(f.pvcs, "default/b")
	p.sweep()
	if p.ledger.len() != 0 {
		t.Error("the reservation of a deleted claim was kept until its TTL")
	}
	// TTL: a reservation whose claim never binds expires.
	p.ledger.now = func() time.Time { return time.Now() }
	f.nodes["n1"].Status.DeviceClasses[0].Available = resource.MustParse("10Gi")
	p.Reserve(context.Background(), state, podWith("pa", "a"), "n1")
	p.ledger.now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	if _, _, st := cycle(t, p, podWith("pb", "b"), "n1"); !st["n1"].IsSuccess() {
		t.Errorf("an expired reservation still holds room: %v", st["n1"])
	}
}

// A reservation found unsettled is not asked about again for a while: a
// burst's cycles do not each re-read every pending claim.
func TestUnsettledReservationsAreRecheckedLater(t *testing.T) {
	l := newLedger(time.Hour)
	now := time.Now()
	l.now = func() time.Time { return now }
	l.reserve("a", reservation{node: "n1", bytes: map[string]int64{"ssd": 1}})
	asked := 0
	settled := func(reservation) bool { asked++; return false }
	for range 3 {
		l.sweep(settled)
		if got := l.reserved("n1", "ssd").bytes; got != 1 {
			t.Fatalf("reserved %d, want 1", got)
		}
	}
	if asked != 1 {
		t.Errorf("asked %d times within %v, want once", asked, recheckAfter)
	}
	now = now.Add(recheckAfter)
	l.sweep(settled)
	if asked != 2 {
		t.Errorf("asked %d times after %v, want twice", asked, recheckAfter)
	}
	l.reserve("b", reservation{node: "n1", bytes: map[string]int64{"ssd": 2}})
	l.reserve("a", reservation{node: "n1", bytes: map[string]int64{"ssd": 4}}) // replaces a's
	if got := l.reserved("n1", "ssd").bytes; got != 6 {
		t.Errorf("reserved %d, want 6", got)
	}
	l.release("a")
	l.release("b")
	if got := l.reserved("n1", "ssd").bytes; got != 0 || len(l.sums) != 0 {
		t.Errorf("after release: reserved %d, sums %v", got, l.sums)
	}
}

// A clone's or restore's source node is preferred, not required: it scores
// highest (an O(1) snapshot there), then a node holding the golden base
// the source descends from (only the difference is copied), then the rest;
// a full source node is filtered out like any other, and the claim goes
// elsewhere.
func TestCloneSourceIsPreferred(t *testing.T) {
	f := newFake()
	gi := f.addImage("ubuntu", "u1", "", "4Gi")
	f.addNode("n1", "10Gi", "10Gi")
	f.addNode("n2", "10Gi", "10Gi")
	f.addNode("n3", "10Gi", "10Gi", goldenBase(gi, thinlvmv1.GoldenBaseReady))
	f.addClaim("origin", "thin", "1Gi")
	f.pvcs["default/origin"].Spec.VolumeName = "pv-origin"
	f.pvs["pv-origin"] = &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-origin"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: thinlvmv1.DriverName, VolumeHandle: "pvc-origin"}}}}
	f.lvs["pvc-origin"] = &thinlvmv1.LogicalVolume{Spec: thinlvmv1.LogicalVolumeSpec{NodeName: "n2",
		Source: &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceGoldenImage, Name: "ubuntu"}}}
	f.addClaim("clone", "thin", "1Gi")
	f.pvcs["default/clone"].Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "origin"}
	f.addClaim("restore", "thin", "1Gi")
	f.pvcs["default/restore"].Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "snap"}
	f.snapshots["default/snap"] = "tl-snapshot-1"
	f.lvs["tl-snapshot-1"] = &thinlvmv1.LogicalVolume{Spec: thinlvmv1.LogicalVolumeSpec{NodeName: "n2",
		Source: &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: "pvc-origin"}}}
	p := NewWithLister(defaultArgs(), f)
	for _, claim := range []string{"clone", "restore"} {
		pod := podWith("p-"+claim, claim)
		state, res, st := cycle(t, p, pod, "n1", "n2", "n3")
		if res != nil {
			t.Errorf("%s: PreFilterResult %v, want every node", claim, res)
		}
		score := map[string]int64{}
		for _, n := range []string{"n1", "n2", "n3"} {
			if !st[n].IsSuccess() {
				t.Errorf("%s on %s: %v", claim, n, st[n])
			}
			score[n], _ = p.Score(context.Background(), state, pod, nodeInfo(n))
		}
		if !(score["n2"] > score["n3"] && score["n3"] > score["n1"]) {
			t.Errorf("%s: scores %v, want the source's node > the base's holder > the rest", claim, score)
		}
	}
	// The source's node is full: the clone goes elsewhere.
	f.nodes["n2"].Status.DeviceClasses[0].Available = resource.MustParse("512Mi")
	_, _, st := cycle(t, p, podWith("p-full", "clone"), "n1", "n2", "n3")
	if st["n2"].IsSuccess() || !st["n1"].IsSuccess() || !st["n3"].IsSuccess() {
		t.Errorf("with the source's node full: %v", st)
	}
}

// With a golden base Ready on 2 of 5 nodes, VM disks score higher there;
// a missing base counts against a node's room. A base left by a deleted
// GoldenImage of the same name (its LV from the old UID) is no base.
func TestGoldenBaseLocality(t *testing.T) {
	f := newFake()
	gi := f.addImage("ubuntu", "u2", "", "4Gi")
	old := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", UID: "u1"}, Spec: gi.Spec}
	f.addNode("a", "20Gi", "20Gi", goldenBase(gi, thinlvmv1.GoldenBaseReady))
	f.addNode("b", "20Gi", "20Gi", goldenBase(gi, thinlvmv1.GoldenBaseReady))
	f.addNode("c", "20Gi", "20Gi", goldenBase(gi, thinlvmv1.GoldenBasePopulating))
	f.addNode("d", "20Gi", "20Gi")
	f.addNode("stale", "20Gi", "20Gi", goldenBase(old, thinlvmv1.GoldenBaseReady))
	f.addNode("tight", "5Gi", "20Gi")
	f.addNode("tight-stale", "5Gi", "20Gi", goldenBase(old, thinlvmv1.GoldenBaseReady))
	f.addNode("tight-populating", "5Gi", "20Gi", goldenBase(gi, thinlvmv1.GoldenBasePopulating))
	f.addClaim("root", "golden", "2Gi")
	p := NewWithLister(defaultArgs(), f)
	pod := podWith("vm", "root")
	state, _, st := cycle(t, p, pod, "a", "b", "c", "d", "stale", "tight", "tight-stale", "tight-populating")
	if st["tight"].IsSuccess() || st["tight-stale"].IsSuccess() {
		t.Error("a node with 5Gi free fits a 2Gi disk plus the 4Gi base it lacks")
	}
	if !st["tight-populating"].IsSuccess() {
		t.Errorf("a node populating the base (its LV counted in the room already) with 5Gi free: %v", st["tight-populating"])
	}
	score := map[string]int64{}
	for _, n := range []string{"a", "b", "c", "d", "stale"} {
		s, sst := p.Score(context.Background(), state, pod, nodeInfo(n))
		if !sst.IsSuccess() {
			t.Fatal(sst)
		}
		score[n] = s
	}
	if !(score["a"] == score["b"] && score["a"] > score["c"] && score["c"] > score["d"] && score["stale"] == score["d"]) {
		t.Errorf("scores %v: want Ready > Populating > missing = stale", score)
	}
}

func TestMostAllocatedPacks(t *testing.T) {
	f := newFake()
	f.addNode("empty", "10Gi", "10Gi")
	f.addNode("half", "5Gi", "10Gi")
	f.addClaim("d", "thin", "1Gi")
	for _, tc := range []struct {
		strategy config.CapacityStrategy
		want     string
	}{{config.LeastAllocated, "empty"}, {config.MostAllocated, "half"}} {
		args := defaultArgs()
		args.CapacityStrategy = tc.strategy
		p := NewWithLister(args, f)
		pod := podWith("p", "d")
		state, _, _ := cycle(t, p, pod, "empty", "half")
		se, _ := p.Score(context.Background(), state, pod, nodeInfo("empty"))
		sh, _ := p.Score(context.Background(), state, pod, nodeInfo("half"))
		if got := map[bool]string{true: "empty", false: "half"}[se > sh]; got != tc.want {
			t.Errorf("%s prefers %s (scores %d/%d), want %s", tc.strategy, got, se, sh, tc.want)
		}
	}
}

func TestNewRejectsWrongArgs(t *testing.T) {
	if _, err := New(context.Background(), &corev1.Pod{}, nil); err == nil || !strings.Contains(err.Error(), "*v1.Pod") {
		t.Errorf("New with a Pod as args: %v", err)
	}
	bad := defaultArgs()
	bad.CapacityStrategy = "Random"
	if _, err := New(context.Background(), bad, nil); err == nil || !strings.Contains(err.Error(), "capacityStrategy") {
		t.Errorf("New with invalid args: %v", err)
	}
}

func TestEventsToRegister(t *testing.T) {
	events, err := NewWithLister(defaultArgs(), newFake()).EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		got = append(got, string(e.Event.Resource))
	}
	for _, want := range []string{"lvmnodes.v1alpha1.thinlvm.io", "goldenimages.v1alpha1.thinlvm.io", "goldenimagechannels.v1alpha1.thinlvm.io"} {
		if !strings.Contains(strings.Join(got, ","), want) {
			t.Errorf("events %v: want %s changes to requeue", got, want)
		}
	}
}

// Before any node holds the base, its GoldenImage's size counts against
// every node's room.
func TestMissingBaseTakesTheImageSize(t *testing.T) {
	f := newFake()
	f.addImage("ubuntu", "u1", "", "4Gi")
	f.addNode("roomy", "7Gi", "20Gi")
	f.addNode("tight", "5Gi", "20Gi")
	f.addClaim("root", "golden", "2Gi")
	p := NewWithLister(defaultArgs(), f)
	_, _, st := cycle(t, p, podWith("vm", "root"), "roomy", "tight")
	if !st["roomy"].IsSuccess() || st["tight"].IsSuccess() {
		t.Errorf("filter roomy %v, tight %v: want only roomy to fit a 2Gi disk plus the 4Gi base", st["roomy"], st["tight"])
	}
}

// A golden class's volumes live in their image's device class, as the
// controller makes them: the StorageClass without a class parameter asks
// for room in the image's class (and the base's size counts there), not in
// each node's default.
func TestGoldenVolumesTakeTheImagesClass(t *testing.T) {
	f := newFake()
	f.addImage("ubuntu", "u1", "hdd", "4Gi")
	f.addNode("ssd-only", "100Gi", "100Gi")
	f.addNode("both", "1Gi", "100Gi")
	f.nodes["both"].Status.DeviceClasses = append(f.nodes["both"].Status.DeviceClasses, thinlvmv1.DeviceClassStatus{Name: "hdd",
		Available: resource.MustParse("7Gi"), PoolSize: resource.MustParse("100Gi"), OverprovisionRatio: "1"})
	f.addNode("both-tight", "100Gi", "100Gi")
	f.nodes["both-tight"].Status.DeviceClasses = append(f.nodes["both-tight"].Status.DeviceClasses, thinlvmv1.DeviceClassStatus{Name: "hdd",
		Available: resource.MustParse("5Gi"), PoolSize: resource.MustParse("100Gi"), OverprovisionRatio: "1"})
	f.addClaim("root", "golden", "2Gi")
	p := NewWithLister(defaultArgs(), f)
	pod := podWith("vm", "root")
	state, _, st := cycle(t, p, pod, "ssd-only", "both", "both-tight")
	if st["ssd-only"].Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st["ssd-only"].Message(), `"hdd"`) {
		t.Errorf("ssd-only: %v, want no device class hdd", st["ssd-only"])
	}
	if !st["both"].IsSuccess() {
		t.Errorf("both (7Gi in hdd for 2Gi and the 4Gi base): %v", st["both"])
	}
	if st["both-tight"].Code() != fwk.Unschedulable {
		t.Errorf("both-tight (5Gi in hdd for 2Gi and the 4Gi base): %v, want Unschedulable", st["both-tight"])
	}
	if st := p.Reserve(context.Background(), state, pod, "both"); !st.IsSuccess() {
		t.Fatal(st)
	}
	if hdd, ssd := p.ledger.reserved("both", "hdd").bytes, p.ledger.reserved("both", "ssd").bytes; hdd != 2<<30 || ssd != 0 {
		t.Errorf("reserved %d in hdd and %d in ssd, want 2Gi in hdd", hdd, ssd)
	}
	// A clone in the golden class counts in the image's class but not the
	// base: it is a snapshot of its source.
	f.addClaim("copy", "golden", "2Gi")
	f.pvcs["default/copy"].Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "root"}
	d, err := p.demandOf(podWith("vm2", "copy"))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.images) != 0 || d.bytes["hdd"] != 2<<30 {
		t.Errorf("clone in a golden class: images %v, bytes %v; want no image and 2Gi in hdd", d.images, d.bytes)
	}
}

// A pod turned away only by reservations in flight is moved back to the
// active queue, since no event marks the moment they settle.
func TestHeldPodsAreReactivated(t *testing.T) {
	f := newFake()
	f.addNode("n1", "10Gi", "10Gi")
	f.addClaim("a", "thin", "6Gi")
	f.addClaim("b", "thin", "6Gi")
	p := NewWithLister(defaultArgs(), f)
	state, _, _ := cycle(t, p, podWith("pa", "a"), "n1")
	p.Reserve(context.Background(), state, podWith("pa", "a"), "n1")
	if _, _, st := cycle(t, p, podWith("pb", "b"), "n1"); st["n1"].IsSuccess() {
		t.Fatal("pb fit")
	}
	got := make(chan map[string]*corev1.Pod, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.reactivate(ctx, func(pods map[string]*corev1.Pod) { got <- pods }, 10*time.Millisecond)
	select {
	case pods := <-got:
		if _, ok := pods["default/pb"]; !ok || len(pods) != 1 {
			t.Errorf("activated %v, want default/pb", pods)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the held pod was not activated")
	}
	// A pod that does not fit the reported room at all is not held.
	f.addClaim("huge", "thin", "20Gi")
	cycle(t, p, podWith("ph", "huge"), "n1")
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	if _, ok := p.held["default/ph"]; ok {
		t.Error("a pod that can never fit was held for reactivation")
	}
}

// A cycle in which PreFilter skipped the pod (no thinlvm claim, or all of
// them bound) has no demand: every later extension point has nothing to do.
func TestExtensionPointsWithoutDemand(t *testing.T) {
	f := newFake()
	f.addNode("n1", "10Gi", "10Gi")
	f.addClaim("bound", "thin", "1Gi")
	f.pvcs["default/bound"].Spec.VolumeName = "pv-1"
	p := NewWithLister(defaultArgs(), f)
	pod := podWith("restarted", "bound")
	state, _, filtered := cycle(t, p, pod, "n1")
	if st := filtered["prefilter"]; st.Code() != fwk.Skip {
		t.Fatalf("PreFilter: %v, want Skip", st)
	}
	ctx := context.Background()
	if st := p.Filter(ctx, state, pod, nodeInfo("n1")); !st.IsSuccess() {
		t.Errorf("Filter: %v", st)
	}
	if st := p.PreScore(ctx, state, pod, nil); st.Code() != fwk.Skip {
		t.Errorf("PreScore: %v, want Skip", st)
	}
	if score, st := p.Score(ctx, state, pod, nodeInfo("n1")); !st.IsSuccess() || score != 0 {
		t.Errorf("Score: %d %v", score, st)
	}
	if st := p.Reserve(ctx, state, pod, "n1"); !st.IsSuccess() {
		t.Errorf("Reserve: %v", st)
	}
	p.Unreserve(ctx, state, pod, "n1")
	if got := p.ledger.reserved("n1", "ssd").bytes; got != 0 {
		t.Errorf("a pod without demand reserved %d bytes", got)
	}
}

// Claim sizes are a tenant's input: their sum saturates instead of
// wrapping negative, a pod asking for more than any pool holds is refused
// with a reason, and it leaves nothing in the ledger to turn honest pods
// away.
func TestDemandNeverWraps(t *testing.T) {
	for _, tc := range []struct {
		name   string
		claims map[string]string
		// where the refusal comes, and what it says
		at, want string
	}{
		{"two 4Ei claims", map[string]string{"a": "4Ei", "b": "4Ei"}, "prefilter", "add up to more bytes than any node can hold"},
		{"three 4Ei claims", map[string]string{"a": "4Ei", "b": "4Ei", "c": "4Ei"}, "prefilter", "add up to more bytes than any node can hold"},
		{"7Ei on a 10Gi pool", map[string]string{"a": "4Ei", "b": "3Ei"}, "n1", "holds at most 10737418240 bytes"},
		{"11Gi on a 10Gi pool", map[string]string{"a": "11Gi"}, "n1", "holds at most 10737418240 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.addNode("n1", "10Gi", "10Gi")
			var names []string
			for name, size := range tc.claims {
				f.addClaim(name, "thin", size)
				names = append(names, name)
			}
			p := NewWithLister(defaultArgs(), f)
			pod := podWith("greedy", names...)
			_, _, got := cycle(t, p, pod, "n1")
			st := got[tc.at]
			if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), tc.want) {
				t.Fatalf("%s: %v, want UnschedulableAndUnresolvable %q (all: %v)", tc.at, st, tc.want, got)
			}
			if r := p.ledger.reserved("n1", "ssd").bytes; r != 0 {
				t.Errorf("the ledger holds %d bytes on n1", r)
			}
			f.addClaim("honest", "thin", "1Gi")
			if _, _, got := cycle(t, p, podWith("honest", "honest"), "n1"); !got["n1"].IsSuccess() {
				t.Errorf("an honest 1Gi pod after it: %v", got)
			}
		})
	}
}

// With no pod to schedule, the ledger is still swept: a reservation that
// expired leaves the count (the thinlvm_scheduler_reservations gauge)
// without waiting for the next scheduling cycle.
func TestIdleSweepDrainsReservations(t *testing.T) {
	f := newFake()
	f.addNode("n1", "10Gi", "10Gi")
	f.addClaim("a", "thin", "1Gi")
	p := NewWithLister(defaultArgs(), f)
	counts := make(chan int, 16)
	p.ledger.count = func(n int) {
		select {
		case counts <- n:
		default:
		}
	}
	state, _, _ := cycle(t, p, podWith("pa", "a"), "n1")
	for len(counts) > 0 { // the cycle's own sweep
		<-counts
	}
	p.Reserve(context.Background(), state, podWith("pa", "a"), "n1")
	if n := <-counts; n != 1 {
		t.Fatalf("count %d after Reserve, want 1", n)
	}
	p.ledger.mu.Lock()
	p.ledger.now = func() time.Time { return time.Now().Add(time.Hour) } // past the TTL
	p.ledger.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.reactivate(ctx, func(map[string]*corev1.Pod) {}, 10*time.Millisecond)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case n := <-counts:
			if n == 0 {
				return
			}
		case <-deadline:
			t.Fatalf("the expired reservation was not swept without a cycle: %d left", p.ledger.len())
		}
	}
}

// addThickNode adds a node whose one device class, "ssd" (the default), is
// thick, as its agent publishes it: no thin pool (ThinPool "", PoolSize 0,
// the pool's percentages "0.00", no overprovisioning), Available the
// volume group's free space less the spare, and room in the VG's metadata
// area.
func (f *fakeLister) addThickNode(name, available, vgSize string) {
	f.nodes[name] = &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: thinlvmv1.LVMNodeStatus{
		DeviceClasses: []thinlvmv1.DeviceClassStatus{{Name: "ssd", Type: thinlvmv1.DeviceClassThick, Default: true,
			VolumeGroup: "vg0", ThinPool: "", VGSize: resource.MustParse(vgSize), VGFree: resource.MustParse(available),
			PoolSize: resource.MustParse("0"), DataUsed: resource.MustParse("0"), DataPercent: "0.00", MetadataPercent: "0.00",
			OverprovisionRatio: "0", Available: resource.MustParse(available),
			VGMetadata: &thinlvmv1.VGMetadataStatus{Size: resource.MustParse("1020Ki"), Free: resource.MustParse("900Ki"), LVsLeft: 1000}}},
		UpdateTime: &metav1.Time{Time: time.Now()},
	}}
}

// A thick device class has no thin pool: its room is its Available (the
// volume group's free space less the spare), filtered and scored as a
// thin class's. Its pool's zero size and "0.00" use are no pool at all,
// neither full nor unhealthy nor a class that holds at most 0 bytes.
func TestThickDeviceClassIsFilteredByAvailable(t *testing.T) {
	f := newFake()
	f.addThickNode("roomy", "10Gi", "20Gi")
	f.addThickNode("half", "5Gi", "20Gi")
	f.addThickNode("tight", "2Gi", "20Gi")
	f.addClaim("data", "thin", "3Gi")
	p := NewWithLister(defaultArgs(), f)
	pod := podWith("p", "data")
	state, _, st := cycle(t, p, pod, "roomy", "half", "tight")
	for _, n := range []string{"roomy", "half"} {
		if !st[n].IsSuccess() {
			t.Errorf("%s (thick, 3Gi needed of its Available): %v", n, st[n])
		}
	}
	if st["tight"].Code() != fwk.Unschedulable || !strings.Contains(st["tight"].Message(), "has 2147483648 bytes free, the pod needs 3221225472") {
		t.Errorf("tight (thick, 2Gi Available, 3Gi needed): %v, want Unschedulable for want of free bytes", st["tight"])
	}
	for n, s := range st {
		if strings.Contains(s.Message(), "takes no new volumes") {
			t.Errorf("%s: a thick class's empty pool fields read as a full or unhealthy pool: %v", n, s)
		}
	}
	// Spread: the more the thick class has Available, the higher the node.
	roomy, _ := p.Score(context.Background(), state, pod, nodeInfo("roomy"))
	half, _ := p.Score(context.Background(), state, pod, nodeInfo("half"))
	if !(roomy > half && half > 0) {
		t.Errorf("scores roomy %d, half %d: want the thick class's Available to count, more room first", roomy, half)
	}
	// Reservations count against a thick class's Available too.
	if st := p.Reserve(context.Background(), state, pod, "half"); !st.IsSuccess() {
		t.Fatal(st)
	}
	f.addClaim("more", "thin", "3Gi")
	if _, _, st := cycle(t, p, podWith("p2", "more"), "half"); st["half"].Code() != fwk.Unschedulable {
		t.Errorf("half (5Gi Available, 3Gi reserved, 3Gi needed): %v, want Unschedulable", st["half"])
	}

	// The VG's metadata area is a thick class's limit as a thin one's.
	f.nodes["roomy"].Status.DeviceClasses[0].VGMetadata.LVsLeft = 0
	if _, _, st := cycle(t, p, podWith("p3", "more"), "roomy"); st["roomy"].Code() != fwk.Unschedulable ||
		!strings.Contains(st["roomy"].Message(), `the metadata area of volume group "vg0" has room for 0 more volumes`) {
		t.Errorf("roomy with its VG's metadata area full: %v, want Unschedulable", st["roomy"])
	}
}

package reconciler_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/testutil"
	"github.com/thinlvm/thinlvm/lvmd/lvmdtest"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/lvmd"
	"github.com/thinlvm/thinlvm/node/reconciler"
	"github.com/thinlvm/thinlvm/node/transfer"
)

var nodeSeq atomic.Int32

// startAgent runs the reconciler for a fresh node name with f as lvmd,
// until the test ends; stop ends it earlier.
func startAgent(t *testing.T, f *lvmdtest.LVMD) (node string, stop func()) {
	t.Helper()
	node = newNodeName()
	return node, startAgentOn(t, node, f)
}

// newNodeName is a node name no other test uses.
func newNodeName() string { return fmt.Sprintf("node-%d", nodeSeq.Add(1)) }

func startAgentOn(t *testing.T, node string, f *lvmdtest.LVMD) (stop func()) {
	t.Helper()
	return startAgentWith(t, node, f, agentOptions{})
}

// agentOptions change the agent startAgentWith runs.
type agentOptions struct {
	// wrap, when set, wraps the agent's client.
	wrap func(client.Client) client.Client
	// metrics, when set, are the agent's.
	metrics *reconciler.Metrics
	// copier, when set, copies volumes from other nodes.
	copier *transfer.Copier
	// wrapLVMD, when set, wraps the agent's lvmd client.
	wrapLVMD func(lvmd.Client) lvmd.Client
}

// startAgentWith is startAgentOn with o. Every agent runs the start-up
// sweep of orphan LVs and records Events.
func startAgentWith(t *testing.T, node string, f *lvmdtest.LVMD, o agentOptions) (stop func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     scheme.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var c client.Client = mgr.GetClient()
	if o.wrap != nil {
		c = o.wrap(c)
	}
	var l lvmd.Client = f
	if o.wrapLVMD != nil {
		l = o.wrapLVMD(l)
	}
	r := &reconciler.LogicalVolumeReconciler{Client: c, LVMD: l, NodeName: node, RetryAfter: 200 * time.Millisecond,
		APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("thinlvm-node"), Metrics: o.metrics,
		Copier: o.copier, CopyPoll: 100 * time.Millisecond}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once atomic.Bool
	stop = func() {
		if once.CompareAndSwap(false, true) {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return stop
}

func newLV(name, node, size string) *thinlvmv1.LogicalVolume {
	return &thinlvmv1.LogicalVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       thinlvmv1.LogicalVolumeSpec{Name: name, NodeName: node, Size: resource.MustParse(size)},
	}
}

func get(t *testing.T, name string) *thinlvmv1.LogicalVolume {
	t.Helper()
	lv := &thinlvmv1.LogicalVolume{}
	if err := k8sClient.Get(context.Background(), types.NamespacedName{Name: name}, lv); err != nil {
		t.Fatal(err)
	}
	return lv
}

func readyLV(t *testing.T, name string) *thinlvmv1.LogicalVolume {
	t.Helper()
	var lv *thinlvmv1.LogicalVolume
	testutil.Eventually(t, name+" to be Ready", func() bool {
		lv = get(t, name)
		return meta.IsStatusConditionTrue(lv.Status.Conditions, thinlvmv1.ConditionReady) && lv.Status.ObservedGeneration == lv.Generation
	})
	return lv
}

// forceDelete deletes LogicalVolumes no agent finalizes: their finalizers
// dropped first.
func forceDelete(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		o := get(t, name)
		o.Finalizers = nil
		if err := k8sClient.Update(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		if err := k8sClient.Delete(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

func gone(t *testing.T, name string) {
	t.Helper()
	testutil.Eventually(t, name+" to be deleted", func() bool {
		err := k8sClient.Get(context.Background(), types.NamespacedName{Name: name}, &thinlvmv1.LogicalVolume{})
		return apierrors.IsNotFound(err)
	})
}

func TestCreateResizeDelete(t *testing.T) {
	ctx := context.Background()
	f := lvmdtest.Start(t, lvmdtest.Options{})
	node, _ := startAgent(t, f)
	if err := k8sClient.Create(ctx, newLV("pvc-crd", node, "1Gi")); err != nil {
		t.Fatal(err)
	}
	lv := readyLV(t, "pvc-crd")
	if lv.Status.VolumeID != "pvc-crd" || lv.Status.CurrentSize.Cmp(resource.MustParse("1Gi")) != 0 || !controllerutil.ContainsFinalizer(lv, reconciler.Finalizer) {
		t.Fatalf("status %+v, finalizers %v", lv.Status, lv.Finalizers)
	}
	if c := meta.FindStatusCondition(lv.Status.Conditions, thinlvmv1.ConditionFailed); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Failed condition %+v", c)
	}
	got, ok := f.LV(t, "pvc-crd")
	if !ok || got.GetSizeBytes() != 1<<30 || got.GetTags()[1] != "lv:pvc-crd" {
		t.Fatalf("lvmd has %v", got)
	}

	lv.Spec.Size = resource.MustParse("3Gi")
	if err := k8sClient.Update(ctx, lv); err != nil {
		t.Fatal(err)
	}
	lv = readyLV(t, "pvc-crd")
	if lv.Status.CurrentSize.Cmp(resource.MustParse("3Gi")) != 0 {
		t.Errorf("current size %v after growing the spec", lv.Status.CurrentSize)
	}
	if got, _ := f.LV(t, "pvc-crd"); got.GetSizeBytes() != 3<<30 {
		t.Errorf("lvmd LV is %d bytes", got.GetSizeBytes())
	}

	if err := k8sClient.Delete(ctx, lv); err != nil {
		t.Fatal(err)
	}
	gone(t, "pvc-crd")
	if _, ok := f.LV(t, "pvc-crd"); ok {
		t.Error("LV left behind after delete")
	}
}

func TestOtherNodesAreIgnored(t *testing.T) {
	ctx := context.Background()
	f := lvmdtest.Start(t, lvmdtest.Options{})
	startAgent(t, f)
	if err := k8sClient.Create(ctx, newLV("pvc-elsewhere", "some-other-node", "1Gi")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if lv := get(t, "pvc-elsewhere"); len(lv.Finalizers) != 0 || len(lv.Status.Conditions) != 0 {
		t.Errorf("another node's LogicalVolume was touched: %+v", lv)
	}
	// The start-up sweep lists lvmd's LVs; nothing else may reach lvmd.
	if calls := slices.DeleteFunc(f.Calls(), func(c string) bool { return c == "ListLVs" }); len(calls) != 0 {
		t.Errorf("lvmd called %d times for another node's volume: %v", len(calls), calls)
	}
	if err := k8sClient.Delete(ctx, get(t, "pvc-elsewhere")); err != nil {
		t.Fatal(err)
	}
}

func TestValidationByTheAPIServer(t *testing.T) {
	ctx := context.Background()
	tiny := newLV("lv-tiny", "n", "512Ki")
	if err := k8sClient.Create(ctx, tiny); !apierrors.IsInvalid(err) {
		t.Errorf("size 512Ki: %v, want Invalid", err)
	}
	badAccess := newLV("lv-bad-access", "n", "1Gi")
	badAccess.Spec.AccessType = "rwx"
	if err := k8sClient.Create(ctx, badAccess); !apierrors.IsInvalid(err) {
		t.Errorf("accessType rwx: %v, want Invalid", err)
	}
	badSource := newLV("lv-bad-source", "n", "1Gi")
	badSource.Spec.Source = &thinlvmv1.VolumeSource{Kind: "Backup", Name: "x"}
	if err := k8sClient.Create(ctx, badSource); !apierrors.IsInvalid(err) {
		t.Errorf("source kind Backup: %v, want Invalid", err)
	}
	badRole := newLV("lv-bad-role", "n", "1Gi")
	badRole.Spec.Role = "Backup"
	if err := k8sClient.Create(ctx, badRole); !apierrors.IsInvalid(err) {
		t.Errorf("role Backup: %v, want Invalid", err)
	}

	lv := newLV("lv-immutable", "n", "1Gi")
	if err := k8sClient.Create(ctx, lv); err != nil {
		t.Fatal(err)
	}
	defer k8sClient.Delete(ctx, lv)
	if lv.Spec.AccessType != thinlvmv1.AccessReadWrite {
		t.Errorf("accessType defaulted to %q, want rw", lv.Spec.AccessType)
	}
	if lv.Spec.Role != thinlvmv1.RoleVolume {
		t.Errorf("role defaulted to %q, want Volume", lv.Spec.Role)
	}
	// A snapshot stays a snapshot: what an ID names must not change under
	// the controller.
	snap := newLV("lv-immutable-snap", "n", "1Gi")
	snap.Spec.Role = thinlvmv1.RoleSnapshot
	snap.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: "lv-immutable"}
	if err := k8sClient.Create(ctx, snap); err != nil {
		t.Fatal(err)
	}
	defer k8sClient.Delete(ctx, snap)
	for _, tt := range []struct {
		name   string
		object string
		mutate func(*thinlvmv1.LogicalVolume)
	}{
		{"shrink", "lv-immutable", func(l *thinlvmv1.LogicalVolume) { l.Spec.Size = resource.MustParse("512Mi") }},
		{"change node", "lv-immutable", func(l *thinlvmv1.LogicalVolume) { l.Spec.NodeName = "m" }},
		{"change deviceClass", "lv-immutable", func(l *thinlvmv1.LogicalVolume) { l.Spec.DeviceClass = "hdd" }},
		{"add a source", "lv-immutable", func(l *thinlvmv1.LogicalVolume) {
			l.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: "x"}
		}},
		{"volume to snapshot", "lv-immutable", func(l *thinlvmv1.LogicalVolume) { l.Spec.Role = thinlvmv1.RoleSnapshot }},
		{"snapshot to volume", "lv-immutable-snap", func(l *thinlvmv1.LogicalVolume) { l.Spec.Role = thinlvmv1.RoleVolume }},
		{"change a snapshot's source", "lv-immutable-snap", func(l *thinlvmv1.LogicalVolume) { l.Spec.Source.Name = "other" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := get(t, tt.object)
			tt.mutate(l)
			if err := k8sClient.Update(ctx, l); !apierrors.IsInvalid(err) {
				t.Errorf("%v, want Invalid", err)
			}
		})
	}
}

// An object deleted while its LV is being made still gets the LV removed:
// the finalizer went on first.
func TestDeleteMidCreateLeavesNoLV(t *testing.T) {
	ctx := context.Background()
	f := lvmdtest.Start(t, lvmdtest.Options{})
	release := f.Hold()
	node, _ := startAgent(t, f)
	if err := k8sClient.Create(ctx, newLV("pvc-mid", node, "1Gi")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "CreateLV to start", func() bool { return f.Count("CreateLV") > 0 })
	if lv := get(t, "pvc-mid"); !controllerutil.ContainsFinalizer(lv, reconciler.Finalizer) {
		t.Fatal("CreateLV ran before the finalizer was added")
	}
	if err := k8sClient.Delete(ctx, get(t, "pvc-mid")); err != nil {
		t.Fatal(err)
	}
	release() // the create finishes after the delete
	gone(t, "pvc-mid")
	if names := f.LVNames(t); len(names) != 0 {
		t.Errorf("orphan LVs: %v", names)
	}
}

func TestFailureConditionAndRetry(t *testing.T) {
	ctx := context.Background()
	f := lvmdtest.Start(t, lvmdtest.Options{})
	f.SetPoolUsage(t, "vg0", "pool0", 93, 12) // over the high-water mark: lvmd refuses new volumes
	node, _ := startAgent(t, f)
	if err := k8sClient.Create(ctx, newLV("pvc-full", node, "1Gi")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the Failed condition", func() bool {
		c := meta.FindStatusCondition(get(t, "pvc-full").Status.Conditions, thinlvmv1.ConditionFailed)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	lv := get(t, "pvc-full")
	failed := meta.FindStatusCondition(lv.Status.Conditions, thinlvmv1.ConditionFailed)
	ready := meta.FindStatusCondition(lv.Status.Conditions, thinlvmv1.ConditionReady)
	if failed.Reason != thinlvmv1.ReasonNoSpace || failed.Message == "" || ready.Status != metav1.ConditionFalse {
		t.Errorf("conditions %+v", lv.Status.Conditions)
	}
	f.SetPoolUsage(t, "vg0", "pool0", 40, 12) // space freed: the retry succeeds
	readyLV(t, "pvc-full")
	if err := k8sClient.Delete(ctx, lv); err != nil {
		t.Fatal(err)
	}
	gone(t, "pvc-full")
}

func TestSnapshotSourceAndRestart(t *testing.T) {
	ctx := context.Background()
	f := lvmdtest.Start(t, lvmdtest.Options{})
	node, stop := startAgent(t, f)
	if err := k8sClient.Create(ctx, newLV("pvc-origin", node, "1Gi")); err != nil {
		t.Fatal(err)
	}
	readyLV(t, "pvc-origin")
	snap := newLV("snapshot-1234", node, "1Gi")
	snap.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: "pvc-origin"}
	snap.Spec.AccessType = thinlvmv1.AccessReadOnly
	if err := k8sClient.Create(ctx, snap); err != nil {
		t.Fatal(err)
	}
	clone := newLV("pvc-clone", node, "5Gi")
	clone.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceSnapshot, Name: "snapshot-1234"}
	if err := k8sClient.Create(ctx, clone); err != nil {
		t.Fatal(err)
	}
	s := readyLV(t, "snapshot-1234")
	c := readyLV(t, "pvc-clone")
	// "snapshot" is a prefix lvm reserves: the LV gets a derived name.
	if s.Status.VolumeID != "tl-snapshot-1234" {
		t.Errorf("snapshot volumeID %q", s.Status.VolumeID)
	}
	sl, _ := f.LV(t, "tl-snapshot-1234")
	cl, _ := f.LV(t, "pvc-clone")
	if sl.GetOrigin() != "pvc-origin" || !sl.GetReadOnly() || cl.GetOrigin() != "tl-snapshot-1234" || cl.GetSizeBytes() != 5<<30 || c.Status.CurrentSize.Value() != 5<<30 {
		t.Errorf("snapshot %v, clone %v", sl, cl)
	}

	// A restarted agent finds every LV it made and makes none again.
	creates := f.Count("CreateLV") + f.Count("CreateSnapshot")
	stop()
	startAgentOn(t, node, f)
	time.Sleep(2 * time.Second)
	for _, name := range []string{"pvc-origin", "snapshot-1234", "pvc-clone"} {
		readyLV(t, name)
	}
	if again := f.Count("CreateLV") + f.Count("CreateSnapshot"); again != creates {
		t.Errorf("restart made %d more LVs", again-creates)
	}

	// A source on another node cannot be used by an agent that copies from
	// no other node.
	far := newLV("pvc-far", node, "1Gi")
	far.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: "pvc-elsewhere-src"}
	other := newLV("pvc-elsewhere-src", "another-node", "1Gi")
	if err := k8sClient.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Create(ctx, far); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "Unsupported: no transfer endpoint", func() bool {
		c := meta.FindStatusCondition(get(t, "pvc-far").Status.Conditions, thinlvmv1.ConditionFailed)
		return c != nil && c.Reason == thinlvmv1.ReasonUnsupported
	})
	for _, name := range []string{"pvc-far", "pvc-clone", "snapshot-1234", "pvc-origin", "pvc-elsewhere-src"} {
		if err := k8sClient.Delete(ctx, get(t, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"pvc-far", "pvc-clone", "snapshot-1234", "pvc-origin"} {
		gone(t, name)
	}
	if names := f.LVNames(t); len(names) != 0 {
		t.Errorf("LVs left: %v", names)
	}
}

// A LogicalVolume in a device class lvmd does not know never gets an LV;
// deleting it must not leave it Terminating for good.
func TestUnknownDeviceClassIsDeleted(t *testing.T) {
	ctx := context.Background()
	f := lvmdtest.Start(t, lvmdtest.Options{})
	node, _ := startAgent(t, f)
	lv := newLV("pvc-made-up-class", node, "1Gi")
	lv.Spec.DeviceClass = "made-up"
	if err := k8sClient.Create(ctx, lv); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the Failed condition", func() bool {
		c := meta.FindStatusCondition(get(t, lv.Name).Status.Conditions, thinlvmv1.ConditionFailed)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == thinlvmv1.ReasonInvalidSpec
	})
	if err := k8sClient.Delete(ctx, lv); err != nil {
		t.Fatal(err)
	}
	gone(t, lv.Name)
}

// A clone's source LV is the source object's own LV: a status.volumeID
// forged to name a third tenant's LV changes nothing. No agent runs here
// (it would rewrite the forged status at once): the test reconciles the
// clone itself.
func TestForgedSourceVolumeIDIsIgnored(t *testing.T) {
	ctx := context.Background()
	f := lvmdtest.Start(t, lvmdtest.Options{})
	node := newNodeName()
	for _, name := range []string{"pvc-honest-src", "pvc-victim"} {
		if _, err := f.CreateLV(ctx, &pb.CreateLVRequest{Name: name, SizeBytes: 1 << 30, Tags: []string{reconciler.OwnerTagPrefix + name}}); err != nil {
			t.Fatal(err)
		}
	}
	src := newLV("pvc-honest-src", node, "1Gi")
	if err := k8sClient.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	src.Status.VolumeID = "pvc-victim" // what a compromised writer of status could do
	meta.SetStatusCondition(&src.Status.Conditions, metav1.Condition{Type: thinlvmv1.ConditionReady, Status: metav1.ConditionTrue, Reason: thinlvmv1.ReasonCreated})
	if err := k8sClient.Status().Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	clone := newLV("pvc-forged-clone", node, "1Gi")
	clone.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: "pvc-honest-src"}
	if err := k8sClient.Create(ctx, clone); err != nil {
		t.Fatal(err)
	}
	r := &reconciler.LogicalVolumeReconciler{Client: k8sClient, LVMD: f, NodeName: node}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "pvc-forged-clone"}}); err != nil {
		t.Fatal(err)
	}
	lv, ok := f.LV(t, "pvc-forged-clone")
	if !ok || lv.GetOrigin() != "pvc-honest-src" {
		t.Errorf("the clone %v was made from %q, want pvc-honest-src", ok, lv.GetOrigin())
	}
	forceDelete(t, "pvc-forged-clone", "pvc-honest-src")
}

// Two LogicalVolumes whose names derive to one LV name never share it:
// the second fails with Conflict, and deleting it leaves the first's LV.
func TestTwoObjectsNeverShareAnLV(t *testing.T) {
	ctx := context.Background()
	f := lvmdtest.Start(t, lvmdtest.Options{})
	node, _ := startAgent(t, f)
	if thinlvmv1.LVNameOf("snapshot-x") != thinlvmv1.LVNameOf("tl-snapshot-x") {
		t.Fatal("the names no longer collide: pick two that do")
	}
	if err := k8sClient.Create(ctx, newLV("snapshot-x", node, "1Gi")); err != nil {
		t.Fatal(err)
	}
	readyLV(t, "snapshot-x")
	if err := k8sClient.Create(ctx, newLV("tl-snapshot-x", node, "1Gi")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the second to fail with Conflict", func() bool {
		c := meta.FindStatusCondition(get(t, "tl-snapshot-x").Status.Conditions, thinlvmv1.ConditionFailed)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == thinlvmv1.ReasonConflict
	})
	if err := k8sClient.Delete(ctx, get(t, "tl-snapshot-x")); err != nil {
		t.Fatal(err)
	}
	gone(t, "tl-snapshot-x")
	if _, ok := f.LV(t, "tl-snapshot-x"); !ok {
		t.Fatal("deleting the second object removed the first one's LV")
	}
	if err := k8sClient.Delete(ctx, get(t, "snapshot-x")); err != nil {
		t.Fatal(err)
	}
	gone(t, "snapshot-x")
	if _, ok := f.LV(t, "tl-snapshot-x"); ok {
		t.Error("the first object's LV outlived it")
	}
}

// A volume waiting for its golden base is written once, not at every
// retry; a change of its node's bases wakes it.
func TestWaitingForBaseWritesOnChangeOnly(t *testing.T) {
	ctx := context.Background()
	f := lvmdtest.Start(t, lvmdtest.Options{})
	var patches atomic.Int32
	node := newNodeName()
	startAgentWith(t, node, f, agentOptions{wrap: func(c client.Client) client.Client { // it retries every 200ms
		return countingClient{Client: c, statusPatches: &patches}
	}})
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "wait-img"}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: "http://127.0.0.1:9/img", SHA256: strings.Repeat("0", 64)}},
		Size:   resource.MustParse("1Mi")}}
	ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: node}}
	for _, o := range []client.Object{gi, ln} {
		if err := k8sClient.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	lv := newLV("pvc-waits", node, "1Mi")
	lv.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceGoldenImage, Name: "wait-img"}
	if err := k8sClient.Create(ctx, lv); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "WaitingForBase", func() bool {
		c := meta.FindStatusCondition(get(t, "pvc-waits").Status.Conditions, thinlvmv1.ConditionReady)
		return c != nil && c.Reason == thinlvmv1.ReasonWaitingForBase
	})
	// A reconcile that reads the volume from a cache not yet holding the
	// first write may send it once more (CI saw it); a retry that writes
	// every time never goes quiet. So: a quiet second must come, five
	// retries without a write.
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := patches.Load()
		time.Sleep(time.Second)
		n := patches.Load() - before
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a waiting volume's status was still sent %d times a second while nothing changed", n)
		}
	}
	ln.Status.GoldenBases = []thinlvmv1.GoldenBaseStatus{{Name: "wait-img", LV: thinlvmv1.BaseLVName(gi), State: thinlvmv1.GoldenBaseFailed, Message: "checksum mismatch"}}
	if err := k8sClient.Status().Update(ctx, ln); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "BaseFailed", func() bool {
		c := meta.FindStatusCondition(get(t, "pvc-waits").Status.Conditions, thinlvmv1.ConditionFailed)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == thinlvmv1.ReasonBaseFailed
	})
	if names := f.LVNames(t); len(names) != 0 {
		t.Errorf("LVs made without a base: %v", names)
	}
}

// countingClient counts the status patches sent through it.
type countingClient struct {
	client.Client
	statusPatches *atomic.Int32
}

func (c countingClient) Status() client.SubResourceWriter {
	return countingStatus{c.Client.Status(), c.statusPatches}
}

type countingStatus struct {
	client.SubResourceWriter
	patches *atomic.Int32
}

func (s countingStatus) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	s.patches.Add(1)
	return s.SubResourceWriter.Patch(ctx, o, p, opts...)
}

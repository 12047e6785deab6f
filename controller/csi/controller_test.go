package csi_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	csispec "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	controllercsi "github.com/thinlvm/thinlvm/controller/csi"
	"github.com/thinlvm/thinlvm/internal/envtest"
	"github.com/thinlvm/thinlvm/internal/testutil"
	"github.com/thinlvm/thinlvm/lvmd/lvmdtest"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/reconciler"
)

// controllerNamespace is the controller's own namespace, where the
// populator makes its prime claims.
const controllerNamespace = "thinlvm-system"

// The controller runs against a real API server; the node agents are the
// real reconciler over lvmd on the simulated lvm, one per node.
var (
	k8s  client.Client
	srv  *controllercsi.ControllerServer
	lvmd = map[string]*lvmdtest.LVMD{}
)

func TestMain(m *testing.M) {
	o := envtest.Options{Manager: ctrl.Options{Controller: config.Controller{SkipNameValidation: ptr.To(true)}}}
	envtest.MainWithManager(m, o, func(ctx context.Context, env *envtest.Env, mgr ctrl.Manager) error {
		k8s = env.Client
		for _, n := range []string{"n1", "n2", "n3"} {
			l, _, err := lvmdtest.Run(lvmdtest.Options{}) // it ends with the test process
			if err != nil {
				return err
			}
			lvmd[n] = l
			r := &reconciler.LogicalVolumeReconciler{Client: mgr.GetClient(), LVMD: lvmd[n], NodeName: n, RetryAfter: time.Hour}
			if err := r.SetupWithManager(mgr); err != nil {
				return err
			}
		}
		srv = &controllercsi.ControllerServer{Client: mgr.GetClient(), Timeout: 20 * time.Second,
			Recorder: mgr.GetEventRecorder("thinlvm-controller"), APIReader: mgr.GetAPIReader(), Namespace: controllerNamespace}
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controllerNamespace}}); err != nil {
			return err
		}
		if err := srv.SetupWithManager(mgr); err != nil {
			return err
		}
		// LVMNodes as the publisher would write them: n1 has 10Gi, n2
		// 100Gi, n3 2Gi available.
		for n, avail := range map[string]string{"n1": "10Gi", "n2": "100Gi", "n3": "2Gi"} {
			ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: n}}
			if err := k8s.Create(ctx, ln); err != nil {
				return err
			}
			ln.Status.DeviceClasses = []thinlvmv1.DeviceClassStatus{{Name: "ssd", Default: true, Available: resource.MustParse(avail)}}
			if err := k8s.Status().Update(ctx, ln); err != nil {
				return err
			}
		}
		return nil
	})
}

var rwo = []*csispec.VolumeCapability{{AccessType: &csispec.VolumeCapability_Mount{Mount: &csispec.VolumeCapability_MountVolume{}},
	AccessMode: &csispec.VolumeCapability_AccessMode{Mode: csispec.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}

func top(nodes ...string) *csispec.TopologyRequirement {
	r := &csispec.TopologyRequirement{}
	for _, n := range nodes {
		t := &csispec.Topology{Segments: map[string]string{thinlvmv1.TopologyKey: n}}
		r.Preferred = append(r.Preferred, t)
		r.Requisite = append(r.Requisite, t)
	}
	return r
}

func createVolume(t *testing.T, name string, size int64, ar *csispec.TopologyRequirement, src *csispec.VolumeContentSource) (*csispec.Volume, error) {
	t.Helper()
	resp, err := srv.CreateVolume(context.Background(), &csispec.CreateVolumeRequest{Name: name, VolumeCapabilities: rwo,
		CapacityRange: &csispec.CapacityRange{RequiredBytes: size}, AccessibilityRequirements: ar, VolumeContentSource: src})
	return resp.GetVolume(), err
}

func nodeOf(v *csispec.Volume) string {
	return v.GetAccessibleTopology()[0].GetSegments()[thinlvmv1.TopologyKey]
}

func TestPlacement(t *testing.T) {
	tests := []struct {
		name string
		size int64
		ar   *csispec.TopologyRequirement
		want string
		code codes.Code
	}{
		{"preferred node with room", 1 << 30, top("n1", "n2"), "n1", codes.OK},
		{"preferred node without room: the next", 20 << 30, top("n1", "n2"), "n2", codes.OK},
		{"no candidate has room", 50 << 30, top("n1", "n3"), "", codes.ResourceExhausted},
		{"no requirements: the most room", 1 << 30, nil, "n2", codes.OK},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := createVolume(t, fmt.Sprintf("pvc-place-%d", i), tt.size, tt.ar, nil)
			if status.Code(err) != tt.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tt.code)
			}
			if err == nil && nodeOf(v) != tt.want {
				t.Errorf("placed on %s, want %s", nodeOf(v), tt.want)
			}
		})
	}
}

func TestCreateIsIdempotentAndChecksSize(t *testing.T) {
	v1, err := createVolume(t, "pvc-idem", 1<<30, top("n1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := createVolume(t, "pvc-idem", 1<<30, top("n1"), nil)
	if err != nil || v2.GetVolumeId() != v1.GetVolumeId() || v2.GetCapacityBytes() != 1<<30 {
		t.Fatalf("repeat: %v %v", v2, err)
	}
	if _, err := createVolume(t, "pvc-idem", 2<<30, top("n1"), nil); status.Code(err) != codes.AlreadyExists {
		t.Errorf("same name, bigger: %v, want AlreadyExists", err)
	}
	if lvmd["n1"].Count("CreateLV") == 0 {
		t.Error("no LV made")
	}
}

// An xfs volume is at least 300 MiB, what mkfs.xfs makes (a 256Mi claim
// on xfs failed every mount on a real node): a smaller request gets 300 MiB,
// a limit under it OutOfRange with nothing made. ext4 keeps the request.
func TestXFSMinimum(t *testing.T) {
	ctx := context.Background()
	mount := func(fs string) []*csispec.VolumeCapability {
		return []*csispec.VolumeCapability{{AccessType: &csispec.VolumeCapability_Mount{Mount: &csispec.VolumeCapability_MountVolume{FsType: fs}},
			AccessMode: &csispec.VolumeCapability_AccessMode{Mode: csispec.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}
	}
	for _, tt := range []struct {
		name, fs      string
		required, lim int64
		want          int64
		code          codes.Code
	}{
		{"xfs under its minimum", "xfs", 256 << 20, 0, 300 << 20, codes.OK},
		{"xfs under its minimum, limit allows it", "xfs", 256 << 20, 1 << 30, 300 << 20, codes.OK},
		{"xfs over its minimum", "xfs", 512 << 20, 0, 512 << 20, codes.OK},
		{"xfs with a limit under its minimum", "xfs", 256 << 20, 256 << 20, 0, codes.OutOfRange},
		{"ext4 small", "ext4", 256 << 20, 0, 256 << 20, codes.OK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name := "pvc-xfsmin-" + strings.NewReplacer(" ", "-", ",", "").Replace(tt.name)
			resp, err := srv.CreateVolume(ctx, &csispec.CreateVolumeRequest{Name: name, VolumeCapabilities: mount(tt.fs),
				CapacityRange: &csispec.CapacityRange{RequiredBytes: tt.required, LimitBytes: tt.lim}, AccessibilityRequirements: top("n1")})
			if status.Code(err) != tt.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tt.code)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "xfs needs at least") {
					t.Errorf("error %q does not say why", err)
				}
				if err := k8s.Get(ctx, types.NamespacedName{Name: name}, &thinlvmv1.LogicalVolume{}); !apierrors.IsNotFound(err) {
					t.Errorf("a LogicalVolume %s was left behind (get: %v)", name, err)
				}
				return
			}
			if got := resp.GetVolume().GetCapacityBytes(); got != tt.want {
				t.Errorf("capacity %d, want %d", got, tt.want)
			}
		})
	}
}

// lvmd's refusal comes back with its code (through the node agent's
// condition reason), and the LogicalVolume goes, so that the provisioner
// can try elsewhere.
func TestNodeRefusalLeavesNothing(t *testing.T) {
	tests := []struct {
		name   string
		code   codes.Code
		reason string
	}{
		{"no space", codes.ResourceExhausted, thinlvmv1.ReasonNoSpace},
		{"source missing", codes.NotFound, thinlvmv1.ReasonSourceNotFound},
		{"unknown class", codes.InvalidArgument, thinlvmv1.ReasonInvalidSpec},
		{"size", codes.OutOfRange, thinlvmv1.ReasonSizeOutOfRange},
		{"conflict", codes.AlreadyExists, thinlvmv1.ReasonConflict},
		{"foreign LV", codes.FailedPrecondition, thinlvmv1.ReasonForeignLV},
		{"unsupported", codes.Unimplemented, thinlvmv1.ReasonUnsupported},
		{"lvmd down", codes.Unavailable, thinlvmv1.ReasonLVMDUnavailable},
		{"lvm failed", codes.Internal, thinlvmv1.ReasonLVMFailed},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lvmd["n1"].SetFail("CreateLV", status.Error(tt.code, "thin pool over its high-water mark: data 95.00%, metadata 10.00%"))
			defer lvmd["n1"].SetFail("CreateLV", nil)
			name := fmt.Sprintf("pvc-refused-%d", i)
			_, err := createVolume(t, name, 1<<30, top("n1"), nil)
			if status.Code(err) != tt.code {
				t.Fatalf("got %v, want %v", err, tt.code)
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				lv := &thinlvmv1.LogicalVolume{}
				err := k8s.Get(context.Background(), types.NamespacedName{Name: name}, lv)
				if client.IgnoreNotFound(err) == nil && err != nil {
					break
				}
				if c := meta.FindStatusCondition(lv.Status.Conditions, thinlvmv1.ConditionFailed); err == nil && c != nil && c.Reason != tt.reason {
					t.Fatalf("Failed reason %s, want %s", c.Reason, tt.reason)
				}
				if time.Now().After(deadline) {
					t.Fatal("the refused LogicalVolume is still there")
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// A retry that meets the LogicalVolume an earlier, refused attempt deleted
// (its node could not remove it yet: lvmd is down) is told to come back
// at once, instead of waiting for an object that will never be Ready; once
// the node removed it, the next retry makes the volume.
func TestRetryAfterRefusalWhileTheNodeIsDown(t *testing.T) {
	down := status.Error(codes.Unavailable, "dial unix /run/thinlvm/lvmd.sock: connection refused")
	// lvmd is down: every call fails, so the node can neither make the LV
	// nor tell that there is none to remove.
	for _, m := range []string{"CreateLV", "GetLV", "RemoveLV"} {
		lvmd["n1"].SetFail(m, down)
		defer lvmd["n1"].SetFail(m, nil)
	}
	const name = "pvc-node-down"
	if _, err := createVolume(t, name, 1<<30, top("n1"), nil); status.Code(err) != codes.Unavailable {
		t.Fatalf("first attempt: %v, want Unavailable", err)
	}
	// Retries come while the node is still down: each is answered at once
	// (a retry read before the controller's cache saw the deletion meets
	// the refusal again), and once the deletion shows, with Aborted.
	for i, aborted := 0, false; !aborted; i++ {
		if i == 100 {
			t.Fatal("no retry was told Aborted while the refused LogicalVolume waited for its node")
		}
		_, err := createVolume(t, name, 1<<30, top("n1"), nil)
		switch {
		case status.Code(err) == codes.Aborted && strings.Contains(err.Error(), "still being deleted"):
			aborted = true
		case status.Code(err) != codes.Unavailable:
			t.Fatalf("retry while the refused LogicalVolume waits for its node: %v, want Aborted", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, m := range []string{"CreateLV", "GetLV", "RemoveLV"} {
		lvmd["n1"].SetFail(m, nil)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, err := createVolume(t, name, 1<<30, top("n1"), nil)
		if err == nil {
			if nodeOf(v) != "n1" {
				t.Errorf("made on %s", nodeOf(v))
			}
			break
		}
		if status.Code(err) != codes.Aborted || time.Now().After(deadline) {
			t.Fatalf("once the node is back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := srv.DeleteVolume(context.Background(), &csispec.DeleteVolumeRequest{VolumeId: name}); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotsClonesAndSourceNode(t *testing.T) {
	ctx := context.Background()
	v, err := createVolume(t, "pvc-src", 1<<30, top("n1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := srv.CreateSnapshot(ctx, &csispec.CreateSnapshotRequest{Name: "snapshot-abc", SourceVolumeId: v.GetVolumeId()})
	if err != nil {
		t.Fatal(err)
	}
	if s := snap.GetSnapshot(); !s.GetReadyToUse() || s.GetSourceVolumeId() != v.GetVolumeId() || s.GetSizeBytes() != 1<<30 {
		t.Errorf("snapshot %v", s)
	}
	if lv, ok := lvmd["n1"].LV(t, "tl-snapshot-abc"); !ok || !lv.GetReadOnly() || lv.GetOrigin() != "pvc-src" {
		t.Errorf("snapshot LV %v", lv)
	}
	// What the objects are is in their spec, which the API server keeps.
	for id, want := range map[string]thinlvmv1.LogicalVolumeSpec{
		v.GetVolumeId(): {Role: thinlvmv1.RoleVolume},
		snap.GetSnapshot().GetSnapshotId(): {Role: thinlvmv1.RoleSnapshot,
			Source: &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: v.GetVolumeId()}},
	} {
		lv := &thinlvmv1.LogicalVolume{}
		if err := k8s.Get(ctx, types.NamespacedName{Name: id}, lv); err != nil {
			t.Fatal(err)
		}
		got := thinlvmv1.LogicalVolumeSpec{Role: lv.Spec.Role, Source: lv.Spec.Source}
		if diff := cmp.Diff(want, got); diff != "" || len(lv.Labels) != 0 {
			t.Errorf("%s: labels %v, role and source (-want +got):\n%s", id, lv.Labels, diff)
		}
	}
	fromSnap := &csispec.VolumeContentSource{Type: &csispec.VolumeContentSource_Snapshot{Snapshot: &csispec.VolumeContentSource_SnapshotSource{SnapshotId: "snapshot-abc"}}}
	restored, err := createVolume(t, "pvc-restored", 3<<30, top("n1", "n2"), fromSnap)
	if err != nil {
		t.Fatal(err)
	}
	if nodeOf(restored) != "n1" || restored.GetCapacityBytes() != 3<<30 {
		t.Errorf("restored %v", restored)
	}
	// The scheduler chose another node: the restore is made there, by a
	// copy from n1, which the agents here (no transfer endpoint) refuse;
	// the refused LogicalVolume is deleted.
	_, err = createVolume(t, "pvc-far", 1<<30, top("n2"), fromSnap)
	if status.Code(err) != codes.Unimplemented || !contains(status.Convert(err).Message(), "n1") {
		t.Errorf("restore elsewhere: %v, want Unimplemented naming n1", err)
	}
	clone, err := createVolume(t, "pvc-clone", 1<<30, nil, &csispec.VolumeContentSource{Type: &csispec.VolumeContentSource_Volume{
		Volume: &csispec.VolumeContentSource_VolumeSource{VolumeId: v.GetVolumeId()}}})
	if err != nil || nodeOf(clone) != "n1" {
		t.Errorf("clone: %v %v", clone, err)
	}
	_, err = createVolume(t, "pvc-nosrc", 1<<30, nil, &csispec.VolumeContentSource{Type: &csispec.VolumeContentSource_Snapshot{
		Snapshot: &csispec.VolumeContentSource_SnapshotSource{SnapshotId: "no-such"}}})
	if status.Code(err) != codes.NotFound {
		t.Errorf("missing snapshot source: %v, want NotFound", err)
	}

	for i := range 3 {
		if _, err := srv.CreateSnapshot(ctx, &csispec.CreateSnapshotRequest{Name: fmt.Sprintf("snap-page-%d", i), SourceVolumeId: v.GetVolumeId()}); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	token := ""
	for pages := 0; ; pages++ {
		resp, err := srv.ListSnapshots(ctx, &csispec.ListSnapshotsRequest{SourceVolumeId: v.GetVolumeId(), MaxEntries: 2, StartingToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.GetEntries() {
			ids = append(ids, e.GetSnapshot().GetSnapshotId())
		}
		if token = resp.GetNextToken(); token == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	if len(ids) != 4 {
		t.Errorf("listed %v, want 4 snapshots of pvc-src", ids)
	}
	// By ID: the snapshot, nothing for a volume's ID or an unknown one,
	// and nothing when the source does not match.
	for _, c := range []struct {
		req  *csispec.ListSnapshotsRequest
		want []string
	}{
		{&csispec.ListSnapshotsRequest{SnapshotId: "snapshot-abc"}, []string{"snapshot-abc"}},
		{&csispec.ListSnapshotsRequest{SnapshotId: "snapshot-abc", SourceVolumeId: v.GetVolumeId()}, []string{"snapshot-abc"}},
		{&csispec.ListSnapshotsRequest{SnapshotId: "snapshot-abc", SourceVolumeId: "pvc-clone"}, nil},
		{&csispec.ListSnapshotsRequest{SnapshotId: v.GetVolumeId()}, nil},
		{&csispec.ListSnapshotsRequest{SnapshotId: "no-such"}, nil},
	} {
		resp, err := srv.ListSnapshots(ctx, c.req)
		var got []string
		for _, e := range resp.GetEntries() {
			got = append(got, e.GetSnapshot().GetSnapshotId())
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ListSnapshots(%v): %v %v, want %v", c.req, got, err, c.want)
		}
	}
	if _, err := srv.ListSnapshots(ctx, &csispec.ListSnapshotsRequest{StartingToken: "bogus"}); status.Code(err) != codes.Aborted {
		t.Errorf("bad token: %v, want Aborted", err)
	}
}

// A snapshot of a volume in a thick device class is refused before
// anything is made; a volume in a thin class on the same node is not.
func TestSnapshotOfThickVolumeIsRefused(t *testing.T) {
	ctx := context.Background()
	// A node without an agent: its LVMNode reports a thin and a thick
	// class, and nothing makes its LVs, which is all the refusal needs.
	const n = "n-thick"
	ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: n}}
	if err := k8s.Create(ctx, ln); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ln) })
	ln.Status.DeviceClasses = []thinlvmv1.DeviceClassStatus{{Name: "ssd", Default: true}, {Name: "hdd", Type: thinlvmv1.DeviceClassThick}}
	if err := k8s.Status().Update(ctx, ln); err != nil {
		t.Fatal(err)
	}
	if ln.Status.DeviceClass("hdd").Type != thinlvmv1.DeviceClassThick {
		t.Fatal("the API server dropped the device class's type: the CRDs under test (deploy/crds) lack it")
	}
	// The source volumes, as CreateVolume makes them.
	for name, class := range map[string]string{"pvc-thick-src": "hdd", "pvc-thin-src": "ssd"} {
		lv := &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: thinlvmv1.LogicalVolumeSpec{
			Name: name, NodeName: n, DeviceClass: class, Size: resource.MustParse("1Gi"), Role: thinlvmv1.RoleVolume}}
		if err := k8s.Create(ctx, lv); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), lv) })
	}
	testutil.Eventually(t, "the controller's cache to hold the LVMNode and the sources", func() bool {
		got := &thinlvmv1.LVMNode{}
		if err := srv.Client.Get(ctx, types.NamespacedName{Name: n}, got); err != nil {
			return false
		}
		if dc := got.Status.DeviceClass("hdd"); dc == nil || dc.Type != thinlvmv1.DeviceClassThick {
			return false
		}
		for _, name := range []string{"pvc-thick-src", "pvc-thin-src"} {
			if err := srv.Client.Get(ctx, types.NamespacedName{Name: name}, &thinlvmv1.LogicalVolume{}); err != nil {
				return false
			}
		}
		return true
	})

	// Bounded, so that a snapshot made in error fails the test at once.
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := srv.CreateSnapshot(short, &csispec.CreateSnapshotRequest{Name: "snap-thick", SourceVolumeId: "pvc-thick-src"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "thick volumes have no snapshots") {
		t.Errorf("snapshot of a thick volume: %v, want FailedPrecondition saying thick volumes have no snapshots", err)
	}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "snap-thick"}, &thinlvmv1.LogicalVolume{}); !apierrors.IsNotFound(err) {
		t.Errorf("a snapshot LogicalVolume of the thick volume was made (get: %v)", err)
		_ = k8s.Delete(ctx, &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: "snap-thick"}})
	}

	// The thin volume's snapshot is made; no agent reports it, so the
	// call runs out of time waiting.
	short, cancel = context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = srv.CreateSnapshot(short, &csispec.CreateSnapshotRequest{Name: "snap-thin-beside", SourceVolumeId: "pvc-thin-src"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("snapshot of a thin volume on the same node: %v, want DeadlineExceeded (made, not reported)", err)
	}
	snap := &thinlvmv1.LogicalVolume{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "snap-thin-beside"}, snap); err != nil {
		t.Fatalf("no snapshot LogicalVolume of the thin volume: %v", err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), snap) })
	if snap.Spec.Role != thinlvmv1.RoleSnapshot || snap.Spec.NodeName != n || snap.Spec.DeviceClass != "ssd" {
		t.Errorf("snapshot of the thin volume: role %q, node %q, class %q; want a snapshot on %s in ssd", snap.Spec.Role, snap.Spec.NodeName, snap.Spec.DeviceClass, n)
	}
}

func TestExpandDeleteCapacity(t *testing.T) {
	ctx := context.Background()
	v, err := createVolume(t, "pvc-grow", 1<<30, top("n2"), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.ControllerExpandVolume(ctx, &csispec.ControllerExpandVolumeRequest{VolumeId: v.GetVolumeId(), CapacityRange: &csispec.CapacityRange{RequiredBytes: 5 << 30}})
	if err != nil || resp.GetCapacityBytes() != 5<<30 || !resp.GetNodeExpansionRequired() {
		t.Fatalf("expand: %v %v", resp, err)
	}
	if lv, _ := lvmd["n2"].LV(t, "pvc-grow"); lv.GetSizeBytes() != 5<<30 {
		t.Errorf("LV is %d bytes", lv.GetSizeBytes())
	}
	if _, err := srv.ControllerExpandVolume(ctx, &csispec.ControllerExpandVolumeRequest{VolumeId: "missing", CapacityRange: &csispec.CapacityRange{RequiredBytes: 1}}); status.Code(err) != codes.NotFound {
		t.Errorf("expand missing: %v", err)
	}
	if _, err := srv.DeleteVolume(ctx, &csispec.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	if _, ok := lvmd["n2"].LV(t, "pvc-grow"); ok {
		t.Error("LV still there after DeleteVolume")
	}
	if _, err := srv.DeleteVolume(ctx, &csispec.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); err != nil {
		t.Errorf("repeated delete: %v", err)
	}
	c, err := srv.GetCapacity(ctx, &csispec.GetCapacityRequest{AccessibleTopology: &csispec.Topology{Segments: map[string]string{thinlvmv1.TopologyKey: "n3"}},
		Parameters: map[string]string{thinlvmv1.DeviceClassParameter: "ssd"}})
	if err != nil || c.GetAvailableCapacity() != 2<<30 {
		t.Errorf("capacity of n3: %v %v", c, err)
	}
	if c, _ := srv.GetCapacity(ctx, &csispec.GetCapacityRequest{Parameters: map[string]string{thinlvmv1.DeviceClassParameter: "nvme"}}); c.GetAvailableCapacity() != 0 {
		t.Errorf("capacity of an unknown class %v", c)
	}
	c, err = srv.GetCapacity(ctx, &csispec.GetCapacityRequest{AccessibleTopology: &csispec.Topology{Segments: map[string]string{thinlvmv1.TopologyKey: "no-such-node"}}})
	if err != nil || c.GetAvailableCapacity() != 0 || c.GetMaximumVolumeSize().GetValue() != 0 {
		t.Errorf("capacity of a node without an LVMNode: %v %v, want 0", c, err)
	}
	// Without a segment: the sum over the nodes, the largest one's as the
	// maximum (the LVMNodes' reports, which the fake agents do not
	// change).
	c, err = srv.GetCapacity(ctx, &csispec.GetCapacityRequest{})
	if err != nil || c.GetAvailableCapacity() != 112<<30 || c.GetMaximumVolumeSize().GetValue() != 100<<30 {
		t.Errorf("capacity of all nodes: %v %v, want 112Gi, largest 100Gi", c, err)
	}
}

func TestValidation(t *testing.T) {
	ctx := context.Background()
	block := []*csispec.VolumeCapability{{AccessType: &csispec.VolumeCapability_Block{Block: &csispec.VolumeCapability_BlockVolume{}},
		AccessMode: &csispec.VolumeCapability_AccessMode{Mode: csispec.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER}}}
	tests := []struct {
		name string
		req  *csispec.CreateVolumeRequest
		want codes.Code
	}{
		{"no name", &csispec.CreateVolumeRequest{VolumeCapabilities: rwo}, codes.InvalidArgument},
		{"no capabilities", &csispec.CreateVolumeRequest{Name: "x"}, codes.InvalidArgument},
		{"multi-node", &csispec.CreateVolumeRequest{Name: "x", VolumeCapabilities: block}, codes.InvalidArgument},
		{"required over limit", &csispec.CreateVolumeRequest{Name: "x", VolumeCapabilities: rwo, CapacityRange: &csispec.CapacityRange{RequiredBytes: 2, LimitBytes: 1}}, codes.InvalidArgument},
		{"limit under the minimum", &csispec.CreateVolumeRequest{Name: "x", VolumeCapabilities: rwo, CapacityRange: &csispec.CapacityRange{LimitBytes: 1000}}, codes.OutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := srv.CreateVolume(ctx, tt.req); status.Code(err) != tt.want {
				t.Errorf("code %v (%v), want %v", status.Code(err), err, tt.want)
			}
		})
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestPhaseMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	controllercsi.NewPhaseCollector(reg, k8s)
	if _, err := createVolume(t, "pvc-metric", 1<<30, top("n3"), nil); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	if got["Ready"] < 1 {
		t.Errorf("phases %v: want at least one Ready", got)
	}
}

// A golden class's volume is a snapshot of the base, on a node that holds
// it when the requirements allow, at least the image's size.
func TestGoldenImageVolumes(t *testing.T) {
	ctx := context.Background()
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: "http://127.0.0.1:1/u.img", SHA256: strings.Repeat("a", 64)}},
		Size:   resource.MustParse("2Gi")}}
	if err := k8s.Create(ctx, gi); err != nil {
		t.Fatal(err)
	}
	// n2 holds the base Ready, as its agent would have made it.
	base := thinlvmv1.BaseLVName(gi)
	if _, err := lvmd["n2"].CreateLV(ctx, &pb.CreateLVRequest{Name: base, SizeBytes: 2 << 30, Tags: []string{thinlvmv1.BaseTagPrefix + "ubuntu"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := lvmd["n2"].ChangeLV(ctx, &pb.ChangeLVRequest{Name: base, ReadOnly: ptr.To(true), Active: ptr.To(false)}); err != nil {
		t.Fatal(err)
	}
	ln := &thinlvmv1.LVMNode{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "n2"}, ln); err != nil {
		t.Fatal(err)
	}
	ln.Status.GoldenBases = []thinlvmv1.GoldenBaseStatus{{Name: "ubuntu", LV: base, Size: resource.MustParse("2Gi"), State: thinlvmv1.GoldenBaseReady}}
	if err := k8s.Status().Update(ctx, ln); err != nil {
		t.Fatal(err)
	}
	golden := map[string]string{thinlvmv1.GoldenImageParameter: "ubuntu"}
	create := func(name string, size, limit int64, params map[string]string, src *csispec.VolumeContentSource) (*csispec.Volume, error) {
		resp, err := srv.CreateVolume(ctx, &csispec.CreateVolumeRequest{Name: name, VolumeCapabilities: rwo, Parameters: params,
			CapacityRange: &csispec.CapacityRange{RequiredBytes: size, LimitBytes: limit}, AccessibilityRequirements: top("n1", "n2"), VolumeContentSource: src})
		return resp.GetVolume(), err
	}
	deadline := time.Now().Add(10 * time.Second)
	var v *csispec.Volume
	var err error
	for { // the controller's cache sees the LVMNode update
		if v, err = create("pvc-vm-1", 1<<30, 0, golden, nil); err != nil || nodeOf(v) == "n2" || time.Now().After(deadline) {
			break
		}
		_, _ = srv.DeleteVolume(ctx, &csispec.DeleteVolumeRequest{VolumeId: v.GetVolumeId()})
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if nodeOf(v) != "n2" || v.GetCapacityBytes() != 2<<30 {
		t.Errorf("volume on %s with %d bytes, want on n2 (holds the base) with the image's 2Gi", nodeOf(v), v.GetCapacityBytes())
	}
	if lv, ok := lvmd["n2"].LV(t, v.GetVolumeId()); !ok || lv.GetOrigin() != base || lv.GetReadOnly() {
		t.Errorf("LV %v, want a writable snapshot of %s", lv, base)
	}
	big, err := create("pvc-vm-2", 5<<30, 0, golden, nil)
	if err != nil || big.GetCapacityBytes() != 5<<30 {
		t.Errorf("larger than the base: %v, %v", big, err)
	}

	// A clone in the golden class (as KubeVirt clones a VM disk) is a
	// snapshot of its source on the source's node, whatever the image.
	src := &csispec.VolumeContentSource{Type: &csispec.VolumeContentSource_Volume{Volume: &csispec.VolumeContentSource_VolumeSource{VolumeId: v.GetVolumeId()}}}
	clone, err := create("pvc-vm-clone", 2<<30, 0, golden, src)
	if err != nil {
		t.Fatalf("clone of a golden volume in its class: %v", err)
	}
	if lv, ok := lvmd["n2"].LV(t, clone.GetVolumeId()); nodeOf(clone) != "n2" || !ok || lv.GetOrigin() != v.GetVolumeId() {
		t.Errorf("clone on %s: LV %v, want a snapshot of %s on n2", nodeOf(clone), lv, v.GetVolumeId())
	}
	for _, tt := range []struct {
		name   string
		size   int64
		limit  int64
		params map[string]string
		src    *csispec.VolumeContentSource
		code   codes.Code
	}{
		{"unknown image", 1 << 30, 0, map[string]string{thinlvmv1.GoldenImageParameter: "nope"}, nil, codes.NotFound},
		{"another device class", 1 << 30, 0, map[string]string{thinlvmv1.GoldenImageParameter: "ubuntu", thinlvmv1.DeviceClassParameter: "hdd"}, nil, codes.InvalidArgument},
		{"limit under the image's size", 1 << 30, 1 << 30, golden, nil, codes.OutOfRange},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := create("pvc-bad-"+strings.ReplaceAll(tt.name, " ", "-"), tt.size, tt.limit, tt.params, tt.src)
			if status.Code(err) != tt.code {
				t.Errorf("code %v (%v), want %v", status.Code(err), err, tt.code)
			}
			if err := k8s.Get(ctx, types.NamespacedName{Name: "pvc-bad-" + strings.ReplaceAll(tt.name, " ", "-")}, &thinlvmv1.LogicalVolume{}); client.IgnoreNotFound(err) != nil || err == nil {
				t.Errorf("a LogicalVolume was left behind: %v", err)
			}
		})
	}
}

// Bad input is refused with InvalidArgument before anything is made: no
// LogicalVolume outlives a refused CreateVolume or CreateSnapshot.
func TestBadInputLeavesNothing(t *testing.T) {
	ctx := context.Background()
	src, err := createVolume(t, "pvc-bad-src", 1<<30, top("n1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		params map[string]string
		ar     *csispec.TopologyRequirement
		want   string
	}{
		{"misspelt device class key", map[string]string{"thinlvm.io/device-clas": "nvme"}, top("n1"), `unknown parameters ["thinlvm.io/device-clas"]`},
		{"unknown key beside good ones", map[string]string{thinlvmv1.DeviceClassParameter: "ssd", "csi.storage.k8s.io/fstype": "xfs", "fast": "yes"}, top("n1"), `unknown parameters ["fast"]`},
		{"made-up device class on the chosen node", map[string]string{thinlvmv1.DeviceClassParameter: "made-up"}, top("n1"), `device class "made-up" is not on node(s) [n1]`},
		{"made-up device class anywhere", map[string]string{thinlvmv1.DeviceClassParameter: "made-up"}, nil, `no node reports device class "made-up"`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("pvc-bad-%d", i)
			_, err := srv.CreateVolume(ctx, &csispec.CreateVolumeRequest{Name: name, VolumeCapabilities: rwo, Parameters: tt.params, AccessibilityRequirements: tt.ar})
			if status.Code(err) == codes.OK || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error saying %q", err, tt.want)
			}
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.ResourceExhausted {
				t.Errorf("code %v", c)
			}
			if err := k8s.Get(ctx, types.NamespacedName{Name: name}, &thinlvmv1.LogicalVolume{}); !apierrors.IsNotFound(err) {
				t.Errorf("a LogicalVolume %s was left behind (get: %v)", name, err)
			}
		})
	}
	// The provisioner's own keys are accepted.
	if _, err := srv.CreateVolume(ctx, &csispec.CreateVolumeRequest{Name: "pvc-bad-ok", VolumeCapabilities: rwo, AccessibilityRequirements: top("n1"),
		Parameters: map[string]string{thinlvmv1.DeviceClassParameter: "ssd", "csi.storage.k8s.io/fstype": "xfs", "csi.storage.k8s.io/pvc/name": "data"}}); err != nil {
		t.Errorf("provisioner parameters refused: %v", err)
	}
	_, err = srv.CreateSnapshot(ctx, &csispec.CreateSnapshotRequest{Name: "snap-bad", SourceVolumeId: src.GetVolumeId(), Parameters: map[string]string{"retention": "1d"}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("snapshot with an unknown parameter: %v, want InvalidArgument", err)
	}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "snap-bad"}, &thinlvmv1.LogicalVolume{}); !apierrors.IsNotFound(err) {
		t.Errorf("a snapshot LogicalVolume was left behind (get: %v)", err)
	}
}

// ListVolumes pages through the volumes, never the snapshots.
func TestListVolumes(t *testing.T) {
	ctx := context.Background()
	for _, n := range []string{"pvc-list-a", "pvc-list-b", "pvc-list-c"} {
		if _, err := createVolume(t, n, 1<<30, top("n2"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.CreateSnapshot(ctx, &csispec.CreateSnapshotRequest{Name: "snap-list", SourceVolumeId: "pvc-list-a"}); err != nil {
		t.Fatal(err)
	}
	// The labels that once decided what an object is are never read: a
	// volume labelled as a snapshot stays a volume.
	b := &thinlvmv1.LogicalVolume{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "pvc-list-b"}, b); err != nil {
		t.Fatal(err)
	}
	b.Labels = map[string]string{"thinlvm.io/kind": "snapshot", "thinlvm.io/source-volume": "pvc-list-a"}
	if err := k8s.Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for { // the controller reads from its cache
		if err := srv.Client.Get(ctx, types.NamespacedName{Name: "pvc-list-b"}, b); err == nil && b.Labels["thinlvm.io/kind"] == "snapshot" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the controller's cache never saw the label")
		}
		time.Sleep(20 * time.Millisecond)
	}
	snaps, err := srv.ListSnapshots(ctx, &csispec.ListSnapshotsRequest{SourceVolumeId: "pvc-list-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps.GetEntries()) != 1 || snaps.GetEntries()[0].GetSnapshot().GetSnapshotId() != "snap-list" {
		t.Errorf("snapshots of pvc-list-a: %v, want only snap-list", snaps.GetEntries())
	}
	all, err := srv.ListVolumes(ctx, &csispec.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	token := ""
	for pages := 0; ; pages++ {
		resp, err := srv.ListVolumes(ctx, &csispec.ListVolumesRequest{MaxEntries: 2, StartingToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetEntries()) > 2 {
			t.Fatalf("page of %d entries, max 2", len(resp.GetEntries()))
		}
		for _, e := range resp.GetEntries() {
			seen[e.GetVolume().GetVolumeId()]++
			if nodeOf(e.GetVolume()) == "" {
				t.Errorf("%s has no topology", e.GetVolume().GetVolumeId())
			}
		}
		if token = resp.GetNextToken(); token == "" {
			break
		}
		if pages > 100 {
			t.Fatal("paging does not end")
		}
	}
	if len(seen) != len(all.GetEntries()) {
		t.Errorf("paged %d volumes, unpaged %d", len(seen), len(all.GetEntries()))
	}
	for _, n := range []string{"pvc-list-a", "pvc-list-b", "pvc-list-c"} {
		if seen[n] != 1 {
			t.Errorf("%s listed %d times", n, seen[n])
		}
	}
	if seen["snap-list"] != 0 {
		t.Error("a snapshot is listed as a volume")
	}
	if _, err := srv.ListVolumes(ctx, &csispec.ListVolumesRequest{StartingToken: "bogus"}); status.Code(err) != codes.Aborted {
		t.Errorf("bad token: %v, want Aborted", err)
	}
}

// A claim whose volume waits for its node's golden base is told so by an
// Event, before the call times out.
func TestClaimToldItWaitsForBase(t *testing.T) {
	ctx := context.Background()
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "slow-image"}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: "http://127.0.0.1:1/slow.img", SHA256: strings.Repeat("b", 64)}},
		Size:   resource.MustParse("1Gi")}}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "vm-disk", Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	for _, o := range []client.Object{gi, pvc} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// No node makes the base here: the call waits until its deadline.
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := srv.CreateVolume(cctx, &csispec.CreateVolumeRequest{Name: "pvc-waits-for-base", VolumeCapabilities: rwo,
		Parameters: map[string]string{thinlvmv1.GoldenImageParameter: "slow-image",
			"csi.storage.k8s.io/pvc/name": "vm-disk", "csi.storage.k8s.io/pvc/namespace": "default"},
		CapacityRange: &csispec.CapacityRange{RequiredBytes: 1 << 30}, AccessibilityRequirements: top("n1")})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("CreateVolume: %v, want DeadlineExceeded while the base is missing", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for found := false; !found; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no WaitingForGoldenBase Event on the claim")
		}
		list := &eventsv1.EventList{}
		if err := k8s.List(ctx, list, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			found = found || e.Regarding.Kind == "PersistentVolumeClaim" && e.Regarding.Name == "vm-disk" && e.Regarding.UID == pvc.UID &&
				e.Reason == controllercsi.ReasonWaitingForGoldenBase && strings.Contains(e.Note, "slow-image")
		}
	}
	_, _ = srv.DeleteVolume(ctx, &csispec.DeleteVolumeRequest{VolumeId: "pvc-waits-for-base"})
}

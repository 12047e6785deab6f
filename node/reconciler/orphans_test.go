package reconciler_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/testutil"
	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
	"github.com/thinlvm/thinlvm/lvmd/lvmdtest"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/reconciler"
)

// An agent that starts removes the LVs whose LogicalVolume is gone
// (deleted while the node was away), a snapshot's as a volume's, and says
// so in an Event on its LVMNode. An LV that is no LogicalVolume's, one lvmd
// does not manage, a golden base, and the LVs of objects that exist, on
// this node or another, stay.
func TestOrphanLVsAreRemovedAtStart(t *testing.T) {
	ctx := context.Background()
	f := lvmdtest.Start(t, lvmdtest.Options{})
	node := newNodeName()
	owner := func(name string) []string { return []string{reconciler.OwnerTagPrefix + name} }
	for _, lv := range []*pb.CreateLVRequest{
		{Name: "pvc-orphan", Tags: owner("pvc-orphan")},
		{Name: "scratch"}, // lvmd's, but no LogicalVolume's
		{Name: "gi-some-uid", Tags: []string{thinlvmv1.BaseTagPrefix + "some-image"}},
		{Name: "pvc-kept", Tags: owner("pvc-kept")},
		{Name: "pvc-moved", Tags: owner("pvc-moved")},
		{Name: "odd-name", Tags: owner("pvc-other")}, // not the LV an agent makes for pvc-other
	} {
		lv.SizeBytes = 1 << 30
		if _, err := f.CreateLV(ctx, lv); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: thinlvmv1.LVNameOf("snapshot-orphan"), SourceName: "pvc-kept",
		ReadOnly: true, Tags: owner("snapshot-orphan")}); err != nil {
		t.Fatal(err)
	}
	// Not lvmd's (no "thinlvm" tag), though it looks like an agent's.
	f.LVM.AddLV(fake.LV{VG: "vg0", Pool: "pool0", Name: "pvc-untagged", Size: 1 << 30, Tags: []string{reconciler.OwnerTagPrefix + "pvc-untagged"}})
	moved := newLV("pvc-moved", "another-node", "1Gi")
	for _, o := range []client.Object{&thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: node}}, newLV("pvc-kept", node, "1Gi"), moved} {
		if err := k8sClient.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	reg := prometheus.NewRegistry()
	startAgentWith(t, node, f, agentOptions{metrics: reconciler.NewMetrics(reg)})
	testutil.Eventually(t, "the orphans removed", func() bool { return orphansRemoved(t, reg) >= 2 })
	time.Sleep(300 * time.Millisecond) // the sweep would be through the rest
	want := []string{"gi-some-uid", "odd-name", "pvc-kept", "pvc-moved", "scratch"}
	if got := f.LVNames(t); !slices.Equal(got, want) {
		t.Errorf("LVs after the sweep %v, want %v", got, want)
	}
	if _, ok := f.LVM.GetLV("vg0", "pvc-untagged"); !ok {
		t.Error("an LV lvmd does not manage was removed")
	}
	if n := orphansRemoved(t, reg); n != 2 {
		t.Errorf("thinlvm_node_orphan_lvs_removed_total is %v, want 2", n)
	}
	for lv, owner := range map[string]string{"pvc-orphan": "pvc-orphan", "tl-snapshot-orphan": "snapshot-orphan"} {
		testutil.Eventually(t, "an Event for "+lv, func() bool {
			list := &eventsv1.EventList{}
			if err := k8sClient.List(ctx, list); err != nil {
				return false
			}
			for _, e := range list.Items {
				if e.Regarding.Kind == "LVMNode" && e.Regarding.Name == node && e.Regarding.UID != "" && e.Reason == "OrphanLVRemoved" &&
					e.Related != nil && e.Related.Kind == "LogicalVolume" && e.Related.Name == owner && e.Type == "Normal" && strings.Contains(e.Note, lv) {
					return true
				}
			}
			return false
		})
	}
	readyLV(t, "pvc-kept") // its LV found, not made again
	if n := f.Count("CreateLV"); n != 6 {
		t.Errorf("%d CreateLV calls, want the test's 6", n)
	}

	if err := k8sClient.Delete(ctx, get(t, "pvc-kept")); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Delete(ctx, moved); err != nil {
		t.Fatal(err)
	}
	gone(t, "pvc-kept")
}

func orphansRemoved(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "thinlvm_node_orphan_lvs_removed_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// An orphan lvmd refuses to remove (still open, say) stays, and a Warning
// says so; the next start tries again.
func TestOrphanLVNotRemovedIsReported(t *testing.T) {
	ctx := context.Background()
	f := lvmdtest.Start(t, lvmdtest.Options{})
	node := newNodeName()
	if _, err := f.CreateLV(ctx, &pb.CreateLVRequest{Name: "pvc-open-orphan", SizeBytes: 1 << 30, Tags: []string{reconciler.OwnerTagPrefix + "pvc-open-orphan"}}); err != nil {
		t.Fatal(err)
	}
	f.SetFail("RemoveLV", status.Error(codes.FailedPrecondition, "logical volume vg0/pvc-open-orphan in use"))
	reg := prometheus.NewRegistry()
	startAgentWith(t, node, f, agentOptions{metrics: reconciler.NewMetrics(reg)})
	testutil.Eventually(t, "a Warning", func() bool {
		list := &eventsv1.EventList{}
		if err := k8sClient.List(ctx, list); err != nil {
			return false
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "LVMNode" && e.Regarding.Name == node && e.Reason == "OrphanLVRemoveFailed" && e.Type == "Warning" &&
				strings.Contains(e.Note, "pvc-open-orphan") && strings.Contains(e.Note, "in use") {
				return true
			}
		}
		return false
	})
	if _, ok := f.LV(t, "pvc-open-orphan"); !ok {
		t.Error("the LV is gone")
	}
	if n := orphansRemoved(t, reg); n != 0 {
		t.Errorf("thinlvm_node_orphan_lvs_removed_total is %v, want 0", n)
	}
}

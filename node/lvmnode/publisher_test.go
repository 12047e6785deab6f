package lvmnode_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/envtest"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/lvmd/fake"
	"github.com/thinlvm/thinlvm/node/lvmnode"
)

var k8sClient client.Client

func TestMain(m *testing.M) {
	env, err := envtest.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		os.Exit(1)
	}
	k8sClient = env.Client
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func capacity(avail uint64, data float64) *pb.DeviceClassCapacity {
	return &pb.DeviceClassCapacity{DeviceClass: "ssd", VolumeGroup: "vg0", ThinPool: "pool0", Default: true,
		VgSizeBytes: 16 << 30, VgFreeBytes: 8 << 30, ThinPoolSizeBytes: 8 << 30, DataPercent: data, MetadataPercent: 10.5,
		DataUsedBytes: uint64(data / 100 * (8 << 30)), VirtualBytes: 4 << 30, OverprovisionRatio: 4, AvailableBytes: avail, LvCount: 3}
}

func lvmNode(t *testing.T, name string) *thinlvmv1.LVMNode {
	t.Helper()
	ln := &thinlvmv1.LVMNode{}
	if err := k8sClient.Get(context.Background(), types.NamespacedName{Name: name}, ln); err != nil {
		return nil
	}
	return ln
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestPublisher(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "pub-node"}}
	if err := k8sClient.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	f := &fake.LVMD{}
	f.SetCapacity(capacity(20<<30, 12.5))
	p := &lvmnode.Publisher{Client: k8sClient, LVMD: f, NodeName: "pub-node", Interval: 300 * time.Millisecond, Retry: 100 * time.Millisecond}
	go func() { _ = p.Start(ctx) }()

	eventually(t, "the LVMNode", func() bool { ln := lvmNode(t, "pub-node"); return ln != nil && len(ln.Status.DeviceClasses) == 1 })
	ln := lvmNode(t, "pub-node")
	want := []thinlvmv1.DeviceClassStatus{{
		Name: "ssd", VolumeGroup: "vg0", ThinPool: "pool0", Default: true,
		VGSize: resource.MustParse("16Gi"), VGFree: resource.MustParse("8Gi"), PoolSize: resource.MustParse("8Gi"),
		DataUsed: resource.MustParse("1Gi"), DataPercent: "12.50", MetadataPercent: "10.50", Virtual: resource.MustParse("4Gi"),
		OverprovisionRatio: "4", Available: resource.MustParse("20Gi"), LVCount: 3,
	}}
	if d := cmp.Diff(want, ln.Status.DeviceClasses, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); d != "" {
		t.Errorf("status (-want +got):\n%s", d)
	}
	if len(ln.OwnerReferences) != 1 || ln.OwnerReferences[0].Kind != "Node" || ln.OwnerReferences[0].UID != node.UID {
		t.Errorf("owner references %+v, want the Node", ln.OwnerReferences)
	}

	// The same report again writes nothing.
	writes := p.Writes()
	f.SetCapacity(capacity(20<<30, 12.5))
	time.Sleep(time.Second)
	if p.Writes() != writes {
		t.Errorf("an unchanged report was written (%d writes, was %d)", p.Writes(), writes)
	}

	// A burst of changes is written rate-limited, ending at the newest.
	for i := range 20 {
		f.SetCapacity(capacity(uint64(19-i)<<30, 13))
		time.Sleep(20 * time.Millisecond)
	}
	eventually(t, "the newest report", func() bool {
		ln := lvmNode(t, "pub-node")
		return ln.Status.DeviceClasses[0].Available.Cmp(resource.MustParse("0")) == 0
	})
	if n := p.Writes() - writes; n > 4 {
		t.Errorf("20 changes in 0.4s made %d writes: not rate-limited to one per 300ms", n)
	}

	// A broken watch reconnects.
	f.SetFail("Watch.Recv", fake.Errorf(14, "lvmd restarting"))
	time.Sleep(200 * time.Millisecond)
	f.SetFail("Watch.Recv", nil)
	f.SetCapacity(capacity(5<<30, 14))
	eventually(t, "the report after a reconnect", func() bool {
		return lvmNode(t, "pub-node").Status.DeviceClasses[0].Available.Cmp(resource.MustParse("5Gi")) == 0
	})
}

// Without its Node the LVMNode is not made (it would never be collected);
// it is once the Node exists.
func TestPublisherWaitsForNode(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &fake.LVMD{}
	f.SetCapacity(capacity(1<<30, 1))
	p := &lvmnode.Publisher{Client: k8sClient, LVMD: f, NodeName: "late-node", Interval: 100 * time.Millisecond, Retry: 100 * time.Millisecond}
	go func() { _ = p.Start(ctx) }()
	time.Sleep(500 * time.Millisecond)
	if lvmNode(t, "late-node") != nil {
		t.Fatal("LVMNode made before its Node exists")
	}
	if err := k8sClient.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "late-node"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the LVMNode", func() bool { return lvmNode(t, "late-node") != nil })
}

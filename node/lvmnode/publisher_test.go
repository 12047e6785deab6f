package lvmnode_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/envtest"
	"github.com/thinlvm/thinlvm/internal/testutil"
	"github.com/thinlvm/thinlvm/lvmd/config"
	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
	"github.com/thinlvm/thinlvm/lvmd/lvmdtest"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/lvmnode"
)

var k8sClient client.Client

func TestMain(m *testing.M) {
	envtest.Main(m, func(env *envtest.Env) { k8sClient = env.Client })
}

const gib = uint64(1) << 30

// startLVMD runs lvmd over a 16 GiB VG with 8 GiB free and an 8 GiB pool,
// 12.5% of its data and 10.5% of its metadata used, holding three thin LVs
// of 4 GiB in all, overprovisioned up to 4 times: 28 GiB available.
func startLVMD(t *testing.T) *lvmdtest.LVMD {
	cfg := &config.Config{DeviceClasses: []config.DeviceClass{{Name: "ssd", VolumeGroup: "vg0", ThinPool: "pool0", Default: true, OverprovisionRatio: 4}}}
	cfg.Default()
	r := &fake.Runner{
		VGs:   []fake.VG{{Name: "vg0", Size: 16 * gib, Free: 8 * gib}},
		Pools: []fake.Pool{{VG: "vg0", Name: "pool0", Size: 8 * gib, DataPercent: 12.5, MetadataPercent: 10.5}},
	}
	for i, size := range []uint64{1, 1, 2} {
		r.AddLV(fake.LV{VG: "vg0", Pool: "pool0", Name: fmt.Sprintf("lv%d", i), Size: size * gib, Tags: []string{"thinlvm"}})
	}
	return lvmdtest.Start(t, lvmdtest.Options{Config: cfg, Runner: r})
}

func lvmNode(t *testing.T, name string) *thinlvmv1.LVMNode {
	t.Helper()
	ln := &thinlvmv1.LVMNode{}
	if err := k8sClient.Get(context.Background(), types.NamespacedName{Name: name}, ln); err != nil {
		return nil
	}
	return ln
}

func TestPublisher(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "pub-node"}}
	if err := k8sClient.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	f := startLVMD(t)
	p := &lvmnode.Publisher{Client: k8sClient, LVMD: f, NodeName: "pub-node", Interval: 300 * time.Millisecond, Retry: 100 * time.Millisecond}
	go func() { _ = p.Start(ctx) }()

	// The patch is visible on the API server a moment before the publisher
	// counts it: wait for both.
	testutil.Eventually(t, "the LVMNode", func() bool {
		ln := lvmNode(t, "pub-node")
		return ln != nil && len(ln.Status.DeviceClasses) == 1 && p.Writes() == 1
	})
	ln := lvmNode(t, "pub-node")
	want := []thinlvmv1.DeviceClassStatus{{
		Name: "ssd", VolumeGroup: "vg0", ThinPool: "pool0", Default: true,
		VGSize: resource.MustParse("16Gi"), VGFree: resource.MustParse("8Gi"), PoolSize: resource.MustParse("8Gi"),
		DataUsed: resource.MustParse("1Gi"), DataPercent: "12.50", MetadataPercent: "10.50", Virtual: resource.MustParse("4Gi"),
		OverprovisionRatio: "4", Available: resource.MustParse("28Gi"), LVCount: 3,
		// lvm2's default metadata area, and room for about a thousand LVs.
		VGMetadata: &thinlvmv1.VGMetadataStatus{Size: resource.MustParse("1020Ki"),
			Free: *resource.NewQuantity(int64(f.LVM.MetadataFree("vg0")), resource.BinarySI)},
	}}
	if d := cmp.Diff(want, ln.Status.DeviceClasses, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 }),
		cmpopts.IgnoreFields(thinlvmv1.VGMetadataStatus{}, "LVsLeft")); d != "" {
		t.Errorf("status (-want +got):\n%s", d)
	}
	if m := ln.Status.DeviceClasses[0].VGMetadata; m == nil || m.LVsLeft < 900 || m.LVsLeft > 1100 {
		t.Errorf("VG metadata %+v, want about 1000 LVs left", m)
	}
	if len(ln.OwnerReferences) != 1 || ln.OwnerReferences[0].Kind != "Node" || ln.OwnerReferences[0].UID != node.UID {
		t.Errorf("owner references %+v, want the Node", ln.OwnerReferences)
	}

	// The same report again writes nothing: lvmd re-reads lvm every 20ms.
	writes := p.Writes()
	time.Sleep(time.Second)
	if p.Writes() != writes {
		t.Errorf("an unchanged report was written (%d writes, was %d)", p.Writes(), writes)
	}

	// A burst of changes is written rate-limited, ending at the newest: a
	// pool filling to its high-water mark, where nothing is available.
	for i := range 20 {
		f.LVM.SetPoolUsage("vg0", "pool0", 13+float64(i)*4.6, 10.5)
		time.Sleep(20 * time.Millisecond)
	}
	testutil.Eventually(t, "the newest report", func() bool {
		ln := lvmNode(t, "pub-node")
		return ln.Status.DeviceClasses[0].Available.Cmp(resource.MustParse("0")) == 0
	})
	if n := p.Writes() - writes; n > 4 {
		t.Errorf("20 changes in 0.4s made %d writes: not rate-limited to one per 300ms", n)
	}

	// A broken watch reconnects.
	f.SetFail("Watch", status.Error(codes.Unavailable, "lvmd restarting"))
	time.Sleep(200 * time.Millisecond)
	f.SetFail("Watch", nil)
	f.LVM.SetPoolUsage("vg0", "pool0", 25, 10.5) // (8Gi - 2Gi used) * 4
	testutil.Eventually(t, "the report after a reconnect", func() bool {
		return lvmNode(t, "pub-node").Status.DeviceClasses[0].Available.Cmp(resource.MustParse("24Gi")) == 0
	})
	if n := f.Count("Watch"); n < 2 {
		t.Errorf("Watch called %d times: the broken watch was not reopened", n)
	}
}

// Without its Node the LVMNode is not made (it would never be collected);
// it is once the Node exists.
func TestPublisherWaitsForNode(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := lvmdtest.Start(t, lvmdtest.Options{})
	p := &lvmnode.Publisher{Client: k8sClient, LVMD: f, NodeName: "late-node", Interval: 100 * time.Millisecond, Retry: 100 * time.Millisecond}
	go func() { _ = p.Start(ctx) }()
	time.Sleep(500 * time.Millisecond)
	if lvmNode(t, "late-node") != nil {
		t.Fatal("LVMNode made before its Node exists")
	}
	if err := k8sClient.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "late-node"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the LVMNode", func() bool { return lvmNode(t, "late-node") != nil })
}

// A pool that fills past its high-water mark and runs out of data space, or
// whose metadata fills and makes it read-only, is shown in the LVMNode and
// recorded as Warning Events; one grown back under it as Normal ones. An
// unchanged state records nothing again.
func TestPublisherPoolEvents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := k8sClient.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "full-node"}}); err != nil {
		t.Fatal(err)
	}
	f := startLVMD(t)
	rec := events.NewFakeRecorder(20)
	// Every change is written here, use alone too (DriftInterval).
	p := &lvmnode.Publisher{Client: k8sClient, LVMD: f, NodeName: "full-node", Interval: 50 * time.Millisecond, DriftInterval: time.Millisecond,
		Retry: 50 * time.Millisecond, Recorder: rec}
	go func() { _ = p.Start(ctx) }()
	testutil.Eventually(t, "the LVMNode", func() bool { ln := lvmNode(t, "full-node"); return ln != nil && len(ln.Status.DeviceClasses) == 1 })

	steps := []struct {
		name       string
		data, meta float64
		over       bool
		readOnly   bool // the kernel made the pool read-only (lv_attr M)
		health     thinlvmv1.ThinPoolHealth
		events     []string
	}{
		{name: "over the data high-water mark", data: 92, meta: 10.5, over: true,
			events: []string{"Warning ThinPoolOverHighWatermark device class ssd: thin pool vg0/pool0 is over its high-water mark (data 92.00%, metadata 10.50%)"}},
		{name: "fuller, still over", data: 95, meta: 10.5, over: true},
		{name: "full", data: 100, meta: 10.5, over: true, health: thinlvmv1.ThinPoolOutOfDataSpace,
			events: []string{"Warning ThinPoolUnhealthy device class ssd: thin pool vg0/pool0 is OutOfDataSpace"}},
		{name: "grown", data: 40, meta: 10.5,
			events: []string{"Normal ThinPoolUnderHighWatermark device class ssd: thin pool vg0/pool0 is under its high-water mark again",
				"Normal ThinPoolRecovered device class ssd: thin pool vg0/pool0 takes writes again (was OutOfDataSpace)"}},
		{name: "metadata over", data: 40, meta: 85, over: true,
			events: []string{"Warning ThinPoolOverHighWatermark device class ssd: thin pool vg0/pool0 is over its high-water mark (data 40.00%, metadata 85.00%)"}},
		{name: "metadata full", data: 40, meta: 100, over: true, readOnly: true, health: thinlvmv1.ThinPoolMetadataReadOnly,
			events: []string{"Warning ThinPoolUnhealthy device class ssd: thin pool vg0/pool0 is MetadataReadOnly"}},
		{name: "metadata grown", data: 40, meta: 28,
			events: []string{"Normal ThinPoolUnderHighWatermark device class ssd: thin pool vg0/pool0 is under its high-water mark again",
				"Normal ThinPoolRecovered device class ssd: thin pool vg0/pool0 takes writes again (was MetadataReadOnly)"}},
	}
	for _, s := range steps {
		// The usage first, then the mode: a publish between them sees the
		// pool under its mark before it sees it writable, as the Events of
		// "metadata grown" are ordered.
		f.LVM.SetPoolUsage("vg0", "pool0", s.data, s.meta)
		f.LVM.SetPoolReadOnly("vg0", "pool0", s.readOnly)
		testutil.Eventually(t, s.name, func() bool {
			c := lvmNode(t, "full-node").Status.DeviceClasses[0]
			return c.DataPercent == strconv.FormatFloat(s.data, 'f', 2, 64) && c.OverHighWatermark == s.over && c.PoolHealth == s.health
		})
		time.Sleep(100 * time.Millisecond) // the Events are recorded after the write
		var got []string
		for len(rec.Events) > 0 {
			got = append(got, <-rec.Events)
		}
		if len(got) != len(s.events) {
			t.Fatalf("%s: events %q, want %d starting %q", s.name, got, len(s.events), s.events)
		}
		for i := range got {
			if !strings.HasPrefix(got[i], s.events[i]) {
				t.Errorf("%s: event %q, want it to start %q", s.name, got[i], s.events[i])
			}
		}
	}
}

// A VG whose metadata area fills: the LVMNode shows no LVs left, with a
// Warning Event, and room again after removals, with a Normal one.
func TestPublisherVGMetadataEvents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := k8sClient.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "mda-node"}}); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{DeviceClasses: []config.DeviceClass{{Name: "ssd", VolumeGroup: "vg0", ThinPool: "pool0", Default: true, OverprovisionRatio: 4}}}
	cfg.Default()
	// A 32 KiB area: 15872 bytes a copy, room for about a dozen LVs past
	// lvmd's reserve.
	f := lvmdtest.Start(t, lvmdtest.Options{Config: cfg, Runner: &fake.Runner{
		VGs:   []fake.VG{{Name: "vg0", Size: 16 * gib, Free: 8 * gib, MetadataAreaSize: 32 << 10}},
		Pools: []fake.Pool{{VG: "vg0", Name: "pool0", Size: 8 * gib}},
	}})
	rec := events.NewFakeRecorder(20)
	p := &lvmnode.Publisher{Client: k8sClient, LVMD: f, NodeName: "mda-node", Interval: 50 * time.Millisecond, Retry: 50 * time.Millisecond, Recorder: rec}
	go func() { _ = p.Start(ctx) }()
	left := func() int32 {
		ln := lvmNode(t, "mda-node")
		if ln == nil || len(ln.Status.DeviceClasses) != 1 || ln.Status.DeviceClasses[0].VGMetadata == nil {
			return -1
		}
		return ln.Status.DeviceClasses[0].VGMetadata.LVsLeft
	}
	testutil.Eventually(t, "the LVMNode", func() bool { return left() > 0 })
	var made int
	for made = 0; made < 50; made++ {
		if _, err := f.CreateLV(ctx, &pb.CreateLVRequest{Name: fmt.Sprintf("lv%d", made), SizeBytes: gib}); err != nil {
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatal(err)
			}
			break
		}
	}
	testutil.Eventually(t, "no LVs left", func() bool { return left() == 0 })
	wantEvent := func(prefix string) {
		t.Helper()
		testutil.Eventually(t, "the Event "+prefix, func() bool { return len(rec.Events) > 0 })
		if got := <-rec.Events; !strings.HasPrefix(got, prefix) {
			t.Errorf("event %q, want it to start %q", got, prefix)
		}
	}
	wantEvent("Warning VGMetadataFull device class ssd: volume group vg0's metadata area is full")
	for i := range 3 {
		if _, err := f.RemoveLV(ctx, &pb.RemoveLVRequest{Name: fmt.Sprintf("lv%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "room again", func() bool { return left() > 0 })
	wantEvent("Normal VGMetadataRoom device class ssd: volume group vg0's metadata area has room for")
}

// Data written into a pool moves its use on every lvmd refresh, on every
// node: a change of use alone waits out DriftInterval, while a change of
// anything else is written at once, with the newest use.
func TestPublisherHoldsUseDrift(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := k8sClient.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "drift-node"}}); err != nil {
		t.Fatal(err)
	}
	f := startLVMD(t)
	p := &lvmnode.Publisher{Client: k8sClient, LVMD: f, NodeName: "drift-node", Interval: 50 * time.Millisecond, DriftInterval: time.Hour}
	defer cancel() // before lvmd stops
	go func() { _ = p.Start(ctx) }()
	testutil.Eventually(t, "the LVMNode", func() bool {
		ln := lvmNode(t, "drift-node")
		return ln != nil && len(ln.Status.DeviceClasses) == 1 && p.Writes() == 1
	})
	writes := p.Writes()

	// 12.5% to 13% of the 8 GiB pool: what is available, (8 GiB - used)
	// times 4, moves from 28 GiB by 0.16 GiB, within 1%.
	for i := range 5 {
		f.LVM.SetPoolUsage("vg0", "pool0", 12.6+float64(i)*0.1, 10.5+float64(i)*0.1)
		time.Sleep(100 * time.Millisecond) // five lvmd refreshes each
	}
	if p.Writes() != writes {
		t.Errorf("use drift was written %d times before DriftInterval", p.Writes()-writes)
	}
	if got := lvmNode(t, "drift-node").Status.DeviceClasses[0].DataPercent; got != "12.50" {
		t.Errorf("DataPercent %s, want the first report's 12.50 until DriftInterval", got)
	}

	// A new LV is written at once, with the newest use.
	f.LVM.AddLV(fake.LV{VG: "vg0", Pool: "pool0", Name: "lv9", Size: gib, Tags: []string{"thinlvm"}})
	testutil.Eventually(t, "the new LV count", func() bool {
		return lvmNode(t, "drift-node").Status.DeviceClasses[0].LVCount == 4 && p.Writes() == writes+1
	})
	if got := lvmNode(t, "drift-node").Status.DeviceClasses[0].DataPercent; got != "13.00" {
		t.Errorf("DataPercent %s after a significant change, want the newest 13.00", got)
	}

	// A drift of more than 1% in what is available is written.
	writes = p.Writes()
	f.LVM.SetPoolUsage("vg0", "pool0", 20, 10.5)
	testutil.Eventually(t, "a large use change", func() bool {
		return lvmNode(t, "drift-node").Status.DeviceClasses[0].DataPercent == "20.00" && p.Writes() > writes
	})
	time.Sleep(200 * time.Millisecond) // four publisher intervals: no second write
	if p.Writes() != writes+1 {
		t.Errorf("a large use change made %d writes, want 1", p.Writes()-writes)
	}
}

// With a short DriftInterval a change of use alone is written once it has
// passed.
func TestPublisherWritesUseAfterDriftInterval(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := k8sClient.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "drift-node-2"}}); err != nil {
		t.Fatal(err)
	}
	f := startLVMD(t)
	p := &lvmnode.Publisher{Client: k8sClient, LVMD: f, NodeName: "drift-node-2", Interval: 50 * time.Millisecond, DriftInterval: 500 * time.Millisecond}
	go func() { _ = p.Start(ctx) }()
	testutil.Eventually(t, "the LVMNode", func() bool { ln := lvmNode(t, "drift-node-2"); return ln != nil && len(ln.Status.DeviceClasses) == 1 })
	f.LVM.SetPoolUsage("vg0", "pool0", 12.7, 10.5)
	testutil.Eventually(t, "the drift written", func() bool { return lvmNode(t, "drift-node-2").Status.DeviceClasses[0].DataPercent == "12.70" })
}

// A node without a device class's volume group: the LVMNode shows the
// class unavailable, Ready False naming it, with a Warning Event; once the
// VG and pool are made, lvmd's next refresh finds them, the class has room,
// Ready turns True, with a Normal Event. The agent is never restarted.
func TestPublisherDeviceClassAppears(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := k8sClient.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "late-vg-node"}}); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{DeviceClasses: []config.DeviceClass{
		{Name: "ssd", VolumeGroup: "vg0", ThinPool: "pool0", Default: true},
		{Name: "nvme", VolumeGroup: "vgnvme", ThinPool: "pool1"},
	}}
	cfg.Default()
	r := &fake.Runner{
		VGs:   []fake.VG{{Name: "vg0", Size: 16 * gib, Free: 8 * gib}},
		Pools: []fake.Pool{{VG: "vg0", Name: "pool0", Size: 8 * gib}},
	}
	f := lvmdtest.Start(t, lvmdtest.Options{Config: cfg, Runner: r})
	rec := events.NewFakeRecorder(20)
	synced := lvmnode.NewSyncedGauge(prometheus.NewRegistry())
	p := &lvmnode.Publisher{Client: k8sClient, LVMD: f, NodeName: "late-vg-node", Interval: 50 * time.Millisecond, Retry: 50 * time.Millisecond, Recorder: rec,
		Resync: 100 * time.Millisecond, Synced: synced}
	go func() { _ = p.Start(ctx) }()

	ready := func() *metav1.Condition {
		ln := lvmNode(t, "late-vg-node")
		if ln == nil {
			return nil
		}
		for i := range ln.Status.Conditions {
			if ln.Status.Conditions[i].Type == thinlvmv1.ConditionReady {
				return &ln.Status.Conditions[i]
			}
		}
		return nil
	}
	testutil.Eventually(t, "Ready False", func() bool { c := ready(); return c != nil && c.Status == metav1.ConditionFalse })
	if c := ready(); c.Reason != thinlvmv1.ReasonDeviceClassUnavailable || !strings.Contains(c.Message, "device class nvme: volume group vgnvme not found") {
		t.Errorf("Ready: %s %q, want %s naming the class and its VG", c.Reason, c.Message, thinlvmv1.ReasonDeviceClassUnavailable)
	}
	for _, c := range lvmNode(t, "late-vg-node").Status.DeviceClasses {
		switch {
		case c.Name == "nvme" && (c.Unavailable != "volume group vgnvme not found" || !c.Available.IsZero()):
			t.Errorf("nvme: unavailable %q, available %s; want the missing VG and none", c.Unavailable, c.Available.String())
		case c.Name == "ssd" && (c.Unavailable != "" || c.Available.IsZero()):
			t.Errorf("ssd: unavailable %q, available %s; want it serving", c.Unavailable, c.Available.String())
		}
	}
	if ev := nextEvent(t, rec); !strings.HasPrefix(ev, "Warning DeviceClassUnavailable device class nvme: volume group vgnvme not found") {
		t.Errorf("event %q, want the class unavailable", ev)
	}

	f.LVM.AddVGAndPool(fake.VG{Name: "vgnvme", Size: 16 * gib, Free: 8 * gib}, fake.Pool{VG: "vgnvme", Name: "pool1", Size: 8 * gib})
	testutil.Eventually(t, "Ready True", func() bool { c := ready(); return c != nil && c.Status == metav1.ConditionTrue })
	for _, c := range lvmNode(t, "late-vg-node").Status.DeviceClasses {
		if c.Unavailable != "" || c.Available.IsZero() {
			t.Errorf("%s after its VG was made: unavailable %q, available %s", c.Name, c.Unavailable, c.Available.String())
		}
	}
	// Idle now: the resync moves the gauge all the same.
	at := promtestutil.ToFloat64(synced)
	testutil.Eventually(t, "the sync gauge to move while idle", func() bool { return promtestutil.ToFloat64(synced) > at })
	if ev := nextEvent(t, rec); !strings.HasPrefix(ev, "Normal DeviceClassAvailable device class nvme: thin pool vgnvme/pool1 found") {
		t.Errorf("event %q, want the class available", ev)
	}
}

// nextEvent takes the recorder's next Event (recorded after the write).
func nextEvent(t *testing.T, rec *events.FakeRecorder) string {
	t.Helper()
	select {
	case ev := <-rec.Events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no Event")
		return ""
	}
}

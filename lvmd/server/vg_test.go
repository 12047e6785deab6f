package server

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// capacityRunner is testRunner with data in the pools and LVs in ssd's.
func capacityRunner() *fake.Runner {
	f := testRunner()
	f.Pools[0].DataPercent, f.Pools[0].MetadataPercent = 25, 10
	f.Pools[1].DataPercent, f.Pools[1].MetadataPercent = 50, 5
	f.LVs = []fake.LV{
		{VG: "vg0", Name: "a", Pool: "pool", Size: 4 * gib, Tags: []string{"thinlvm"}},
		{VG: "vg0", Name: "b", Pool: "pool", Origin: "a", Size: 2 * gib, Tags: []string{"thinlvm"}, Inactive: true, SkipActivation: true},
		// Not lvmd's, but its blocks count all the same.
		{VG: "vg0", Name: "foreign", Pool: "pool", Size: gib},
	}
	return f
}

var (
	// ssd: virtual room 8 x 2 - 7 - 1 spare = 8 GiB; real room
	// (8 - 2 used - 1 spare) x 2 = 10 GiB.
	ssdCapacity = &pb.DeviceClassCapacity{
		DeviceClass: "ssd", Type: "thin", VolumeGroup: "vg0", ThinPool: "pool", Default: true,
		VgSizeBytes: 20 * gib, VgFreeBytes: 10 * gib, ThinPoolSizeBytes: 8 * gib,
		DataPercent: 25, MetadataPercent: 10, DataUsedBytes: 2 * gib, VirtualBytes: 7 * gib,
		OverprovisionRatio: 2, AvailableBytes: 8 * gib, LvCount: 2, WhenFull: "error",
	}
	// hdd, autoextend on: the pool may grow by the VG's 3 GiB free. Virtual
	// room 7 x 1 - 0 = 7 GiB; real room (7 - 2 used) x 1 = 5 GiB.
	hddCapacity = &pb.DeviceClassCapacity{
		DeviceClass: "hdd", Type: "thin", VolumeGroup: "vg1", ThinPool: "tp",
		VgSizeBytes: 8 * gib, VgFreeBytes: 3 * gib, ThinPoolSizeBytes: 4 * gib,
		DataPercent: 50, MetadataPercent: 5, DataUsedBytes: 2 * gib,
		OverprovisionRatio: 1, AvailableBytes: 5 * gib, WhenFull: "queue",
	}
)

// withMetadata is c with the VG metadata area of f's VG as the fake holds
// it now (the default area).
func withMetadata(c *pb.DeviceClassCapacity, f *fake.Runner) *pb.DeviceClassCapacity {
	c = cloneCapacity(c)
	c.VgMetadataSizeBytes = fake.DefaultMetadataAreaSize
	for _, vg := range f.VGs {
		if vg.Name == c.VolumeGroup && vg.MetadataAreaSize != 0 {
			c.VgMetadataSizeBytes = vg.MetadataAreaSize
		}
	}
	c.VgMetadataFreeBytes = f.MetadataFree(c.VolumeGroup)
	if c.VgMetadataFreeBytes >= metadataReserveBytes {
		c.VgMetadataLvsLeft = uint32((c.VgMetadataFreeBytes - metadataReserveBytes) / metadataTypicalLVBytes)
	}
	return c
}

func diffCapacity(t *testing.T, want, got []*pb.DeviceClassCapacity) {
	t.Helper()
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("capacity (-want +got):\n%s", diff)
	}
}

func TestGetCapacity(t *testing.T) {
	overMark := func(c *pb.DeviceClassCapacity) *pb.DeviceClassCapacity {
		c = cloneCapacity(c)
		poolSize, data := float64(8*gib), 95.0
		c.DataPercent, c.DataUsedBytes, c.AvailableBytes, c.OverHighWatermark = data, uint64(poolSize*data/100), 0, true
		return c
	}
	noSpare := cloneCapacity(ssdCapacity)
	noSpare.AvailableBytes = 9 * gib // 8 x 2 - 7
	tests := []struct {
		name  string
		setup func(f *fake.Runner)
		spare uint64
		class string
		code  codes.Code
		want  []*pb.DeviceClassCapacity
	}{
		{name: "all", spare: 1, want: []*pb.DeviceClassCapacity{ssdCapacity, hddCapacity}},
		{name: "one device class", spare: 1, class: "hdd", want: []*pb.DeviceClassCapacity{hddCapacity}},
		{name: "no spare", class: "ssd", want: []*pb.DeviceClassCapacity{noSpare}},
		{
			name:  "over the high-water mark: nothing available",
			setup: func(f *fake.Runner) { f.Pools[0].DataPercent = 95 },
			spare: 1, class: "ssd",
			want: []*pb.DeviceClassCapacity{overMark(ssdCapacity)},
		},
		{
			name:  "out of data space",
			setup: func(f *fake.Runner) { f.Pools[0].DataPercent = 100 },
			spare: 1, class: "ssd",
			want: []*pb.DeviceClassCapacity{func() *pb.DeviceClassCapacity {
				c := overMark(ssdCapacity)
				c.DataPercent, c.DataUsedBytes, c.PoolHealth = 100, 8*gib, "OutOfDataSpace"
				return c
			}()},
		},
		{
			// lvm reports no use of an inactive pool; it offers nothing.
			name:  "pool deactivated by an administrator",
			setup: func(f *fake.Runner) { f.Pools[0].Inactive = true },
			spare: 1, class: "ssd",
			want: []*pb.DeviceClassCapacity{func() *pb.DeviceClassCapacity {
				c := cloneCapacity(ssdCapacity)
				c.DataPercent, c.MetadataPercent, c.DataUsedBytes, c.AvailableBytes = 0, 0, 0, 0
				return c
			}()},
		},
		{
			// 16 KiB: (16384-512)/2-512 = 7424 bytes a copy, less the VG,
			// its pool and three LVs leaves less than lvmd's reserve.
			name:  "VG metadata area full: nothing available",
			setup: func(f *fake.Runner) { f.VGs[0].MetadataAreaSize = 16 << 10 },
			spare: 1, class: "ssd",
			want: []*pb.DeviceClassCapacity{func() *pb.DeviceClassCapacity {
				c := cloneCapacity(ssdCapacity)
				c.AvailableBytes = 0
				return c
			}()},
		},
		{
			name:  "VG metadata area with room for a few LVs",
			setup: func(f *fake.Runner) { f.VGs[0].MetadataAreaSize = 32 << 10 },
			spare: 1, class: "ssd",
			want: []*pb.DeviceClassCapacity{ssdCapacity},
		},
		{name: "unknown device class", class: "nvme", code: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := capacityRunner()
			if tt.setup != nil {
				tt.setup(f)
			}
			cfg := testConfig()
			cfg.DeviceClasses[0].SpareGB = tt.spare
			e := newEnv(t, cfg, f, envOptions{})
			resp, err := e.vg.GetCapacity(t.Context(), &pb.GetCapacityRequest{DeviceClass: tt.class})
			wantCode(t, err, tt.code)
			var want []*pb.DeviceClassCapacity
			for _, c := range tt.want {
				want = append(want, withMetadata(c, f))
			}
			diffCapacity(t, want, resp.GetDeviceClasses())
			if ssd := resp.GetDeviceClasses(); tt.class == "ssd" && len(ssd) == 1 {
				if left, size := ssd[0].GetVgMetadataLvsLeft(), ssd[0].GetVgMetadataSizeBytes(); size == 16<<10 && left != 0 || size > 16<<10 && left == 0 {
					t.Errorf("%d LVs left in a metadata area of %d bytes", left, size)
				}
			}
			if tt.code == codes.OK && resp.GetGeneration() == 0 {
				t.Error("generation 0")
			}
		})
	}
}

// real use limits what a nearly written pool offers, whatever the ratio.
func TestGetCapacityRealUse(t *testing.T) {
	f := capacityRunner()
	f.Pools[0].DataPercent = 75 // 6 of 8 GiB written
	cfg := testConfig()
	cfg.DeviceClasses[0].SpareGB = 0
	cfg.DeviceClasses[0].OverprovisionRatio = 10
	e := newEnv(t, cfg, f, envOptions{})
	resp, err := e.vg.GetCapacity(t.Context(), &pb.GetCapacityRequest{DeviceClass: "ssd"})
	if err != nil {
		t.Fatal(err)
	}
	// Virtual room 8 x 10 - 7 = 73 GiB; real room (8 - 6) x 10 = 20 GiB.
	if got, want := resp.GetDeviceClasses()[0].GetAvailableBytes(), 20*gib; got != want {
		t.Errorf("available %d, want %d", got, want)
	}
}

func cloneCapacity(c *pb.DeviceClassCapacity) *pb.DeviceClassCapacity {
	return &pb.DeviceClassCapacity{
		DeviceClass: c.DeviceClass, Type: c.Type, VolumeGroup: c.VolumeGroup, ThinPool: c.ThinPool, Default: c.Default,
		VgSizeBytes: c.VgSizeBytes, VgFreeBytes: c.VgFreeBytes, ThinPoolSizeBytes: c.ThinPoolSizeBytes,
		DataPercent: c.DataPercent, MetadataPercent: c.MetadataPercent, DataUsedBytes: c.DataUsedBytes,
		VirtualBytes: c.VirtualBytes, OverprovisionRatio: c.OverprovisionRatio, AvailableBytes: c.AvailableBytes, LvCount: c.LvCount,
		OverHighWatermark: c.OverHighWatermark, PoolHealth: c.PoolHealth, WhenFull: c.WhenFull,
		VgMetadataSizeBytes: c.VgMetadataSizeBytes, VgMetadataFreeBytes: c.VgMetadataFreeBytes, VgMetadataLvsLeft: c.VgMetadataLvsLeft,
	}
}

// Mutations show in the capacity at once, before lvm is read again.
func TestGetCapacityFollowsMutations(t *testing.T) {
	cfg := testConfig()
	cfg.DeviceClasses[0].SpareGB = 1
	// No refresh but the one the test asks for: the amended view's VG
	// metadata room differs from lvm's.
	e := newEnv(t, cfg, capacityRunner(), envOptions{debounce: 1 << 40, maxStale: 1 << 40})
	capacity := func() (*pb.DeviceClassCapacity, uint64) {
		t.Helper()
		resp, err := e.vg.GetCapacity(t.Context(), &pb.GetCapacityRequest{DeviceClass: "ssd"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetDeviceClasses()[0], resp.GetGeneration()
	}
	c0, gen0 := capacity()
	if _, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "c", SizeBytes: gib}); err != nil {
		t.Fatal(err)
	}
	want := withMetadata(ssdCapacity, e.fake)
	want.VirtualBytes, want.AvailableBytes, want.LvCount = 8*gib, 7*gib, 3
	// Until lvm is read again, the VG's metadata room falls by lvmd's
	// estimate of the new LV's.
	want.VgMetadataFreeBytes = c0.GetVgMetadataFreeBytes() - metadataBytes("c", "", []string{"thinlvm"})
	want.VgMetadataLvsLeft = uint32((want.VgMetadataFreeBytes - metadataReserveBytes) / metadataTypicalLVBytes)
	got, gen1 := capacity()
	diffCapacity(t, []*pb.DeviceClassCapacity{want}, []*pb.DeviceClassCapacity{got})
	if gen1 <= gen0 {
		t.Errorf("generation %d after a mutation, was %d", gen1, gen0)
	}
	if _, err := e.lv.ResizeLV(t.Context(), &pb.ResizeLVRequest{Name: "c", SizeBytes: 2 * gib}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.lv.RemoveLV(t.Context(), &pb.RemoveLVRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	want.VirtualBytes, want.AvailableBytes, want.LvCount = 5*gib, 10*gib, 2 // b, c and foreign
	got, _ = capacity()
	diffCapacity(t, []*pb.DeviceClassCapacity{want}, []*pb.DeviceClassCapacity{got})
	// And the same once lvm has been read again, with lvm's metadata room.
	if err := e.d.store.refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	want = withMetadata(want, e.fake)
	got, _ = capacity()
	diffCapacity(t, []*pb.DeviceClassCapacity{want}, []*pb.DeviceClassCapacity{got})
}

// GetCapacity is served from the cached report: it never starts lvm.
func TestGetCapacityRunsNoLVM(t *testing.T) {
	e := newEnv(t, testConfig(), capacityRunner(), envOptions{})
	before := e.fake.Total()
	for range 100 {
		if _, err := e.vg.GetCapacity(t.Context(), &pb.GetCapacityRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.fake.Total() - before; got != 0 {
		t.Errorf("100 GetCapacity calls ran %d lvm commands: %q", got, e.fake.Calls()[before:])
	}
}

func TestWatch(t *testing.T) {
	e := newEnv(t, testConfig(), capacityRunner(), envOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	stream, err := e.vg.Watch(ctx, &pb.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	get, err := e.vg.GetCapacity(t.Context(), &pb.GetCapacityRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(get, first, protocmp.Transform()); diff != "" {
		t.Errorf("first report differs from GetCapacity (-get +watch):\n%s", diff)
	}
	if _, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "c", SizeBytes: gib}); err != nil {
		t.Fatal(err)
	}
	next, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := next.GetDeviceClasses()[0].GetLvCount(); got != 3 {
		t.Errorf("lv count %d after CreateLV, want 3", got)
	}
	if next.GetGeneration() <= first.GetGeneration() {
		t.Errorf("generation %d, then %d", first.GetGeneration(), next.GetGeneration())
	}
	// A new report that changes nothing is not sent: the next message is
	// the next change. The report read after CreateLV corrects lvmd's
	// estimate of the VG metadata room, a change: it is sent, unless the
	// watcher woke after it and sent it already.
	e.settle(t)
	if next.GetDeviceClasses()[0].GetVgMetadataFreeBytes() != e.fake.MetadataFree("vg0") {
		if next, err = stream.Recv(); err != nil {
			t.Fatal(err)
		}
		if got, want := next.GetDeviceClasses()[0].GetVgMetadataFreeBytes(), e.fake.MetadataFree("vg0"); got != want {
			t.Errorf("report after the refresh: VG metadata room %d, want lvm's %d", got, want)
		}
	}
	if _, err := e.lv.RemoveLV(t.Context(), &pb.RemoveLVRequest{Name: "c"}); err != nil {
		t.Fatal(err)
	}
	next, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := next.GetDeviceClasses()[0].GetLvCount(); got != 2 {
		t.Errorf("lv count %d after RemoveLV, want 2", got)
	}
	cancel()
	_, err = stream.Recv()
	wantCode(t, err, codes.Canceled)
	eventually(t, "the watcher to unsubscribe", func() bool {
		e.d.store.subsMu.Lock()
		defer e.d.store.subsMu.Unlock()
		return len(e.d.store.subs) == 0
	})
}

// lvmd stopping ends the watchers' streams with Unavailable, so that the
// gRPC server's graceful stop returns instead of waiting for the node
// agent to hang up (it waited out lvmd's 10 s limit on every stop).
func TestWatchEndsWhenLVMDStops(t *testing.T) {
	e := newEnv(t, testConfig(), capacityRunner(), envOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a stream lvmd leaves open ends here
	defer cancel()
	stream := e.watching(t, ctx)
	e.stop()
	_, err := stream.Recv()
	wantCode(t, err, codes.Unavailable)
	stopped := make(chan struct{})
	go func() { e.srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the server's graceful stop still waits after lvmd stopped")
	}
}

// Watchers share the store's reports: however many watch, lvm is read at
// most once per mutation (plus a few), and never for a watcher.
func TestWatchersRunNoLVM(t *testing.T) {
	e := newEnv(t, testConfig(), capacityRunner(), envOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	const watchers, creates = 3, 10
	reportsBefore, mutationsBefore := e.fake.Count("fullreport"), e.mutations()
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range watchers {
		stream, err := e.vg.Watch(ctx, &pb.WatchRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			// Read until the report shows every LV created.
			for {
				resp, err := stream.Recv()
				if err != nil {
					t.Errorf("watch: %v", err)
					return
				}
				if resp.GetDeviceClasses()[0].GetLvCount() == 2+creates {
					return
				}
			}
		})
	}
	if got := e.fake.Count("fullreport"); got != reportsBefore {
		t.Errorf("%d watchers ran %d reports", watchers, got-reportsBefore)
	}
	for i := range creates {
		if _, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: fmt.Sprintf("lv%d", i), SizeBytes: 64 * mib}); err != nil {
			t.Fatal(err)
		}
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the watchers did not see every LV")
	}
	e.settle(t)
	reports, mutations := e.fake.Count("fullreport")-reportsBefore, e.mutations()-mutationsBefore
	if mutations != creates {
		t.Errorf("%d mutations, want %d", mutations, creates)
	}
	if reports > mutations+2 {
		t.Errorf("%d reports for %d mutations with %d watchers", reports, mutations, watchers)
	}
	t.Logf("%d reports for %d mutations", reports, mutations)
}

func TestMetrics(t *testing.T) {
	cfg := testConfig()
	cfg.DeviceClasses[0].SpareGB = 1
	e := newEnv(t, cfg, capacityRunner(), envOptions{})
	_, err := e.lv.GetLV(t.Context(), &pb.GetLVRequest{Name: "nosuch"})
	wantCode(t, err, codes.NotFound)
	if _, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "c", SizeBytes: gib}); err != nil {
		t.Fatal(err)
	}
	m := e.d.metrics
	tests := []struct {
		name   string
		metric prometheus.Collector
		want   float64
	}{
		{"GetLV NotFound", m.rpcErrors.WithLabelValues("/thinlvm.lvmd.v1.LVService/GetLV", "NotFound"), 1},
		{"CreateLV errors", m.rpcErrors.WithLabelValues("/thinlvm.lvmd.v1.LVService/CreateLV", "NotFound"), 0},
		{"vg size", m.vgSize.WithLabelValues("ssd"), float64(20 * gib)},
		{"vg free", m.vgFree.WithLabelValues("hdd"), float64(3 * gib)},
		{"pool size", m.poolSize.WithLabelValues("ssd"), float64(8 * gib)},
		{"pool data", m.poolData.WithLabelValues("ssd"), 25},
		{"pool metadata", m.poolMeta.WithLabelValues("hdd"), 5},
		{"virtual", m.virtualBytes.WithLabelValues("ssd"), float64(8 * gib)},
		{"available", m.availableByte.WithLabelValues("ssd"), float64(7 * gib)},
		{"lvs", m.lvCount.WithLabelValues("ssd"), 3},
		{"under the high-water mark", m.overHighWater.WithLabelValues("ssd"), 0},
		{"pool ok", m.poolHealth.WithLabelValues("ssd", "ok"), 1},
		{"pool not full", m.poolHealth.WithLabelValues("ssd", "out_of_data_space"), 0},
		{"generation", m.generation, float64(e.d.store.current().generation)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := metricValue(t, tt.metric); got != tt.want {
				t.Errorf("%s = %g, want %g", tt.name, got, tt.want)
			}
		})
	}
}

// The pool's state metrics follow it as it fills past the high-water mark,
// runs out of data space and is grown again.
func TestPoolStateMetrics(t *testing.T) {
	e := newEnv(t, testConfig(), capacityRunner(), envOptions{})
	m := e.d.metrics
	type state struct {
		over                           float64
		ok, outOfData, readOnly, faild float64
	}
	read := func() state {
		return state{
			over: metricValue(t, m.overHighWater.WithLabelValues("ssd")),
			ok:   metricValue(t, m.poolHealth.WithLabelValues("ssd", "ok")), outOfData: metricValue(t, m.poolHealth.WithLabelValues("ssd", "out_of_data_space")),
			readOnly: metricValue(t, m.poolHealth.WithLabelValues("ssd", "metadata_read_only")), faild: metricValue(t, m.poolHealth.WithLabelValues("ssd", "failed")),
		}
	}
	tests := []struct {
		name       string
		data, meta float64
		readOnly   bool
		want       state
	}{
		{name: "under", data: 25, meta: 10, want: state{ok: 1}},
		{name: "data over 90%", data: 91, meta: 10, want: state{over: 1, ok: 1}},
		{name: "metadata over 80%", data: 25, meta: 81, want: state{over: 1, ok: 1}},
		{name: "data full", data: 100, meta: 10, want: state{over: 1, outOfData: 1}},
		{name: "metadata full: read-only", data: 50, meta: 100, readOnly: true, want: state{over: 1, readOnly: 1}},
		{name: "grown: under again", data: 40, meta: 10, want: state{ok: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.fake.SetPoolUsage("vg0", "pool", tt.data, tt.meta)
			e.fake.SetPoolReadOnly("vg0", "pool", tt.readOnly)
			if err := e.d.store.refresh(t.Context()); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, read(), cmp.AllowUnexported(state{})); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
		})
	}
}

// metricValue reads a gauge's or a counter's value.
func metricValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	if g := m.GetGauge(); g != nil {
		return g.GetValue()
	}
	return m.GetCounter().GetValue()
}

func TestRoundUp(t *testing.T) {
	const ext = 4 * mib
	tests := []struct {
		size, unit, want uint64
	}{
		{0, ext, 0},
		{1, ext, ext},
		{ext, ext, ext},
		{ext + 1, ext, 2 * ext},
		{5, 0, 5}, // no extent size known
		{math.MaxUint64 - ext + 1, ext, math.MaxUint64 - ext + 1},
		// Too large to round: saturated, never wrapped to 0.
		{math.MaxUint64 - ext + 2, ext, math.MaxUint64},
		{math.MaxUint64, ext, math.MaxUint64},
		{math.MaxUint64, 1, math.MaxUint64},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%d", tt.size, tt.unit), func(t *testing.T) {
			if got := roundUp(tt.size, tt.unit); got != tt.want {
				t.Errorf("roundUp(%d, %d) = %d, want %d", tt.size, tt.unit, got, tt.want)
			}
		})
	}
}

package lvmvm

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

func capacityOf(t *testing.T, class string) *pb.DeviceClassCapacity {
	t.Helper()
	resp, err := vgs.GetCapacity(testContext(t), &pb.GetCapacityRequest{DeviceClass: class})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetDeviceClasses()) != 1 {
		t.Fatalf("GetCapacity(%s) returned %d classes", class, len(resp.GetDeviceClasses()))
	}
	return resp.GetDeviceClasses()[0]
}

// eventually polls cond until it returns "" or the deadline passes; the
// report lvmd serves is refreshed in the background.
func eventually(t *testing.T, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, msg)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// lvmFacts reads what vgs and lvs say of a device class's VG and pool.
type lvmFacts struct {
	vgSize, vgFree, poolSize, virtual uint64
	data, meta                        string
	managed                           uint32
}

func factsOf(t *testing.T, vg, pool string) lvmFacts {
	t.Helper()
	ctx := testContext(t)
	out, err := testVM.Run(ctx, "lvm", "vgs", "--noheadings", "--units", "b", "--nosuffix", "--separator", "|", "-o", "vg_size,vg_free", vg)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Split(strings.TrimSpace(out), "|")
	var facts lvmFacts
	facts.vgSize, _ = strconv.ParseUint(f[0], 10, 64)
	facts.vgFree, _ = strconv.ParseUint(f[1], 10, 64)
	rows, err := testVM.LVS(ctx, vg, "lv_size,pool_lv,data_percent,metadata_percent,lv_tags")
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range rows {
		size, _ := strconv.ParseUint(r[0], 10, 64)
		switch {
		case name == pool:
			facts.poolSize, facts.data, facts.meta = size, r[2], r[3]
		case r[1] == pool:
			facts.virtual += size
			if strings.Contains(","+r[4]+",", ",thinlvm,") {
				facts.managed++
			}
		}
	}
	return facts
}

func pct(v float64) string { return fmt.Sprintf("%.2f", v) }

func TestCapacityMatchesLVM(t *testing.T) {
	ctx := testContext(t)
	for i, size := range []uint64{256 * mib, 1 * gib, 40 * mib} {
		if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: fmt.Sprintf("cap%d", i), SizeBytes: size}); err != nil {
			t.Fatal(err)
		}
	}
	writeRandom(t, ctx, "/dev/vg0/cap1", 100)
	// Served capacity converges to what lvm says (the write is seen at the
	// next refresh).
	eventually(t, 30*time.Second, func() string {
		want := factsOf(t, "vg0", "pool0")
		c := capacityOf(t, "ssd")
		got := lvmFacts{vgSize: c.GetVgSizeBytes(), vgFree: c.GetVgFreeBytes(), poolSize: c.GetThinPoolSizeBytes(),
			virtual: c.GetVirtualBytes(), data: pct(c.GetDataPercent()), meta: pct(c.GetMetadataPercent()), managed: c.GetLvCount()}
		if got != want {
			return fmt.Sprintf("lvmd says %+v, lvm says %+v", got, want)
		}
		return ""
	})
	c := capacityOf(t, "ssd")
	if c.GetDataPercent() == 0 {
		t.Error("data percent is 0 after writing 100 MiB")
	}
	// available = min(pool*ratio - virtual, (pool - used)*ratio) for class ssd.
	pool, used, ratio := float64(c.GetThinPoolSizeBytes()), float64(c.GetDataUsedBytes()), c.GetOverprovisionRatio()
	want := uint64(min(pool*ratio-float64(c.GetVirtualBytes()), (pool-used)*ratio))
	if c.GetAvailableBytes() != want {
		t.Errorf("available %d, want %d", c.GetAvailableBytes(), want)
	}
	for i := range 3 {
		if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: fmt.Sprintf("cap%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPoolExhaustion(t *testing.T) {
	ctx := testContext(t)
	avail := capacityOf(t, "small").GetAvailableBytes()
	// More than the overprovision ratio allows.
	_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "too-big", DeviceClass: "small", SizeBytes: avail + 4*mib})
	wantCode(t, err, codes.ResourceExhausted)

	// Real data use over the high-water mark (80%) refuses new LVs, whatever
	// the ratio says.
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "fill", DeviceClass: "small", SizeBytes: 60 * mib}); err != nil {
		t.Fatal(err)
	}
	writeRandom(t, ctx, "/dev/vgsmall/fill", 56)
	eventually(t, 30*time.Second, func() string {
		if c := capacityOf(t, "small"); c.GetDataPercent() <= 80 || c.GetAvailableBytes() != 0 {
			return fmt.Sprintf("capacity not yet over the high-water mark: %v", c)
		}
		return ""
	})
	_, err = lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "after-full", DeviceClass: "small", SizeBytes: 4 * mib})
	wantCode(t, err, codes.ResourceExhausted)
	for _, frag := range []string{"data 8", "metadata ", "high-water"} {
		if !strings.Contains(err.Error(), frag) {
			t.Errorf("error %q does not say %q", err, frag)
		}
	}
	if _, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "snap-full", DeviceClass: "small", SourceName: "fill"}); err == nil {
		t.Error("CreateSnapshot on a full pool succeeded")
	}
	_, err = lvs.ResizeLV(ctx, &pb.ResizeLVRequest{Name: "fill", DeviceClass: "small", SizeBytes: 64 * mib})
	wantCode(t, err, codes.ResourceExhausted)

	got := lvsOf(t, ctx, "vgsmall")
	for _, name := range []string{"too-big", "after-full", "snap-full"} {
		if _, ok := got[name]; ok {
			t.Errorf("refused create left lv %s behind", name)
		}
	}
	if got["fill"].size != 60*mib {
		t.Errorf("refused resize changed fill to %d bytes", got["fill"].size)
	}
	if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: "fill", DeviceClass: "small"}); err != nil {
		t.Fatal(err)
	}
}

func TestPoolAutoExtend(t *testing.T) {
	ctx := testContext(t)
	before := capacityOf(t, "grow")
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "grower", DeviceClass: "grow", SizeBytes: 60 * mib}); err != nil {
		t.Fatal(err)
	}
	writeRandom(t, ctx, "/dev/vggrow/grower", 48) // 75% of the 64 MiB pool, over the 60% threshold
	eventually(t, 60*time.Second, func() string {
		if c := capacityOf(t, "grow"); c.GetThinPoolSizeBytes() <= before.GetThinPoolSizeBytes() {
			return fmt.Sprintf("pool not extended: %v", c)
		}
		return ""
	})
	facts := factsOf(t, "vggrow", "pool")
	if facts.poolSize < 2*before.GetThinPoolSizeBytes() {
		t.Errorf("lvs says the pool is %d bytes, want >= %d (percent: 100)", facts.poolSize, 2*before.GetThinPoolSizeBytes())
	}
	if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: "grower", DeviceClass: "grow"}); err != nil {
		t.Fatal(err)
	}
}

package lvmvm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// poolMetric returns a thinlvm_lvmd_thinpool_* gauge of a device class;
// labels are further label=value pairs the series must carry.
func poolMetric(t *testing.T, ctx context.Context, name, class string, labels ...string) float64 {
	t.Helper()
	fams, err := testVM.LVMDMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := fams[name]
	if !ok {
		t.Fatalf("lvmd serves no %s", name)
	}
	want := append([]string{"device_class=" + class}, labels...)
	for _, m := range f.GetMetric() {
		have := map[string]bool{}
		for _, l := range m.GetLabel() {
			have[l.GetName()+"="+l.GetValue()] = true
		}
		match := true
		for _, w := range want {
			match = match && have[w]
		}
		if match {
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s%v", name, want)
	return 0
}

// ddZero writes n MiB of zeros to a guest device with O_DIRECT and returns
// the outcome; ctx bounds the wait.
func ddZero(t *testing.T, ctx context.Context, dev string, n int) (*ExecResult, time.Duration) {
	t.Helper()
	start := time.Now()
	res, err := testVM.Exec(ctx, "dd", "if=/dev/zero", "of="+dev, "bs=1M", fmt.Sprintf("count=%d", n), "oflag=direct", "status=none")
	if err != nil {
		t.Fatalf("dd to %s did not end (a write that hangs on the full pool?): %v", dev, err)
	}
	return res, time.Since(start)
}

// A thin pool that fills from inside a volume: the writer gets an error at
// once (lvmd set errorwhenfull on the pool lvm2 made with "queue"), data
// already written stays readable, lvmd reports the pool out of data space
// and refuses new volumes, and once the administrator grows the VG and the
// pool the same lvmd serves again and the volume takes writes.
func TestPoolDataFull(t *testing.T) {
	ctx := testContext(t)
	eventually(t, 30*time.Second, func() string {
		if c := capacityOf(t, "full"); c.GetWhenFull() != "error" {
			return fmt.Sprintf("lvmd has not set errorwhenfull on vgfull/pool: %v", c)
		}
		return ""
	})
	for _, lv := range []struct {
		name string
		size uint64
	}{{"keep", 16 * mib}, {"filler", 128 * mib}} {
		if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: lv.name, DeviceClass: "full", SizeBytes: lv.size}); err != nil {
			t.Fatal(err)
		}
	}
	writeRandom(t, ctx, "/dev/vgfull/keep", 8)
	sum := checksum(t, ctx, "/dev/vgfull/keep", 8)

	// Twice the pool's room: dd fails with ENOSPC well before dm-thin's
	// 60 s no_space_timeout would have ended a queued write.
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	res, took := ddZero(t, dctx, "/dev/vgfull/filler", 128)
	cancel()
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "No space left on device") {
		t.Fatalf("dd past the full pool: exit %d, stderr %q; want No space left on device", res.ExitCode, res.Stderr)
	}
	t.Logf("dd of 128 MiB into the 64 MiB pool failed after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(string(res.Stderr)))
	if got := checksum(t, ctx, "/dev/vgfull/keep", 8); got != sum {
		t.Errorf("data written before the pool filled reads back as %s, want %s", got, sum)
	}

	eventually(t, 30*time.Second, func() string {
		c := capacityOf(t, "full")
		if c.GetDataPercent() != 100 || c.GetPoolHealth() != "OutOfDataSpace" || !c.GetOverHighWatermark() || c.GetAvailableBytes() != 0 {
			return fmt.Sprintf("lvmd does not report the pool full: %v", c)
		}
		return ""
	})
	if got := poolMetric(t, ctx, "thinlvm_lvmd_thinpool_health", "full", "state=out_of_data_space"); got != 1 {
		t.Errorf("thinpool_health{state=out_of_data_space} = %g, want 1", got)
	}
	if got := poolMetric(t, ctx, "thinlvm_lvmd_thinpool_over_high_watermark", "full"); got != 1 {
		t.Errorf("thinpool_over_high_watermark = %g, want 1", got)
	}
	_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "refused", DeviceClass: "full", SizeBytes: 4 * mib})
	wantCode(t, err, codes.ResourceExhausted)

	// The administrator adds a disk and grows the pool; lvmd runs on.
	for _, argv := range [][]string{
		{"lvm", "pvcreate", "--yes", "/dev/vdf"},
		{"lvm", "vgextend", "vgfull", "/dev/vdf"},
		{"lvm", "lvextend", "--size", "+192M", "vgfull/pool"},
	} {
		if _, err := testVM.Run(ctx, argv...); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	eventually(t, 30*time.Second, func() string {
		c := capacityOf(t, "full")
		if c.GetPoolHealth() != "" || c.GetOverHighWatermark() || c.GetThinPoolSizeBytes() != 256*mib {
			return fmt.Sprintf("lvmd does not see the grown pool: %v", c)
		}
		return ""
	})
	t.Logf("lvmd saw the grown pool %v after lvextend", time.Since(start).Round(time.Millisecond))
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "after-grow", DeviceClass: "full", SizeBytes: 4 * mib}); err != nil {
		t.Fatalf("CreateLV after the pool grew: %v", err)
	}
	if res, _ := ddZero(t, ctx, "/dev/vgfull/filler", 128); res.ExitCode != 0 {
		t.Errorf("dd after the pool grew: exit %d: %s", res.ExitCode, res.Stderr)
	}
	if got := checksum(t, ctx, "/dev/vgfull/keep", 8); got != sum {
		t.Errorf("kept data reads back as %s after the pool grew, want %s", got, sum)
	}
	for _, name := range []string{"keep", "filler", "after-grow"} {
		if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name, DeviceClass: "full"}); err != nil {
			t.Fatal(err)
		}
	}
}

// With autoextend and room in the VG, lvmd lets writes to a full pool queue
// and grows the pool at its next refresh: a burst of four times the pool's
// size completes without an error.
func TestPoolAutoExtendWriteBurst(t *testing.T) {
	ctx := testContext(t)
	eventually(t, 30*time.Second, func() string {
		if c := capacityOf(t, "burst"); c.GetWhenFull() != "queue" {
			return fmt.Sprintf("lvmd has not let vgburst/pool queue: %v", c)
		}
		return ""
	})
	before := capacityOf(t, "burst").GetThinPoolSizeBytes()
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "burst", DeviceClass: "burst", SizeBytes: 512 * mib}); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	res, took := ddZero(t, dctx, "/dev/vgburst/burst", 256)
	cancel()
	if res.ExitCode != 0 {
		t.Fatalf("a 256 MiB burst into a %d MiB pool with autoextend: exit %d: %s", before/mib, res.ExitCode, res.Stderr)
	}
	facts := factsOf(t, "vgburst", "pool")
	t.Logf("256 MiB written in %v; the pool grew from %d to %d MiB (data %s%%)", took.Round(time.Millisecond), before/mib, facts.poolSize/mib, facts.data)
	if facts.poolSize < 256*mib {
		t.Errorf("pool is %d bytes after the burst, want >= %d", facts.poolSize, 256*mib)
	}
	if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: "burst", DeviceClass: "burst"}); err != nil {
		t.Fatal(err)
	}
}

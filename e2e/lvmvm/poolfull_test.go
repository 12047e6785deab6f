package lvmvm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// poolMetric returns a thinlvm_lvmd_thinpool_* gauge of a device class of
// the suite's lvmd; labels are further label=value pairs the series must
// carry.
func poolMetric(t *testing.T, ctx context.Context, name, class string, labels ...string) float64 {
	t.Helper()
	fams, err := testVM.LVMDMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return classGauge(t, fams, name, class, labels...)
}

// classGauge returns a gauge of a device class from scraped metrics;
// labels are further label=value pairs the series must carry.
func classGauge(t *testing.T, fams map[string]*dto.MetricFamily, name, class string, labels ...string) float64 {
	t.Helper()
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

// writeEvery writes one 64 KiB chunk of 0x5a every stride bytes of dev's
// first size bytes, with O_DIRECT, in one xfs_io process; ctx bounds the
// wait.
func writeEvery(t *testing.T, ctx context.Context, dev string, size, stride uint64) (*ExecResult, time.Duration) {
	t.Helper()
	argv := []string{"xfs_io", "-d"}
	for off := uint64(0); off < size; off += stride {
		argv = append(argv, "-c", fmt.Sprintf("pwrite -q -S 0x5a -b 64k %d 64k", off))
	}
	argv = append(argv, dev)
	start := time.Now()
	res, err := testVM.Exec(ctx, argv...)
	if err != nil {
		t.Fatalf("xfs_io to %s did not end (a write that hangs on the pool?): %v", dev, err)
	}
	return res, time.Since(start)
}

// A thin pool whose metadata fills: the kernel switches the pool to
// read-only, writers that need a new mapping get EIO at once, data already
// written stays readable, lvmd reports the pool MetadataReadOnly and refuses
// new volumes, and growing the metadata (no repair, no restart) puts the
// pool back in write mode.
//
// vgmeta/pool has the smallest metadata lvm makes, 2 MiB (512 blocks of 4
// KiB), and 64 KiB chunks. Mappings alone would take ~120,000 chunks to fill
// it; snapshots fill it fast: a 1 GiB origin written densely has 16,384
// mappings in ~70 btree leaves its snapshots share, and a write into a
// snapshot copies the leaf it touches (and, from the third sharer on, moves
// the leaf's data blocks' reference counts into a btree of their own). So
// each snapshot is written one chunk every 4 MiB, 256 writes that copy every
// leaf (~240 mappings each).
func TestPoolMetadataFull(t *testing.T) {
	ctx := testContext(t)
	eventually(t, 30*time.Second, func() string {
		if c := capacityOf(t, "meta"); c.GetWhenFull() != "error" {
			return fmt.Sprintf("lvmd has not set errorwhenfull on vgmeta/pool: %v", c)
		}
		return ""
	})
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "origin", DeviceClass: "meta", SizeBytes: 1024 * mib}); err != nil {
		t.Fatal(err)
	}
	if res, _ := ddZero(t, ctx, "/dev/vgmeta/origin", 1024); res.ExitCode != 0 {
		t.Fatalf("dd to the origin: exit %d: %s", res.ExitCode, res.Stderr)
	}
	writeRandom(t, ctx, "/dev/vgmeta/origin", 8)
	sum := checksum(t, ctx, "/dev/vgmeta/origin", 8)
	t.Logf("origin of 1 GiB written: metadata %s%%", factsOf(t, "vgmeta", "pool").meta)
	// Made while the metadata is under its high-water mark; they share all
	// of the origin's mappings and cost nothing yet.
	const snaps = 8
	for i := range snaps {
		if _, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: fmt.Sprintf("snap%d", i), DeviceClass: "meta", SourceName: "origin"}); err != nil {
			t.Fatal(err)
		}
	}

	var (
		res     *ExecResult
		took    time.Duration
		full    = -1
		snapSum string
	)
	for i := range snaps {
		// Well under dm-thin's 60 s no_space_timeout.
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		res, took = writeEvery(t, wctx, fmt.Sprintf("/dev/vgmeta/snap%d", i), 1024*mib, 4*mib)
		cancel()
		if res.ExitCode != 0 {
			full = i
			break
		}
		t.Logf("snap%d written (256 chunks) in %v: metadata %s%%", i, took.Round(time.Millisecond), factsOf(t, "vgmeta", "pool").meta)
		if i == 0 {
			snapSum = checksum(t, ctx, "/dev/vgmeta/snap0", 8)
		}
	}
	if full < 0 {
		t.Fatalf("%d snapshots written without filling the metadata: %v", snaps, factsOf(t, "vgmeta", "pool"))
	}
	if !strings.Contains(string(res.Stderr), "Input/output error") {
		t.Fatalf("xfs_io into snap%d: exit %d, stderr %q; want Input/output error", full, res.ExitCode, res.Stderr)
	}
	t.Logf("writes into snap%d failed (%d of 256 with EIO) and xfs_io ended after %v", full,
		strings.Count(string(res.Stderr), "Input/output error"), took.Round(time.Millisecond))
	rows, err := testVM.LVS(ctx, "vgmeta/pool", "lv_attr,lv_health_status,metadata_percent")
	if err != nil {
		t.Fatal(err)
	}
	if r := rows["pool"]; len(r) != 3 || r[0] != "twi-aotzM-" || r[1] != "metadata_read_only" || r[2] != "100.00" {
		t.Errorf("lvs of the pool with full metadata: %q, want twi-aotzM-, metadata_read_only, 100.00", r)
	}
	status, err := testVM.Run(ctx, "dmsetup", "status", "vgmeta-pool-tpool")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dmsetup status: %s", strings.TrimSpace(status))
	// <transaction> <used>/<total> metadata, data, <held root> <mode> ...
	// <needs_check>: the pool is read-only, its metadata all used, and it
	// does not need a check.
	if f := strings.Fields(status); len(f) < 11 || f[4] != "512/512" || f[7] != "ro" || f[10] != "-" {
		t.Errorf("dmsetup status %q: want 512/512 metadata blocks, ro, no needs_check", status)
	}
	if got := checksum(t, ctx, "/dev/vgmeta/origin", 8); got != sum {
		t.Errorf("the origin reads back as %s with full metadata, want %s", got, sum)
	}
	if full > 0 {
		if got := checksum(t, ctx, "/dev/vgmeta/snap0", 8); got != snapSum {
			t.Errorf("snap0 reads back as %s with full metadata, want %s", got, snapSum)
		}
	}

	eventually(t, 30*time.Second, func() string {
		c := capacityOf(t, "meta")
		if c.GetMetadataPercent() != 100 || c.GetPoolHealth() != "MetadataReadOnly" || !c.GetOverHighWatermark() || c.GetAvailableBytes() != 0 {
			return fmt.Sprintf("lvmd does not report the metadata full: %v", c)
		}
		return ""
	})
	if got := poolMetric(t, ctx, "thinlvm_lvmd_thinpool_health", "meta", "state=metadata_read_only"); got != 1 {
		t.Errorf("thinpool_health{state=metadata_read_only} = %g, want 1", got)
	}
	_, err = lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "refused", DeviceClass: "meta", SizeBytes: 4 * mib})
	wantCode(t, err, codes.ResourceExhausted)
	t.Logf("CreateLV with full metadata: %v", err)

	// The administrator grows the metadata; the pool is not failed and needs
	// no repair. lvmd runs on.
	start := time.Now()
	if _, err := testVM.Run(ctx, "lvm", "lvextend", "--poolmetadatasize", "+8M", "vgmeta/pool"); err != nil {
		t.Fatal(err)
	}
	extended := time.Since(start)
	eventually(t, 30*time.Second, func() string {
		c := capacityOf(t, "meta")
		if c.GetPoolHealth() != "" || c.GetOverHighWatermark() || c.GetMetadataPercent() >= 50 {
			return fmt.Sprintf("lvmd does not see the grown metadata: %v", c)
		}
		return ""
	})
	t.Logf("lvextend --poolmetadatasize +8M took %v; lvmd reported the pool healthy %v after it began (metadata %s%%)",
		extended.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), factsOf(t, "vgmeta", "pool").meta)
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "after-grow", DeviceClass: "meta", SizeBytes: 4 * mib}); err != nil {
		t.Fatalf("CreateLV after the metadata grew: %v", err)
	}
	if res, _ := writeEvery(t, ctx, fmt.Sprintf("/dev/vgmeta/snap%d", full), 1024*mib, 4*mib); res.ExitCode != 0 {
		t.Errorf("writes into snap%d after the metadata grew: exit %d: %s", full, res.ExitCode, res.Stderr)
	}
	if got := checksum(t, ctx, "/dev/vgmeta/origin", 8); got != sum {
		t.Errorf("the origin reads back as %s after the metadata grew, want %s", got, sum)
	}
	names := []string{"after-grow", "origin"}
	for i := range snaps {
		names = append(names, fmt.Sprintf("snap%d", i))
	}
	for _, name := range names {
		if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name, DeviceClass: "meta"}); err != nil {
			t.Fatal(err)
		}
	}
}

// The repair an administrator runs on a pool the kernel failed or marked
// needs_check, here on a healthy one: with the pool and its volumes
// deactivated, lvmd offers nothing and refuses new volumes (lvcreate would
// activate the pool, and lvconvert --repair refuse it); lvconvert --repair
// keeps the old metadata as pool_meta0; once the pool is active again the
// volume reads back and lvmd, never restarted, serves again.
func TestPoolRepair(t *testing.T) {
	ctx := testContext(t)
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "repaired", DeviceClass: "meta", SizeBytes: 64 * mib}); err != nil {
		t.Fatal(err)
	}
	writeRandom(t, ctx, "/dev/vgmeta/repaired", 16)
	sum := checksum(t, ctx, "/dev/vgmeta/repaired", 16)
	for _, argv := range [][]string{
		{"lvm", "lvchange", "--activate", "n", "vgmeta/repaired"},
		{"lvm", "lvchange", "--activate", "n", "vgmeta/pool"},
	} {
		if _, err := testVM.Run(ctx, argv...); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, func() string {
		if c := capacityOf(t, "meta"); c.GetAvailableBytes() != 0 || c.GetDataPercent() != 0 {
			return fmt.Sprintf("lvmd still offers the inactive pool: %v", c)
		}
		return ""
	})
	_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "refused", DeviceClass: "meta", SizeBytes: 4 * mib})
	wantCode(t, err, codes.ResourceExhausted)
	if !strings.Contains(err.Error(), "not active") {
		t.Errorf("CreateLV on the inactive pool: %v, want it to say the pool is not active", err)
	}
	start := time.Now()
	out, err := testVM.Run(ctx, "lvm", "lvconvert", "--yes", "--repair", "vgmeta/pool")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lvconvert --repair took %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
	for _, argv := range [][]string{
		{"lvm", "lvchange", "--activate", "y", "vgmeta/pool"},
		{"lvm", "lvchange", "--activate", "y", "vgmeta/repaired"},
		{"lvm", "lvremove", "--yes", "vgmeta/pool_meta0"},
	} {
		if _, err := testVM.Run(ctx, argv...); err != nil {
			t.Fatal(err)
		}
	}
	if got := checksum(t, ctx, "/dev/vgmeta/repaired", 16); got != sum {
		t.Errorf("the volume reads back as %s after the repair, want %s", got, sum)
	}
	eventually(t, 30*time.Second, func() string {
		if c := capacityOf(t, "meta"); c.GetAvailableBytes() == 0 || c.GetPoolHealth() != "" {
			return fmt.Sprintf("lvmd does not offer the repaired pool: %v", c)
		}
		return ""
	})
	t.Logf("lvmd offered the pool again %v after the repair began", time.Since(start).Round(time.Millisecond))
	for _, name := range []string{"after-repair", "repaired"} {
		if name == "after-repair" {
			if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: name, DeviceClass: "meta", SizeBytes: 4 * mib}); err != nil {
				t.Fatalf("CreateLV after the repair: %v", err)
			}
		}
		if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name, DeviceClass: "meta"}); err != nil {
			t.Fatal(err)
		}
	}
}

package lvmvm

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

func mountCap(fs string, mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
}

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
}

const rwo = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER

func publish(t *testing.T, ctx context.Context, id, target string, c *csi.VolumeCapability, ro bool) {
	t.Helper()
	if _, err := csiNode.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: c, Readonly: ro}); err != nil {
		t.Fatalf("publish %s at %s: %v", id, target, err)
	}
}

func unpublish(t *testing.T, ctx context.Context, id, target string) {
	t.Helper()
	if _, err := csiNode.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatalf("unpublish %s: %v", id, err)
	}
}

func guest(t *testing.T, ctx context.Context, script string) string {
	t.Helper()
	out, err := testVM.Run(ctx, "bash", "-c", script)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

func mounted(t *testing.T, ctx context.Context, target string) bool {
	t.Helper()
	return strings.Contains(guest(t, ctx, "cat /proc/mounts"), " "+target+" ")
}

func statsBytes(t *testing.T, ctx context.Context, id, path string) (total int64, inodes int64) {
	t.Helper()
	st, err := csiNode.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: path})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range st.GetUsage() {
		switch u.GetUnit() {
		case csi.VolumeUsage_BYTES:
			total = u.GetTotal()
		case csi.VolumeUsage_INODES:
			inodes = u.GetTotal()
		}
	}
	return total, inodes
}

func TestCSINodeInfo(t *testing.T) {
	ctx := testContext(t)
	info, err := csiNode.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetNodeId() != "lvmvm" || info.GetAccessibleTopology().GetSegments()[thinlvmv1.TopologyKey] != "lvmvm" {
		t.Errorf("NodeGetInfo = %v", info)
	}
	caps, err := csiNode.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range caps.GetCapabilities() {
		got = append(got, c.GetRpc().GetType().String())
	}
	for _, want := range []string{"EXPAND_VOLUME", "GET_VOLUME_STATS", "GET_VOLUME_HEALTH"} {
		if !strings.Contains(strings.Join(got, ","), want) {
			t.Errorf("capabilities %v lack %s", got, want)
		}
	}
}

func TestCSIFilesystemPublishExpand(t *testing.T) {
	for _, fs := range []string{"ext4", "xfs"} {
		t.Run(fs, func(t *testing.T) {
			ctx := testContext(t)
			id, target := "csi-"+fs, "/mnt/pub-"+fs
			if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: id, SizeBytes: 320 * mib}); err != nil {
				t.Fatal(err)
			}
			defer lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: id})
			publish(t, ctx, id, target, mountCap(fs, rwo), false)
			publish(t, ctx, id, target, mountCap(fs, rwo), false) // idempotent
			if got := guest(t, ctx, "grep ' /mnt/pub-"+fs+" ' /proc/mounts | cut -d' ' -f3"); got != fs {
				t.Fatalf("target mounted as %q, want %s", got, fs)
			}
			guest(t, ctx, "echo hello-"+fs+" > "+target+"/file && sync")
			total, inodes := statsBytes(t, ctx, id, target)
			if total < 200*int64(mib) || total > 320*int64(mib) || inodes == 0 {
				t.Errorf("stats: %d bytes, %d inodes", total, inodes)
			}

			unpublish(t, ctx, id, target)
			unpublish(t, ctx, id, target) // idempotent
			if mounted(t, ctx, target) {
				t.Fatal("still mounted after unpublish")
			}
			publish(t, ctx, id, target, mountCap(fs, rwo), false)
			if got := guest(t, ctx, "cat "+target+"/file"); got != "hello-"+fs {
				t.Errorf("after republish the file reads %q", got)
			}

			// Online expansion: grow the LV, then the mounted filesystem.
			if _, err := lvs.ResizeLV(ctx, &pb.ResizeLVRequest{Name: id, SizeBytes: 640 * mib}); err != nil {
				t.Fatal(err)
			}
			resp, err := csiNode.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target,
				CapacityRange: &csi.CapacityRange{RequiredBytes: int64(640 * mib)}, VolumeCapability: mountCap(fs, rwo)})
			if err != nil {
				t.Fatal(err)
			}
			grown, _ := statsBytes(t, ctx, id, target)
			if resp.GetCapacityBytes() != int64(640*mib) || grown < total+250*int64(mib) {
				t.Errorf("after expand: capacity %d, filesystem %d bytes (was %d)", resp.GetCapacityBytes(), grown, total)
			}
			df := guest(t, ctx, "df -k "+target+" | tail -1")
			t.Logf("df after online grow: %s", df)
			if got := guest(t, ctx, "cat "+target+"/file"); got != "hello-"+fs {
				t.Errorf("after expand the file reads %q", got)
			}
			unpublish(t, ctx, id, target)
		})
	}
}

func TestCSIBlockPublish(t *testing.T) {
	ctx := testContext(t)
	id, target := "csi-blk", "/mnt/blk/dev"
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: id, SizeBytes: 64 * mib}); err != nil {
		t.Fatal(err)
	}
	defer lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: id})
	publish(t, ctx, id, target, blockCap(), false)
	writeRandom(t, ctx, target, 8)
	sum := checksum(t, ctx, target, 8)
	if lvSum := checksum(t, ctx, "/dev/vg0/"+id, 8); lvSum != sum {
		t.Fatal("the published block target is not the LV")
	}
	if total, _ := statsBytes(t, ctx, id, target); total != int64(64*mib) {
		t.Errorf("block stats %d bytes, want %d", total, 64*mib)
	}
	unpublish(t, ctx, id, target)
	if mounted(t, ctx, target) {
		t.Fatal("still bind-mounted after unpublish")
	}
	publish(t, ctx, id, target, blockCap(), false)
	if got := checksum(t, ctx, target, 8); got != sum {
		t.Error("data changed across unpublish/publish")
	}
	// Expansion of a Block volume needs no node work; the device grows.
	if _, err := lvs.ResizeLV(ctx, &pb.ResizeLVRequest{Name: id, SizeBytes: 128 * mib}); err != nil {
		t.Fatal(err)
	}
	resp, err := csiNode.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target, VolumeCapability: blockCap()})
	if err != nil || resp.GetCapacityBytes() != int64(128*mib) {
		t.Errorf("expand block: %v %v", resp, err)
	}
	if got := guest(t, ctx, "blockdev --getsize64 "+target); got != fmt.Sprint(128*mib) {
		t.Errorf("published device is %s bytes after growth", got)
	}
	unpublish(t, ctx, id, target)
}

// A clone larger than its source (as a VM disk from a golden base is) gets
// its filesystem grown on publish; two xfs snapshots of one origin mount side
// by side; a read-only publish refuses writes.
func TestCSIClonesAndReadOnly(t *testing.T) {
	ctx := testContext(t)
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "csi-src", SizeBytes: 320 * mib}); err != nil {
		t.Fatal(err)
	}
	defer lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: "csi-src"})
	publish(t, ctx, "csi-src", "/mnt/src", mountCap("xfs", rwo), false)
	guest(t, ctx, "echo base > /mnt/src/os-release && sync")
	unpublish(t, ctx, "csi-src", "/mnt/src")
	for _, name := range []string{"csi-clone1", "csi-clone2"} {
		if _, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: name, SourceName: "csi-src", SizeBytes: gib}); err != nil {
			t.Fatal(err)
		}
		defer lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name})
		publish(t, ctx, name, "/mnt/"+name, mountCap("xfs", rwo), false)
		defer unpublish(t, ctx, name, "/mnt/"+name)
	}
	for _, name := range []string{"csi-clone1", "csi-clone2"} {
		if got := guest(t, ctx, "cat /mnt/"+name+"/os-release"); got != "base" {
			t.Errorf("%s reads %q", name, got)
		}
		if total, _ := statsBytes(t, ctx, name, "/mnt/"+name); total < 900*int64(mib) {
			t.Errorf("%s filesystem is %d bytes: not grown to its 1 GiB LV", name, total)
		}
	}
	guest(t, ctx, "echo vm1 > /mnt/csi-clone1/hostname && sync")
	if out, _ := testVM.Exec(ctx, "cat", "/mnt/csi-clone2/hostname"); out.ExitCode == 0 {
		t.Error("a write in one clone shows in the other")
	}

	publish(t, ctx, "csi-src", "/mnt/src-ro", mountCap("xfs", csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY), false)
	defer unpublish(t, ctx, "csi-src", "/mnt/src-ro")
	if res, err := testVM.Exec(ctx, "touch", "/mnt/src-ro/x"); err != nil || res.ExitCode == 0 {
		t.Errorf("write to a read-only publish: %v %v", res, err)
	}
}

func TestCSIErrorsAndHealth(t *testing.T) {
	ctx := testContext(t)
	tests := []struct {
		name string
		req  *csi.NodePublishVolumeRequest
		want codes.Code
	}{
		{"no volume id", &csi.NodePublishVolumeRequest{TargetPath: "/mnt/x", VolumeCapability: mountCap("ext4", rwo)}, codes.InvalidArgument},
		{"no target", &csi.NodePublishVolumeRequest{VolumeId: "x", VolumeCapability: mountCap("ext4", rwo)}, codes.InvalidArgument},
		{"no capability", &csi.NodePublishVolumeRequest{VolumeId: "x", TargetPath: "/mnt/x"}, codes.InvalidArgument},
		{"unsupported fs", &csi.NodePublishVolumeRequest{VolumeId: "x", TargetPath: "/mnt/x", VolumeCapability: mountCap("btrfs", rwo)}, codes.InvalidArgument},
		{"multi-node access", &csi.NodePublishVolumeRequest{VolumeId: "x", TargetPath: "/mnt/x",
			VolumeCapability: mountCap("ext4", csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}, codes.InvalidArgument},
		{"unknown volume", &csi.NodePublishVolumeRequest{VolumeId: "no-such-volume", TargetPath: "/mnt/x", VolumeCapability: mountCap("ext4", rwo)}, codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := csiNode.NodePublishVolume(ctx, tt.req)
			wantCode(t, err, tt.want)
		})
	}
	_, err := csiNode.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "x", VolumePath: "/mnt/never"})
	wantCode(t, err, codes.NotFound)

	// A published volume whose LV disappears reports INACCESSIBLE.
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "csi-gone", SizeBytes: 16 * mib}); err != nil {
		t.Fatal(err)
	}
	health, err := csiNode.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "csi-gone"})
	if err != nil || len(health.GetVolumeHealth().GetHealthStatuses()) != 0 {
		t.Fatalf("health of a present LV: %v %v", health, err)
	}
	if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: "csi-gone"}); err != nil {
		t.Fatal(err)
	}
	health, err = csiNode.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "csi-gone"})
	if err != nil {
		t.Fatal(err)
	}
	st := health.GetVolumeHealth().GetHealthStatuses()
	if len(st) != 1 || st[0].GetStatus() != csi.VolumeHealthErrorType_INACCESSIBLE {
		t.Errorf("health of a removed LV: %v", health)
	}
}

// A fresh volume published read-only is formatted first, then mounted
// read-only (mount-utils refuses to format for a read-only mount, and the
// kubelet would retry an INTERNAL error for good).
func TestCSIReadOnlyFreshVolume(t *testing.T) {
	ctx := testContext(t)
	for _, fs := range []string{"ext4", "xfs"} {
		name := "csi-ro-fresh-" + fs
		if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: name, SizeBytes: 320 * mib}); err != nil {
			t.Fatal(err)
		}
		defer lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name})
		target := "/mnt/" + name
		publish(t, ctx, name, target, mountCap(fs, rwo), true)
		if !mounted(t, ctx, target) {
			t.Errorf("%s: not mounted", fs)
		}
		if res, err := testVM.Exec(ctx, "touch", target+"/x"); err != nil || res.ExitCode == 0 {
			t.Errorf("%s: write to a read-only publish: %v %v", fs, res, err)
		}
		unpublish(t, ctx, name, target)
	}
}

// A target already taken by another volume, or by the same volume with
// the other read-only flag, is ALREADY_EXISTS; NodeUnpublishVolume takes
// down only the volume it is asked about.
func TestCSIPublishConflicts(t *testing.T) {
	ctx := testContext(t)
	for _, name := range []string{"csi-conf-a", "csi-conf-b"} {
		if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: name, SizeBytes: 64 * mib}); err != nil {
			t.Fatal(err)
		}
		defer lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name})
	}
	for _, tc := range []struct {
		kind   string
		cap    *csi.VolumeCapability
		target string
	}{
		{"filesystem", mountCap("ext4", rwo), "/mnt/conflict"},
		{"block", blockCap(), "/mnt/conflict-dev/disk"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			publish(t, ctx, "csi-conf-a", tc.target, tc.cap, false)
			defer unpublish(t, ctx, "csi-conf-a", tc.target)
			publish(t, ctx, "csi-conf-a", tc.target, tc.cap, false) // the same again: done
			_, err := csiNode.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "csi-conf-b", TargetPath: tc.target, VolumeCapability: tc.cap})
			wantCode(t, err, codes.AlreadyExists)
			_, err = csiNode.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "csi-conf-a", TargetPath: tc.target, VolumeCapability: tc.cap, Readonly: true})
			wantCode(t, err, codes.AlreadyExists)
			_, err = csiNode.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "csi-conf-b", TargetPath: tc.target})
			wantCode(t, err, codes.FailedPrecondition)
			if !mounted(t, ctx, tc.target) {
				t.Error("unpublishing another volume took this one down")
			}
		})
	}
}

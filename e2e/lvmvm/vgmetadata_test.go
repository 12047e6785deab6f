package lvmvm

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// vgMetadataClasses are the device classes of the VG metadata tests and
// benchmark: mdafull on a VG whose PV has a 60 KiB metadata area (room
// for about 50 LVs), dense on a VG with pvcreate's default area.
const vgMetadataClasses = `- name: mdafull
  volumeGroup: vgmda
  thinPool: pool
  overprovisionRatio: 100
- name: dense
  volumeGroup: vgdense
  thinPool: pool
  overprovisionRatio: 100
`

// setupVGMetadata makes vgmda on /dev/vdj and vgdense on /dev/vdk.
// pvcreate extends the metadata area up to the first extent, which sits at
// the data alignment (1 MiB by default): a small area needs a small
// alignment too. 32k at 64k alignment gives a 60 KiB area.
func setupVGMetadata(ctx context.Context) error {
	for _, argv := range [][]string{
		{"lvm", "pvcreate", "--yes", "--metadatasize", "32k", "--dataalignment", "64k", "/dev/vdj"},
		{"lvm", "vgcreate", "vgmda", "/dev/vdj"},
		{"lvm", "lvcreate", "--yes", "--type", "thin-pool", "--size", "128M", "--poolmetadatasize", "8M", "--name", "pool", "vgmda"},
	} {
		if _, err := testVM.Run(ctx, argv...); err != nil {
			return err
		}
	}
	return testVM.SetupThinPool(ctx, "/dev/vdk", "vgdense", "pool", "2G", "64M")
}

// pvcName is a volume name as the node agent makes them (pvc-<uuid>).
func pvcName(prefix string, i int) string {
	return fmt.Sprintf("pvc-%08x-%s-4d5e-8f90-%012x", i, prefix, i)
}

// lvcreateErrors is how many lvcreate commands lvmd ran that lvm failed.
func lvcreateErrors(t *testing.T, ctx context.Context) float64 {
	t.Helper()
	fams, err := testVM.LVMDMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, m := range fams["thinlvm_lvmd_lvm_commands_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["command"] == "lvcreate" && labels["result"] == "error" {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// A VG with a small metadata area, filled with CreateLV: lvmd refuses the
// next volume with ResourceExhausted naming the metadata area before lvm
// fails (no lvcreate ever failed, no LV is left that lvmd did not return),
// lvm still has room, and the VG takes a removal and, then, a new volume.
func TestVGMetadataFull(t *testing.T) {
	ctx := testContext(t)
	const class, vg = "mdafull", "vgmda"
	c := capacityOf(t, class)
	if c.GetVgMetadataSizeBytes() != 60<<10 || c.GetVgMetadataLvsLeft() == 0 {
		t.Fatalf("vgmda's metadata area: %d bytes, %d LVs left; want 61440 and room", c.GetVgMetadataSizeBytes(), c.GetVgMetadataLvsLeft())
	}
	failedBefore := lvcreateErrors(t, ctx)
	var made []string
	var err error
	// Until refused twice, the second time after lvmd has read lvm again
	// (its estimate of the LVs it made since is above what lvm writes).
	waited := false
	for i := 0; i < 200; i++ {
		name := pvcName("0a0a", i)
		_, err = lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: name, DeviceClass: class, SizeBytes: 4 * mib, Tags: []string{"lv:" + name}})
		if err == nil {
			made, waited = append(made, name), false
			continue
		}
		if waited || status.Code(err) != codes.ResourceExhausted {
			break
		}
		time.Sleep(3 * time.Second) // lvmd's coalesced refresh: 200ms after the last mutation, 2s at most
		waited, i = true, i-1
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("after %d LVs: %v, want ResourceExhausted", len(made), err)
	}
	msg := status.Convert(err).Message()
	for _, frag := range []string{`volume group "vgmda" metadata area is full`, "pvcreate --metadatasize"} {
		if !strings.Contains(msg, frag) {
			t.Errorf("message %q lacks %q", msg, frag)
		}
	}
	// 29952 bytes a copy, less the VG and its pool, less lvmd's 8 KiB
	// reserve, at about 400 bytes an LV.
	if len(made) < 30 || len(made) > 60 {
		t.Errorf("%d LVs made in a 60 KiB metadata area, want 30 to 60", len(made))
	}
	t.Logf("%d LVs made before lvmd refused: %s", len(made), msg)
	if n := lvcreateErrors(t, ctx) - failedBefore; n != 0 {
		t.Errorf("lvm failed %v lvcreate commands: lvmd did not refuse first", n)
	}
	// No orphan: lvm holds exactly the LVs lvmd returned, and still has
	// metadata room.
	guest, err := testVM.LVS(ctx, vg, "lv_attr")
	if err != nil {
		t.Fatal(err)
	}
	delete(guest, "pool")
	if len(guest) != len(made) {
		t.Errorf("lvm holds %d LVs in %s, lvmd made %d", len(guest), vg, len(made))
	}
	out, err := testVM.Run(ctx, "lvm", "vgs", "--noheadings", "--units", "b", "--nosuffix", "-o", "vg_mda_free", vg)
	if err != nil {
		t.Fatal(err)
	}
	if free, _ := strconv.ParseUint(strings.TrimSpace(out), 10, 64); free < 4096 {
		t.Errorf("lvm's vg_mda_free is %d when lvmd refuses, want lvmd's reserve left", free)
	}
	eventually(t, 30*time.Second, func() string {
		if c := capacityOf(t, class); c.GetVgMetadataLvsLeft() != 0 || c.GetAvailableBytes() != 0 {
			return fmt.Sprintf("capacity of the full class: %d LVs left, %d bytes available", c.GetVgMetadataLvsLeft(), c.GetAvailableBytes())
		}
		if v := poolMetric(t, ctx, "thinlvm_lvmd_vg_metadata_lvs_left", class); v != 0 {
			return fmt.Sprintf("thinlvm_lvmd_vg_metadata_lvs_left %v", v)
		}
		return ""
	})
	_, err = lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "snap", DeviceClass: class, SourceName: made[0]})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "metadata area is full") {
		t.Errorf("CreateSnapshot in the full VG: %v, want ResourceExhausted naming the metadata area", err)
	}
	// The VG is still writable: removals work, and make room.
	for _, name := range made[:3] {
		if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name, DeviceClass: class}); err != nil {
			t.Fatalf("RemoveLV %s in the full VG: %v", name, err)
		}
	}
	eventually(t, 30*time.Second, func() string {
		if left := capacityOf(t, class).GetVgMetadataLvsLeft(); left == 0 {
			return "no LVs left after three removals"
		}
		return ""
	})
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "again", DeviceClass: class, SizeBytes: 4 * mib}); err != nil {
		t.Errorf("CreateLV after removals: %v", err)
	}
	for _, name := range append(made[3:], "again") {
		if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name, DeviceClass: class}); err != nil {
			t.Fatal(err)
		}
	}
}

package server

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// lvmMetadataFull is lvm2 2.03.16's stderr (LC_ALL=C) for an lvcreate past
// its VG's metadata area, as ExecRunner keeps it.
const lvmMetadataFull = "VG vg0 311 metadata on /dev/vdb (62930 bytes) exceeds maximum metadata size (62720 bytes)\n  Failed to write VG vg0."

// A VG filled with CreateLV: lvmd refuses the first LV whose metadata would
// eat into its reserve, with ResourceExhausted naming the metadata area,
// before lvm fails; nothing is half-made, and a removal makes room again.
func TestCreateLVVGMetadataFull(t *testing.T) {
	f := testRunner()
	f.VGs[0].MetadataAreaSize = 64 << 10 // (65536-512)/2-512 = 32000 bytes a copy
	e := newEnv(t, testConfig(), f, envOptions{})
	var made int
	var err error
	// Until refused on a fresh report: one read after the last create
	// corrects lvmd's estimate, and may make room for one more.
	for made = 0; made < 200; made++ {
		if err != nil {
			e.settle(t)
		}
		name := fmt.Sprintf("pvc-%08d-0000-0000-0000-000000000000", made)
		_, err = e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: name, SizeBytes: mib, Tags: []string{"lv:" + name}})
		if err != nil && e.d.store.current().fresh {
			break
		}
		if err != nil {
			made--
		}
	}
	wantCode(t, err, codes.ResourceExhausted)
	for _, frag := range []string{`volume group "vg0" metadata area is full`, "of 32000 bytes used", "pvcreate --metadatasize"} {
		if !strings.Contains(status.Convert(err).Message(), frag) {
			t.Errorf("message %q lacks %q", status.Convert(err).Message(), frag)
		}
	}
	// lvm never failed: every lvcreate lvmd ran made an LV, and lvm still
	// has the reserve free.
	if got := e.fake.Count("lvcreate"); got != made || len(e.fake.ListLVs()) != made {
		t.Errorf("%d lvcreate commands, %d LVs, for %d LVs made", got, len(e.fake.ListLVs()), made)
	}
	// 32000 bytes less the VG and pool (~2.2 KiB) and the 8 KiB reserve,
	// at ~400 bytes an LV here (~480 by lvmd's estimate before a refresh).
	if made < 40 || made > 56 {
		t.Errorf("%d LVs made in a 64 KiB metadata area, want 40 to 56", made)
	}
	if free := e.fake.MetadataFree("vg0"); free < metadataReserveBytes-512 {
		t.Errorf("lvm's vg_mda_free %d when lvmd refused, want about the %d reserve", free, metadataReserveBytes)
	}
	c, err := e.vg.GetCapacity(t.Context(), &pb.GetCapacityRequest{DeviceClass: "ssd"})
	if err != nil {
		t.Fatal(err)
	}
	if ssd := c.GetDeviceClasses()[0]; ssd.GetVgMetadataLvsLeft() != 0 || ssd.GetAvailableBytes() != 0 {
		t.Errorf("capacity of a full VG metadata area: %d LVs left, %d bytes available; want 0 and 0", ssd.GetVgMetadataLvsLeft(), ssd.GetAvailableBytes())
	}
	// Snapshots are refused the same way; a transient one (a copy's point
	// in time) may use half the reserve.
	_, err = e.lv.CreateSnapshot(t.Context(), &pb.CreateSnapshotRequest{Name: "snap", SourceName: "pvc-00000000-0000-0000-0000-000000000000"})
	wantCode(t, err, codes.ResourceExhausted)
	if !strings.Contains(status.Convert(err).Message(), "metadata area is full") {
		t.Errorf("snapshot refused with %q, want the metadata area named", status.Convert(err).Message())
	}
	if _, err := e.lv.CreateSnapshot(t.Context(), &pb.CreateSnapshotRequest{Name: "transient", SourceName: "pvc-00000000-0000-0000-0000-000000000000",
		ReadOnly: true, Transient: true}); err != nil {
		t.Errorf("transient snapshot in the reserve: %v", err)
	}
	// Removals still work, and make room once lvm is read again.
	for _, name := range []string{"transient", "pvc-00000000-0000-0000-0000-000000000000", "pvc-00000001-0000-0000-0000-000000000000"} {
		if _, err := e.lv.RemoveLV(t.Context(), &pb.RemoveLVRequest{Name: name}); err != nil {
			t.Fatalf("RemoveLV %s: %v", name, err)
		}
	}
	e.settle(t)
	if _, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "after", SizeBytes: mib}); err != nil {
		t.Errorf("CreateLV after removals: %v", err)
	}
}

// Creates that follow each other before lvm is read again count each
// other's metadata: the amended view's room falls with every LV.
func TestCreateLVVGMetadataBeforeRefresh(t *testing.T) {
	f := testRunner()
	f.VGs[0].MetadataAreaSize = 32 << 10 // 15872 bytes a copy, ~5 KiB over the reserve
	// No refresh between the creates.
	e := newEnv(t, testConfig(), f, envOptions{debounce: 1 << 40, maxStale: 1 << 40})
	var made int
	var err error
	for made = 0; made < 100; made++ {
		if _, err = e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: fmt.Sprintf("lv%d", made), SizeBytes: mib}); err != nil {
			break
		}
	}
	wantCode(t, err, codes.ResourceExhausted)
	if e.fake.Count("fullreport") != 1 {
		t.Errorf("%d reports, want the first only", e.fake.Count("fullreport"))
	}
	if made == 0 || made > 20 {
		t.Errorf("%d LVs made before lvmd refused, want about 13", made)
	}
	if free := e.fake.MetadataFree("vg0"); free < metadataReserveBytes-512 {
		t.Errorf("lvm's vg_mda_free %d when lvmd refused, want its reserve left", free)
	}
}

// lvm's own refusal (a VG changed outside lvmd since its last report) is
// ResourceExhausted too, and leaves nothing.
func TestCreateVGMetadataFullInLVM(t *testing.T) {
	tests := []struct {
		name   string
		create func(e *env) error
	}{
		{"lv", func(e *env) error {
			_, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", SizeBytes: gib})
			return err
		}},
		{"snapshot", func(e *env) error {
			_, err := e.lv.CreateSnapshot(t.Context(), &pb.CreateSnapshotRequest{Name: "a", SourceName: "origin"})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testRunner()
			f.LVs = []fake.LV{{VG: "vg0", Name: "origin", Pool: "pool", Size: gib, Tags: []string{"thinlvm"}}}
			e := newEnv(t, testConfig(), f, envOptions{})
			f.FailNext(fake.Failure{Subcommand: "lvcreate", Stderr: lvmMetadataFull})
			err := tt.create(e)
			wantCode(t, err, codes.ResourceExhausted)
			if !strings.Contains(err.Error(), "exceeds maximum metadata size") {
				t.Errorf("error %v does not carry lvm's", err)
			}
			diffNames(t, []string{"vg0/origin"}, f)
		})
	}
}

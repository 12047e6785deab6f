package lvmvm

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

var updateTestdata = flag.Bool("update-testdata", false, "write the fullreport captured from the VM to lvmd/lvm/testdata")

// TestFullReportFromRealLVM runs lvmd's report command in the VM over thin
// LVs, snapshots (read-only, inactive) and tags, parses it and checks it
// against lvs. With -update-testdata it refreshes the capture that the
// parser's unit tests read.
func TestFullReportFromRealLVM(t *testing.T) {
	ctx := testContext(t)
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "rep-origin", DeviceClass: "small", SizeBytes: 16 * mib, Tags: []string{"lv:rep-origin"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "rep-ro", DeviceClass: "small", SourceName: "rep-origin", ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	// An inactive thin snapshot made by hand, as lvm makes them by default.
	if _, err := testVM.Run(ctx, "lvm", "lvcreate", "--snapshot", "vgsmall/rep-origin", "--name", "rep-inactive"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = testVM.Run(ctx, "lvm", "lvremove", "--yes", "vgsmall/rep-inactive", "vgsmall/rep-ro", "vgsmall/rep-origin")
	}()
	out, err := testVM.Run(ctx, append([]string{"lvm"}, lvm.FullReportArgs([]string{"vgsmall"})...)...)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := lvm.ParseFullReport([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := lvsOf(t, ctx, "vgsmall")
	if len(rep.LVs) != len(want) {
		t.Errorf("report has %d LVs, lvs %d", len(rep.LVs), len(want))
	}
	for name, w := range want {
		lv := rep.LV("vgsmall", name)
		if lv == nil {
			t.Errorf("report lacks %s", name)
			continue
		}
		if lv.Size != w.size || lv.Attr != w.attr || lv.Origin != w.origin {
			t.Errorf("%s: report %+v, lvs %+v", name, lv, w)
		}
	}
	if lv := rep.LV("vgsmall", "rep-ro"); lv == nil || !lv.ReadOnly() || !lv.Active() || !lv.HasTag("thinlvm") {
		t.Errorf("rep-ro: %+v", lv)
	}
	if lv := rep.LV("vgsmall", "rep-inactive"); lv == nil || lv.Active() || lv.ReadOnly() {
		t.Errorf("rep-inactive: %+v", lv)
	}
	if pool := rep.LV("vgsmall", "pool"); pool == nil || !pool.IsThinPool() || pool.MetadataPercent == 0 || pool.ChunkSize != 64<<10 {
		t.Errorf("pool: %+v", pool)
	}
	// The seg sub-report gives each thin LV its own thin id.
	ids := map[uint32]string{}
	for _, name := range []string{"rep-origin", "rep-ro", "rep-inactive"} {
		lv := rep.LV("vgsmall", name)
		if lv == nil || lv.ThinID == 0 || ids[lv.ThinID] != "" {
			t.Errorf("%s: thin id of %+v missing or shared with %s", name, lv, ids[lv.ThinID])
			continue
		}
		ids[lv.ThinID] = name
	}
	if *updateTestdata {
		root, err := moduleRoot()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(root, "lvmd", "lvm", "testdata", "fullreport-vm.json")
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
}

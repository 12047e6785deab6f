package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

func TestChangeLVTags(t *testing.T) {
	tests := []struct {
		name     string
		add, del []string
		code     codes.Code
		want     []string
		lvchange int
	}{
		{name: "add and remove in one lvchange", add: []string{"move:n2"}, del: []string{"lv:old"}, want: []string{"thinlvm", "move:n2"}, lvchange: 1},
		{name: "present and absent ones are no-ops", add: []string{"thinlvm", "x"}, del: []string{"nope"}, want: []string{"thinlvm", "lv:old", "x"}, lvchange: 1},
		{name: "nothing changes: no command", add: []string{"lv:old"}, del: []string{"absent"}, want: []string{"thinlvm", "lv:old"}},
		{name: "removing thinlvm", del: []string{"thinlvm"}, code: codes.InvalidArgument, want: []string{"thinlvm", "lv:old"}},
		{name: "added and removed", add: []string{"x"}, del: []string{"x"}, code: codes.InvalidArgument, want: []string{"thinlvm", "lv:old"}},
		{name: "invalid tag", add: []string{"--yes"}, code: codes.InvalidArgument, want: []string{"thinlvm", "lv:old"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testRunner()
			f.LVs = []fake.LV{{VG: "vg0", Name: "a", Pool: "pool", Size: gib, Tags: []string{"thinlvm", "lv:old"}}}
			e := newEnv(t, testConfig(), f, envOptions{})
			resp, err := e.lv.ChangeLV(t.Context(), &pb.ChangeLVRequest{Name: "a", AddTags: tt.add, DelTags: tt.del})
			wantCode(t, err, tt.code)
			if tt.code == codes.OK {
				if d := cmp.Diff(tt.want, resp.GetVolume().GetTags()); d != "" {
					t.Errorf("response tags (-want +got):\n%s", d)
				}
			}
			lv, _ := f.GetLV("vg0", "a")
			if d := cmp.Diff(tt.want, lv.Tags); d != "" {
				t.Errorf("lvm's tags (-want +got):\n%s", d)
			}
			if got := f.Count("lvchange"); got != tt.lvchange {
				t.Errorf("%d lvchange commands, want %d", got, tt.lvchange)
			}
			// The cached view agrees without a new report.
			got, err := e.lv.GetLV(t.Context(), &pb.GetLVRequest{Name: "a"})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got.GetVolume().GetTags()); d != "" {
				t.Errorf("GetLV tags (-want +got):\n%s", d)
			}
		})
	}
}

// deltaRunner holds testConfig's VGs and pools and, in vg0/pool: base, vol
// (a snapshot of it), an LV without lvmd's tag, and in vg1/tp an LV of the
// hdd class.
func deltaRunner(devDir string) *fake.Runner {
	f := testRunner()
	f.DevDir = devDir
	f.LVs = []fake.LV{
		{VG: "vg0", Name: "base", Pool: "pool", Size: 4 * mib, Tags: []string{"thinlvm"}, ReadOnly: true, Inactive: true},
		{VG: "vg0", Name: "vol", Pool: "pool", Origin: "base", Size: 4*mib + 100*1024, Tags: []string{"thinlvm"}},
		{VG: "vg0", Name: "foreign", Pool: "pool", Size: 4 * mib},
		{VG: "vg1", Name: "other", Pool: "tp", Size: 4 * mib, Tags: []string{"thinlvm"}},
	}
	return f
}

// writeBlocks fills blocks [block, block+n) of 64 KiB of an LV's backing
// file with b.
func writeBlocks(t *testing.T, dir, name string, block, n int64, b byte) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "vg0", name), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, n*fake.DefaultChunkSize)
	for i := range buf {
		buf[i] = b
	}
	if _, err := f.WriteAt(buf, block*fake.DefaultChunkSize); err != nil {
		t.Fatal(err)
	}
}

func TestGetThinDelta(t *testing.T) {
	const kib = 1024
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "vg0"), 0o700); err != nil {
		t.Fatal(err)
	}
	// base maps blocks 0-1 and 5-6; vol discarded 0-1, rewrote 5, wrote
	// 50-52 and its last block (64), cut by its size at 100 KiB past 4 MiB.
	writeBlocks(t, dir, "base", 0, 2, 1)
	writeBlocks(t, dir, "base", 5, 2, 1)
	writeBlocks(t, dir, "vol", 0, 2, 0)
	writeBlocks(t, dir, "vol", 5, 1, 2)
	writeBlocks(t, dir, "vol", 6, 1, 1)
	writeBlocks(t, dir, "vol", 50, 3, 3)
	writeBlocks(t, dir, "vol", 65, 1, 3)
	r := func(off, n uint64, zero bool) *pb.ThinRange {
		return &pb.ThinRange{OffsetBytes: off * kib, LengthBytes: n * kib, Zero: zero}
	}
	tests := []struct {
		name string
		req  *pb.GetThinDeltaRequest
		code codes.Code
		want []*pb.ThinRange
	}{
		{
			name: "against the base: written ranges copied, the discarded one zeroed",
			req:  &pb.GetThinDeltaRequest{Name: "vol", BaseName: "base"},
			want: []*pb.ThinRange{r(0, 128, true), r(320, 64, false), r(3200, 192, false), r(4160, 36, false)},
		},
		{
			name: "no base: the mapped ranges, clipped to the size",
			req:  &pb.GetThinDeltaRequest{Name: "vol"},
			want: []*pb.ThinRange{r(320, 128, false), r(3200, 192, false), r(4160, 36, false)},
		},
		{name: "name invalid", req: &pb.GetThinDeltaRequest{Name: "-vol"}, code: codes.InvalidArgument},
		{name: "base invalid", req: &pb.GetThinDeltaRequest{Name: "vol", BaseName: "a b"}, code: codes.InvalidArgument},
		{name: "its own base", req: &pb.GetThinDeltaRequest{Name: "vol", BaseName: "vol"}, code: codes.InvalidArgument},
		{name: "unknown class", req: &pb.GetThinDeltaRequest{Name: "vol", DeviceClass: "nvme"}, code: codes.InvalidArgument},
		{name: "missing", req: &pb.GetThinDeltaRequest{Name: "nope"}, code: codes.NotFound},
		{name: "base missing", req: &pb.GetThinDeltaRequest{Name: "vol", BaseName: "nope"}, code: codes.NotFound},
		{name: "not lvmd's", req: &pb.GetThinDeltaRequest{Name: "foreign"}, code: codes.FailedPrecondition},
		{name: "base not lvmd's", req: &pb.GetThinDeltaRequest{Name: "vol", BaseName: "foreign"}, code: codes.FailedPrecondition},
		{name: "base of another device class", req: &pb.GetThinDeltaRequest{Name: "vol", BaseName: "other"}, code: codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := deltaRunner(dir)
			e := newEnv(t, testConfig(), f, envOptions{})
			resp, err := e.lv.GetThinDelta(t.Context(), tt.req)
			wantCode(t, err, tt.code)
			if f.MetadataSnapHeld("vg0", "pool") {
				t.Error("the metadata snapshot is still held")
			}
			if tt.code != codes.OK {
				if n := f.Count(lvm.ToolDMSetup) + f.Count(lvm.ToolThinDelta); n != 0 {
					t.Errorf("%d device-mapper commands for a refused request", n)
				}
				return
			}
			want := &pb.GetThinDeltaResponse{BlockSizeBytes: 64 * kib, SizeBytes: 4*mib + 100*kib, Ranges: tt.want}
			if d := cmp.Diff(want, resp, protocmp.Transform()); d != "" {
				t.Errorf("GetThinDelta (-want +got):\n%s", d)
			}
			if got := [2]int{f.Count(lvm.ToolDMSetup), f.Count(lvm.ToolThinDelta)}; got != [2]int{2, 1} {
				t.Errorf("%d dmsetup and %d thin_delta commands, want 2 and 1", got[0], got[1])
			}
		})
	}
}

// The metadata snapshot is released whatever happens after it was reserved.
func TestGetThinDeltaReleases(t *testing.T) {
	t.Run("thin_delta fails", func(t *testing.T) {
		f := deltaRunner("")
		e := newEnv(t, testConfig(), f, envOptions{})
		f.FailNext(fake.Failure{Subcommand: lvm.ToolThinDelta, ExitCode: 1, Stderr: "metadata checksum error"})
		_, err := e.lv.GetThinDelta(t.Context(), &pb.GetThinDeltaRequest{Name: "vol", BaseName: "base"})
		wantCode(t, err, codes.Internal)
		if f.MetadataSnapHeld("vg0", "pool") || f.Count(lvm.ToolDMSetup) != 2 {
			t.Errorf("held %t after %d dmsetup commands, want released after 2", f.MetadataSnapHeld("vg0", "pool"), f.Count(lvm.ToolDMSetup))
		}
		// The next call works.
		if _, err := e.lv.GetThinDelta(t.Context(), &pb.GetThinDeltaRequest{Name: "vol", BaseName: "base"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a snapshot left held is released and taken again", func(t *testing.T) {
		f := deltaRunner("")
		e := newEnv(t, testConfig(), f, envOptions{})
		if _, err := f.Run(t.Context(), "dmsetup", "message", "vg0-pool-tpool", "0", "reserve_metadata_snap"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.lv.GetThinDelta(t.Context(), &pb.GetThinDeltaRequest{Name: "vol"}); err != nil {
			t.Fatal(err)
		}
		if f.MetadataSnapHeld("vg0", "pool") {
			t.Error("the metadata snapshot is still held")
		}
	})
	t.Run("release fails: an error", func(t *testing.T) {
		f := deltaRunner("")
		e := newEnv(t, testConfig(), f, envOptions{})
		f.OnRun = func(_ context.Context, args []string) {
			if args[0] == lvm.ToolThinDelta {
				f.FailNext(fake.Failure{Subcommand: lvm.ToolDMSetup, ExitCode: 1, Stderr: "ioctl failed"})
			}
		}
		_, err := e.lv.GetThinDelta(t.Context(), &pb.GetThinDeltaRequest{Name: "vol"})
		wantCode(t, err, codes.Internal)
	})
}

// The pool's metadata is read while a thin LV of it is active, though the
// pool itself shows inactive; with every LV and the pool inactive it cannot
// be, and lvmd does not activate them.
func TestGetThinDeltaPoolActivity(t *testing.T) {
	f := deltaRunner("")
	f.Pools[0].Inactive = true
	f.LVs[2].Inactive = true // foreign
	e := newEnv(t, testConfig(), f, envOptions{})
	ctx := t.Context()
	if _, err := e.lv.GetThinDelta(ctx, &pb.GetThinDeltaRequest{Name: "vol", BaseName: "base"}); err != nil {
		t.Fatalf("with vol active: %v", err)
	}
	if _, err := e.lv.ChangeLV(ctx, &pb.ChangeLVRequest{Name: "vol", Active: new(false)}); err != nil {
		t.Fatal(err)
	}
	_, err := e.lv.GetThinDelta(ctx, &pb.GetThinDeltaRequest{Name: "vol", BaseName: "base"})
	wantCode(t, err, codes.FailedPrecondition)
	if n := f.Count(lvm.ToolDMSetup); n != 2 {
		t.Errorf("%d dmsetup commands, want only the first call's 2", n)
	}
}

// A snapshot lvmd just made is in an amended view without its thin id: the
// report is read again.
func TestGetThinDeltaAfterCreate(t *testing.T) {
	f := deltaRunner("")
	e := newEnv(t, testConfig(), f, envOptions{})
	ctx := t.Context()
	if _, err := e.lv.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "snap", SourceName: "vol"}); err != nil {
		t.Fatal(err)
	}
	reports := f.Count("fullreport")
	if _, err := e.lv.GetThinDelta(ctx, &pb.GetThinDeltaRequest{Name: "snap", BaseName: "vol"}); err != nil {
		t.Fatal(err)
	}
	if f.Count("fullreport") == reports {
		t.Error("no report read for the new snapshot's thin id")
	}
}

package server

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/thinlvm/thinlvm/lvmd/config"
	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// ignoreUUID leaves out the UUID, which lvm makes up: lvmd reports it once
// it has read the LV back.
var ignoreUUID = protocmp.IgnoreFields(&pb.LogicalVolume{}, "uuid")

func diffLV(t *testing.T, want, got *pb.LogicalVolume) {
	t.Helper()
	if diff := cmp.Diff(want, got, protocmp.Transform(), ignoreUUID); diff != "" {
		t.Errorf("volume (-want +got):\n%s", diff)
	}
}

// thinLV is a volume as lvmd returns a new, active, writable thin LV.
func thinLV(class, vg, name string, size uint64, tags ...string) *pb.LogicalVolume {
	return &pb.LogicalVolume{Name: name, DeviceClass: class, VolumeGroup: vg, SizeBytes: size,
		DevicePath: "/dev/" + vg + "/" + name, Tags: append([]string{"thinlvm"}, tags...), Active: true}
}

func TestCreateLV(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(f *fake.Runner, c *config.Config)
		req    *pb.CreateLVRequest
		code   codes.Code
		want   *pb.LogicalVolume
		stderr string
		// msg are fragments of the error message.
		msg []string
		// lvcreate is how many lvcreate commands run.
		lvcreate int
		// lvs are the LVs in lvm afterwards.
		lvs []string
	}{
		{
			name:     "success",
			req:      &pb.CreateLVRequest{Name: "pvc-1", DeviceClass: "ssd", SizeBytes: gib, Tags: []string{"lv:ns/pvc-1"}},
			want:     thinLV("ssd", "vg0", "pvc-1", gib, "lv:ns/pvc-1"),
			lvcreate: 1,
			lvs:      []string{"vg0/pvc-1"},
		},
		{
			name:     "default device class",
			req:      &pb.CreateLVRequest{Name: "a", SizeBytes: gib},
			want:     thinLV("ssd", "vg0", "a", gib),
			lvcreate: 1,
			lvs:      []string{"vg0/a"},
		},
		{
			name:     "other device class",
			req:      &pb.CreateLVRequest{Name: "a", DeviceClass: "hdd", SizeBytes: gib},
			want:     thinLV("hdd", "vg1", "a", gib),
			lvcreate: 1,
			lvs:      []string{"vg1/a"},
		},
		{
			name:     "size rounded up to the extent size",
			req:      &pb.CreateLVRequest{Name: "a", SizeBytes: 5*mib + 1},
			want:     thinLV("ssd", "vg0", "a", 8*mib),
			lvcreate: 1,
			lvs:      []string{"vg0/a"},
		},
		{
			name:     "thinlvm tag not doubled",
			req:      &pb.CreateLVRequest{Name: "a", SizeBytes: gib, Tags: []string{"thinlvm", "x"}},
			want:     thinLV("ssd", "vg0", "a", gib, "x"),
			lvcreate: 1,
			lvs:      []string{"vg0/a"},
		},
		{
			name:     "exactly the available size",
			req:      &pb.CreateLVRequest{Name: "a", SizeBytes: 14 * gib}, // (8 GiB pool - 1 GiB spare) x 2
			want:     thinLV("ssd", "vg0", "a", 14*gib),
			lvcreate: 1,
			lvs:      []string{"vg0/a"},
		},
		{
			name: "unknown device class",
			req:  &pb.CreateLVRequest{Name: "a", DeviceClass: "nvme", SizeBytes: gib},
			code: codes.InvalidArgument,
			msg:  []string{`unknown device class "nvme"`},
		},
		{
			name:  "no default device class",
			setup: func(_ *fake.Runner, c *config.Config) { c.DeviceClasses[0].Default = false },
			req:   &pb.CreateLVRequest{Name: "a", SizeBytes: gib},
			code:  codes.InvalidArgument,
		},
		{name: "name missing", req: &pb.CreateLVRequest{SizeBytes: gib}, code: codes.InvalidArgument},
		{name: "name reserved", req: &pb.CreateLVRequest{Name: "snapshot-a", SizeBytes: gib}, code: codes.InvalidArgument},
		{name: "name with a slash", req: &pb.CreateLVRequest{Name: "vg1/a", SizeBytes: gib}, code: codes.InvalidArgument},
		{name: "name an option", req: &pb.CreateLVRequest{Name: "--yes", SizeBytes: gib}, code: codes.InvalidArgument},
		{name: "name too long", req: &pb.CreateLVRequest{Name: strings.Repeat("a", 128), SizeBytes: gib}, code: codes.InvalidArgument},
		{name: "tag invalid", req: &pb.CreateLVRequest{Name: "a", SizeBytes: gib, Tags: []string{"a b"}}, code: codes.InvalidArgument},
		{name: "size 0", req: &pb.CreateLVRequest{Name: "a"}, code: codes.InvalidArgument, msg: []string{"size_bytes"}},
		{
			name: "more than available",
			req:  &pb.CreateLVRequest{Name: "a", SizeBytes: 14*gib + 1},
			code: codes.ResourceExhausted,
			msg:  []string{"15036579840 bytes requested", "15032385536 bytes available"},
		},
		{
			// Rounding it up to an extent must not wrap it to 0.
			name: "largest size",
			req:  &pb.CreateLVRequest{Name: "a", SizeBytes: math.MaxUint64},
			code: codes.ResourceExhausted,
		},
		{
			name: "lvm has no space",
			setup: func(f *fake.Runner, _ *config.Config) {
				f.Failures = []fake.Failure{{Subcommand: "lvcreate", Stderr: `  Volume group "vg0" has insufficient free space (0 extents): 1 required.`}}
			},
			req:      &pb.CreateLVRequest{Name: "a", SizeBytes: gib},
			code:     codes.ResourceExhausted,
			lvcreate: 1,
		},
		{
			name: "full pool under a 100% high-water mark",
			setup: func(f *fake.Runner, c *config.Config) {
				f.Pools[0].DataPercent = 100
				c.DeviceClasses[0].DataHighWatermarkPercent = 100
			},
			req:      &pb.CreateLVRequest{Name: "a", SizeBytes: mib},
			code:     codes.ResourceExhausted,
			lvcreate: 0, // lvmd offers nothing from a full pool
		},
		{
			name:  "pool over its data high-water mark",
			setup: func(f *fake.Runner, _ *config.Config) { f.Pools[0].DataPercent, f.Pools[0].MetadataPercent = 90.5, 10 },
			req:   &pb.CreateLVRequest{Name: "a", SizeBytes: mib},
			code:  codes.ResourceExhausted,
			msg:   []string{"high-water mark", "data 90.50% (limit 90%)", "metadata 10.00% (limit 80%)"},
		},
		{
			name:  "pool over its metadata high-water mark",
			setup: func(f *fake.Runner, _ *config.Config) { f.Pools[0].DataPercent, f.Pools[0].MetadataPercent = 5, 80.25 },
			req:   &pb.CreateLVRequest{Name: "a", SizeBytes: mib},
			code:  codes.ResourceExhausted,
			msg:   []string{"high-water mark", "data 5.00% (limit 90%)", "metadata 80.25% (limit 80%)"},
		},
		{
			name:  "pool at its high-water mark",
			setup: func(f *fake.Runner, _ *config.Config) { f.Pools[0].DataPercent, f.Pools[0].MetadataPercent = 90, 80 },
			// 8 GiB x 90% used: (8 - 7.2 - 1 spare) x 2 < 0
			req:  &pb.CreateLVRequest{Name: "a", SizeBytes: mib},
			code: codes.ResourceExhausted,
			msg:  []string{"0 bytes available"},
		},
		{
			// lvcreate would activate it, and lvconvert --repair of it fail.
			name:     "pool deactivated by an administrator",
			setup:    func(f *fake.Runner, _ *config.Config) { f.Pools[0].Inactive = true },
			req:      &pb.CreateLVRequest{Name: "a", SizeBytes: mib},
			code:     codes.ResourceExhausted,
			msg:      []string{"thin pool vg0/pool is not active", "lvchange -ay"},
			lvcreate: 0,
		},
		{
			name: "foreign LV of that name",
			setup: func(f *fake.Runner, _ *config.Config) {
				f.LVs = []fake.LV{{VG: "vg0", Name: "a", Pool: "pool", Size: gib}}
			},
			req:  &pb.CreateLVRequest{Name: "a", SizeBytes: gib},
			code: codes.AlreadyExists,
			msg:  []string{`without the "thinlvm" tag`},
			lvs:  []string{"vg0/a"},
		},
		{
			name: "thinlvm LV of that name in another pool",
			setup: func(f *fake.Runner, _ *config.Config) {
				f.Pools = append(f.Pools, fake.Pool{VG: "vg0", Name: "pool2", Size: gib})
				f.LVs = []fake.LV{{VG: "vg0", Name: "a", Pool: "pool2", Size: gib, Tags: []string{"thinlvm"}}}
			},
			req:  &pb.CreateLVRequest{Name: "a", SizeBytes: gib},
			code: codes.AlreadyExists,
			lvs:  []string{"vg0/a"},
		},
		{
			name: "snapshot of that name",
			setup: func(f *fake.Runner, _ *config.Config) {
				f.LVs = []fake.LV{
					{VG: "vg0", Name: "src", Pool: "pool", Size: gib, Tags: []string{"thinlvm"}},
					{VG: "vg0", Name: "a", Pool: "pool", Origin: "src", Size: gib, Tags: []string{"thinlvm"}},
				}
			},
			req:  &pb.CreateLVRequest{Name: "a", SizeBytes: gib},
			code: codes.AlreadyExists,
			lvs:  []string{"vg0/a", "vg0/src"},
		},
		{
			name: "lvm fails otherwise",
			setup: func(f *fake.Runner, _ *config.Config) {
				f.Failures = []fake.Failure{{Subcommand: "lvcreate", Stderr: "  device-mapper: reload ioctl failed: Device or resource busy"}}
			},
			req:      &pb.CreateLVRequest{Name: "a", SizeBytes: gib},
			code:     codes.Internal,
			msg:      []string{"Device or resource busy"},
			lvcreate: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, cfg := testRunner(), testConfig()
			if tt.setup != nil {
				tt.setup(f, cfg)
			}
			e := newEnv(t, cfg, f, envOptions{})
			before := f.Total()
			resp, err := e.lv.CreateLV(t.Context(), tt.req)
			wantCode(t, err, tt.code)
			for _, m := range tt.msg {
				if !strings.Contains(status.Convert(err).Message(), m) {
					t.Errorf("message %q does not have %q", status.Convert(err).Message(), m)
				}
			}
			if tt.code == codes.OK {
				diffLV(t, tt.want, resp.GetVolume())
			}
			if got := f.Count("lvcreate"); got != tt.lvcreate {
				t.Errorf("%d lvcreate commands, want %d: %q", got, tt.lvcreate, f.Calls())
			}
			if tt.code == codes.InvalidArgument && f.Total() != before {
				t.Errorf("an invalid request ran lvm: %q", f.Calls()[before:])
			}
			diffNames(t, tt.lvs, f)
			if tt.code == codes.OK {
				lv, _ := f.GetLV(tt.want.VolumeGroup, tt.want.Name)
				if lv.Size != tt.want.SizeBytes || !cmp.Equal(lv.Tags, tt.want.Tags) || lv.Pool != map[string]string{"vg0": "pool", "vg1": "tp"}[lv.VG] {
					t.Errorf("lvm has %+v, want %+v", lv, tt.want)
				}
			}
		})
	}
}

func TestCreateLVArgv(t *testing.T) {
	cfg := testConfig()
	cfg.DeviceClasses[0].LVCreateOptions = []string{"--zero", "n"}
	e := newEnv(t, cfg, testRunner(), envOptions{})
	if _, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", SizeBytes: gib + 1, Tags: []string{"lv:x"}}); err != nil {
		t.Fatal(err)
	}
	want := []string{"lvcreate", "--yes", "--thin", "vg0/pool", "--virtualsize", "1077936128b", "--name", "a",
		"--addtag", "thinlvm", "--addtag", "lv:x", "--zero", "n"}
	calls := e.fake.Calls()
	if diff := cmp.Diff(want, calls[len(calls)-1]); diff != "" {
		t.Errorf("lvcreate argv (-want +got):\n%s", diff)
	}
}

func TestCreateLVIdempotent(t *testing.T) {
	e := newEnv(t, testConfig(), testRunner(), envOptions{})
	req := &pb.CreateLVRequest{Name: "a", SizeBytes: gib, Tags: []string{"lv:x"}}
	first, err := e.lv.CreateLV(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	// Before and after lvmd reads the LV back from lvm.
	again, err := e.lv.CreateLV(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	diffLV(t, first.GetVolume(), again.GetVolume())
	e.settle(t)
	again, err = e.lv.CreateLV(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	diffLV(t, first.GetVolume(), again.GetVolume())
	lv, _ := e.fake.GetLV("vg0", "a")
	if again.GetVolume().GetUuid() != lv.UUID {
		t.Errorf("uuid %q, lvm says %q", again.GetVolume().GetUuid(), lv.UUID)
	}
	// A request that rounds to the same size is the same request.
	if _, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", SizeBytes: gib - mib, Tags: []string{"lv:x"}}); err != nil {
		t.Errorf("CreateLV rounding to the same size: %v", err)
	}
	if got := e.fake.Count("lvcreate"); got != 1 {
		t.Errorf("%d lvcreate commands, want 1", got)
	}

	_, err = e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", SizeBytes: 2 * gib})
	wantCode(t, err, codes.AlreadyExists)
	if lv, _ := e.fake.GetLV("vg0", "a"); lv.Size != gib {
		t.Errorf("the existing LV changed: %+v", lv)
	}
}

// An LV made outside lvmd since its last report: lvcreate says it exists,
// lvmd reads the report again and finds it is not its own.
func TestCreateLVForeignSinceLastReport(t *testing.T) {
	e := newEnv(t, testConfig(), testRunner(), envOptions{})
	e.fake.AddLV(fake.LV{VG: "vg0", Name: "a", Pool: "pool", Size: gib})
	reports := e.fake.Count("fullreport")
	_, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", SizeBytes: gib})
	wantCode(t, err, codes.AlreadyExists)
	if got := e.fake.Count("lvcreate"); got != 1 {
		t.Errorf("%d lvcreate commands, want 1", got)
	}
	if got := e.fake.Count("fullreport") - reports; got != 1 {
		t.Errorf("%d reports read, want 1", got)
	}
	if lv, _ := e.fake.GetLV("vg0", "a"); len(lv.Tags) != 0 {
		t.Errorf("the foreign LV changed: %+v", lv)
	}
}

// A thinlvm LV made since the last report (by an lvmd before a restart
// that lost its view, say) of the requested size is the requested LV.
func TestCreateLVOwnSinceLastReport(t *testing.T) {
	e := newEnv(t, testConfig(), testRunner(), envOptions{})
	e.fake.AddLV(fake.LV{VG: "vg0", Name: "a", Pool: "pool", Size: gib, Tags: []string{"thinlvm"}})
	resp, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", SizeBytes: gib})
	if err != nil {
		t.Fatal(err)
	}
	diffLV(t, thinLV("ssd", "vg0", "a", gib), resp.GetVolume())
}

func TestCreateSnapshot(t *testing.T) {
	src := fake.LV{VG: "vg0", Name: "src", Pool: "pool", Size: 2 * gib, Tags: []string{"thinlvm", "lv:src"}}
	snap := func(name string, size uint64, readOnly bool, tags ...string) *pb.LogicalVolume {
		v := thinLV("ssd", "vg0", name, size, tags...)
		v.Origin, v.ReadOnly = "src", readOnly
		return v
	}
	tests := []struct {
		name  string
		setup func(f *fake.Runner)
		req   *pb.CreateSnapshotRequest
		code  codes.Code
		want  *pb.LogicalVolume
		// commands are the subcommands of the mutations run.
		commands []string
		lvs      []string
	}{
		{
			name:     "source size",
			req:      &pb.CreateSnapshotRequest{Name: "s", SourceName: "src", Tags: []string{"lv:s"}},
			want:     snap("s", 2*gib, false, "lv:s"),
			commands: []string{"lvcreate"},
			lvs:      []string{"vg0/s", "vg0/src"},
		},
		{
			name:     "source size given",
			req:      &pb.CreateSnapshotRequest{Name: "s", SourceName: "src", SizeBytes: 2 * gib},
			want:     snap("s", 2*gib, false),
			commands: []string{"lvcreate"},
			lvs:      []string{"vg0/s", "vg0/src"},
		},
		{
			name:     "read-only",
			req:      &pb.CreateSnapshotRequest{Name: "s", DeviceClass: "ssd", SourceName: "src", ReadOnly: true},
			want:     snap("s", 2*gib, true),
			commands: []string{"lvcreate"},
			lvs:      []string{"vg0/s", "vg0/src"},
		},
		{
			name:     "larger: extended",
			req:      &pb.CreateSnapshotRequest{Name: "s", SourceName: "src", SizeBytes: 3*gib - 1},
			want:     snap("s", 3*gib, false),
			commands: []string{"lvcreate", "lvextend"},
			lvs:      []string{"vg0/s", "vg0/src"},
		},
		{
			name: "smaller",
			req:  &pb.CreateSnapshotRequest{Name: "s", SourceName: "src", SizeBytes: gib},
			code: codes.OutOfRange,
			lvs:  []string{"vg0/src"},
		},
		{
			name: "source missing",
			req:  &pb.CreateSnapshotRequest{Name: "s", SourceName: "nosuch"},
			code: codes.NotFound,
			lvs:  []string{"vg0/src"},
		},
		{
			name:  "source not managed",
			setup: func(f *fake.Runner) { f.LVs[0].Tags = nil },
			req:   &pb.CreateSnapshotRequest{Name: "s", SourceName: "src"},
			code:  codes.NotFound,
			lvs:   []string{"vg0/src"},
		},
		{
			name: "source in another device class",
			req:  &pb.CreateSnapshotRequest{Name: "s", DeviceClass: "hdd", SourceName: "src"},
			code: codes.NotFound,
			lvs:  []string{"vg0/src"},
		},
		{name: "source name invalid", req: &pb.CreateSnapshotRequest{Name: "s", SourceName: "a_tmeta"}, code: codes.InvalidArgument, lvs: []string{"vg0/src"}},
		{name: "source name missing", req: &pb.CreateSnapshotRequest{Name: "s"}, code: codes.InvalidArgument, lvs: []string{"vg0/src"}},
		{name: "name invalid", req: &pb.CreateSnapshotRequest{Name: "-s", SourceName: "src"}, code: codes.InvalidArgument, lvs: []string{"vg0/src"}},
		{name: "name is the source", req: &pb.CreateSnapshotRequest{Name: "src", SourceName: "src"}, code: codes.InvalidArgument, lvs: []string{"vg0/src"}},
		{name: "tag invalid", req: &pb.CreateSnapshotRequest{Name: "s", SourceName: "src", Tags: []string{"-t"}}, code: codes.InvalidArgument, lvs: []string{"vg0/src"}},
		{name: "unknown device class", req: &pb.CreateSnapshotRequest{Name: "s", DeviceClass: "x", SourceName: "src"}, code: codes.InvalidArgument, lvs: []string{"vg0/src"}},
		{
			name: "more than available",
			req:  &pb.CreateSnapshotRequest{Name: "s", SourceName: "src", SizeBytes: 13*gib + 1}, // 16 GiB x 2 - 1 spare - 2 of src
			code: codes.ResourceExhausted,
			lvs:  []string{"vg0/src"},
		},
		{
			name: "largest size",
			req:  &pb.CreateSnapshotRequest{Name: "s", SourceName: "src", SizeBytes: math.MaxUint64 - 1},
			code: codes.ResourceExhausted,
			lvs:  []string{"vg0/src"},
		},
		{
			name: "extend fails: the snapshot is rolled back",
			setup: func(f *fake.Runner) {
				f.Failures = []fake.Failure{{Subcommand: "lvextend", Stderr: "  Insufficient free space: 256 extents needed, but only 0 available"}}
			},
			req:      &pb.CreateSnapshotRequest{Name: "s", SourceName: "src", SizeBytes: 3 * gib},
			code:     codes.ResourceExhausted,
			commands: []string{"lvcreate", "lvextend", "lvremove"},
			lvs:      []string{"vg0/src"},
		},
		{
			name: "foreign LV of that name",
			setup: func(f *fake.Runner) {
				f.LVs = append(f.LVs, fake.LV{VG: "vg0", Name: "s", Pool: "pool", Size: 2 * gib, Origin: "src"})
			},
			req:  &pb.CreateSnapshotRequest{Name: "s", SourceName: "src"},
			code: codes.AlreadyExists,
			lvs:  []string{"vg0/s", "vg0/src"},
		},
		{
			name: "thin LV of that name",
			setup: func(f *fake.Runner) {
				f.LVs = append(f.LVs, fake.LV{VG: "vg0", Name: "s", Pool: "pool", Size: 2 * gib, Tags: []string{"thinlvm"}})
			},
			req:  &pb.CreateSnapshotRequest{Name: "s", SourceName: "src"},
			code: codes.AlreadyExists,
			lvs:  []string{"vg0/s", "vg0/src"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testRunner()
			f.LVs = []fake.LV{src}
			if tt.setup != nil {
				tt.setup(f)
			}
			e := newEnv(t, testConfig(), f, envOptions{})
			before := len(f.Calls())
			resp, err := e.lv.CreateSnapshot(t.Context(), tt.req)
			wantCode(t, err, tt.code)
			if tt.code == codes.OK {
				diffLV(t, tt.want, resp.GetVolume())
				lv, _ := f.GetLV("vg0", tt.req.Name)
				got := &pb.LogicalVolume{Name: lv.Name, DeviceClass: "ssd", VolumeGroup: lv.VG, SizeBytes: lv.Size,
					DevicePath: "/dev/" + lv.VG + "/" + lv.Name, Origin: lv.Origin, Tags: lv.Tags, ReadOnly: lv.ReadOnly, Active: !lv.Inactive}
				if diff := cmp.Diff(tt.want, got, protocmp.Transform(), ignoreUUID); diff != "" {
					t.Errorf("snapshot in lvm (-want +got):\n%s", diff)
				}
			}
			var commands []string
			for _, c := range f.Calls()[before:] {
				if c[0] != "fullreport" {
					commands = append(commands, c[0])
				}
			}
			if diff := cmp.Diff(tt.commands, commands); diff != "" {
				t.Errorf("lvm mutations (-want +got):\n%s", diff)
			}
			diffNames(t, tt.lvs, f)
			e.settle(t)
			if _, err := e.lv.GetLV(t.Context(), &pb.GetLVRequest{Name: tt.req.Name, DeviceClass: tt.req.DeviceClass}); tt.code == codes.OK && err != nil {
				t.Errorf("GetLV of the snapshot: %v", err)
			}
		})
	}
}

func TestCreateSnapshotArgv(t *testing.T) {
	f := testRunner()
	f.LVs = []fake.LV{{VG: "vg0", Name: "src", Pool: "pool", Size: 2 * gib, Tags: []string{"thinlvm"}}}
	e := newEnv(t, testConfig(), f, envOptions{})
	if _, err := e.lv.CreateSnapshot(t.Context(), &pb.CreateSnapshotRequest{Name: "s", SourceName: "src", ReadOnly: true,
		SizeBytes: 4 * gib, Tags: []string{"lv:s"}}); err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"lvcreate", "--yes", "--snapshot", "vg0/src", "--name", "s", "--setactivationskip", "n", "--activate", "y",
			"--permission", "r", "--addtag", "thinlvm", "--addtag", "lv:s"},
		{"lvextend", "--size", "4294967296b", "vg0/s"},
	}
	calls := f.Calls()
	if diff := cmp.Diff(want, calls[1:3]); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
}

func TestCreateSnapshotIdempotent(t *testing.T) {
	f := testRunner()
	f.LVs = []fake.LV{{VG: "vg0", Name: "src", Pool: "pool", Size: 2 * gib, Tags: []string{"thinlvm"}}}
	e := newEnv(t, testConfig(), f, envOptions{})
	for _, req := range []*pb.CreateSnapshotRequest{
		{Name: "ro", SourceName: "src", ReadOnly: true},
		{Name: "big", SourceName: "src", SizeBytes: 3 * gib},
	} {
		t.Run(req.Name, func(t *testing.T) {
			first, err := e.lv.CreateSnapshot(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			mutations := e.mutations()
			again, err := e.lv.CreateSnapshot(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			diffLV(t, first.GetVolume(), again.GetVolume())
			e.settle(t)
			again, err = e.lv.CreateSnapshot(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			diffLV(t, first.GetVolume(), again.GetVolume())
			if got := e.mutations(); got != mutations {
				t.Errorf("a repeated request ran %d lvm mutations", got-mutations)
			}
		})
	}
	tests := []struct {
		name string
		req  *pb.CreateSnapshotRequest
	}{
		{"read-write where read-only", &pb.CreateSnapshotRequest{Name: "ro", SourceName: "src"}},
		{"smaller", &pb.CreateSnapshotRequest{Name: "big", SourceName: "src"}},
		{"other source", &pb.CreateSnapshotRequest{Name: "big", SourceName: "ro", SizeBytes: 3 * gib}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.lv.CreateSnapshot(t.Context(), tt.req)
			wantCode(t, err, codes.AlreadyExists)
		})
	}
}

// A snapshot made but not yet extended (lvmd stopped between the two
// commands) is extended by the repeated request.
func TestCreateSnapshotFinishesExtend(t *testing.T) {
	f := testRunner()
	f.LVs = []fake.LV{
		{VG: "vg0", Name: "src", Pool: "pool", Size: 2 * gib, Tags: []string{"thinlvm"}},
		{VG: "vg0", Name: "s", Pool: "pool", Origin: "src", Size: 2 * gib, Tags: []string{"thinlvm"}},
	}
	e := newEnv(t, testConfig(), f, envOptions{})
	resp, err := e.lv.CreateSnapshot(t.Context(), &pb.CreateSnapshotRequest{Name: "s", SourceName: "src", SizeBytes: 3 * gib})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetVolume().GetSizeBytes(); got != 3*gib {
		t.Errorf("size %d, want %d", got, 3*gib)
	}
	if lv, _ := f.GetLV("vg0", "s"); lv.Size != 3*gib {
		t.Errorf("lvm has %+v, want it extended", lv)
	}
}

func TestResizeLV(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fake.Runner)
		req   *pb.ResizeLVRequest
		code  codes.Code
		// size is the LV's size in lvm afterwards.
		size     uint64
		lvextend int
	}{
		{name: "grow", req: &pb.ResizeLVRequest{Name: "a", SizeBytes: 2 * gib}, size: 2 * gib, lvextend: 1},
		{name: "grow, rounded up", req: &pb.ResizeLVRequest{Name: "a", DeviceClass: "ssd", SizeBytes: gib + 1}, size: gib + 4*mib, lvextend: 1},
		{name: "same size", req: &pb.ResizeLVRequest{Name: "a", SizeBytes: gib}, size: gib},
		{name: "same size once rounded", req: &pb.ResizeLVRequest{Name: "a", SizeBytes: gib - mib}, size: gib},
		{name: "shrink", req: &pb.ResizeLVRequest{Name: "a", SizeBytes: gib - 4*mib}, code: codes.OutOfRange, size: gib},
		{name: "missing", req: &pb.ResizeLVRequest{Name: "b", SizeBytes: 2 * gib}, code: codes.NotFound, size: gib},
		{name: "in another device class", req: &pb.ResizeLVRequest{Name: "a", DeviceClass: "hdd", SizeBytes: 2 * gib}, code: codes.NotFound, size: gib},
		{name: "size 0", req: &pb.ResizeLVRequest{Name: "a"}, code: codes.InvalidArgument, size: gib},
		{name: "name invalid", req: &pb.ResizeLVRequest{Name: "a b", SizeBytes: 2 * gib}, code: codes.InvalidArgument, size: gib},
		{name: "more than available", req: &pb.ResizeLVRequest{Name: "a", SizeBytes: 15*gib + 1}, code: codes.ResourceExhausted, size: gib},
		{name: "exactly the available", req: &pb.ResizeLVRequest{Name: "a", SizeBytes: 15 * gib}, size: 15 * gib, lvextend: 1},
		{name: "largest size", req: &pb.ResizeLVRequest{Name: "a", SizeBytes: math.MaxUint64 - 4*mib + 2}, code: codes.ResourceExhausted, size: gib},
		{
			name:  "not managed",
			setup: func(f *fake.Runner) { f.LVs[0].Tags = nil },
			req:   &pb.ResizeLVRequest{Name: "a", SizeBytes: 2 * gib},
			code:  codes.FailedPrecondition,
			size:  gib,
		},
		{
			name: "lvm has no space",
			setup: func(f *fake.Runner) {
				f.Failures = []fake.Failure{{Subcommand: "lvextend", Stderr: "  Insufficient free space: 1 extents needed, but only 0 available"}}
			},
			req:      &pb.ResizeLVRequest{Name: "a", SizeBytes: 2 * gib},
			code:     codes.ResourceExhausted,
			size:     gib,
			lvextend: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testRunner()
			f.LVs = []fake.LV{{VG: "vg0", Name: "a", Pool: "pool", Size: gib, Tags: []string{"thinlvm"}}}
			if tt.setup != nil {
				tt.setup(f)
			}
			e := newEnv(t, testConfig(), f, envOptions{})
			resp, err := e.lv.ResizeLV(t.Context(), tt.req)
			wantCode(t, err, tt.code)
			if tt.code == codes.OK && resp.GetVolume().GetSizeBytes() != tt.size {
				t.Errorf("response size %d, want %d", resp.GetVolume().GetSizeBytes(), tt.size)
			}
			if lv, _ := f.GetLV("vg0", "a"); lv.Size != tt.size {
				t.Errorf("lvm size %d, want %d", lv.Size, tt.size)
			}
			if got := f.Count("lvextend"); got != tt.lvextend {
				t.Errorf("%d lvextend commands, want %d", got, tt.lvextend)
			}
			if tt.code == codes.OK {
				got, err := e.lv.GetLV(t.Context(), &pb.GetLVRequest{Name: "a"})
				if err != nil || got.GetVolume().GetSizeBytes() != tt.size {
					t.Errorf("GetLV after resize: %v, %v", got, err)
				}
			}
		})
	}
}

func TestRemoveLV(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fake.Runner)
		req   *pb.RemoveLVRequest
		code  codes.Code
		lvs   []string
		// lvremove is how many lvremove commands run.
		lvremove int
	}{
		{name: "present", req: &pb.RemoveLVRequest{Name: "a"}, lvs: []string{"vg0/foreign"}, lvremove: 1},
		{name: "absent", req: &pb.RemoveLVRequest{Name: "b"}, lvs: []string{"vg0/a", "vg0/foreign"}},
		{name: "in another device class", req: &pb.RemoveLVRequest{Name: "a", DeviceClass: "hdd"}, lvs: []string{"vg0/a", "vg0/foreign"}},
		{name: "not managed", req: &pb.RemoveLVRequest{Name: "foreign"}, code: codes.FailedPrecondition, lvs: []string{"vg0/a", "vg0/foreign"}},
		{name: "name invalid", req: &pb.RemoveLVRequest{Name: "pvmove0"}, code: codes.InvalidArgument, lvs: []string{"vg0/a", "vg0/foreign"}},
		{name: "unknown device class", req: &pb.RemoveLVRequest{Name: "a", DeviceClass: "x"}, code: codes.InvalidArgument, lvs: []string{"vg0/a", "vg0/foreign"}},
		{
			name: "already gone from lvm",
			setup: func(f *fake.Runner) {
				f.Failures = []fake.Failure{{Subcommand: "lvremove", Stderr: `  Failed to find logical volume "vg0/a"`}}
			},
			req:      &pb.RemoveLVRequest{Name: "a"},
			lvs:      []string{"vg0/a", "vg0/foreign"}, // the injected failure left it
			lvremove: 1,
		},
		{
			name: "lvm fails",
			setup: func(f *fake.Runner) {
				f.Failures = []fake.Failure{{Subcommand: "lvremove", Stderr: "  Logical volume vg0/a in use."}}
			},
			req:      &pb.RemoveLVRequest{Name: "a"},
			code:     codes.Internal,
			lvs:      []string{"vg0/a", "vg0/foreign"},
			lvremove: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testRunner()
			f.LVs = []fake.LV{
				{VG: "vg0", Name: "a", Pool: "pool", Size: gib, Tags: []string{"thinlvm"}},
				{VG: "vg0", Name: "foreign", Pool: "pool", Size: gib},
			}
			if tt.setup != nil {
				tt.setup(f)
			}
			e := newEnv(t, testConfig(), f, envOptions{})
			_, err := e.lv.RemoveLV(t.Context(), tt.req)
			wantCode(t, err, tt.code)
			diffNames(t, tt.lvs, f)
			if got := f.Count("lvremove"); got != tt.lvremove {
				t.Errorf("%d lvremove commands, want %d", got, tt.lvremove)
			}
			if _, inLVM := f.GetLV("vg0", tt.req.Name); tt.code == codes.OK && !inLVM {
				_, err := e.lv.GetLV(t.Context(), &pb.GetLVRequest{Name: tt.req.Name, DeviceClass: tt.req.DeviceClass})
				wantCode(t, err, codes.NotFound)
			}
		})
	}
}

// Thin snapshots outlive their origin, in lvm and in lvmd's view.
func TestRemoveOrigin(t *testing.T) {
	f := testRunner()
	f.LVs = []fake.LV{
		{VG: "vg0", Name: "src", Pool: "pool", Size: gib, Tags: []string{"thinlvm"}},
		{VG: "vg0", Name: "s", Pool: "pool", Origin: "src", Size: gib, Tags: []string{"thinlvm"}},
	}
	e := newEnv(t, testConfig(), f, envOptions{})
	if _, err := e.lv.RemoveLV(t.Context(), &pb.RemoveLVRequest{Name: "src"}); err != nil {
		t.Fatal(err)
	}
	for _, settled := range []bool{false, true} {
		if settled {
			e.settle(t)
		}
		resp, err := e.lv.GetLV(t.Context(), &pb.GetLVRequest{Name: "s"})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetVolume().GetOrigin(); got != "" {
			t.Errorf("settled %t: origin %q after the origin was removed", settled, got)
		}
	}
	// The snapshot is now a plain thin LV: CreateLV of its size finds it.
	if _, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "s", SizeBytes: gib}); err != nil {
		t.Errorf("CreateLV of the orphaned snapshot: %v", err)
	}
}

func TestGetAndListLVs(t *testing.T) {
	f := testRunner()
	f.Pools = append(f.Pools, fake.Pool{VG: "vg0", Name: "other", Size: gib})
	f.LVs = []fake.LV{
		{VG: "vg0", Name: "a", Pool: "pool", Size: gib, Tags: []string{"thinlvm", "lv:x"}},
		{VG: "vg0", Name: "b", Pool: "pool", Size: 2 * gib, Tags: []string{"thinlvm", "lv:y"}},
		{VG: "vg0", Name: "ro", Pool: "pool", Origin: "b", Size: 2 * gib, Tags: []string{"thinlvm", "lv:x"}, ReadOnly: true,
			Inactive: true, SkipActivation: true},
		{VG: "vg1", Name: "c", Pool: "tp", Size: gib, Tags: []string{"thinlvm", "lv:x"}},
		{VG: "vg0", Name: "foreign", Pool: "pool", Size: gib, Tags: []string{"lv:x"}},
		{VG: "vg0", Name: "elsewhere", Pool: "other", Size: gib, Tags: []string{"thinlvm", "lv:x"}},
	}
	e := newEnv(t, testConfig(), f, envOptions{})
	a := thinLV("ssd", "vg0", "a", gib, "lv:x")
	b := thinLV("ssd", "vg0", "b", 2*gib, "lv:y")
	ro := thinLV("ssd", "vg0", "ro", 2*gib, "lv:x")
	ro.Origin, ro.ReadOnly, ro.Active = "b", true, false
	c := thinLV("hdd", "vg1", "c", gib, "lv:x")

	listTests := []struct {
		name string
		req  *pb.ListLVsRequest
		code codes.Code
		want []*pb.LogicalVolume
	}{
		{name: "all", req: &pb.ListLVsRequest{}, want: []*pb.LogicalVolume{a, b, ro, c}},
		{name: "by tag", req: &pb.ListLVsRequest{Tag: "lv:x"}, want: []*pb.LogicalVolume{a, ro, c}},
		{name: "by managed tag", req: &pb.ListLVsRequest{Tag: "thinlvm"}, want: []*pb.LogicalVolume{a, b, ro, c}},
		{name: "by device class", req: &pb.ListLVsRequest{DeviceClass: "hdd"}, want: []*pb.LogicalVolume{c}},
		{name: "by device class and tag", req: &pb.ListLVsRequest{DeviceClass: "ssd", Tag: "lv:y"}, want: []*pb.LogicalVolume{b}},
		{name: "no match", req: &pb.ListLVsRequest{Tag: "lv:z"}},
		{name: "unknown device class", req: &pb.ListLVsRequest{DeviceClass: "x"}, code: codes.InvalidArgument},
		{name: "invalid tag", req: &pb.ListLVsRequest{Tag: "a,b"}, code: codes.InvalidArgument},
	}
	for _, tt := range listTests {
		t.Run("ListLVs "+tt.name, func(t *testing.T) {
			resp, err := e.lv.ListLVs(t.Context(), tt.req)
			wantCode(t, err, tt.code)
			if diff := cmp.Diff(tt.want, resp.GetVolumes(), protocmp.Transform(), ignoreUUID); diff != "" {
				t.Errorf("volumes (-want +got):\n%s", diff)
			}
		})
	}
	getTests := []struct {
		name string
		req  *pb.GetLVRequest
		code codes.Code
		want *pb.LogicalVolume
	}{
		{name: "thin LV", req: &pb.GetLVRequest{Name: "a"}, want: a},
		{name: "inactive read-only snapshot", req: &pb.GetLVRequest{Name: "ro", DeviceClass: "ssd"}, want: ro},
		{name: "other device class", req: &pb.GetLVRequest{Name: "c", DeviceClass: "hdd"}, want: c},
		{name: "wrong device class", req: &pb.GetLVRequest{Name: "c"}, code: codes.NotFound},
		{name: "not managed", req: &pb.GetLVRequest{Name: "foreign"}, code: codes.NotFound},
		{name: "in a pool lvmd does not serve", req: &pb.GetLVRequest{Name: "elsewhere"}, code: codes.NotFound},
		{name: "the thin pool", req: &pb.GetLVRequest{Name: "pool"}, code: codes.NotFound},
		{name: "missing", req: &pb.GetLVRequest{Name: "z"}, code: codes.NotFound},
		{name: "name invalid", req: &pb.GetLVRequest{Name: ""}, code: codes.InvalidArgument},
		{name: "unknown device class", req: &pb.GetLVRequest{Name: "a", DeviceClass: "x"}, code: codes.InvalidArgument},
	}
	for _, tt := range getTests {
		t.Run("GetLV "+tt.name, func(t *testing.T) {
			resp, err := e.lv.GetLV(t.Context(), tt.req)
			wantCode(t, err, tt.code)
			if tt.code == codes.OK {
				diffLV(t, tt.want, resp.GetVolume())
				lv, _ := f.GetLV(tt.want.VolumeGroup, tt.want.Name)
				if resp.GetVolume().GetUuid() != lv.UUID || lv.UUID == "" {
					t.Errorf("uuid %q, lvm says %q", resp.GetVolume().GetUuid(), lv.UUID)
				}
			}
		})
	}
	if got := f.Count("fullreport"); got != 1 {
		t.Errorf("reads ran %d reports, want only Start's", got)
	}
}

// Mutations of different LVs, reads and watchers at once: run with -race.
func TestConcurrentRequests(t *testing.T) {
	e := newEnv(t, testConfig(), testRunner(), envOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := e.vg.Watch(ctx, &pb.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			name := fmt.Sprintf("lv%d", i)
			class := []string{"ssd", "hdd"}[i%2]
			steps := []func() error{
				func() error {
					_, err := e.lv.CreateLV(ctx, &pb.CreateLVRequest{Name: name, DeviceClass: class, SizeBytes: 64 * mib})
					return err
				},
				func() error {
					_, err := e.lv.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: name + "s", DeviceClass: class, SourceName: name, SizeBytes: 128 * mib})
					return err
				},
				func() error {
					_, err := e.lv.ResizeLV(ctx, &pb.ResizeLVRequest{Name: name, DeviceClass: class, SizeBytes: 256 * mib})
					return err
				},
				func() error { _, err := e.vg.GetCapacity(ctx, &pb.GetCapacityRequest{}); return err },
				func() error { _, err := e.lv.ListLVs(ctx, &pb.ListLVsRequest{}); return err },
				func() error {
					_, err := e.lv.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name, DeviceClass: class})
					return err
				},
			}
			for j, step := range steps {
				if err := step(); err != nil {
					t.Errorf("%s step %d: %v", name, j, err)
				}
			}
		})
	}
	wg.Wait()
	e.settle(t)
	resp, err := e.lv.ListLVs(t.Context(), &pb.ListLVsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, v := range resp.GetVolumes() {
		listed = append(listed, v.GetVolumeGroup()+"/"+v.GetName())
		if lv, _ := e.fake.GetLV(v.GetVolumeGroup(), v.GetName()); lv.Size != v.GetSizeBytes() || lv.Size != 128*mib {
			t.Errorf("%s: lvmd says %d bytes, lvm %d, want %d", v.GetName(), v.GetSizeBytes(), lv.Size, 128*mib)
		}
	}
	if diff := cmp.Diff(lvNames(e.fake), listed, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("ListLVs against lvm (-lvm +lvmd):\n%s", diff)
	}
	if len(listed) != 8 {
		t.Errorf("%d LVs left, want the 8 snapshots: %q", len(listed), listed)
	}
}

// A repeated request returns the LV it made even when the pool has since
// filled: idempotency does not depend on space.
func TestCreateLVIdempotentWhenFull(t *testing.T) {
	e := newEnv(t, testConfig(), testRunner(), envOptions{interval: 10 * time.Millisecond})
	req := &pb.CreateLVRequest{Name: "big", SizeBytes: 14 * gib} // all there is
	if _, err := e.lv.CreateLV(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	e.fake.SetPoolUsage("vg0", "pool", 95, 50)
	eventually(t, "the pool's use in the report", func() bool {
		return e.d.store.current().report.LV("vg0", "pool").DataPercent == 95
	})
	if _, err := e.lv.CreateLV(t.Context(), req); err != nil {
		t.Errorf("repeated CreateLV: %v", err)
	}
	_, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "other", SizeBytes: mib})
	wantCode(t, err, codes.ResourceExhausted)
}

// A transient snapshot (a copy's point in time) is not counted against the
// overprovision ratio: a full device class still makes one; it must be
// read-only and of its source's size.
func TestCreateTransientSnapshotWhenFull(t *testing.T) {
	e := newEnv(t, testConfig(), testRunner(), envOptions{})
	if _, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "big", SizeBytes: 14 * gib, Tags: []string{"lv:big"}}); err != nil {
		t.Fatal(err)
	}
	_, err := e.lv.CreateSnapshot(t.Context(), &pb.CreateSnapshotRequest{Name: "plain", SourceName: "big", ReadOnly: true})
	wantCode(t, err, codes.ResourceExhausted)
	got, err := e.lv.CreateSnapshot(t.Context(), &pb.CreateSnapshotRequest{Name: "tx", SourceName: "big", ReadOnly: true, Transient: true})
	if err != nil {
		t.Fatalf("transient snapshot of a full class: %v", err)
	}
	if v := got.GetVolume(); !v.GetReadOnly() || v.GetOrigin() != "big" || v.GetSizeBytes() != 14*gib {
		t.Errorf("transient snapshot %v", v)
	}
	for _, req := range []*pb.CreateSnapshotRequest{
		{Name: "rw", SourceName: "big", Transient: true},
		{Name: "larger", SourceName: "big", ReadOnly: true, Transient: true, SizeBytes: 15 * gib},
	} {
		_, err := e.lv.CreateSnapshot(t.Context(), req)
		wantCode(t, err, codes.InvalidArgument)
	}
}

func TestChangeLV(t *testing.T) {
	ro, rw, on, off := new(true), new(false), new(true), new(false)
	tests := []struct {
		name     string
		req      *pb.ChangeLVRequest
		code     codes.Code
		readOnly bool
		active   bool
		// lvchange is how many lvchange commands run.
		lvchange int
	}{
		{name: "seal: read-only and inactive", req: &pb.ChangeLVRequest{Name: "a", ReadOnly: ro, Active: off}, readOnly: true, lvchange: 2},
		{name: "read-only only", req: &pb.ChangeLVRequest{Name: "a", ReadOnly: ro}, readOnly: true, active: true, lvchange: 1},
		{name: "what already holds is a no-op", req: &pb.ChangeLVRequest{Name: "a", ReadOnly: rw, Active: on}, active: true},
		{name: "nothing asked", req: &pb.ChangeLVRequest{Name: "a"}, active: true},
		{name: "missing", req: &pb.ChangeLVRequest{Name: "b", ReadOnly: ro}, code: codes.NotFound, active: true},
		{name: "name invalid", req: &pb.ChangeLVRequest{Name: "-a", ReadOnly: ro}, code: codes.InvalidArgument, active: true},
		{name: "unknown class", req: &pb.ChangeLVRequest{Name: "a", DeviceClass: "nvme", ReadOnly: ro}, code: codes.InvalidArgument, active: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testRunner()
			f.LVs = []fake.LV{{VG: "vg0", Name: "a", Pool: "pool", Size: gib, Tags: []string{"thinlvm"}}}
			e := newEnv(t, testConfig(), f, envOptions{})
			resp, err := e.lv.ChangeLV(t.Context(), tt.req)
			wantCode(t, err, tt.code)
			if tt.code == codes.OK && (resp.GetVolume().GetReadOnly() != tt.readOnly || resp.GetVolume().GetActive() != tt.active) {
				t.Errorf("response read-only %t active %t, want %t %t", resp.GetVolume().GetReadOnly(), resp.GetVolume().GetActive(), tt.readOnly, tt.active)
			}
			lv, _ := f.GetLV("vg0", "a")
			if lv.ReadOnly != tt.readOnly || lv.Inactive == tt.active {
				t.Errorf("lvm has read-only %t inactive %t, want %t %t", lv.ReadOnly, lv.Inactive, tt.readOnly, !tt.active)
			}
			if got := f.Count("lvchange"); got != tt.lvchange {
				t.Errorf("%d lvchange commands, want %d", got, tt.lvchange)
			}
			// The cached view agrees with lvm without a new report.
			got, err := e.lv.GetLV(t.Context(), &pb.GetLVRequest{Name: "a"})
			if err != nil {
				t.Fatal(err)
			}
			if got.GetVolume().GetReadOnly() != tt.readOnly || got.GetVolume().GetActive() != tt.active {
				t.Errorf("GetLV says read-only %t active %t, want %t %t", got.GetVolume().GetReadOnly(), got.GetVolume().GetActive(), tt.readOnly, tt.active)
			}
		})
	}
}

// Device paths follow lvm's device directory (DM_DEV_DIR) in every answer:
// the create's and the report's.
func TestDevicePathsUnderDevDir(t *testing.T) {
	e := newEnv(t, testConfig(), testRunner(), envOptions{devDir: "/host/dev"})
	ctx := t.Context()
	created, err := e.lv.CreateLV(ctx, &pb.CreateLVRequest{Name: "pvc-1", SizeBytes: gib})
	if err != nil {
		t.Fatal(err)
	}
	e.settle(t)
	got, err := e.lv.GetLV(ctx, &pb.GetLVRequest{Name: "pvc-1"})
	if err != nil {
		t.Fatal(err)
	}
	for what, path := range map[string]string{"CreateLV": created.GetVolume().GetDevicePath(), "GetLV": got.GetVolume().GetDevicePath()} {
		if path != "/host/dev/vg0/pvc-1" {
			t.Errorf("%s: device path %q, want /host/dev/vg0/pvc-1", what, path)
		}
	}
}

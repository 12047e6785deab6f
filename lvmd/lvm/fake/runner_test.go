package fake_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
)

const (
	mib = uint64(1) << 20
	gib = uint64(1) << 30
)

func newRunner() *fake.Runner {
	return &fake.Runner{
		VGs:   []fake.VG{{Name: "vg0", Size: 20 * gib, Free: 10 * gib}, {Name: "vg1", Size: 8 * gib, Free: 8*gib - 1*gib}},
		Pools: []fake.Pool{{VG: "vg0", Name: "pool", Size: 8 * gib, DataPercent: 12.5, MetadataPercent: 3}, {VG: "vg1", Name: "tp", Size: gib}},
		LVs: []fake.LV{
			{VG: "vg0", Name: "thin1", Pool: "pool", Size: 2 * gib, Tags: []string{"thinlvm", "a=b"}, DataPercent: 50},
			{VG: "vg0", Name: "snap1", Pool: "pool", Origin: "thin1", Size: 2 * gib, ReadOnly: true, Inactive: true, SkipActivation: true},
		},
	}
}

// ignoreUUID leaves out what the fake numbers itself: UUIDs, thin ids, and
// chunk sizes (TestThinIDsAndChunkSize checks those).
var ignoreUUID = cmpopts.IgnoreFields(lvm.LV{}, "UUID", "ThinID", "ChunkSize")

func report(t *testing.T, c *lvm.Client, vgs ...string) *lvm.Report {
	t.Helper()
	r, err := c.FullReport(t.Context(), vgs)
	if err != nil {
		t.Fatalf("FullReport: %v", err)
	}
	return r
}

func TestFullReport(t *testing.T) {
	f := newRunner()
	c := &lvm.Client{Runner: f}
	got := report(t, c, "vg0", "vg1")
	want := &lvm.Report{
		VGs: []lvm.VG{
			// The default metadata area; vg0 holds a pool and two LVs, vg1 a pool.
			{Name: "vg0", Size: 20 * gib, Free: 10 * gib, ExtentSize: 4 * mib, MetadataAreaSize: 1044480, MetadataAreaFree: 518144},
			{Name: "vg1", Size: 8 * gib, Free: 7 * gib, ExtentSize: 4 * mib, MetadataAreaSize: 1044480, MetadataAreaFree: 519168},
		},
		LVs: []lvm.LV{
			{Name: "pool", VG: "vg0", Size: 8 * gib, Attr: "twi-aotz--", DataPercent: 12.5, MetadataPercent: 3, WhenFull: "queue"},
			{Name: "snap1", VG: "vg0", Path: "/dev/vg0/snap1", Size: 2 * gib, Attr: "Vri---tz-k", Origin: "thin1", Pool: "pool"},
			{Name: "thin1", VG: "vg0", Path: "/dev/vg0/thin1", Size: 2 * gib, Attr: "Vwi-a-tz--", Pool: "pool",
				Tags: []string{"thinlvm", "a=b"}, DataPercent: 50},
			{Name: "tp", VG: "vg1", Size: gib, Attr: "twi-aotz--", WhenFull: "queue"},
		},
	}
	if diff := cmp.Diff(want, got, ignoreUUID, cmpopts.IgnoreFields(lvm.VG{}, "UUID")); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	uuids := map[string]bool{}
	for _, lv := range got.LVs {
		uuids[lv.UUID] = true
	}
	for _, vg := range got.VGs {
		uuids[vg.UUID] = true
	}
	if len(uuids) != 6 || uuids[""] {
		t.Errorf("UUIDs not unique and set: %v", uuids)
	}
	if again := report(t, c, "vg0", "vg1"); !cmp.Equal(got, again) {
		t.Errorf("UUIDs changed between reports:\n%s", cmp.Diff(got, again))
	}
	if got := report(t, c, "vg1"); len(got.VGs) != 1 || len(got.LVs) != 1 {
		t.Errorf("report of vg1 = %+v, want vg1 only", got)
	}
	if got := report(t, c); len(got.VGs) != 2 {
		t.Errorf("report of no VG named = %+v, want all", got)
	}
	if _, err := c.FullReport(t.Context(), []string{"vg0", "vg9"}); !errors.Is(err, lvm.ErrNotFound) {
		t.Errorf("report of a missing VG: %v, want ErrNotFound", err)
	}
}

// The fake's JSON has the shape of lvm2's: one report per VG, all values
// strings, the switched-off sub-reports as lists of empty objects.
func TestFullReportJSON(t *testing.T) {
	f := &fake.Runner{
		VGs:   []fake.VG{{Name: "vg0", UUID: "u-vg", Size: 8 * gib, Free: 4 * gib}},
		Pools: []fake.Pool{{VG: "vg0", Name: "pool", UUID: "u-pool", Size: 4 * gib, DataPercent: 3.29, MetadataPercent: 12.79}},
		LVs:   []fake.LV{{VG: "vg0", Name: "thin1", UUID: "u-thin1", Pool: "pool", Size: 2 * gib, DataPercent: 0.78}},
	}
	args := append([]string{"fullreport", "--reportformat", "json", "--units", "b", "--nosuffix",
		"--configreport", "vg", "-o", "vg_name,vg_uuid,vg_size,vg_free,vg_extent_size",
		"--configreport", "lv", "-o", "lv_name,lv_size,lv_attr,lv_tags,data_percent,metadata_percent",
		"--configreport", "pv", "-o,", "--configreport", "pvseg", "-o,", "--configreport", "seg", "-o,"}, "vg0")
	out, err := f.Run(t.Context(), args...)
	if err != nil {
		t.Fatal(err)
	}
	want := `  {
      "report": [
          {
              "vg": [
                  {"vg_name":"vg0", "vg_uuid":"u-vg", "vg_size":"8589934592", "vg_free":"4294967296", "vg_extent_size":"4194304"}
              ]
              ,
              "pv": [
                  {}
              ]
              ,
              "lv": [
                  {"lv_name":"pool", "lv_size":"4294967296", "lv_attr":"twi-aotz--", "lv_tags":"", "data_percent":"3.29", "metadata_percent":"12.79"},
                  {"lv_name":"thin1", "lv_size":"2147483648", "lv_attr":"Vwi-a-tz--", "lv_tags":"", "data_percent":"0.78", "metadata_percent":""}
              ]
              ,
              "pvseg": [
                  {}
              ]
              ,
              "seg": [
                  {},
                  {}
              ]
          }
      ]
  }
`
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("fullreport output (-want +got):\n%s", diff)
	}
}

func TestCommands(t *testing.T) {
	type step struct {
		call func(ctx context.Context, c *lvm.Client, f *fake.Runner) error
		// err is the sentinel the step's error must match; nil for success.
		err error
		// stderr is a fragment the error's stderr must have.
		stderr string
	}
	createThin := func(name string, size uint64, tags ...string) func(context.Context, *lvm.Client, *fake.Runner) error {
		return func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
			return c.CreateThin(ctx, lvm.ThinSpec{VG: "vg0", Pool: "pool", Name: name, Size: size, Tags: tags})
		}
	}
	tests := []struct {
		name  string
		steps []step
		// want is the LVs of vg0 afterwards, the pool included.
		want []lvm.LV
		// vgFree is vg0's free space afterwards, 0 for unchanged.
		vgFree uint64
	}{
		{
			name:  "create thin rounds up to an extent",
			steps: []step{{call: createThin("new", 5*mib+512, "thinlvm", "x:y")}},
			want: []lvm.LV{{Name: "new", VG: "vg0", Path: "/dev/vg0/new", Size: 8 * mib, Attr: "Vwi-a-tz--", Pool: "pool",
				Tags: []string{"thinlvm", "x:y"}}},
		},
		{
			name:  "create thin that exists",
			steps: []step{{call: createThin("thin1", gib), err: lvm.ErrExists, stderr: `Logical Volume "thin1" already exists in volume group "vg0"`}},
		},
		{
			name:  "create thin named like the pool",
			steps: []step{{call: createThin("pool", gib), err: lvm.ErrExists}},
		},
		{
			name: "create thin in a missing pool",
			steps: []step{{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
				return c.CreateThin(ctx, lvm.ThinSpec{VG: "vg0", Pool: "nopool", Name: "a", Size: gib})
			}, err: lvm.ErrNotFound, stderr: `Failed to find logical volume "vg0/nopool"`}},
		},
		{
			name: "create thin in a missing VG",
			steps: []step{{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
				return c.CreateThin(ctx, lvm.ThinSpec{VG: "vg9", Pool: "pool", Name: "a", Size: gib})
			}, err: lvm.ErrNotFound, stderr: `Volume group "vg9" not found`}},
		},
		{
			name: "create thin in a full pool",
			steps: []step{
				{call: func(_ context.Context, _ *lvm.Client, f *fake.Runner) error {
					f.SetPoolUsage("vg0", "pool", 100, 3)
					return nil
				}},
				{call: createThin("a", gib), err: lvm.ErrInsufficientSpace, stderr: "free space in thin pool vg0/pool reached threshold"},
			},
			want: []lvm.LV{{Name: "pool", VG: "vg0", Size: 8 * gib, Attr: "twi-aotzD-", DataPercent: 100, MetadataPercent: 3, WhenFull: "queue"}},
		},
		{
			name: "snapshot activated, read-only",
			steps: []step{{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
				return c.CreateThinSnapshot(ctx, lvm.SnapshotSpec{VG: "vg0", Source: "thin1", Name: "s", ReadOnly: true, Activate: true, Tags: []string{"thinlvm"}})
			}}},
			want: []lvm.LV{{Name: "s", VG: "vg0", Path: "/dev/vg0/s", Size: 2 * gib, Attr: "Vri-a-tz--", Origin: "thin1", Pool: "pool",
				Tags: []string{"thinlvm"}}},
		},
		{
			name: "snapshot not activated keeps activation skip",
			steps: []step{{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
				return c.CreateThinSnapshot(ctx, lvm.SnapshotSpec{VG: "vg0", Source: "thin1", Name: "s"})
			}}},
			want: []lvm.LV{{Name: "s", VG: "vg0", Path: "/dev/vg0/s", Size: 2 * gib, Attr: "Vwi---tz-k", Origin: "thin1", Pool: "pool"}},
		},
		{
			name: "snapshot of a missing source",
			steps: []step{{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
				return c.CreateThinSnapshot(ctx, lvm.SnapshotSpec{VG: "vg0", Source: "nosuch", Name: "s"})
			}, err: lvm.ErrNotFound, stderr: `Failed to find logical volume "vg0/nosuch"`}},
		},
		{
			name: "snapshot over an existing name",
			steps: []step{{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
				return c.CreateThinSnapshot(ctx, lvm.SnapshotSpec{VG: "vg0", Source: "thin1", Name: "snap1"})
			}, err: lvm.ErrExists}},
		},
		{
			name: "extend",
			steps: []step{{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
				return c.Extend(ctx, "vg0", "thin1", 3*gib-512)
			}}},
			want: []lvm.LV{{Name: "thin1", VG: "vg0", Path: "/dev/vg0/thin1", Size: 3 * gib, Attr: "Vwi-a-tz--", Pool: "pool",
				Tags: []string{"thinlvm", "a=b"}, DataPercent: 50}},
		},
		{
			name: "extend to the same size",
			steps: []step{{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
				return c.Extend(ctx, "vg0", "thin1", 2*gib-mib)
			}, err: lvm.ErrSizeUnchanged, stderr: "New size (512 extents) matches existing size (512 extents)."}},
		},
		{
			name: "extend to a smaller size",
			steps: []step{{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
				return c.Extend(ctx, "vg0", "thin1", gib)
			}, err: lvm.ErrShrink, stderr: "New size given (256 extents) not larger than existing size (512 extents)"}},
		},
		{
			name: "extend a missing LV",
			steps: []step{{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
				return c.Extend(ctx, "vg0", "nosuch", gib)
			}, err: lvm.ErrNotFound, stderr: `Failed to find logical volume "vg0/nosuch"`}},
		},
		{
			name: "remove an origin: its snapshot stays",
			steps: []step{{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
				return c.Remove(ctx, "vg0", "thin1")
			}}},
			want: []lvm.LV{{Name: "snap1", VG: "vg0", Path: "/dev/vg0/snap1", Size: 2 * gib, Attr: "Vri---tz-k", Pool: "pool"}},
		},
		{
			name: "remove a missing LV",
			steps: []step{{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
				return c.Remove(ctx, "vg0", "nosuch")
			}, err: lvm.ErrNotFound, stderr: `Failed to find logical volume "vg0/nosuch"`}},
		},
		{
			name: "autoextend under the threshold does nothing",
			steps: []step{{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
				return c.AutoExtendPool(ctx, "vg0", "pool", 80, 50)
			}}},
		},
		{
			name: "autoextend over the threshold by data",
			steps: []step{
				{call: func(_ context.Context, _ *lvm.Client, f *fake.Runner) error {
					f.SetPoolUsage("vg0", "pool", 90, 40)
					return nil
				}},
				{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
					return c.AutoExtendPool(ctx, "vg0", "pool", 80, 25)
				}},
			},
			want:   []lvm.LV{{Name: "pool", VG: "vg0", Size: 10 * gib, Attr: "twi-aotz--", DataPercent: 72, MetadataPercent: 32, WhenFull: "queue"}},
			vgFree: 8 * gib,
		},
		{
			name: "autoextend over the threshold by metadata",
			steps: []step{
				{call: func(_ context.Context, _ *lvm.Client, f *fake.Runner) error {
					f.SetPoolUsage("vg0", "pool", 10, 80)
					return nil
				}},
				{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
					return c.AutoExtendPool(ctx, "vg0", "pool", 80, 100)
				}},
			},
			want:   []lvm.LV{{Name: "pool", VG: "vg0", Size: 16 * gib, Attr: "twi-aotz--", DataPercent: 5, MetadataPercent: 40, WhenFull: "queue"}},
			vgFree: 2 * gib,
		},
		{
			name: "autoextend without room in the VG",
			steps: []step{
				{call: func(_ context.Context, _ *lvm.Client, f *fake.Runner) error {
					f.SetPoolUsage("vg0", "pool", 95, 40)
					return nil
				}},
				{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
					return c.AutoExtendPool(ctx, "vg0", "pool", 80, 100) // 8 GiB more, 10 GiB free...
				}},
				{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
					return c.AutoExtendPool(ctx, "vg0", "pool", 45, 100) // ...then 16 GiB more, 2 GiB free
				}, err: lvm.ErrInsufficientSpace, stderr: "Insufficient free space: 4096 extents needed, but only 512 available"},
			},
			want:   []lvm.LV{{Name: "pool", VG: "vg0", Size: 16 * gib, Attr: "twi-aotz--", DataPercent: 47.5, MetadataPercent: 20, WhenFull: "queue"}},
			vgFree: 2 * gib,
		},
		{
			name: "errorwhenfull on a thin pool",
			steps: []step{
				{call: func(ctx context.Context, c *lvm.Client, _ *fake.Runner) error {
					return c.SetErrorWhenFull(ctx, "vg0", "pool", true)
				}},
				{call: createThin("a", gib)},
			},
			want: []lvm.LV{{Name: "a", VG: "vg0", Path: "/dev/vg0/a", Size: gib, Attr: "Vwi-a-tz--", Pool: "pool"},
				{Name: "pool", VG: "vg0", Size: 8 * gib, Attr: "twi-aotz--", DataPercent: 12.5, MetadataPercent: 3, WhenFull: "error"}},
		},
		{
			name: "injected failure leaves the state as it was",
			steps: []step{
				{call: func(_ context.Context, _ *lvm.Client, f *fake.Runner) error {
					f.FailNext(fake.Failure{Subcommand: "lvcreate", Stderr: "  Insufficient free space: 1 extents needed, but only 0 available"})
					return nil
				}},
				{call: createThin("a", gib), err: lvm.ErrInsufficientSpace, stderr: "Insufficient free space"},
				{call: createThin("a", gib)},
			},
			want: []lvm.LV{{Name: "a", VG: "vg0", Path: "/dev/vg0/a", Size: gib, Attr: "Vwi-a-tz--", Pool: "pool"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newRunner()
			c := &lvm.Client{Runner: f}
			before := report(t, c, "vg0")
			for i, s := range tt.steps {
				err := s.call(t.Context(), c, f)
				if s.err == nil {
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					continue
				}
				if !errors.Is(err, s.err) {
					t.Fatalf("step %d: error %v, want %v", i, err, s.err)
				}
				var cerr *lvm.CommandError
				if !errors.As(err, &cerr) || cerr.ExitCode != fake.ExitFailed || !strings.Contains(cerr.Stderr, s.stderr) {
					t.Fatalf("step %d: error %#v, want exit code %d and stderr with %q", i, cerr, fake.ExitFailed, s.stderr)
				}
			}
			after := report(t, c, "vg0")
			if diff := cmp.Diff(changed(before, after), tt.want, ignoreUUID, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("LVs added or changed (-got +want):\n%s", diff)
			}
			wantFree := before.VGs[0].Free
			if tt.vgFree != 0 {
				wantFree = tt.vgFree
			}
			if got := after.VGs[0].Free; got != wantFree {
				t.Errorf("vg0 free = %d, want %d", got, wantFree)
			}
		})
	}
}

// changed returns the LVs of after that are new or differ from before.
func changed(before, after *lvm.Report) []lvm.LV {
	var out []lvm.LV
	for _, lv := range after.LVs {
		if old := before.LV(lv.VG, lv.Name); old == nil || !cmp.Equal(*old, lv) {
			out = append(out, lv)
		}
	}
	return out
}

func TestRecordsCalls(t *testing.T) {
	f := newRunner()
	c := &lvm.Client{Runner: f}
	report(t, c, "vg0")
	_ = c.Remove(t.Context(), "vg0", "nosuch")
	if err := c.Remove(t.Context(), "vg0", "snap1"); err != nil {
		t.Fatal(err)
	}
	calls := f.Calls()
	if len(calls) != 3 || f.Total() != 3 {
		t.Fatalf("recorded %d (Total %d) calls, want 3: %q", len(calls), f.Total(), calls)
	}
	if diff := cmp.Diff([]string{"lvremove", "--yes", "--force", "vg0/snap1"}, calls[2]); diff != "" {
		t.Errorf("last call (-want +got):\n%s", diff)
	}
	for sub, want := range map[string]int{"fullreport": 1, "lvremove": 2, "lvcreate": 0} {
		if got := f.Count(sub); got != want {
			t.Errorf("Count(%s) = %d, want %d", sub, got, want)
		}
	}
	calls[2][0] = "changed"
	if f.Calls()[2][0] != "lvremove" {
		t.Error("Calls returned the fake's own slices")
	}
}

func TestFailures(t *testing.T) {
	f := newRunner()
	f.Failures = []fake.Failure{{Subcommand: "lvremove", ExitCode: 7, Stderr: "boom"}, {Stderr: "any"}}
	c := &lvm.Client{Runner: f}
	// The first failure waits for an lvremove; the second takes any command.
	_, err := c.FullReport(t.Context(), []string{"vg0"})
	var cerr *lvm.CommandError
	if !errors.As(err, &cerr) || cerr.Stderr != "any" || cerr.ExitCode != fake.ExitFailed {
		t.Fatalf("FullReport: %v, want the failure for any command", err)
	}
	err = c.Remove(t.Context(), "vg0", "thin1")
	if !errors.As(err, &cerr) || cerr.Stderr != "boom" || cerr.ExitCode != 7 {
		t.Fatalf("Remove: %v, want the lvremove failure", err)
	}
	if _, ok := f.GetLV("vg0", "thin1"); !ok {
		t.Error("a failed lvremove removed the LV")
	}
	if err := c.Remove(t.Context(), "vg0", "thin1"); err != nil {
		t.Fatalf("Remove after the failures: %v", err)
	}
	if !strings.Contains(cerr.Error(), "exit code 7: boom") {
		t.Errorf("CommandError.Error() = %q", cerr.Error())
	}
}

func TestUnsupported(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"unknown subcommand", []string{"vgcreate", "vg2", "/dev/sdb"}},
		{"no subcommand", nil},
		{"unknown option", []string{"lvcreate", "--yes", "--thin", "vg0/pool", "--virtualsize", "1b", "--name", "a", "--wipesignatures", "y"}},
		{"size without unit", []string{"lvcreate", "--yes", "--thin", "vg0/pool", "--virtualsize", "1073741824", "--name", "a"}},
		{"size in GiB", []string{"lvextend", "--size", "2g", "vg0/thin1"}},
		{"size 0", []string{"lvextend", "--size", "0b", "vg0/thin1"}},
		{"thin and snapshot", []string{"lvcreate", "--thin", "--snapshot", "vg0/thin1", "--name", "a"}},
		{"old-style snapshot", []string{"lvcreate", "--snapshot", "vg0/thin1", "--size", "1073741824b", "--name", "a"}},
		{"lvremove that would prompt", []string{"lvremove", "vg0/thin1"}},
		{"remove the pool", []string{"lvremove", "--yes", "--force", "vg0/pool"}},
		{"two targets", []string{"lvremove", "--yes", "--force", "vg0/thin1", "vg0/snap1"}},
		{"target without VG", []string{"lvextend", "--size", "4194304b", "thin1"}},
		{"report in human units", []string{"fullreport", "--reportformat", "json", "--units", "h",
			"--configreport", "vg", "-o", "vg_name", "--configreport", "lv", "-o", "lv_name",
			"--configreport", "pv", "-o,", "--configreport", "pvseg", "-o,", "--configreport", "seg", "-o,"}},
		{"report with default segment fields", []string{"fullreport", "--reportformat", "json", "--units", "b", "--nosuffix",
			"--configreport", "vg", "-o", "vg_name", "--configreport", "lv", "-o", "lv_name"}},
		{"autoextend policy unparsable", []string{"lvextend", "--use-policies", "--config", "activation{}", "vg0/pool"}},
		{"tags with activation", []string{"lvchange", "--addtag", "x", "--activate", "n", "vg0/thin1"}},
		{"dmsetup other than message", []string{"dmsetup", "remove", "vg0-pool-tpool"}},
		{"dmsetup message unknown", []string{"dmsetup", "message", "vg0-pool-tpool", "0", "create_thin", "9"}},
		{"thin_delta without -m", []string{"thin_delta", "--snap1", "1", "--snap2", "2", "/dev/mapper/vg0-pool_tmeta"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newRunner()
			before := f.ListLVs()
			_, err := f.Run(t.Context(), tt.args...)
			var cerr *lvm.CommandError
			if !errors.As(err, &cerr) || cerr.ExitCode != fake.ExitInvalidCommandLine || !strings.Contains(cerr.Stderr, "unsupported") {
				t.Errorf("Run(%q) = %v, want an unsupported-command error", tt.args, err)
			}
			// Thin ids are numbered at the first command.
			if diff := cmp.Diff(before, f.ListLVs(), cmpopts.IgnoreFields(fake.LV{}, "ThinID")); diff != "" {
				t.Errorf("state changed (-before +after):\n%s", diff)
			}
		})
	}
}

// lvm takes sizes in bytes only as whole sectors.
func TestSizeInSectors(t *testing.T) {
	f := newRunner()
	err := (&lvm.Client{Runner: f}).CreateThin(t.Context(), lvm.ThinSpec{VG: "vg0", Pool: "pool", Name: "a", Size: gib + 1})
	var cerr *lvm.CommandError
	if !errors.As(err, &cerr) || cerr.ExitCode != fake.ExitInvalidCommandLine ||
		!strings.Contains(cerr.Stderr, "Size is not a multiple of 512. Try using 1073741824 or 1073742336.") {
		t.Errorf("CreateThin of %d bytes: %v", gib+1, err)
	}
	if _, ok := f.GetLV("vg0", "a"); ok {
		t.Error("LV created")
	}
}

func TestUnknownField(t *testing.T) {
	f := newRunner()
	_, err := f.Run(t.Context(), "fullreport", "--reportformat", "json", "--units", "b", "--nosuffix",
		"--configreport", "vg", "-o", "vg_name,vg_colour", "--configreport", "lv", "-o", "lv_name",
		"--configreport", "pv", "-o,", "--configreport", "pvseg", "-o,", "--configreport", "seg", "-o,")
	var cerr *lvm.CommandError
	if !errors.As(err, &cerr) || cerr.Stderr != "Unrecognised field: vg_colour" {
		t.Errorf("report with an unknown field: %v", err)
	}
}

// A command whose context ended before Run is not started, as with
// lvm.ExecRunner.
func TestCancelledContext(t *testing.T) {
	f := newRunner()
	f.OnRun = func(context.Context, []string) { t.Error("a command with a cancelled context started") }
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := (&lvm.Client{Runner: f}).Remove(ctx, "vg0", "thin1"); !errors.Is(err, context.Canceled) {
		t.Errorf("Remove with a cancelled context: %v, want context.Canceled", err)
	}
	if _, ok := f.GetLV("vg0", "thin1"); !ok {
		t.Error("a cancelled lvremove removed the LV")
	}
	if got := f.Total(); got != 0 {
		t.Errorf("%d commands recorded, want none", got)
	}
}

// A command held in OnRun outlives its context, as lvm.ExecRunner's
// process does: Run returns at once, the command completes when let go.
func TestHeldCommandOutlivesContext(t *testing.T) {
	tests := []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		cancel  bool
		wantErr error
	}{
		{name: "cancelled", ctx: func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, cancel: true, wantErr: context.Canceled},
		{name: "deadline passed", ctx: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 20*time.Millisecond)
		}, wantErr: context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newRunner()
			started, release := make(chan struct{}), make(chan struct{})
			f.OnRun = func(_ context.Context, args []string) {
				if args[0] == "lvremove" {
					close(started)
					<-release
				}
			}
			ctx, cancel := tt.ctx()
			defer cancel()
			ran := make(chan error, 1)
			go func() { ran <- (&lvm.Client{Runner: f}).Remove(ctx, "vg0", "thin1") }()
			<-started
			if tt.cancel {
				cancel()
			}
			err := <-ran
			var still *lvm.StillRunningError
			if !errors.As(err, &still) || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Remove: %v, want a *lvm.StillRunningError wrapping %v", err, tt.wantErr)
			}
			if _, ok := f.GetLV("vg0", "thin1"); !ok {
				t.Fatal("the held lvremove removed the LV before it was let go")
			}
			close(release)
			<-still.Done
			if _, ok := f.GetLV("vg0", "thin1"); ok {
				t.Error("the lvremove did not complete after its context ended")
			}
			if got := f.Count("lvremove"); got != 1 {
				t.Errorf("%d lvremove commands recorded, want 1", got)
			}
		})
	}
}

func TestAccessors(t *testing.T) {
	f := newRunner()
	f.AddLV(fake.LV{VG: "vg1", Name: "foreign", Pool: "tp", Size: gib})
	if lv, ok := f.GetLV("vg1", "foreign"); !ok || lv.Size != gib {
		t.Errorf("GetLV(vg1, foreign) = %+v, %t", lv, ok)
	}
	if _, ok := f.GetLV("vg1", "thin1"); ok {
		t.Error("GetLV(vg1, thin1) found an LV of vg0")
	}
	if p, ok := f.GetPool("vg0", "pool"); !ok || p.Size != 8*gib {
		t.Errorf("GetPool = %+v, %t", p, ok)
	}
	if vg, ok := f.GetVG("vg1"); !ok || vg.Free != 7*gib {
		t.Errorf("GetVG = %+v, %t", vg, ok)
	}
	var names []string
	for _, lv := range f.ListLVs() {
		names = append(names, lv.VG+"/"+lv.Name)
	}
	if diff := cmp.Diff([]string{"vg0/snap1", "vg0/thin1", "vg1/foreign"}, names); diff != "" {
		t.Errorf("ListLVs (-want +got):\n%s", diff)
	}
	lv, _ := f.GetLV("vg0", "thin1")
	lv.Tags[0] = "changed"
	if lv, _ := f.GetLV("vg0", "thin1"); lv.Tags[0] != "thinlvm" {
		t.Error("GetLV returned the fake's own tags")
	}
}

// The fake is safe for concurrent use; run with -race.
func TestConcurrent(t *testing.T) {
	f := newRunner()
	c := &lvm.Client{Runner: f}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			name := fmt.Sprintf("lv%d", i)
			if err := c.CreateThin(t.Context(), lvm.ThinSpec{VG: "vg0", Pool: "pool", Name: name, Size: gib}); err != nil {
				t.Error(err)
			}
			if _, err := c.FullReport(t.Context(), []string{"vg0"}); err != nil {
				t.Error(err)
			}
			if err := c.Extend(t.Context(), "vg0", name, 2*gib); err != nil {
				t.Error(err)
			}
			f.SetPoolUsage("vg0", "pool", float64(i), 1)
			_ = f.Calls()
			_ = f.ListLVs()
		})
	}
	wg.Wait()
	if got, want := len(f.ListLVs()), 2+8; got != want {
		t.Errorf("%d LVs, want %d", got, want)
	}
	if got, want := f.Count("lvcreate")+f.Count("fullreport")+f.Count("lvextend"), 24; got != want {
		t.Errorf("%d commands counted, want %d", got, want)
	}
}

// With DevDir, LVs are files: a snapshot starts as a copy of its origin,
// grows with it, and goes with lvremove; the report names the file.
func TestDevDir(t *testing.T) {
	dir := t.TempDir()
	f := newRunner()
	f.LVs = nil
	f.DevDir = dir
	c := &lvm.Client{Runner: f}
	ctx := t.Context()
	if err := c.CreateThin(ctx, lvm.ThinSpec{VG: "vg0", Pool: "pool", Name: "src", Size: 4 * mib}); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "vg0", "src")
	if err := os.WriteFile(src, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateThinSnapshot(ctx, lvm.SnapshotSpec{VG: "vg0", Source: "src", Name: "snap", Activate: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Extend(ctx, "vg0", "snap", 8*mib); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(dir, "vg0", "snap")
	data, err := os.ReadFile(snap)
	if err != nil || len(data) != int(8*mib) || string(data[:4]) != "data" {
		t.Errorf("snapshot device holds %d bytes starting %q (%v), want 8 MiB starting \"data\"", len(data), data[:min(4, len(data))], err)
	}
	if lv := report(t, c, "vg0").LV("vg0", "snap"); lv == nil || lv.Path != snap {
		t.Errorf("report: %+v, want path %s", lv, snap)
	}
	if err := c.Remove(ctx, "vg0", "snap"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(snap); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed LV's device: %v, want it gone", err)
	}
}

// The configuration a containerized lvmd gives every command (dmeventd
// monitoring off) is accepted, also next to the autoextend policy.
func TestMonitoringOffAccepted(t *testing.T) {
	f := newRunner()
	f.Pools[0].DataPercent = 95
	c := &lvm.Client{Runner: f}
	ctx := t.Context()
	for _, args := range [][]string{
		{"lvcreate", "--config", "activation/monitoring=0", "--thin", "--virtualsize", "1073741824b", "--name", "m", "vg0/pool"},
		{"lvextend", "--use-policies", "--config", "activation/monitoring=0 activation{thin_pool_autoextend_threshold=80 thin_pool_autoextend_percent=20}", "vg0/pool"},
	} {
		if _, err := f.Run(ctx, args...); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
	r := report(t, c, "vg0")
	if r.LV("vg0", "m") == nil {
		t.Error("the LV was not made")
	}
	if p := r.LV("vg0", "pool"); p == nil || p.Size <= 8*gib {
		t.Errorf("the pool did not grow by its policy: %+v", p)
	}
}

// A VG's metadata area fills as LVs are made, as lvm2's does: the free
// space falls, an lvcreate or a tag that would not fit fails with lvm's
// error and changes nothing, and a removal makes room again.
func TestMetadataArea(t *testing.T) {
	f := &fake.Runner{
		VGs:   []fake.VG{{Name: "vg0", Size: 20 * gib, Free: 10 * gib, MetadataAreaSize: 16 << 10}},
		Pools: []fake.Pool{{VG: "vg0", Name: "pool", Size: 8 * gib}},
	}
	c := &lvm.Client{Runner: f}
	free := func() uint64 { t.Helper(); return report(t, c, "vg0").VGs[0].MetadataAreaFree }
	last := free()
	// (16384-512)/2-512 = 7424 bytes per copy; the VG and its pool take
	// about 2.2 KiB, each LV here about 350 bytes.
	if last == 0 || last > 7424 || last%512 != 0 {
		t.Fatalf("vg_mda_free %d of a 16 KiB area, want whole sectors under 7424", last)
	}
	var made int
	var err error
	for made = 0; made < 100; made++ {
		name := fmt.Sprintf("lv-%03d", made)
		if err = c.CreateThin(t.Context(), lvm.ThinSpec{VG: "vg0", Pool: "pool", Name: name, Size: gib, Tags: []string{"thinlvm", "lv:" + name}}); err != nil {
			break
		}
		if now := free(); now > last {
			t.Fatalf("vg_mda_free grew from %d to %d with lv %d", last, now, made)
		} else {
			last = now
		}
	}
	if made < 10 || made == 100 {
		t.Fatalf("%d LVs fit a 16 KiB metadata area, want about 14", made)
	}
	if !errors.Is(err, lvm.ErrVGMetadataFull) || !errors.Is(err, lvm.ErrInsufficientSpace) {
		t.Fatalf("lvcreate past the metadata area: %v, want ErrVGMetadataFull", err)
	}
	if !strings.Contains(err.Error(), "exceeds maximum metadata size (7424 bytes)") {
		t.Errorf("error %q does not read as lvm2's", err)
	}
	if got := len(f.ListLVs()); got != made {
		t.Errorf("%d LVs after the failed lvcreate, want %d", got, made)
	}
	if err := c.ChangeTags(t.Context(), "vg0", "lv-000", []string{strings.Repeat("t", 400)}, nil); !errors.Is(err, lvm.ErrVGMetadataFull) {
		t.Errorf("a tag past the metadata area: %v, want ErrVGMetadataFull", err)
	}
	if err := c.Remove(t.Context(), "vg0", "lv-000"); err != nil {
		t.Fatal(err)
	}
	if now := free(); now <= last {
		t.Errorf("vg_mda_free %d after a removal, was %d", now, last)
	}
	if err := c.CreateThin(t.Context(), lvm.ThinSpec{VG: "vg0", Pool: "pool", Name: "again", Size: gib, Tags: []string{"thinlvm"}}); err != nil {
		t.Errorf("lvcreate after a removal: %v", err)
	}
}

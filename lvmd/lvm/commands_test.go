package lvm_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
)

// recorder is a Runner that records the commands and answers each with
// out and err.
type recorder struct {
	calls [][]string
	out   []byte
	err   error
}

func (r *recorder) Run(_ context.Context, args ...string) ([]byte, error) {
	r.calls = append(r.calls, append([]string(nil), args...))
	return r.out, r.err
}

var fullReportArgv = []string{"fullreport", "--reportformat", "json", "--units", "b", "--nosuffix",
	"--configreport", "vg", "-o", "vg_name,vg_uuid,vg_size,vg_free,vg_extent_size,vg_mda_size,vg_mda_free",
	"--configreport", "lv", "-o", "lv_uuid,lv_name,lv_path,lv_size,lv_attr,lv_tags,origin,pool_lv,vg_name,data_percent,metadata_percent,lv_when_full",
	"--configreport", "pv", "-o,",
	"--configreport", "pvseg", "-o,",
	"--configreport", "seg", "-o", "lv_uuid,thin_id,chunk_size"}

func TestClientArgv(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name string
		call func(ctx context.Context, c *lvm.Client) error
		want []string
	}{
		{
			name: "CreateThin",
			call: func(ctx context.Context, c *lvm.Client) error {
				return c.CreateThin(ctx, lvm.ThinSpec{VG: "vg0", Pool: "pool", Name: "a", Size: gib,
					Tags: []string{"thinlvm", "lv:ns/pvc"}, ExtraArgs: []string{"--zero", "n"}})
			},
			want: []string{"lvcreate", "--yes", "--thin", "vg0/pool", "--virtualsize", "1073741824b", "--name", "a",
				"--addtag", "thinlvm", "--addtag", "lv:ns/pvc", "--zero", "n"},
		},
		{
			name: "CreateThin without tags or options",
			call: func(ctx context.Context, c *lvm.Client) error {
				return c.CreateThin(ctx, lvm.ThinSpec{VG: "vg0", Pool: "pool", Name: "a", Size: 4194305})
			},
			want: []string{"lvcreate", "--yes", "--thin", "vg0/pool", "--virtualsize", "4194305b", "--name", "a"},
		},
		{
			name: "CreateThinSnapshot read-only, activated",
			call: func(ctx context.Context, c *lvm.Client) error {
				return c.CreateThinSnapshot(ctx, lvm.SnapshotSpec{VG: "vg0", Source: "src", Name: "snap", ReadOnly: true,
					Activate: true, Tags: []string{"thinlvm"}, ExtraArgs: []string{"--zero=n"}})
			},
			want: []string{"lvcreate", "--yes", "--snapshot", "vg0/src", "--name", "snap",
				"--setactivationskip", "n", "--activate", "y", "--permission", "r", "--addtag", "thinlvm", "--zero=n"},
		},
		{
			name: "CreateThinSnapshot read-write, not activated",
			call: func(ctx context.Context, c *lvm.Client) error {
				return c.CreateThinSnapshot(ctx, lvm.SnapshotSpec{VG: "vg0", Source: "src", Name: "snap", Tags: []string{"thinlvm"}})
			},
			want: []string{"lvcreate", "--yes", "--snapshot", "vg0/src", "--name", "snap", "--activate", "n", "--permission", "rw", "--addtag", "thinlvm"},
		},
		{
			name: "Extend",
			call: func(ctx context.Context, c *lvm.Client) error { return c.Extend(ctx, "vg0", "a", 2*gib) },
			want: []string{"lvextend", "--size", "2147483648b", "vg0/a"},
		},
		{
			name: "Remove",
			call: func(ctx context.Context, c *lvm.Client) error { return c.Remove(ctx, "vg0", "a") },
			want: []string{"lvremove", "--yes", "--force", "vg0/a"},
		},
		{
			name: "AutoExtendPool",
			call: func(ctx context.Context, c *lvm.Client) error { return c.AutoExtendPool(ctx, "vg0", "pool", 80, 20) },
			want: []string{"lvextend", "--use-policies", "--config",
				"activation{thin_pool_autoextend_threshold=80 thin_pool_autoextend_percent=20}", "vg0/pool"},
		},
		{
			name: "SetErrorWhenFull y",
			call: func(ctx context.Context, c *lvm.Client) error { return c.SetErrorWhenFull(ctx, "vg0", "pool", true) },
			want: []string{"lvchange", "--errorwhenfull", "y", "vg0/pool"},
		},
		{
			name: "SetErrorWhenFull n",
			call: func(ctx context.Context, c *lvm.Client) error { return c.SetErrorWhenFull(ctx, "vg0", "pool", false) },
			want: []string{"lvchange", "--errorwhenfull", "n", "vg0/pool"},
		},
		{
			name: "ChangeTags",
			call: func(ctx context.Context, c *lvm.Client) error {
				return c.ChangeTags(ctx, "vg0", "a", []string{"x", "move:n2"}, []string{"lv:old"})
			},
			want: []string{"lvchange", "--addtag", "x", "--addtag", "move:n2", "--deltag", "lv:old", "vg0/a"},
		},
		{
			// device-mapper doubles each '-' inside a name.
			name: "ReserveMetadataSnap",
			call: func(ctx context.Context, c *lvm.Client) error { return c.ReserveMetadataSnap(ctx, "vg-a", "my-pool") },
			want: []string{"dmsetup", "message", "vg--a-my--pool-tpool", "0", "reserve_metadata_snap"},
		},
		{
			name: "ReleaseMetadataSnap",
			call: func(ctx context.Context, c *lvm.Client) error { return c.ReleaseMetadataSnap(ctx, "vg0", "pool") },
			want: []string{"dmsetup", "message", "vg0-pool-tpool", "0", "release_metadata_snap"},
		},
		{
			name: "FullReport",
			call: func(ctx context.Context, c *lvm.Client) error {
				_, err := c.FullReport(ctx, []string{"vg0", "vg1"})
				return err
			},
			want: append(append([]string(nil), fullReportArgv...), "vg0", "vg1"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{out: []byte(`{"report":[]}`)}
			if err := tt.call(t.Context(), &lvm.Client{Runner: r}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([][]string{tt.want}, r.calls); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
		})
	}
}

func TestClientRefusesInvalidNames(t *testing.T) {
	tests := []struct {
		name string
		call func(ctx context.Context, c *lvm.Client) error
	}{
		{"CreateThin vg", func(ctx context.Context, c *lvm.Client) error {
			return c.CreateThin(ctx, lvm.ThinSpec{VG: "-vg", Pool: "pool", Name: "a", Size: 1})
		}},
		{"CreateThin pool", func(ctx context.Context, c *lvm.Client) error {
			return c.CreateThin(ctx, lvm.ThinSpec{VG: "vg0", Pool: "pool_tdata", Name: "a", Size: 1})
		}},
		{"CreateThin name", func(ctx context.Context, c *lvm.Client) error {
			return c.CreateThin(ctx, lvm.ThinSpec{VG: "vg0", Pool: "pool", Name: "a;rm -rf /", Size: 1})
		}},
		{"CreateThin tag", func(ctx context.Context, c *lvm.Client) error {
			return c.CreateThin(ctx, lvm.ThinSpec{VG: "vg0", Pool: "pool", Name: "a", Size: 1, Tags: []string{"thinlvm", "--yes"}})
		}},
		{"CreateThinSnapshot source", func(ctx context.Context, c *lvm.Client) error {
			return c.CreateThinSnapshot(ctx, lvm.SnapshotSpec{VG: "vg0", Source: "../a", Name: "s"})
		}},
		{"CreateThinSnapshot name", func(ctx context.Context, c *lvm.Client) error {
			return c.CreateThinSnapshot(ctx, lvm.SnapshotSpec{VG: "vg0", Source: "a", Name: "snapshot1"})
		}},
		{"CreateThinSnapshot tag", func(ctx context.Context, c *lvm.Client) error {
			return c.CreateThinSnapshot(ctx, lvm.SnapshotSpec{VG: "vg0", Source: "a", Name: "s", Tags: []string{""}})
		}},
		{"Extend", func(ctx context.Context, c *lvm.Client) error { return c.Extend(ctx, "vg0", "", 1) }},
		{"Remove vg", func(ctx context.Context, c *lvm.Client) error { return c.Remove(ctx, "vg 0", "a") }},
		{"Remove name", func(ctx context.Context, c *lvm.Client) error { return c.Remove(ctx, "vg0", "-a") }},
		{"AutoExtendPool", func(ctx context.Context, c *lvm.Client) error { return c.AutoExtendPool(ctx, "vg0", "..", 80, 20) }},
		{"SetErrorWhenFull", func(ctx context.Context, c *lvm.Client) error {
			return c.SetErrorWhenFull(ctx, "vg0", "pool_tmeta", true)
		}},
		{"FullReport", func(ctx context.Context, c *lvm.Client) error {
			_, err := c.FullReport(ctx, []string{"vg0", "--all"})
			return err
		}},
		{"ChangeTags add", func(ctx context.Context, c *lvm.Client) error {
			return c.ChangeTags(ctx, "vg0", "a", []string{"--yes"}, nil)
		}},
		{"ChangeTags del", func(ctx context.Context, c *lvm.Client) error {
			return c.ChangeTags(ctx, "vg0", "a", nil, []string{"a b"})
		}},
		{"ReserveMetadataSnap", func(ctx context.Context, c *lvm.Client) error { return c.ReserveMetadataSnap(ctx, "vg0", "pool x") }},
		{"ThinDelta", func(ctx context.Context, c *lvm.Client) error {
			_, err := c.ThinDelta(ctx, "-vg", "pool", 1, 2)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{}
			err := tt.call(t.Context(), &lvm.Client{Runner: r})
			if !errors.Is(err, lvm.ErrInvalidName) {
				t.Errorf("error = %v, want ErrInvalidName", err)
			}
			if len(r.calls) != 0 {
				t.Errorf("ran %q, want no command", r.calls)
			}
		})
	}
}

func TestClientClassifiesErrors(t *testing.T) {
	tests := []struct {
		name   string
		stderr string
		call   func(ctx context.Context, c *lvm.Client) error
		want   error
	}{
		{
			name:   "CreateThin exists",
			stderr: `  Logical Volume "a" already exists in volume group "vg0"`,
			call: func(ctx context.Context, c *lvm.Client) error {
				return c.CreateThin(ctx, lvm.ThinSpec{VG: "vg0", Pool: "pool", Name: "a", Size: 1})
			},
			want: lvm.ErrExists,
		},
		{
			name:   "CreateThinSnapshot source missing",
			stderr: `  Failed to find logical volume "vg0/src"`,
			call: func(ctx context.Context, c *lvm.Client) error {
				return c.CreateThinSnapshot(ctx, lvm.SnapshotSpec{VG: "vg0", Source: "src", Name: "s"})
			},
			want: lvm.ErrNotFound,
		},
		{
			name:   "Extend shrink",
			stderr: "  New size given (1 extents) not larger than existing size (2 extents)",
			call:   func(ctx context.Context, c *lvm.Client) error { return c.Extend(ctx, "vg0", "a", 1) },
			want:   lvm.ErrShrink,
		},
		{
			name:   "Remove missing",
			stderr: `  Failed to find logical volume "vg0/a"`,
			call:   func(ctx context.Context, c *lvm.Client) error { return c.Remove(ctx, "vg0", "a") },
			want:   lvm.ErrNotFound,
		},
		{
			name:   "AutoExtendPool no space",
			stderr: "  Insufficient free space: 52 extents needed, but only 0 available",
			call:   func(ctx context.Context, c *lvm.Client) error { return c.AutoExtendPool(ctx, "vg0", "pool", 80, 20) },
			want:   lvm.ErrInsufficientSpace,
		},
		{
			name:   "ReserveMetadataSnap held",
			stderr: "device-mapper: message ioctl on vg0-pool-tpool  failed: Device or resource busy\nCommand failed.",
			call:   func(ctx context.Context, c *lvm.Client) error { return c.ReserveMetadataSnap(ctx, "vg0", "pool") },
			want:   lvm.ErrMetadataSnapHeld,
		},
		{
			name:   "ReserveMetadataSnap pool inactive",
			stderr: "device-mapper: message ioctl on vg0-pool-tpool  failed: No such device or address\nCommand failed.",
			call:   func(ctx context.Context, c *lvm.Client) error { return c.ReserveMetadataSnap(ctx, "vg0", "pool") },
			want:   lvm.ErrNotActive,
		},
		{
			name:   "ThinDelta thin id missing",
			stderr: "Unable to find mapping tree for snap2 (9)\nUsage: thin_delta [options] <device or file>",
			call: func(ctx context.Context, c *lvm.Client) error {
				_, err := c.ThinDelta(ctx, "vg0", "pool", 1, 9)
				return err
			},
			want: lvm.ErrNotFound,
		},
		{
			name:   "FullReport vg missing",
			stderr: "  Volume group \"vg9\" not found\n  Cannot process volume group vg9",
			call: func(ctx context.Context, c *lvm.Client) error {
				_, err := c.FullReport(ctx, []string{"vg9"})
				return err
			},
			want: lvm.ErrNotFound,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cerr := &lvm.CommandError{Args: []string{"x"}, ExitCode: 5, Stderr: tt.stderr}
			err := tt.call(t.Context(), &lvm.Client{Runner: &recorder{err: cerr}})
			if !errors.Is(err, tt.want) {
				t.Errorf("error = %v, want %v", err, tt.want)
			}
			var got *lvm.CommandError
			if !errors.As(err, &got) || got != cerr {
				t.Errorf("error %v does not wrap the *CommandError", err)
			}
		})
	}
}

func TestClientFullReportParses(t *testing.T) {
	c := &lvm.Client{Runner: &recorder{out: fullReportLvmdStyle(t)}}
	r, err := c.FullReport(t.Context(), []string{"vg0"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(r.LVs), 6; got != want {
		t.Errorf("got %d LVs, want %d", got, want)
	}
	c = &lvm.Client{Runner: &recorder{out: []byte("  garbage")}}
	if r, err := c.FullReport(t.Context(), []string{"vg0"}); err == nil {
		t.Errorf("FullReport of garbage = %+v, want an error", r)
	}
}

func TestClientThinDelta(t *testing.T) {
	r := &recorder{out: readTestdata(t, "thin_delta-base-vol.xml")}
	c := &lvm.Client{Runner: r}
	d, err := c.ThinDelta(t.Context(), "vg-a", "my-pool", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"thin_delta", "-m", "--snap1", "1", "--snap2", "2", "/dev/mapper/vg--a-my--pool_tmeta"}}
	if diff := cmp.Diff(want, r.calls); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	if len(d.Ranges) != 5 || d.BlockSize() != 64<<10 {
		t.Errorf("ThinDelta = %+v", d)
	}
	// The output must be of the ids asked for.
	if _, err := c.ThinDelta(t.Context(), "vg-a", "my-pool", 2, 2); err == nil {
		t.Error("ThinDelta took the diff of 1 and 2 for one of 2 with itself")
	}
	if _, err := c.ThinDelta(t.Context(), "vg-a", "my-pool", 0, 2); !errors.Is(err, lvm.ErrInvalid) {
		t.Errorf("ThinDelta of thin id 0: %v, want ErrInvalid", err)
	}
}

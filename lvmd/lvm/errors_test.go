package lvm

import (
	"errors"
	"fmt"
	"testing"
)

func TestClassify(t *testing.T) {
	sentinels := []error{ErrNotFound, ErrExists, ErrInsufficientSpace, ErrVGMetadataFull, ErrSizeUnchanged, ErrShrink, ErrInvalidName}
	tests := []struct {
		name   string
		stderr string
		want   error // nil: no sentinel; the sentinels it wraps count too
	}{
		// lvm2 2.03.16 (LC_ALL=C), an lvcreate past a 124 KiB metadata area.
		{name: "vg metadata area full", want: ErrVGMetadataFull,
			stderr: "WARNING: Sum of all thin volume sizes (9.62 GiB) exceeds the size of thin pool vgs/pool and the size of whole volume group (1020.00 MiB).\n" +
				"  VG vgs 311 metadata on /dev/vdb (62930 bytes) exceeds maximum metadata size (62720 bytes)\n  Failed to write VG vgs."},
		{name: "vg has insufficient free space", stderr: `  Volume group "vg0" has insufficient free space (10 extents): 256 required.`, want: ErrInsufficientSpace},
		{name: "extend insufficient free space", stderr: "  Insufficient free space: 256 extents needed, but only 10 available", want: ErrInsufficientSpace},
		{name: "insufficient suitable extents", stderr: "  Insufficient suitable allocatable extents for logical volume pool: 100 more required", want: ErrInsufficientSpace},
		{name: "thin pool threshold", stderr: "  Cannot create new thin volume, free space in thin pool vg0/pool reached threshold.", want: ErrInsufficientSpace},
		{name: "thin pool full", stderr: "  Thin pool is full.", want: ErrInsufficientSpace},
		{name: "out of data space", stderr: "  Thin pool vg0-pool-tpool (253:2) transaction_id is 5, while expected 6: out of data space.", want: ErrInsufficientSpace},
		{name: "lv exists", stderr: `  Logical Volume "a" already exists in volume group "vg0"`, want: ErrExists},
		{name: "same size", stderr: "  New size (256 extents) matches existing size (256 extents).", want: ErrSizeUnchanged},
		{name: "shrink", stderr: "  New size given (128 extents) not larger than existing size (256 extents)", want: ErrShrink},
		{name: "lv not found", stderr: `  Failed to find logical volume "vg0/a"`, want: ErrNotFound},
		{name: "vg not found", stderr: "  Volume group \"vg9\" not found\n  Cannot process volume group vg9", want: ErrNotFound},
		{name: "lv not found in vg", stderr: `  Logical volume "x" not found in volume group "vg0".`, want: ErrNotFound},
		{name: "unrelated not found is no NotFound", stderr: "  WARNING: Device /dev/sdz not found.\n  Failed to activate new LV.", want: nil},
		{name: "case does not matter", stderr: "INSUFFICIENT FREE SPACE", want: ErrInsufficientSpace},
		{name: "warnings before the error", stderr: "  WARNING: Sum of all thin volume sizes (20.00 GiB) exceeds the size of thin pool vg0/pool (4.00 GiB).\n  Insufficient free space: 1 extents needed, but only 0 available", want: ErrInsufficientSpace},
		{name: "unknown message", stderr: "  Device or resource busy"},
		{name: "empty stderr", stderr: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cerr := &CommandError{Args: []string{"lvcreate"}, ExitCode: 5, Stderr: tt.stderr}
			err := fmt.Errorf("context: %w", classify(cerr))
			for _, s := range sentinels {
				if got, want := errors.Is(err, s), tt.want != nil && errors.Is(tt.want, s); got != want {
					t.Errorf("errors.Is(classify(%q), %v) = %t, want %t", tt.stderr, s, got, want)
				}
			}
			var got *CommandError
			if !errors.As(err, &got) || got != cerr {
				t.Errorf("classify(%q) lost the *CommandError: %v", tt.stderr, err)
			}
			if err.Error() != "context: "+cerr.Error() {
				t.Errorf("classify(%q).Error() = %q, want the command error's %q", tt.stderr, err.Error(), cerr.Error())
			}
		})
	}
}

func TestClassifyOtherErrors(t *testing.T) {
	plain := errors.New("not found") // not from lvm: its text means nothing
	if got := classify(plain); got != plain || errors.Is(got, ErrNotFound) {
		t.Errorf("classify(plain error) = %v, want it unchanged", got)
	}
	if got := classify(nil); got != nil {
		t.Errorf("classify(nil) = %v", got)
	}
}

func TestCommandError(t *testing.T) {
	exitErr := errors.New("exit status 1")
	tests := []struct {
		name string
		err  *CommandError
		want string
	}{
		{
			name: "stderr",
			err:  &CommandError{Args: []string{"lvremove", "--yes", "vg0/a"}, ExitCode: 5, Stderr: `Failed to find logical volume "vg0/a"`},
			want: `lvm lvremove --yes vg0/a: exit code 5: Failed to find logical volume "vg0/a"`,
		},
		{
			name: "no stderr: the exec error",
			err:  &CommandError{Args: []string{"fullreport"}, ExitCode: 1, err: exitErr},
			want: "lvm fullreport: exit code 1: exit status 1",
		},
		{
			name: "neither",
			err:  &CommandError{Args: []string{"fullreport"}, ExitCode: -1},
			want: "lvm fullreport: exit code -1: ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

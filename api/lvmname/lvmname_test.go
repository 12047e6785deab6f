package lvmname_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/thinlvm/thinlvm/api/lvmname"
)

func TestValidateLVName(t *testing.T) {
	tests := []struct {
		name  string
		lv    string
		valid bool
	}{
		{name: "simple", lv: "pvc-0d1e2f", valid: true},
		{name: "every allowed character", lv: "aZ09+_.-", valid: true},
		{name: "127 characters", lv: strings.Repeat("a", 127), valid: true},
		{name: "reserved prefix elsewhere", lv: "my-snapshot", valid: true},
		{name: "reserved suffix without underscore", lv: "tdata", valid: true},
		{name: "lvm default name", lv: "lvol0", valid: true},
		{name: "dot inside", lv: "a.b", valid: true},
		{name: "empty", lv: ""},
		{name: "128 characters", lv: strings.Repeat("a", 128)},
		{name: "dot", lv: "."},
		{name: "dot dot", lv: ".."},
		{name: "leading dash", lv: "-a"},
		{name: "dash only", lv: "-"},
		{name: "space", lv: "a b"},
		{name: "slash", lv: "vg0/a"},
		{name: "dollar", lv: "a$"},
		{name: "newline", lv: "a\n"},
		{name: "nul", lv: "a\x00"},
		{name: "non-ASCII", lv: "é"},
		{name: "prefix snapshot", lv: "snapshot0"},
		{name: "prefix pvmove", lv: "pvmove0"},
		{name: "thin pool data", lv: "pool_tdata"},
		{name: "thin pool metadata", lv: "pool_tmeta"},
		{name: "pool metadata spare", lv: "lvol0_pmspare"},
		{name: "raid image in the middle", lv: "a_rimage_0"},
		{name: "cache pool", lv: "c_cpool"},
		{name: "cache data", lv: "x_cdata"},
		{name: "vdo data", lv: "x_vdata"},
		{name: "integrity metadata", lv: "x_imeta"},
		{name: "writecache origin", lv: "x_wcorig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := lvmname.ValidateLVName(tt.lv)
			checkValid(t, "ValidateLVName", tt.lv, tt.valid, err)
		})
	}
}

func TestValidateVGName(t *testing.T) {
	tests := []struct {
		name  string
		vg    string
		valid bool
	}{
		{name: "simple", vg: "vg0", valid: true},
		{name: "127 characters", vg: strings.Repeat("v", 127), valid: true},
		// The reserved LV names do not apply to VGs.
		{name: "LV-reserved prefix", vg: "snapshots", valid: true},
		{name: "LV-reserved substring", vg: "vg_tdata", valid: true},
		{name: "empty", vg: ""},
		{name: "128 characters", vg: strings.Repeat("v", 128)},
		{name: "dot", vg: "."},
		{name: "dot dot", vg: ".."},
		{name: "leading dash", vg: "-vg"},
		{name: "slash", vg: "dev/vg0"},
		{name: "space", vg: "vg 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := lvmname.ValidateVGName(tt.vg)
			checkValid(t, "ValidateVGName", tt.vg, tt.valid, err)
		})
	}
}

func TestValidateTag(t *testing.T) {
	tests := []struct {
		name  string
		tag   string
		valid bool
	}{
		{name: "simple", tag: "thinlvm", valid: true},
		{name: "owner", tag: "lv:default/pvc-1", valid: true},
		{name: "every extra character", tag: "a/=!:#&+_.-", valid: true},
		{name: "1024 characters", tag: strings.Repeat("t", 1024), valid: true},
		{name: "leading plus", tag: "+t", valid: true},
		{name: "empty", tag: ""},
		{name: "1025 characters", tag: strings.Repeat("t", 1025)},
		{name: "leading dash", tag: "-t"},
		// lvm prints a list of tags comma-separated: a comma would split it.
		{name: "comma", tag: "a,b"},
		{name: "space", tag: "a b"},
		{name: "at", tag: "a@b"},
		{name: "quote", tag: `a"b`},
		{name: "newline", tag: "a\nb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := lvmname.ValidateTag(tt.tag)
			checkValid(t, "ValidateTag", tt.tag, tt.valid, err)
		})
	}
}

func checkValid(t *testing.T, fn, arg string, valid bool, err error) {
	t.Helper()
	switch {
	case valid && err != nil:
		t.Errorf("%s(%q) = %v, want nil", fn, arg, err)
	case !valid && !errors.Is(err, lvmname.ErrInvalidName):
		t.Errorf("%s(%q) = %v, want ErrInvalidName", fn, arg, err)
	}
}

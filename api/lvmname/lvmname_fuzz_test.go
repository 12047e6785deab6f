package lvmname_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/thinlvm/thinlvm/api/lvmname"
)

// lvm2's rules, written again here from its documentation (lvm(8), VALID
// NAMES and tags) and lib/misc/lvm-string.c rather than from names.go, so
// that the fuzzer compares two readings of them.
const (
	lvm2NameChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+_.-"
	lvm2TagChars  = lvm2NameChars + "/=!:#&"
)

var (
	lvm2LVPrefixes   = []string{"pvmove", "snapshot"}
	lvm2LVSubstrings = []string{
		// component LVs: cache, mirror, raid, thin, vdo, integrity, writecache
		"_cdata", "_cmeta", "_corig", "_cpool", "_cvol", "_mimage", "_mlog", "_rimage", "_rmeta",
		"_tdata", "_tmeta", "_vdata", "_imeta", "_iorig", "_wcorig",
		// non-component internal LVs
		"_pmspare", "_vorigin",
	}
)

// onlyOf tells whether every byte of s is in chars (strings.Trim works on
// runes: a byte that is not valid UTF-8 is trimmed never).
func onlyOf(s, chars string) bool { return strings.Trim(s, chars) == "" }

// lvm2Name is _validate_name: 1-127 bytes (NAME_LEN less its NUL) of
// a-z A-Z 0-9 + _ . -, not starting with '-', not "." or "..".
func lvm2Name(s string) bool {
	return s != "" && len(s) <= 127 && s[0] != '-' && s != "." && s != ".." && onlyOf(s, lvm2NameChars)
}

// lvm2LVName adds apply_lvname_restrictions: reserved prefixes and the
// substrings that name lvm's internal LVs.
func lvm2LVName(s string) bool {
	if !lvm2Name(s) {
		return false
	}
	for _, p := range lvm2LVPrefixes {
		if strings.HasPrefix(s, p) {
			return false
		}
	}
	for _, r := range lvm2LVSubstrings {
		if strings.Contains(s, r) {
			return false
		}
	}
	return true
}

// lvm2Tag is a tag as lvm(8) documents it: 1-1024 characters of
// a-z A-Z 0-9 _ + . - / = ! : # &, not starting with '-'.
func lvm2Tag(s string) bool {
	return s != "" && len(s) <= 1024 && s[0] != '-' && onlyOf(s, lvm2TagChars)
}

// argvSafe tells whether s can be passed to lvm as one argv word without
// being read as an option or splitting in a shell or a log line: no leading
// '-', no whitespace, no NUL, no other control or non-ASCII byte, no shell
// metacharacter. pathSep allows '/' (tags); names never carry it, since lvm
// reads "vg/lv" as a path.
func argvSafe(s string, pathSep bool) bool {
	if s == "" || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"'`$\\;|<>()*?[]{}~%,@^", c) >= 0 || c == '/' && !pathSep {
			return false
		}
	}
	return true
}

// FuzzValidateNames checks that ValidateVGName, ValidateLVName and
// ValidateTag never panic, agree with lvm2's rules as written above, refuse
// with ErrInvalidName, and accept only words safe to pass in lvm's argv.
func FuzzValidateNames(f *testing.F) {
	for _, s := range []string{
		"", "a", "vg0", "pool", "pvc-0d1e2f3a", "aZ09+_.-", "lvmd-snap_1.2", ".", "..", "...", "-", "-a",
		"a b", "a\x00", "a\n", "vg0/lv", "é", "\xff", strings.Repeat("a", 127), strings.Repeat("a", 128),
		"snapshot", "snapshot0", "pvmove", "my-snapshot", "pool_tdata", "pool_tmeta", "lvol0_pmspare",
		"x_vorigin", "x_wcorig", "tdata", "_tdat", "thinlvm/volume=pvc-1", "owner:ns#a&b!c",
		strings.Repeat("t", 1024), strings.Repeat("t", 1025), "$(reboot)", "a;b", "--name",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range []struct {
			kind     string
			validate func(string) error
			rule     func(string) bool
			pathSep  bool
		}{
			{"vg name", lvmname.ValidateVGName, lvm2Name, false},
			{"lv name", lvmname.ValidateLVName, lvm2LVName, false},
			{"tag", lvmname.ValidateTag, lvm2Tag, true},
		} {
			err := c.validate(s)
			if err != nil && !errors.Is(err, lvmname.ErrInvalidName) {
				t.Errorf("%s %q: error %v is not ErrInvalidName", c.kind, s, err)
			}
			switch ok := c.rule(s); {
			case err == nil && !ok:
				t.Errorf("%s %q accepted; lvm2's rules refuse it", c.kind, s)
			case err != nil && ok:
				t.Errorf("%s %q refused (%v); lvm2's rules accept it", c.kind, s, err)
			}
			if err == nil && !argvSafe(s, c.pathSep) {
				t.Errorf("%s %q accepted, but it is not safe as an argv word", c.kind, s)
			}
		}
	})
}

// Package lvmname checks names and tags against lvm2's rules, before any
// of them reaches an lvm command. It depends on nothing: lvmd validates
// every request with it, and the API derives LV names with it.
package lvmname

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidName is a name or tag lvm2 would reject.
var ErrInvalidName = errors.New("invalid name")

// maxNameLen is lvm2's NAME_LEN less the terminating NUL.
const maxNameLen = 127

// lvm2 reserves these prefixes and substrings for its internal LVs
// (lib/misc/lvm-string.c, apply_lv_name_restrictions).
var (
	reservedPrefixes   = []string{"snapshot", "pvmove"}
	reservedSubstrings = []string{"_cdata", "_cmeta", "_corig", "_cpool", "_cvol", "_imeta", "_iorig",
		"_mimage", "_mlog", "_pmspare", "_rimage", "_rmeta", "_tdata", "_tmeta", "_vdata", "_vorigin", "_wcorig"}
)

func isNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '+' || c == '_' || c == '.' || c == '-'
}

func validateName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: %s name is empty", ErrInvalidName, kind)
	case len(name) > maxNameLen:
		return fmt.Errorf("%w: %s name %q is longer than %d characters", ErrInvalidName, kind, name, maxNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %s name %q is reserved", ErrInvalidName, kind, name)
	case name[0] == '-':
		return fmt.Errorf("%w: %s name %q starts with '-'", ErrInvalidName, kind, name)
	}
	for i := 0; i < len(name); i++ {
		if !isNameChar(name[i]) {
			return fmt.Errorf("%w: %s name %q has %q: only a-z A-Z 0-9 + _ . - are allowed", ErrInvalidName, kind, name, name[i])
		}
	}
	return nil
}

// ValidateVGName checks a volume group name against lvm2's rules.
func ValidateVGName(name string) error { return validateName("volume group", name) }

// ValidateLVName checks a logical volume name against lvm2's rules,
// reserved prefixes and substrings included.
func ValidateLVName(name string) error {
	if err := validateName("logical volume", name); err != nil {
		return err
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(name, p) {
			return fmt.Errorf("%w: logical volume name %q starts with the reserved %q", ErrInvalidName, name, p)
		}
	}
	for _, s := range reservedSubstrings {
		if strings.Contains(name, s) {
			return fmt.Errorf("%w: logical volume name %q contains the reserved %q", ErrInvalidName, name, s)
		}
	}
	return nil
}

// maxTagLen is lvm2's limit on a tag's length.
const maxTagLen = 1024

// ValidateTag checks an lvm tag: 1-1024 characters of a-z A-Z 0-9 _ + . - /
// = ! : # &, not starting with '-'.
func ValidateTag(tag string) error {
	switch {
	case tag == "":
		return fmt.Errorf("%w: tag is empty", ErrInvalidName)
	case len(tag) > maxTagLen:
		return fmt.Errorf("%w: tag %q is longer than %d characters", ErrInvalidName, tag, maxTagLen)
	case tag[0] == '-':
		return fmt.Errorf("%w: tag %q starts with '-'", ErrInvalidName, tag)
	}
	for i := 0; i < len(tag); i++ {
		if c := tag[i]; !isNameChar(c) && !strings.ContainsRune("/=!:#&", rune(c)) {
			return fmt.Errorf("%w: tag %q has %q", ErrInvalidName, tag, c)
		}
	}
	return nil
}

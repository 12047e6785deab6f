package lvm

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/thinlvm/thinlvm/api/lvmname"
)

// Sentinel errors for lvm outcomes, what lvm said or what lvmd decided
// before running it: the one set lvmd maps to gRPC codes (server.toStatus).
// Test them with errors.Is.
var (
	// ErrNotFound: the VG or LV does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: an LV of that name exists already.
	ErrExists = errors.New("already exists")
	// ErrInsufficientSpace: the VG or thin pool has no room.
	ErrInsufficientSpace = errors.New("insufficient space")
	// ErrVGMetadataFull: the VG's metadata area has no room for the
	// change: lvm's "exceeds maximum metadata size", or lvmd's refusal
	// before it. It is an ErrInsufficientSpace, with its text: the message
	// that follows it names the metadata area.
	ErrVGMetadataFull = fmt.Errorf("%w", ErrInsufficientSpace)
	// ErrSizeUnchanged: an extend to the LV's current size.
	ErrSizeUnchanged = errors.New("size unchanged")
	// ErrShrink: an extend to a size below the current one.
	ErrShrink = errors.New("new size smaller than current size")
	// ErrInvalidName: a name lvm2 would reject, refused before any command.
	ErrInvalidName = lvmname.ErrInvalidName
	// ErrInvalid: a request lvmd refuses before any command (a bad size,
	// an unknown device class).
	ErrInvalid = errors.New("invalid argument")
	// ErrConflict: an LV of the requested name exists with other
	// parameters, so an idempotent retry cannot return it.
	ErrConflict = errors.New("already exists with different parameters")
	// ErrNotManaged: the LV exists without lvmd's tag, or in another device
	// class's pool: lvmd does not touch it.
	ErrNotManaged = errors.New("not managed by thinlvm")
	// ErrNotActive: the thin pool's -tpool device is not active, so its
	// metadata cannot be read.
	ErrNotActive = errors.New("not active")
	// ErrMetadataSnapHeld: the thin pool holds a metadata snapshot already
	// (a pool holds one at a time).
	ErrMetadataSnapHeld = errors.New("metadata snapshot held")
	// ErrUnavailable: the device class's volume group or thin pool is
	// missing on this node (lvmd serves the other classes meanwhile).
	ErrUnavailable = errors.New("device class unavailable")
	// ErrThick: the device class is thick and the request needs a thin
	// one (a snapshot that is not a copy's transient one).
	ErrThick = errors.New("thick device class")
)

// classifiedError wraps a *CommandError with the sentinel its stderr shows.
type classifiedError struct {
	sentinel error
	cause    *CommandError
}

func (c *classifiedError) Error() string   { return c.cause.Error() }
func (c *classifiedError) Unwrap() []error { return []error{c.sentinel, c.cause} }

// stderr fragments (LC_ALL=C) and the sentinel each one means. Only this
// package reads lvm's stderr.
var stderrClasses = []struct {
	fragment string
	sentinel error
}{
	// VG vg 1723 metadata on /dev/sdc1 (521759 bytes) exceeds maximum
	// metadata size (521472 bytes), then Failed to write VG vg.
	{"exceeds maximum metadata size", ErrVGMetadataFull},
	{"insufficient free space", ErrInsufficientSpace},
	{"insufficient suitable allocatable extents", ErrInsufficientSpace},
	{"free space in thin pool", ErrInsufficientSpace}, // "... reached threshold"
	{"thin pool is full", ErrInsufficientSpace},
	{"out of data space", ErrInsufficientSpace},
	{"already exists in volume group", ErrExists},
	{"matches existing size", ErrSizeUnchanged},
	{"not larger than existing size", ErrShrink},
	{"failed to find logical volume", ErrNotFound},
	{"not found in volume group", ErrNotFound}, // Logical volume "x" not found in volume group "vg"
}

// vgNotFound matches lvm's `Volume group "vg" not found` and nothing wider:
// a warning that merely contains "not found" must not turn a failure into
// a NotFound that callers treat as done.
var vgNotFound = regexp.MustCompile(`(?m)^\s*volume group "[^"]*" not found`)

// classify returns err wrapped with the sentinel its stderr shows, or err.
func classify(err error) error {
	var cerr *CommandError
	if !errors.As(err, &cerr) {
		return err
	}
	s := strings.ToLower(cerr.Stderr)
	for _, c := range stderrClasses {
		if strings.Contains(s, c.fragment) {
			return &classifiedError{sentinel: c.sentinel, cause: cerr}
		}
	}
	if vgNotFound.MatchString(s) {
		return &classifiedError{sentinel: ErrNotFound, cause: cerr}
	}
	return err
}

// dmClasses are the stderr fragments of dmsetup and thin_delta (LC_ALL=C),
// apart from lvm's: "busy" means another thing to dmsetup message than to
// lvm.
var dmClasses = []struct {
	fragment string
	sentinel error
}{
	// dmsetup message: the kernel's EBUSY to reserve_metadata_snap.
	{"failed: device or resource busy", ErrMetadataSnapHeld},
	// dmsetup message to a device that is not there (ENXIO).
	{"failed: no such device or address", ErrNotActive},
	// thin_delta: no such thin id in the pool's metadata.
	{"unable to find mapping tree", ErrNotFound},
}

// classifyDM is classify for dmsetup and thin_delta.
func classifyDM(err error) error {
	var cerr *CommandError
	if !errors.As(err, &cerr) {
		return err
	}
	s := strings.ToLower(cerr.Stderr)
	for _, c := range dmClasses {
		if strings.Contains(s, c.fragment) {
			return &classifiedError{sentinel: c.sentinel, cause: cerr}
		}
	}
	return err
}

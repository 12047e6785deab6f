package lvm

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/thinlvm/thinlvm/api/lvmname"
)

// Client builds lvm commands from typed requests and runs them. Every name
// is validated before a command is built. Client does not serialise calls:
// its caller does.
type Client struct {
	Runner Runner
}

func sizeArg(bytes uint64) string { return strconv.FormatUint(bytes, 10) + "b" }

func validateNames(vg string, lvs ...string) error {
	if err := lvmname.ValidateVGName(vg); err != nil {
		return err
	}
	for _, lv := range lvs {
		if err := lvmname.ValidateLVName(lv); err != nil {
			return err
		}
	}
	return nil
}

func addTags(args []string, tags []string) ([]string, error) {
	for _, t := range tags {
		if err := lvmname.ValidateTag(t); err != nil {
			return nil, err
		}
		args = append(args, "--addtag", t)
	}
	return args, nil
}

// FullReport reads the VGs and LVs of the named volume groups in one lvm
// process.
func (c *Client) FullReport(ctx context.Context, vgs []string) (*Report, error) {
	for _, vg := range vgs {
		if err := lvmname.ValidateVGName(vg); err != nil {
			return nil, err
		}
	}
	out, err := c.Runner.Run(ctx, FullReportArgs(vgs)...)
	if err != nil {
		return nil, fmt.Errorf("report volume groups %v: %w", vgs, classify(err))
	}
	return ParseFullReport(out)
}

// VGNames lists the volume groups there are. lvm refuses a whole report
// when one VG it names is missing: lvmd asks which are there, and reports
// those (a device class whose VG is missing is unavailable, not fatal).
func (c *Client) VGNames(ctx context.Context) ([]string, error) {
	out, err := c.Runner.Run(ctx, VGNamesArgs()...)
	if err != nil {
		return nil, fmt.Errorf("list volume groups: %w", classify(err))
	}
	return ParseVGNames(out)
}

// ThinSpec describes a new thin LV.
type ThinSpec struct {
	VG, Pool, Name string
	Size           uint64
	Tags           []string
	// ExtraArgs are a device class's lvcreateOptions, validated by the
	// config.
	ExtraArgs []string
}

// CreateThin creates and activates a thin LV.
func (c *Client) CreateThin(ctx context.Context, s ThinSpec) error {
	if err := validateNames(s.VG, s.Pool, s.Name); err != nil {
		return err
	}
	args := []string{"lvcreate", "--yes", "--thin", s.VG + "/" + s.Pool, "--virtualsize", sizeArg(s.Size), "--name", s.Name}
	args, err := addTags(args, s.Tags)
	if err != nil {
		return err
	}
	if _, err := c.Runner.Run(ctx, append(args, s.ExtraArgs...)...); err != nil {
		return fmt.Errorf("create thin lv %s/%s: %w", s.VG, s.Name, classify(err))
	}
	return nil
}

// LinearSpec describes a new thick (linear) LV, allocated from the VG's
// free extents.
type LinearSpec struct {
	VG, Name  string
	Size      uint64
	Tags      []string
	ExtraArgs []string
}

// CreateLinear creates and activates a thick LV. lvm zeroes its first 4
// KiB and wipes known signatures there; the rest holds whatever the
// extents held.
func (c *Client) CreateLinear(ctx context.Context, s LinearSpec) error {
	if err := validateNames(s.VG, s.Name); err != nil {
		return err
	}
	args := []string{"lvcreate", "--yes", "--size", sizeArg(s.Size), "--name", s.Name}
	args, err := addTags(args, s.Tags)
	if err != nil {
		return err
	}
	// The VG last: lvcreate takes the first positional argument as the VG
	// and the rest as PVs to allocate from, and a class's options must not
	// be read as PVs.
	args = append(append(args, s.ExtraArgs...), s.VG)
	if _, err := c.Runner.Run(ctx, args...); err != nil {
		return fmt.Errorf("create lv %s/%s: %w", s.VG, s.Name, classify(err))
	}
	return nil
}

// COWSnapshotSpec describes a read-only snapshot of a thick LV: the
// classic kind, whose copy-on-write store of COWSize bytes is allocated
// from the VG and holds the origin's blocks as they were before each
// write. It is invalidated when the store fills.
type COWSnapshotSpec struct {
	VG, Source, Name string
	COWSize          uint64
	Tags             []string
}

// CreateCOWSnapshot creates and activates a read-only snapshot of a thick
// LV.
func (c *Client) CreateCOWSnapshot(ctx context.Context, s COWSnapshotSpec) error {
	if err := validateNames(s.VG, s.Source, s.Name); err != nil {
		return err
	}
	args := []string{"lvcreate", "--yes", "--snapshot", "--size", sizeArg(s.COWSize), "--name", s.Name, "--permission", "r"}
	args, err := addTags(args, s.Tags)
	if err != nil {
		return err
	}
	if _, err := c.Runner.Run(ctx, append(args, s.VG+"/"+s.Source)...); err != nil {
		return fmt.Errorf("create snapshot %s/%s of %s: %w", s.VG, s.Name, s.Source, classify(err))
	}
	return nil
}

// SnapshotSpec describes a new thin snapshot.
type SnapshotSpec struct {
	VG, Source, Name string
	ReadOnly         bool
	// Activate makes the snapshot active now; lvm creates thin snapshots
	// with activation skip set, and this clears it.
	Activate  bool
	Tags      []string
	ExtraArgs []string
}

// CreateThinSnapshot creates a thin snapshot of a thin LV, of the source's
// size.
func (c *Client) CreateThinSnapshot(ctx context.Context, s SnapshotSpec) error {
	if err := validateNames(s.VG, s.Source, s.Name); err != nil {
		return err
	}
	args := []string{"lvcreate", "--yes", "--snapshot", s.VG + "/" + s.Source, "--name", s.Name}
	if s.Activate {
		args = append(args, "--setactivationskip", "n", "--activate", "y")
	} else {
		args = append(args, "--activate", "n")
	}
	// Permission is always explicit: the origin may be a read-only
	// golden base while the snapshot is a writable volume.
	if s.ReadOnly {
		args = append(args, "--permission", "r")
	} else {
		args = append(args, "--permission", "rw")
	}
	args, err := addTags(args, s.Tags)
	if err != nil {
		return err
	}
	if _, err := c.Runner.Run(ctx, append(args, s.ExtraArgs...)...); err != nil {
		return fmt.Errorf("create thin snapshot %s/%s of %s: %w", s.VG, s.Name, s.Source, classify(err))
	}
	return nil
}

// Extend grows an LV to size bytes. Growing to the current size is
// ErrSizeUnchanged, to a smaller one ErrShrink.
func (c *Client) Extend(ctx context.Context, vg, name string, size uint64) error {
	if err := validateNames(vg, name); err != nil {
		return err
	}
	if _, err := c.Runner.Run(ctx, "lvextend", "--size", sizeArg(size), vg+"/"+name); err != nil {
		return fmt.Errorf("extend lv %s/%s to %d bytes: %w", vg, name, size, classify(err))
	}
	return nil
}

// SetPermission makes an LV read-only or read-write.
func (c *Client) SetPermission(ctx context.Context, vg, name string, readOnly bool) error {
	if err := validateNames(vg, name); err != nil {
		return err
	}
	perm := "rw"
	if readOnly {
		perm = "r"
	}
	if _, err := c.Runner.Run(ctx, "lvchange", "--permission", perm, vg+"/"+name); err != nil {
		return fmt.Errorf("set permission of lv %s/%s to %s: %w", vg, name, perm, classify(err))
	}
	return nil
}

// SetActive activates or deactivates an LV; activation ignores the LV's
// activation skip flag.
func (c *Client) SetActive(ctx context.Context, vg, name string, active bool) error {
	if err := validateNames(vg, name); err != nil {
		return err
	}
	args := []string{"lvchange", "--activate", "n", vg + "/" + name}
	if active {
		args = []string{"lvchange", "--activate", "y", "--ignoreactivationskip", vg + "/" + name}
	}
	if _, err := c.Runner.Run(ctx, args...); err != nil {
		return fmt.Errorf("set activation of lv %s/%s to %t: %w", vg, name, active, classify(err))
	}
	return nil
}

// Remove removes an LV without asking.
func (c *Client) Remove(ctx context.Context, vg, name string) error {
	if err := validateNames(vg, name); err != nil {
		return err
	}
	if _, err := c.Runner.Run(ctx, "lvremove", "--yes", "--force", vg+"/"+name); err != nil {
		return fmt.Errorf("remove lv %s/%s: %w", vg, name, classify(err))
	}
	return nil
}

// AutoExtendPool grows a thin pool's data and metadata from VG free space by
// lvm's own policy (as dmeventd would), when use is at or over threshold
// percent: by percent of the current size.
func (c *Client) AutoExtendPool(ctx context.Context, vg, pool string, threshold, percent int) error {
	if err := validateNames(vg, pool); err != nil {
		return err
	}
	policy := fmt.Sprintf("activation{thin_pool_autoextend_threshold=%d thin_pool_autoextend_percent=%d}", threshold, percent)
	if _, err := c.Runner.Run(ctx, "lvextend", "--use-policies", "--config", policy, vg+"/"+pool); err != nil {
		return fmt.Errorf("autoextend thin pool %s/%s: %w", vg, pool, classify(err))
	}
	return nil
}

// SetErrorWhenFull sets what a full thin pool does with writes that need
// new space: fail them at once (errorWhenFull) or queue them until the pool
// grows or dm-thin's no_space_timeout ends. lvm reloads the pool's table.
func (c *Client) SetErrorWhenFull(ctx context.Context, vg, pool string, errorWhenFull bool) error {
	if err := validateNames(vg, pool); err != nil {
		return err
	}
	v := "n"
	if errorWhenFull {
		v = "y"
	}
	if _, err := c.Runner.Run(ctx, "lvchange", "--errorwhenfull", v, vg+"/"+pool); err != nil {
		return fmt.Errorf("set errorwhenfull of thin pool %s/%s to %s: %w", vg, pool, v, classify(err))
	}
	return nil
}

// ChangeTags adds and removes tags of an LV in one lvchange.
func (c *Client) ChangeTags(ctx context.Context, vg, name string, add, del []string) error {
	if err := validateNames(vg, name); err != nil {
		return err
	}
	args, err := addTags([]string{"lvchange"}, add)
	if err != nil {
		return err
	}
	for _, t := range del {
		if err := lvmname.ValidateTag(t); err != nil {
			return err
		}
		args = append(args, "--deltag", t)
	}
	if _, err := c.Runner.Run(ctx, append(args, vg+"/"+name)...); err != nil {
		return fmt.Errorf("change tags of lv %s/%s (add %q, remove %q): %w", vg, name, add, del, classify(err))
	}
	return nil
}

// DMName is the device-mapper name lvm gives the LV vg/lv, or one of its
// layers (layer "-tpool", "_tmeta"; "" for the LV): each '-' inside the
// names is doubled, one '-' joins them, and the layer follows as it is.
func DMName(vg, lv, layer string) string {
	return strings.ReplaceAll(vg, "-", "--") + "-" + strings.ReplaceAll(lv, "-", "--") + layer
}

// ReserveMetadataSnap takes a metadata snapshot of a thin pool (dmsetup
// message <pool>-tpool 0 reserve_metadata_snap): thin_delta reads the
// mappings from it, consistent while the pool goes on. A pool holds one at
// a time: ErrMetadataSnapHeld when one is held. A pool whose -tpool device
// is not active is ErrNotActive.
func (c *Client) ReserveMetadataSnap(ctx context.Context, vg, pool string) error {
	return c.poolMessage(ctx, vg, pool, "reserve_metadata_snap")
}

// ReleaseMetadataSnap releases a thin pool's metadata snapshot.
func (c *Client) ReleaseMetadataSnap(ctx context.Context, vg, pool string) error {
	return c.poolMessage(ctx, vg, pool, "release_metadata_snap")
}

func (c *Client) poolMessage(ctx context.Context, vg, pool, msg string) error {
	if err := validateNames(vg, pool); err != nil {
		return err
	}
	if _, err := c.Runner.Run(ctx, ToolDMSetup, "message", DMName(vg, pool, "-tpool"), "0", msg); err != nil {
		return fmt.Errorf("%s of thin pool %s/%s: %w", msg, vg, pool, classifyDM(err))
	}
	return nil
}

// ThinDelta compares two thin devices of a pool, by thin id, in the
// metadata snapshot the caller reserved (ReserveMetadataSnap): base and
// id, or id with itself for the blocks it maps.
func (c *Client) ThinDelta(ctx context.Context, vg, pool string, base, id uint32) (*ThinDelta, error) {
	if err := validateNames(vg, pool); err != nil {
		return nil, err
	}
	if base == 0 || id == 0 {
		return nil, fmt.Errorf("%w: thin ids %d and %d: lvm numbers them from 1", ErrInvalid, base, id)
	}
	meta := "/dev/mapper/" + DMName(vg, pool, "_tmeta")
	out, err := c.Runner.Run(ctx, ToolThinDelta, "-m", "--snap1", strconv.FormatUint(uint64(base), 10),
		"--snap2", strconv.FormatUint(uint64(id), 10), meta)
	if err != nil {
		return nil, fmt.Errorf("thin_delta of thin ids %d and %d in pool %s/%s: %w", base, id, vg, pool, classifyDM(err))
	}
	d, err := ParseThinDelta(out)
	if err != nil {
		return nil, err
	}
	if d.Left != base || d.Right != id {
		return nil, fmt.Errorf("thin_delta compared thin ids %d and %d, asked for %d and %d", d.Left, d.Right, base, id)
	}
	return d, nil
}

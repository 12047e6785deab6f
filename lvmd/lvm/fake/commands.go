package fake

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/thinlvm/thinlvm/api/lvmname"
)

// lookupVG returns the VG of a command, or lvm's error for a missing one.
func (r *Runner) lookupVG(c *command, name string) (*VG, error) {
	vg := r.vg(name)
	if vg == nil {
		return nil, c.fail("Volume group \"%s\" not found\n  Cannot process volume group %s", name, name)
	}
	return vg, nil
}

func (r *Runner) nameTaken(vg, name string) bool {
	return r.lv(vg, name) != nil || r.pool(vg, name) != nil
}

// poolFull is lvm2's refusal to add thin volumes to a full pool.
func poolFull(c *command, p *Pool) error {
	if p.DataPercent >= 100 || p.MetadataPercent >= 100 {
		return c.fail("Cannot create new thin volume, free space in thin pool %s/%s reached threshold.", p.VG, p.Name)
	}
	return nil
}

func (r *Runner) lvcreate(c *command) (string, error) {
	if err := c.parse(); err != nil {
		return "", err
	}
	if z, ok := c.value("--zero"); ok && z != "y" && z != "n" {
		return "", c.unsupported("--zero %q", z)
	}
	name, ok := c.value("--name")
	if !ok {
		return "", c.unsupported("lvcreate without --name")
	}
	if err := lvmname.ValidateLVName(name); err != nil {
		return "", c.fail("Logical volume name \"%s\" is invalid.", name)
	}
	tags := c.values["--addtag"]
	for _, t := range tags {
		if err := lvmname.ValidateTag(t); err != nil {
			return "", c.fail("Invalid tag %s.", t)
		}
	}
	if !c.bools["--thin"] && !c.bools["--snapshot"] {
		return r.createLinear(c, name, tags)
	}
	vgName, from, err := c.target()
	if err != nil {
		return "", err
	}
	vg, err := r.lookupVG(c, vgName)
	if err != nil {
		return "", err
	}
	lv := LV{VG: vgName, Name: name, Tags: slices.Clone(tags)}
	switch {
	case c.bools["--snapshot"] && !c.bools["--thin"] && r.lv(vgName, from) != nil && r.lv(vgName, from).Pool == "":
		if err := r.cowSnapshot(c, vg, &lv, r.lv(vgName, from)); err != nil {
			return "", err
		}
	case c.bools["--thin"] && !c.bools["--snapshot"]:
		p := r.pool(vgName, from)
		if p == nil {
			return "", c.fail("Failed to find logical volume \"%s/%s\"", vgName, from)
		}
		size, err := c.bytesArg("--virtualsize")
		if err != nil {
			return "", err
		}
		if len(c.values["--activate"]) > 0 || len(c.values["--setactivationskip"]) > 0 || len(c.values["--permission"]) > 0 {
			return "", c.unsupported("activation or permission options for a thin LV")
		}
		if r.nameTaken(vgName, name) {
			return "", c.fail("Logical Volume \"%s\" already exists in volume group \"%s\"", name, vgName)
		}
		if err := poolFull(c, p); err != nil {
			return "", err
		}
		lv.Pool, lv.Size = p.Name, roundUp(size, extentSize(vg))
	case c.bools["--snapshot"] && !c.bools["--thin"]:
		src := r.lv(vgName, from)
		if src == nil {
			if r.pool(vgName, from) != nil {
				return "", c.unsupported("snapshot of thin pool %s/%s", vgName, from)
			}
			return "", c.fail("Failed to find logical volume \"%s/%s\"", vgName, from)
		}
		if _, ok := c.value("--size"); ok {
			return "", c.unsupported("--size for a thin snapshot")
		}
		if r.nameTaken(vgName, name) {
			return "", c.fail("Logical Volume \"%s\" already exists in volume group \"%s\"", name, vgName)
		}
		if err := poolFull(c, r.pool(vgName, src.Pool)); err != nil {
			return "", err
		}
		lv.Pool, lv.Origin, lv.Size = src.Pool, src.Name, src.Size
		lv.SkipActivation = true
		if v, ok := c.value("--setactivationskip"); ok {
			switch v {
			case "y":
			case "n":
				lv.SkipActivation = false
			default:
				return "", c.unsupported("--setactivationskip %q", v)
			}
		}
		activate := "y"
		if v, ok := c.value("--activate"); ok {
			activate = v
		}
		if activate != "y" && activate != "n" {
			return "", c.unsupported("--activate %q", activate)
		}
		// lvcreate activates by default, but activation skip wins.
		lv.Inactive = activate == "n" || lv.SkipActivation
		if v, ok := c.value("--permission"); ok {
			switch v {
			case "r":
				lv.ReadOnly = true
			case "rw":
			default:
				return "", c.unsupported("--permission %q", v)
			}
		}
	default:
		return "", c.unsupported("lvcreate without exactly one of --thin and --snapshot")
	}
	return r.addLV(c, vg, lv)
}

func (r *Runner) lvextend(c *command) (string, error) {
	if err := c.parse(); err != nil {
		return "", err
	}
	vgName, name, err := c.target()
	if err != nil {
		return "", err
	}
	vg, err := r.lookupVG(c, vgName)
	if err != nil {
		return "", err
	}
	ext := extentSize(vg)
	if c.bools["--use-policies"] {
		return r.autoextend(c, vg, name)
	}
	size, err := c.bytesArg("--size")
	if err != nil {
		return "", err
	}
	if len(c.values["--config"]) > 0 {
		return "", c.unsupported("--config without --use-policies")
	}
	size = roundUp(size, ext)
	var cur *uint64
	p := r.pool(vgName, name)
	if p != nil {
		cur = &p.Size
	} else if lv := r.lv(vgName, name); lv != nil {
		cur = &lv.Size
	} else {
		return "", c.fail("Failed to find logical volume \"%s/%s\"", vgName, name)
	}
	newExt, curExt := size/ext, *cur/ext
	switch {
	case size == *cur:
		return "", c.fail("New size (%d extents) matches existing size (%d extents).", newExt, curExt)
	case size < *cur:
		return "", c.fail("New size given (%d extents) not larger than existing size (%d extents)", newExt, curExt)
	}
	if p != nil {
		return r.growPool(c, vg, p, size-p.Size)
	}
	if lv := r.lv(vgName, name); lv.Pool == "" {
		if lv.Origin != "" {
			return "", c.unsupported("extending snapshot %s/%s", vgName, name)
		}
		if err := takeExtents(c, vg, size-lv.Size); err != nil {
			return "", err
		}
	}
	if r.DevDir != "" {
		if err := os.Truncate(r.devicePath(vgName, name), int64(size)); err != nil {
			return "", c.fail("device of %s/%s: %v", vgName, name, err)
		}
	}
	*cur = size
	return fmt.Sprintf("  Size of logical volume %s/%s changed from %d extents to %d extents.\n  Logical volume %s/%s successfully resized.\n",
		vgName, name, curExt, newExt, vgName, name), nil
}

// autoextend is `lvextend --use-policies`: it grows a thin pool by the
// policy's percent when its use is at or over the policy's threshold.
func (r *Runner) autoextend(c *command, vg *VG, name string) (string, error) {
	if _, ok := c.value("--size"); ok {
		return "", c.unsupported("--size with --use-policies")
	}
	policy, ok := c.value("--config")
	if !ok {
		return "", c.unsupported("--use-policies without --config")
	}
	var threshold, percent int
	if _, err := fmt.Sscanf(policy, "activation{thin_pool_autoextend_threshold=%d thin_pool_autoextend_percent=%d}", &threshold, &percent); err != nil {
		return "", c.unsupported("--config %q", policy)
	}
	p := r.pool(vg.Name, name)
	if p == nil {
		if r.lv(vg.Name, name) != nil {
			return "", c.unsupported("--use-policies on thin LV %s/%s", vg.Name, name)
		}
		return "", c.fail("Failed to find logical volume \"%s/%s\"", vg.Name, name)
	}
	if threshold >= 100 || p.DataPercent < float64(threshold) && p.MetadataPercent < float64(threshold) {
		return "", nil // lvm2 does nothing and says nothing
	}
	return r.growPool(c, vg, p, roundUp(p.Size*uint64(percent)/100, extentSize(vg)))
}

// growPool takes by bytes from the VG's free space for a thin pool.
func (r *Runner) growPool(c *command, vg *VG, p *Pool, by uint64) (string, error) {
	ext := extentSize(vg)
	if by > vg.Free {
		return "", c.fail("Insufficient free space: %d extents needed, but only %d available", by/ext, vg.Free/ext)
	}
	old := p.Size
	p.Size += by
	vg.Free -= by
	scale := float64(old) / float64(p.Size)
	p.DataPercent *= scale
	p.MetadataPercent *= scale
	return fmt.Sprintf("  Size of logical volume %s/%s_tdata changed from %d extents to %d extents.\n  Logical volume %s/%s successfully resized.\n",
		vg.Name, p.Name, old/ext, p.Size/ext, vg.Name, p.Name), nil
}

// lvchange changes one thin LV's permission (--permission r|rw),
// activation (--activate y|n) or tags (--addtag, --deltag), one kind at a
// time.
func (r *Runner) lvchange(c *command) (string, error) {
	if err := c.parse(); err != nil {
		return "", err
	}
	vgName, name, err := c.target()
	if err != nil {
		return "", err
	}
	vg, err := r.lookupVG(c, vgName)
	if err != nil {
		return "", err
	}
	if ewf, ok := c.value("--errorwhenfull"); ok {
		return r.setErrorWhenFull(c, vgName, name, ewf)
	}
	lv := r.lv(vgName, name)
	if lv == nil {
		return "", c.fail("Failed to find logical volume \"%s/%s\"", vgName, name)
	}
	perm, hasPerm := c.value("--permission")
	act, hasAct := c.value("--activate")
	if add, del := c.values["--addtag"], c.values["--deltag"]; len(add) > 0 || len(del) > 0 {
		if hasPerm || hasAct {
			return "", c.unsupported("tag changes with other changes")
		}
		for _, t := range slices.Concat(add, del) {
			if err := lvmname.ValidateTag(t); err != nil {
				return "", c.fail("Invalid tag %s.", t)
			}
		}
		var grow uint64
		for _, t := range add {
			if !slices.Contains(lv.Tags, t) {
				grow += uint64(len(t)) + 4
			}
		}
		if err := r.writeMetadata(c, vg, grow); err != nil {
			return "", err
		}
		for _, t := range add {
			if !slices.Contains(lv.Tags, t) {
				lv.Tags = append(lv.Tags, t)
			}
		}
		lv.Tags = slices.DeleteFunc(lv.Tags, func(t string) bool { return slices.Contains(del, t) })
		return fmt.Sprintf("  Logical volume %s/%s changed.\n", vgName, name), nil
	}
	switch {
	case hasPerm && !hasAct:
		if perm != "r" && perm != "rw" {
			return "", c.unsupported("--permission %q", perm)
		}
		if lv.ReadOnly == (perm == "r") {
			return "", c.fail("Logical volume %s/%s is already %s.", vgName, name, map[bool]string{true: "read only", false: "writable"}[lv.ReadOnly])
		}
		lv.ReadOnly = perm == "r"
		return fmt.Sprintf("  Logical volume %s/%s changed.\n", vgName, name), nil
	case hasAct && !hasPerm:
		switch act {
		case "y":
			if lv.SkipActivation && !c.bools["--ignoreactivationskip"] {
				return "", nil // lvm skips it silently
			}
			lv.Inactive = false
		case "n":
			lv.Inactive = true
		default:
			return "", c.unsupported("--activate %q", act)
		}
		return "", nil
	}
	return "", c.unsupported("lvchange without exactly one of --permission and --activate")
}

// setErrorWhenFull is lvchange --errorwhenfull y|n of a thin pool.
func (r *Runner) setErrorWhenFull(c *command, vgName, name, v string) (string, error) {
	if len(c.values) != 1 {
		return "", c.unsupported("--errorwhenfull with other changes")
	}
	p := r.pool(vgName, name)
	if p == nil {
		if r.lv(vgName, name) != nil {
			return "", c.fail("Command on LV %s/%s uses options that require LV types thinpool.", vgName, name)
		}
		return "", c.fail("Failed to find logical volume \"%s/%s\"", vgName, name)
	}
	want := map[string]string{"y": "error", "n": "queue"}[v]
	if want == "" {
		return "", c.unsupported("--errorwhenfull %q", v)
	}
	p.WhenFull = want
	return fmt.Sprintf("  Logical volume %s/%s changed.\n", vgName, name), nil
}

func whenFull(p *Pool) string {
	if p.WhenFull == "" {
		return "queue"
	}
	return p.WhenFull
}

func (r *Runner) lvremove(c *command) (string, error) {
	if err := c.parse(); err != nil {
		return "", err
	}
	if !c.bools["--yes"] || !c.bools["--force"] {
		return "", c.unsupported("lvremove without --yes --force (it would prompt)")
	}
	vgName, name, err := c.target()
	if err != nil {
		return "", err
	}
	if _, err := r.lookupVG(c, vgName); err != nil {
		return "", err
	}
	if r.pool(vgName, name) != nil {
		return "", c.unsupported("removing thin pool %s/%s", vgName, name)
	}
	i := slices.IndexFunc(r.LVs, func(lv LV) bool { return lv.VG == vgName && lv.Name == name })
	if i < 0 {
		return "", c.fail("Failed to find logical volume \"%s/%s\"", vgName, name)
	}
	if r.DevDir != "" {
		if err := os.Remove(r.devicePath(vgName, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", c.fail("device of %s/%s: %v", vgName, name, err)
		}
	}
	if lv := r.LVs[i]; lv.Pool == "" {
		vg := r.vg(vgName)
		vg.Free += lv.Size
		if lv.Origin == "" {
			// A thick LV's snapshots go with it.
			for _, o := range r.LVs {
				if o.VG == vgName && o.Origin == name {
					vg.Free += o.Size
				}
			}
			r.LVs = slices.DeleteFunc(r.LVs, func(o LV) bool { return o.VG == vgName && o.Origin == name })
			i = slices.IndexFunc(r.LVs, func(lv LV) bool { return lv.VG == vgName && lv.Name == name })
		}
	}
	r.LVs = slices.Delete(r.LVs, i, i+1)
	for j := range r.LVs {
		if r.LVs[j].VG == vgName && r.LVs[j].Origin == name {
			r.LVs[j].Origin = "" // thin snapshots outlive their origin
		}
	}
	return fmt.Sprintf("  Logical volume \"%s\" successfully removed.\n", name), nil
}

// createLinear is lvcreate --size of a thick LV, taken from the VG's free
// extents.
func (r *Runner) createLinear(c *command, name string, tags []string) (string, error) {
	if len(c.pos) != 1 || strings.Contains(c.pos[0], "/") {
		return "", c.unsupported("positional arguments %q (a thick LV's VG alone)", c.pos)
	}
	if len(c.values["--activate"]) > 0 || len(c.values["--permission"]) > 0 || len(c.values["--setactivationskip"]) > 0 {
		return "", c.unsupported("activation or permission options for a thick LV")
	}
	vg, err := r.lookupVG(c, c.pos[0])
	if err != nil {
		return "", err
	}
	size, err := c.bytesArg("--size")
	if err != nil {
		return "", err
	}
	lv := LV{VG: vg.Name, Name: name, Tags: slices.Clone(tags), Size: roundUp(size, extentSize(vg))}
	if r.nameTaken(vg.Name, name) {
		return "", c.fail("Logical Volume \"%s\" already exists in volume group \"%s\"", name, vg.Name)
	}
	if err := takeExtents(c, vg, lv.Size); err != nil {
		return "", err
	}
	return r.addLV(c, vg, lv)
}

// cowSnapshot fills lv as lvcreate --snapshot --size makes a snapshot of
// the thick LV src: a copy-on-write store of that size, from the VG.
func (r *Runner) cowSnapshot(c *command, vg *VG, lv, src *LV) error {
	if src.Origin != "" {
		return c.unsupported("snapshot of snapshot %s/%s", src.VG, src.Name)
	}
	size, err := c.bytesArg("--size")
	if err != nil {
		return err
	}
	if r.nameTaken(vg.Name, lv.Name) {
		return c.fail("Logical Volume \"%s\" already exists in volume group \"%s\"", lv.Name, vg.Name)
	}
	if v, ok := c.value("--permission"); !ok || v != "r" {
		return c.unsupported("a thick LV's snapshot that is not read-only")
	}
	lv.Origin, lv.ReadOnly, lv.Size = src.Name, true, roundUp(size, extentSize(vg))
	return takeExtents(c, vg, lv.Size)
}

// takeExtents takes size bytes from vg's free extents, or is lvm's refusal.
func takeExtents(c *command, vg *VG, size uint64) error {
	ext := extentSize(vg)
	if size > vg.Free {
		return c.fail("Volume group \"%s\" has insufficient free space (%d extents): %d required.", vg.Name, vg.Free/ext, size/ext)
	}
	vg.Free -= size
	return nil
}

// addLV writes a new LV's metadata and device, and adds it.
func (r *Runner) addLV(c *command, vg *VG, lv LV) (string, error) {
	if err := r.writeMetadata(c, vg, lvMetadataBytes(&lv)); err != nil {
		if lv.Pool == "" {
			vg.Free += lv.Size // lvm changed nothing
		}
		return "", err
	}
	if err := r.backDevice(c, &lv); err != nil {
		return "", err
	}
	lv.UUID = r.uuid()
	if lv.Pool != "" {
		r.thinID(&lv)
	}
	r.LVs = append(r.LVs, lv)
	return fmt.Sprintf("  Logical volume \"%s\" created.\n", lv.Name), nil
}

// devicePath is where an LV's device node is.
func devicePath(devDir, vg, name string) string {
	if devDir == "" {
		devDir = "/dev"
	}
	return filepath.Join(devDir, vg, name)
}

func (r *Runner) devicePath(vg, name string) string { return devicePath(r.DevDir, vg, name) }

// backDevice makes a new LV's backing file when DevDir is set: a copy of
// its origin's, or empty, of the LV's size.
func (r *Runner) backDevice(c *command, lv *LV) error {
	if r.DevDir == "" {
		return nil
	}
	var data []byte
	size := lv.Size
	if lv.Origin != "" {
		if lv.Pool == "" { // a copy-on-write snapshot: its origin's size
			size = r.lv(lv.VG, lv.Origin).Size
		}
		var err error
		if data, err = os.ReadFile(r.devicePath(lv.VG, lv.Origin)); err != nil {
			return c.fail("device of origin %s/%s: %v", lv.VG, lv.Origin, err)
		}
	}
	path := r.devicePath(lv.VG, lv.Name)
	err := os.MkdirAll(filepath.Dir(path), 0o700)
	if err == nil {
		err = os.WriteFile(path, data, 0o600)
	}
	if err == nil {
		err = os.Truncate(path, int64(size))
	}
	if err != nil {
		return c.fail("device of %s/%s: %v", lv.VG, lv.Name, err)
	}
	return nil
}

package fake

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// fullReport answers `lvm fullreport` with the sub-reports and fields its
// --configreport options ask for, one report per VG, as lvm2 prints them.
func (r *Runner) fullReport(c *command) (string, error) {
	fields := map[string][]string{}
	var vgNames []string
	var format, units string
	nosuffix := false
	section := ""
	for i := 1; i < len(c.args); i++ {
		a := c.args[i]
		next := func() (string, error) {
			if i+1 >= len(c.args) {
				return "", c.unsupported("%s without a value", a)
			}
			i++
			return c.args[i], nil
		}
		var v string
		var err error
		switch a {
		case "--reportformat":
			format, err = next()
		case "--units":
			units, err = next()
		case "--nosuffix":
			nosuffix = true
		case "--configreport":
			section, err = next()
			if err == nil && !slices.Contains([]string{"vg", "pv", "lv", "pvseg", "seg"}, section) {
				err = c.unsupported("report %q", section)
			}
		case "-o", "--options":
			v, err = next()
			fallthrough
		case "-o,": // -o with its value attached: no fields
			if a == "-o," {
				v = ","
			}
			if err == nil {
				if section == "" {
					err = c.unsupported("-o before --configreport")
				}
				fields[section] = nil
				for _, f := range strings.Split(v, ",") {
					if f != "" {
						fields[section] = append(fields[section], f)
					}
				}
			}
		default:
			if strings.HasPrefix(a, "-") {
				err = c.unsupported("option %q", a)
			}
			vgNames = append(vgNames, a)
		}
		if err != nil {
			return "", err
		}
	}
	if format != "json" || units != "b" || !nosuffix {
		return "", c.unsupported("report format: want --reportformat json --units b --nosuffix")
	}
	for _, sec := range []string{"vg", "pv", "lv", "pvseg", "seg"} {
		if _, ok := fields[sec]; !ok {
			return "", c.unsupported("fullreport without -o for %s: lvm would print its default fields", sec)
		}
	}
	if len(vgNames) == 0 {
		for _, vg := range r.VGs {
			vgNames = append(vgNames, vg.Name)
		}
		sort.Strings(vgNames)
	}
	var reports []string
	for _, name := range vgNames {
		vg, err := r.lookupVG(c, name)
		if err != nil {
			return "", err
		}
		rep, err := r.vgReport(c, vg, fields)
		if err != nil {
			return "", err
		}
		reports = append(reports, rep)
	}
	return "  {\n      \"report\": [\n" + strings.Join(reports, ",\n") + "\n      ]\n  }\n", nil
}

// row is one line of a report: a field's value by name.
type row func(field string) (string, bool)

func (r *Runner) vgReport(c *command, vg *VG, fields map[string][]string) (string, error) {
	if vg.UUID == "" {
		vg.UUID = r.uuid()
	}
	vgRow := func(f string) (string, bool) {
		switch f {
		case "vg_name":
			return vg.Name, true
		case "vg_uuid":
			return vg.UUID, true
		case "vg_size":
			return strconv.FormatUint(vg.Size, 10), true
		case "vg_free":
			return strconv.FormatUint(vg.Free, 10), true
		case "vg_extent_size":
			return strconv.FormatUint(extentSize(vg), 10), true
		case "vg_extent_count":
			return strconv.FormatUint(vg.Size/extentSize(vg), 10), true
		case "vg_free_count":
			return strconv.FormatUint(vg.Free/extentSize(vg), 10), true
		case "vg_mda_size":
			return strconv.FormatUint(metadataAreaSize(vg), 10), true
		case "vg_mda_free":
			return strconv.FormatUint(r.metadataFree(vg), 10), true
		}
		return "", false
	}
	type named struct {
		name string
		row  row
	}
	var lvs []named
	for i := range r.Pools {
		if p := &r.Pools[i]; p.VG == vg.Name {
			if p.UUID == "" {
				p.UUID = r.uuid()
			}
			lvs = append(lvs, named{p.Name, poolRow(p)})
		}
	}
	for i := range r.LVs {
		if lv := &r.LVs[i]; lv.VG == vg.Name {
			if lv.UUID == "" {
				lv.UUID = r.uuid()
			}
			snaps := slices.ContainsFunc(r.LVs, func(o LV) bool { return o.VG == lv.VG && o.Origin == lv.Name })
			lvs = append(lvs, named{lv.Name, lvRow(lv, snaps, r.DevDir)})
		}
	}
	sort.Slice(lvs, func(i, j int) bool { return lvs[i].name < lvs[j].name })
	lvRows := make([]row, len(lvs))
	for i, lv := range lvs {
		lvRows[i] = lv.row
	}
	none := func(string) (string, bool) { return "", false }
	sections := []struct {
		name string
		rows []row
	}{
		{"vg", []row{vgRow}},
		{"pv", []row{none}}, // one PV per VG
		{"lv", lvRows},
		{"pvseg", []row{none}},
		{"seg", lvRows},
	}
	var parts []string
	for _, s := range sections {
		var lines []string
		for _, rw := range s.rows {
			line, err := formatRow(c, s.name, fields[s.name], rw)
			if err != nil {
				return "", err
			}
			lines = append(lines, "                  "+line)
		}
		parts = append(parts, fmt.Sprintf("              %q: [\n%s\n              ]\n", s.name, strings.Join(lines, ",\n")))
	}
	return "          {\n" + strings.Join(parts, "              ,\n") + "          }", nil
}

func formatRow(c *command, section string, fields []string, rw row) (string, error) {
	kv := make([]string, 0, len(fields))
	for _, f := range fields {
		v, ok := rw(f)
		if !ok {
			if section == "seg" || section == "pv" || section == "pvseg" {
				return "", c.unsupported("field %q in the %s report", f, section)
			}
			return "", c.fail("Unrecognised field: %s", f)
		}
		k, _ := json.Marshal(f)
		q, _ := json.Marshal(v)
		kv = append(kv, string(k)+":"+string(q))
	}
	return "{" + strings.Join(kv, ", ") + "}", nil
}

func percent(p float64) string { return strconv.FormatFloat(p, 'f', 2, 64) }

func poolRow(p *Pool) row {
	return func(f string) (string, bool) {
		switch f {
		case "lv_uuid":
			return p.UUID, true
		case "lv_name":
			return p.Name, true
		case "lv_full_name":
			return p.VG + "/" + p.Name, true
		case "lv_path", "lv_tags", "origin", "pool_lv", "thin_id":
			return "", true
		case "chunk_size":
			return strconv.FormatUint(chunkSize(p), 10), true
		case "lv_size":
			return strconv.FormatUint(p.Size, 10), true
		case "lv_attr":
			switch {
			case p.Inactive:
				return "twi---tz--", true
			case p.ReadOnly:
				return "twi-aotzM-", true
			case p.DataPercent >= 100:
				return "twi-aotzD-", true
			}
			return "twi-aotz--", true
		case "lv_when_full":
			return whenFull(p), true
		case "vg_name":
			return p.VG, true
		case "data_percent", "metadata_percent":
			if p.Inactive {
				return "", true
			}
			if f == "data_percent" {
				return percent(p.DataPercent), true
			}
			return percent(p.MetadataPercent), true
		}
		return "", false
	}
}

func lvRow(lv *LV, hasSnapshots bool, devDir string) row {
	return func(f string) (string, bool) {
		switch f {
		case "lv_uuid":
			return lv.UUID, true
		case "lv_name":
			return lv.Name, true
		case "lv_full_name":
			return lv.VG + "/" + lv.Name, true
		case "lv_path":
			return devicePath(devDir, lv.VG, lv.Name), true
		case "lv_size":
			return strconv.FormatUint(lv.Size, 10), true
		case "lv_attr":
			return attr(lv, hasSnapshots), true
		case "lv_tags":
			return strings.Join(lv.Tags, ","), true
		case "origin":
			return lv.Origin, true
		case "pool_lv":
			return lv.Pool, true
		case "vg_name":
			return lv.VG, true
		case "data_percent":
			if lv.Inactive {
				return "", true
			}
			return percent(lv.DataPercent), true
		case "metadata_percent", "lv_when_full":
			return "", true
		case "thin_id":
			if lv.Pool == "" {
				return "", true // lvm reports none for a thick LV
			}
			return strconv.FormatUint(uint64(lv.ThinID), 10), true
		case "chunk_size":
			return "0", true
		}
		return "", false
	}
}

// DefaultChunkSize is the block size of a pool whose ChunkSize is 0:
// lvm2's default for a small pool, 64 KiB.
const DefaultChunkSize = 64 << 10

func chunkSize(p *Pool) uint64 {
	if p.ChunkSize == 0 {
		return DefaultChunkSize
	}
	return p.ChunkSize
}

// thinID gives lv a thin id when it has none: one above the VG's highest,
// as lvm numbers them.
func (r *Runner) thinID(lv *LV) uint32 {
	if lv.ThinID == 0 {
		var top uint32
		for _, o := range r.LVs {
			if o.VG == lv.VG && o.ThinID > top {
				top = o.ThinID
			}
		}
		lv.ThinID = top + 1
	}
	return lv.ThinID
}

// attr is an LV's lv_attr, e.g. "Vwi-a-tz--", "Vri---tz-k"; a thick LV's
// "-wi-a-----", "owi-a-s---" with snapshots, "sri-a-s---" a snapshot.
func attr(lv *LV, hasSnapshots bool) string {
	a := []byte("Vwi-a-tz--")
	switch {
	case lv.Pool != "":
	case lv.Origin != "":
		a = []byte("swi-a-s---")
	case hasSnapshots:
		a = []byte("owi-a-s---")
	default:
		a = []byte("-wi-a-----")
	}
	if lv.ReadOnly {
		a[1] = 'r'
	}
	if lv.Inactive {
		a[4] = '-'
	}
	if lv.SkipActivation {
		a[9] = 'k'
	}
	return string(a)
}

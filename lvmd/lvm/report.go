package lvm

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// VG is one volume group from a report.
type VG struct {
	Name       string
	UUID       string
	Size       uint64
	Free       uint64
	ExtentSize uint64
	// MetadataAreaSize is vg_mda_size: the smallest metadata area of the
	// VG's PVs (lvm2 keeps a copy of the VG's text metadata in each), set
	// by pvcreate --metadatasize; 1020 KiB by default.
	MetadataAreaSize uint64
	// MetadataAreaFree is vg_mda_free: how much the VG's metadata can still
	// grow, in 512-byte sectors. lvm2 writes each new copy of the metadata
	// into the area's circular buffer beside the old one, so a copy may use
	// at most half the area less a sector (521472 bytes of the default
	// area); vg_mda_free is what is left of that half. An lvm command that
	// would grow the metadata past it fails ("exceeds maximum metadata
	// size") and changes nothing.
	MetadataAreaFree uint64
}

// LV is one logical volume from a report. Hidden LVs (lvm's "[name]") are
// left out of reports.
type LV struct {
	Name            string
	VG              string
	UUID            string
	Path            string
	Size            uint64
	Attr            string
	Origin          string
	Pool            string
	Tags            []string
	DataPercent     float64
	MetadataPercent float64
	// WhenFull is a thin pool's lv_when_full: "error" when writes that need
	// new space fail at once once the pool is full, "queue" when they wait
	// (up to dm-thin's no_space_timeout, 60 s by default) for it to grow;
	// empty for other LVs.
	WhenFull string
	// ThinID is a thin LV's device id in its pool's metadata (what
	// thin_delta names it by); lvm numbers them from 1, and 0 is "not
	// known": another LV type, or a view lvmd amended without it.
	ThinID uint32
	// ChunkSize is a thin pool's block size in bytes; 0 for other LVs.
	ChunkSize uint64
}

// PoolHealth is a thin pool's state as lvm's lv_attr shows it.
type PoolHealth string

// Thin pool states (the ninth lv_attr character).
const (
	// PoolHealthy: the pool takes writes.
	PoolHealthy PoolHealth = ""
	// PoolOutOfDataSpace ('D'): every data chunk is used; writes that need
	// a new chunk fail (or queue, by WhenFull) until the pool grows.
	PoolOutOfDataSpace PoolHealth = "OutOfDataSpace"
	// PoolMetadataReadOnly ('M'): the pool's metadata is full or damaged
	// and the kernel made the pool read-only.
	PoolMetadataReadOnly PoolHealth = "MetadataReadOnly"
	// PoolFailed ('F'): the kernel failed the pool; nothing is served.
	PoolFailed PoolHealth = "Failed"
)

// Health tells a thin pool's state from its lv_attr.
func (lv *LV) Health() PoolHealth {
	if !lv.IsThinPool() || len(lv.Attr) < 9 {
		return PoolHealthy
	}
	switch lv.Attr[8] {
	case 'D':
		return PoolOutOfDataSpace
	case 'M':
		return PoolMetadataReadOnly
	case 'F':
		return PoolFailed
	}
	return PoolHealthy
}

// IsThinPool tells whether the LV is a thin pool.
func (lv *LV) IsThinPool() bool { return len(lv.Attr) > 0 && lv.Attr[0] == 't' }

// IsThin tells whether the LV is a thin volume (thin snapshots included).
func (lv *LV) IsThin() bool { return len(lv.Attr) > 0 && lv.Attr[0] == 'V' }

// ReadOnly tells whether the LV's permission is read-only.
func (lv *LV) ReadOnly() bool { return len(lv.Attr) > 1 && lv.Attr[1] == 'r' }

// Active tells whether the LV is active (has a device node).
func (lv *LV) Active() bool { return len(lv.Attr) > 4 && lv.Attr[4] == 'a' }

// IsLinear tells whether the LV is a plain (thick) LV: lv_attr's volume
// type "-", neither thin, nor a pool, a snapshot or an origin of one, nor
// mirrored, striped over raid or any other kind.
func (lv *LV) IsLinear() bool { return len(lv.Attr) > 0 && lv.Attr[0] == '-' }

// HasTag tells whether the LV carries tag.
func (lv *LV) HasTag(tag string) bool {
	for _, t := range lv.Tags {
		if t == tag {
			return true
		}
	}
	return false
}

// Report is what one `lvm fullreport` says of the volume groups it covers.
type Report struct {
	VGs []VG
	LVs []LV
}

// VG returns the volume group named name, or nil.
func (r *Report) VG(name string) *VG {
	for i := range r.VGs {
		if r.VGs[i].Name == name {
			return &r.VGs[i]
		}
	}
	return nil
}

// LV returns the LV vg/name, or nil.
func (r *Report) LV(vg, name string) *LV {
	for i := range r.LVs {
		if r.LVs[i].VG == vg && r.LVs[i].Name == name {
			return &r.LVs[i]
		}
	}
	return nil
}

// Clone returns a deep copy, so that a published report is never mutated.
func (r *Report) Clone() *Report {
	c := &Report{VGs: append([]VG(nil), r.VGs...), LVs: make([]LV, len(r.LVs))}
	for i, lv := range r.LVs {
		lv.Tags = append([]string(nil), lv.Tags...)
		c.LVs[i] = lv
	}
	return c
}

// The fields a report asks for; the wire structs below name the same ones.
var (
	vgFields = "vg_name,vg_uuid,vg_size,vg_free,vg_extent_size,vg_mda_size,vg_mda_free"
	lvFields = "lv_uuid,lv_name,lv_path,lv_size,lv_attr,lv_tags,origin,pool_lv,vg_name,data_percent,metadata_percent,lv_when_full"
	// segFields are segment fields, which lvm refuses in the lv
	// sub-report ("contains columns which lead to change of report
	// type"): they come in the seg sub-report, joined to the LV by uuid.
	segFields = "lv_uuid,thin_id,chunk_size"
)

// FullReportArgs is the one read command lvmd runs: VGs and LVs in one lvm
// process, the other sub-reports switched off.
func FullReportArgs(vgs []string) []string {
	args := []string{"fullreport", "--reportformat", "json", "--units", "b", "--nosuffix",
		"--configreport", "vg", "-o", vgFields,
		"--configreport", "lv", "-o", lvFields,
		"--configreport", "pv", "-o,",
		"--configreport", "pvseg", "-o,",
		"--configreport", "seg", "-o", segFields}
	return append(args, vgs...)
}

// VGNamesArgs lists the volume groups there are, by name only, in the
// shape of FullReportArgs (one report per VG, the other sub-reports off).
func VGNamesArgs() []string {
	return []string{"fullreport", "--reportformat", "json", "--units", "b", "--nosuffix",
		"--configreport", "vg", "-o", "vg_name",
		"--configreport", "lv", "-o,",
		"--configreport", "pv", "-o,",
		"--configreport", "pvseg", "-o,",
		"--configreport", "seg", "-o,"}
}

// ParseVGNames parses the output of VGNamesArgs.
func ParseVGNames(data []byte) ([]string, error) {
	var w wireReport
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("parse lvm report: %w", err)
	}
	var names []string
	for _, part := range w.Report {
		for _, m := range part.VG {
			if n := m["vg_name"]; n != "" {
				names = append(names, n)
			}
		}
	}
	return names, nil
}

type wireReport struct {
	Report []struct {
		VG  []map[string]string `json:"vg"`
		LV  []map[string]string `json:"lv"`
		Seg []map[string]string `json:"seg"`
	} `json:"report"`
}

// ParseFullReport parses the JSON of `lvm fullreport --reportformat json
// --units b --nosuffix`. Every value in lvm's JSON is a string; empty
// objects (switched-off sub-reports) and hidden LVs are skipped. Segment
// rows give their LV its ThinID and ChunkSize (thin LVs and pools have one
// segment; of an LV with several, the first counts).
func ParseFullReport(data []byte) (*Report, error) {
	var w wireReport
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("parse lvm report: %w", err)
	}
	r := &Report{}
	for _, part := range w.Report {
		for _, m := range part.VG {
			if len(m) == 0 {
				continue
			}
			vg, err := parseVG(m)
			if err != nil {
				return nil, err
			}
			r.VGs = append(r.VGs, vg)
		}
		for _, m := range part.LV {
			if len(m) == 0 || strings.HasPrefix(m["lv_name"], "[") {
				continue
			}
			lv, err := parseLV(m)
			if err != nil {
				return nil, err
			}
			r.LVs = append(r.LVs, lv)
		}
	}
	seen := map[string]bool{}
	for _, part := range w.Report {
		for _, m := range part.Seg {
			uuid := m["lv_uuid"]
			if len(m) == 0 || uuid == "" || seen[uuid] {
				continue
			}
			seen[uuid] = true
			if err := r.addSegment(uuid, m); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

// addSegment sets the segment fields of the LV of uuid, when listed.
func (r *Report) addSegment(uuid string, m map[string]string) error {
	i := slices.IndexFunc(r.LVs, func(lv LV) bool { return lv.UUID == uuid })
	if i < 0 {
		return nil // a hidden LV's
	}
	lv := &r.LVs[i]
	if s := m["thin_id"]; s != "" {
		id, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return fmt.Errorf("parse lvm report: field thin_id=%q of lv %s: %w", s, lv.Name, err)
		}
		lv.ThinID = uint32(id)
	}
	if s := m["chunk_size"]; s != "" {
		c, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("parse lvm report: field chunk_size=%q of lv %s: %w", s, lv.Name, err)
		}
		if lv.IsThinPool() {
			lv.ChunkSize = c
		}
	}
	return nil
}

func parseVG(m map[string]string) (VG, error) {
	vg := VG{Name: m["vg_name"], UUID: m["vg_uuid"]}
	var err error
	if vg.Size, err = parseBytes(m, "vg_size"); err != nil {
		return vg, err
	}
	if vg.Free, err = parseBytes(m, "vg_free"); err != nil {
		return vg, err
	}
	if vg.ExtentSize, err = parseBytes(m, "vg_extent_size"); err != nil {
		return vg, err
	}
	// The metadata area fields are read when present: lvmd asks for them,
	// but a report of other fields (vgs's defaults) has none, and 0 then
	// means "not known".
	if _, ok := m["vg_mda_size"]; ok {
		if vg.MetadataAreaSize, err = parseBytes(m, "vg_mda_size"); err != nil {
			return vg, err
		}
	}
	if _, ok := m["vg_mda_free"]; ok {
		if vg.MetadataAreaFree, err = parseBytes(m, "vg_mda_free"); err != nil {
			return vg, err
		}
	}
	return vg, nil
}

func parseLV(m map[string]string) (LV, error) {
	lv := LV{
		Name: m["lv_name"], VG: m["vg_name"], UUID: m["lv_uuid"], Path: m["lv_path"],
		Attr: m["lv_attr"], Origin: m["origin"], Pool: m["pool_lv"], WhenFull: m["lv_when_full"],
	}
	if t := m["lv_tags"]; t != "" {
		lv.Tags = strings.Split(t, ",")
	}
	var err error
	if lv.Size, err = parseBytes(m, "lv_size"); err != nil {
		return lv, err
	}
	if lv.DataPercent, err = parsePercent(m, "data_percent"); err != nil {
		return lv, err
	}
	if lv.MetadataPercent, err = parsePercent(m, "metadata_percent"); err != nil {
		return lv, err
	}
	return lv, nil
}

func parseBytes(m map[string]string, key string) (uint64, error) {
	s, ok := m[key]
	if !ok {
		return 0, fmt.Errorf("parse lvm report: field %s missing", key)
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse lvm report: field %s=%q: %w", key, s, err)
	}
	return v, nil
}

// parsePercent parses a percentage; lvm leaves it empty where it does not
// apply (a thin pool's metadata_percent on a thin LV, an inactive LV).
func parsePercent(m map[string]string, key string) (float64, error) {
	s := m[key]
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("parse lvm report: field %s=%q: %w", key, s, err)
	}
	// NaN would pass every high-water-mark comparison: a full pool would
	// look empty.
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("parse lvm report: field %s=%q is not a percentage", key, s)
	}
	return v, nil
}

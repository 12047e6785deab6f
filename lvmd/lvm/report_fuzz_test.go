package lvm_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
)

// wantReport is what ParseFullReport promises to make of data, worked out
// from the JSON on its own: every non-empty VG object, with its three sizes
// present and decimal; every non-empty LV object whose name is not a hidden
// "[name]", with its size present and decimal, its percentages empty or
// numbers from 0 up (not NaN or infinite) and its tags the comma-separated
// lv_tags; the first non-empty seg object of a listed LV's uuid gives it
// its thin_id (empty or a uint32) and, a thin pool, its chunk_size (empty
// or decimal). ok is false when data holds a VG or LV that breaks those rules,
// or is not such JSON at all.
func wantReport(data []byte) (r *lvm.Report, ok bool) {
	var w struct {
		Report []struct {
			VG  []map[string]string `json:"vg"`
			LV  []map[string]string `json:"lv"`
			Seg []map[string]string `json:"seg"`
		} `json:"report"`
	}
	if json.Unmarshal(data, &w) != nil {
		return nil, false
	}
	size := func(m map[string]string, key string) uint64 {
		s, present := m[key]
		v, err := strconv.ParseUint(s, 10, 64)
		if !present || err != nil {
			ok = false
		}
		return v
	}
	percent := func(m map[string]string, key string) float64 {
		if m[key] == "" {
			return 0
		}
		v, err := strconv.ParseFloat(m[key], 64)
		// NaN, infinities and negatives are no percentage: NaN would pass
		// every high-water-mark comparison.
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			ok = false
		}
		return v
	}
	r, ok = &lvm.Report{}, true
	for _, part := range w.Report {
		for _, m := range part.VG {
			if len(m) > 0 {
				r.VGs = append(r.VGs, lvm.VG{Name: m["vg_name"], UUID: m["vg_uuid"],
					Size: size(m, "vg_size"), Free: size(m, "vg_free"), ExtentSize: size(m, "vg_extent_size")})
			}
		}
		for _, m := range part.LV {
			if len(m) == 0 || strings.HasPrefix(m["lv_name"], "[") {
				continue
			}
			lv := lvm.LV{Name: m["lv_name"], VG: m["vg_name"], UUID: m["lv_uuid"], Path: m["lv_path"],
				Size: size(m, "lv_size"), Attr: m["lv_attr"], Origin: m["origin"], Pool: m["pool_lv"], WhenFull: m["lv_when_full"],
				DataPercent: percent(m, "data_percent"), MetadataPercent: percent(m, "metadata_percent")}
			if m["lv_tags"] != "" {
				lv.Tags = strings.Split(m["lv_tags"], ",")
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
			i := slices.IndexFunc(r.LVs, func(lv lvm.LV) bool { return lv.UUID == uuid })
			if i < 0 {
				continue
			}
			if s := m["thin_id"]; s != "" {
				id, err := strconv.ParseUint(s, 10, 32)
				if err != nil {
					ok = false
				}
				r.LVs[i].ThinID = uint32(id)
			}
			if s := m["chunk_size"]; s != "" {
				c, err := strconv.ParseUint(s, 10, 64)
				if err != nil {
					ok = false
				}
				if r.LVs[i].IsThinPool() {
					r.LVs[i].ChunkSize = c
				}
			}
		}
	}
	return r, ok
}

// fuzzReportSeeds are the small lvm2 captures in testdata, and the
// lvmd-style fullreport as lvmd now asks for it. The large ones (the default
// fullreport, 150 LVs) stay out: the fuzzer minimizes every input that finds
// new coverage, and on tens of KiB that takes the whole of a short run.
func fuzzReportSeeds(f *testing.F) [][]byte {
	f.Helper()
	var seeds [][]byte
	for _, name := range []string{"fullreport-lvmd-style.json", "fullreport-vm.json", "fullreport-thin-ids.json", "lvs-all.json", "vgs.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, data)
		if name == "fullreport-lvmd-style.json" {
			const free = `"vg_free":"4282384384"`
			seeds = append(seeds, []byte(strings.Replace(string(data), free, free+`, "vg_extent_size":"4194304"`, 1)))
		}
	}
	return seeds
}

// sameReport is cmp.Equal with NaNs equal and nil and empty slices alike,
// without cmp's reflection on every run: cmp.Diff only explains a mismatch.
func sameReport(a, b *lvm.Report) bool {
	if len(a.VGs) != len(b.VGs) || len(a.LVs) != len(b.LVs) {
		return false
	}
	for i := range a.VGs {
		if a.VGs[i] != b.VGs[i] {
			return false
		}
	}
	sameFloat := func(x, y float64) bool { return x == y || x != x && y != y }
	for i := range a.LVs {
		x, y := a.LVs[i], b.LVs[i]
		if !slices.Equal(x.Tags, y.Tags) || !sameFloat(x.DataPercent, y.DataPercent) || !sameFloat(x.MetadataPercent, y.MetadataPercent) {
			return false
		}
		x.Tags, y.Tags, x.DataPercent, y.DataPercent, x.MetadataPercent, y.MetadataPercent = nil, nil, 0, 0, 0, 0
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// FuzzParseFullReport checks that ParseFullReport never panics, accepts a
// report exactly when its VGs and LVs carry what it promises, returns just
// those (hidden LVs left out) field for field, is deterministic, and that
// Clone copies deeply.
func FuzzParseFullReport(f *testing.F) {
	for _, s := range fuzzReportSeeds(f) {
		f.Add(s)
	}
	for _, s := range []string{
		``, `null`, `{}`, `{"report":[]}`, `{"report":[{"vg":[{}],"lv":[{}]}]}`,
		`{"report":[{"lv":[{"lv_name":"[pool_tdata]"}]}]}`,
		`{"report":[{"vg":[{"vg_name":"vg0","vg_size":"-1","vg_free":"0","vg_extent_size":"4194304"}]}]}`,
		`{"report":[{"lv":[{"lv_name":"a","vg_name":"vg0","lv_size":"1","lv_tags":"x,,y","data_percent":"1e400"}]}]}`,
	} {
		f.Add([]byte(s))
	}
	// Two NaNs are the same result (a NaN never gets this far now).
	opts := []cmp.Option{cmpopts.EquateNaNs(), cmpopts.EquateEmpty()}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := lvm.ParseFullReport(data)
		want, ok := wantReport(data)
		if err != nil {
			if got != nil {
				t.Errorf("ParseFullReport returned a report with error %v", err)
			}
			if ok {
				t.Errorf("ParseFullReport: %v; the report is valid: %+v", err, want)
			}
			return
		}
		if !ok {
			t.Fatalf("ParseFullReport accepted a report with a VG or LV that breaks its rules: %+v", got)
		}
		if !sameReport(want, got) {
			t.Errorf("ParseFullReport (-want +got):\n%s", cmp.Diff(want, got, opts...))
		}
		for _, lv := range got.LVs {
			if strings.HasPrefix(lv.Name, "[") {
				t.Errorf("hidden LV %q in the report", lv.Name)
			}
		}
		again, err := lvm.ParseFullReport(data)
		if err != nil {
			t.Fatalf("ParseFullReport failed the second time: %v", err)
		}
		if !sameReport(got, again) {
			t.Errorf("ParseFullReport is not deterministic (-first +second):\n%s", cmp.Diff(got, again, opts...))
		}
		c := got.Clone()
		if !sameReport(got, c) {
			t.Errorf("Clone (-report +clone):\n%s", cmp.Diff(got, c, opts...))
		}
		for i := range c.LVs {
			for j := range c.LVs[i].Tags {
				c.LVs[i].Tags[j] += "x"
			}
		}
		if !sameReport(again, got) {
			t.Errorf("changing the clone's tags changed the report (-before +after):\n%s", cmp.Diff(again, got, opts...))
		}
	})
}

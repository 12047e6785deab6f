package config_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/thinlvm/thinlvm/api/lvmname"
	"github.com/thinlvm/thinlvm/lvmd/config"
)

// The options lvmd puts on every lvcreate itself, which a device class must
// not be able to change: written again here, not read from config.go.
var lvmdOwnedOptions = []string{"-n", "--name", "-V", "--virtualsize", "-L", "--size", "-l", "--extents",
	"-T", "--thin", "--thinpool", "-s", "--snapshot", "--addtag", "-k", "--setactivationskip", "--type",
	"--config", "-y", "--yes"}

// lvcreate's short options that take no value (lvm2 tools/args.h): getopt
// reads the letter after one as another option, "-vn" as "-v -n".
const lvcreateShortFlags = "dfhHKqsTtvy"

// shortOptionSet reads word as getopt reads a cluster of short options and
// returns the first of lvmdOwnedOptions it sets, or "". A letter that takes
// a value ends the cluster: the rest is its value ("-L1G", "-Zn").
func shortOptionSet(word string) string {
	for _, c := range word[1:] {
		for _, r := range lvmdOwnedOptions {
			if r == "-"+string(c) {
				return r
			}
		}
		if !strings.ContainsRune(lvcreateShortFlags, c) {
			return ""
		}
	}
	return ""
}

// className is the documented rule for a device class name: 1-63 characters
// of a-z 0-9 - . (it goes into StorageClass parameters and labels).
func className(s string) bool {
	return s != "" && len(s) <= 63 && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789-.") == ""
}

// checkAccepted asserts what Parse's validation guarantees of a config it
// returns.
func checkAccepted(t *testing.T, c *config.Config) {
	t.Helper()
	if len(c.DeviceClasses) == 0 {
		t.Fatal("accepted a config without device classes")
	}
	names := map[string]bool{}
	var defaults []*config.DeviceClass
	for i := range c.DeviceClasses {
		d := &c.DeviceClasses[i]
		if !className(d.Name) {
			t.Errorf("accepted device class name %q", d.Name)
		}
		if names[d.Name] {
			t.Errorf("accepted device class %q twice", d.Name)
		}
		names[d.Name] = true
		if d.Default {
			defaults = append(defaults, d)
		}
		if err := lvmname.ValidateVGName(d.VolumeGroup); err != nil {
			t.Errorf("class %q: accepted volume group %q: %v", d.Name, d.VolumeGroup, err)
		}
		switch d.Type {
		case config.Thick:
			// A thick class has none of a thin pool's settings.
			if d.ThinPool != "" || d.OverprovisionRatio != 0 || d.DataHighWatermarkPercent != 0 || d.MetadataHighWatermarkPercent != 0 ||
				d.AutoExtend != nil || d.ErrorWhenFull != nil {
				t.Errorf("class %q: thick with a thin pool's settings %+v", d.Name, *d)
			}
		case config.Thin:
			checkThin(t, d)
		default:
			t.Errorf("class %q: accepted type %q", d.Name, d.Type)
		}
		for _, o := range d.LVCreateOptions {
			flag, _, _ := strings.Cut(o, "=")
			switch {
			case o == "" || strings.ContainsAny(o, "\x00\n"):
				t.Errorf("class %q: accepted lvcreate option %q", d.Name, o)
			case strings.HasPrefix(flag, "--"):
				for _, r := range lvmdOwnedOptions {
					// getopt_long takes an unambiguous prefix for the option.
					if len(flag) > 2 && strings.HasPrefix(r, flag) {
						t.Errorf("class %q: accepted lvcreate option %q, which sets lvmd's %s", d.Name, o, r)
					}
				}
			case strings.HasPrefix(o, "-"):
				if r := shortOptionSet(o); r != "" {
					t.Errorf("class %q: accepted lvcreate option %q, which sets lvmd's %s", d.Name, o, r)
				}
			}
		}
	}
	// At most one default, and a request naming no class gets it, or the
	// only class there is.
	if len(defaults) > 1 {
		t.Errorf("accepted %d default device classes", len(defaults))
	}
	d, ok := c.Class("")
	switch {
	case len(defaults) == 1 && (!ok || d != defaults[0]):
		t.Errorf("Class(\"\") = %v, %t; want the default class %q", d, ok, defaults[0].Name)
	case len(defaults) == 0 && len(c.DeviceClasses) == 1 && (!ok || d != &c.DeviceClasses[0]):
		t.Errorf("Class(\"\") = %v, %t; want the only class", d, ok)
	case len(defaults) == 0 && len(c.DeviceClasses) > 1 && ok:
		t.Errorf("Class(\"\") = %q with several classes and no default", d.Name)
	}
	for i := range c.DeviceClasses {
		if d, ok := c.Class(c.DeviceClasses[i].Name); !ok || d != &c.DeviceClasses[i] {
			t.Errorf("Class(%q) = %v, %t", c.DeviceClasses[i].Name, d, ok)
		}
	}
}

// checkThin checks a thin class's pool settings.
func checkThin(t *testing.T, d *config.DeviceClass) {
	t.Helper()
	if err := lvmname.ValidateLVName(d.ThinPool); err != nil {
		t.Errorf("class %q: accepted thin pool %q: %v", d.Name, d.ThinPool, err)
	}
	// Written so that NaN fails them too.
	if !(d.OverprovisionRatio >= 1) {
		t.Errorf("class %q: accepted overprovisionRatio %g", d.Name, d.OverprovisionRatio)
	}
	for _, w := range []float64{d.DataHighWatermarkPercent, d.MetadataHighWatermarkPercent} {
		if !(w > 0 && w <= 100) {
			t.Errorf("class %q: accepted high watermark %g", d.Name, w)
		}
	}
	if a := d.AutoExtend; a != nil && !(a.ThresholdPercent >= 50 && a.ThresholdPercent < 100 && a.Percent > 0 && a.Percent <= 100) {
		t.Errorf("class %q: accepted autoExtend %+v", d.Name, *a)
	}
}

// FuzzParse checks that Parse never panics and that a config it accepts
// validates again, is already defaulted, is parsed the same way twice and
// holds to every guarantee of Validate (checkAccepted).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		validYAML,
		"deviceClasses:\n- name: ssd\n  volumeGroup: vg0\n  thinPool: pool0\n  default: true\n  overprovisionRatio: 4\n  dataHighWatermarkPercent: 90\n  metadataHighWatermarkPercent: 80\n",
		"deviceClasses:\n- name: a\n  volumeGroup: vg0\n  thinPool: pool\n- name: b\n  volumeGroup: vg0\n  thinPool: pool2\n",
		"deviceClasses:\n- name: a\n  volumeGroup: vg0\n  thinPool: pool\n  default: true\n- name: b\n  volumeGroup: vg1\n  thinPool: pool\n  default: true\n",
		`{"deviceClasses":[{"name":"a","volumeGroup":"vg0","thinPool":"pool","lvcreateOptions":["-L1G","--virt","--zero=n"]}]}`,
		"deviceClasses:\n- name: a\n  volumeGroup: vg0\n  thinPool: pool\n  overprovisionRatio: .nan\n  dataHighWatermarkPercent: .inf\n",
		"deviceClasses:\n- name: A\n  volumeGroup: -vg\n  thinPool: pool_tmeta\n  spareGB: 18446744073709551615\n  autoExtend: {thresholdPercent: 100, percent: 0}\n",
		"deviceClasses:\n- name: t\n  type: thick\n  volumeGroup: vg0\n  overprovisionRatio: 2\n  thinPool: p\n",
		"deviceClasses:\n- name: t\n  type: Thick\n  volumeGroup: vg0\n",
		"deviceClasses: [", "", "deviceClasses: []\n", "deviceClasses:\n- name: a\n  thinPoolName: p\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data)
		if err != nil {
			if c != nil {
				t.Errorf("Parse returned a config with error %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Errorf("Validate of a parsed config: %v", err)
		}
		checkAccepted(t, c)
		// Parse already defaulted it: defaulting again changes nothing.
		d := &config.Config{DeviceClasses: append([]config.DeviceClass(nil), c.DeviceClasses...)}
		d.Default()
		if diff := cmp.Diff(c, d); diff != "" {
			t.Errorf("Default of a parsed config (-parsed +defaulted):\n%s", diff)
		}
		again, err := config.Parse(data)
		if err != nil {
			t.Fatalf("Parse failed the second time: %v", err)
		}
		if diff := cmp.Diff(c, again); diff != "" {
			t.Errorf("Parse is not deterministic (-first +second):\n%s", diff)
		}
	})
}

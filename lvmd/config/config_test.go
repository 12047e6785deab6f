package config_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/thinlvm/thinlvm/lvmd/config"
)

const validYAML = `
deviceClasses:
- name: ssd
  volumeGroup: vg0
  thinPool: pool
  default: true
  overprovisionRatio: 5
  spareGB: 10
  lvcreateOptions: ["--zero", "n", "-Zn", "--discards=passdown"]
  dataHighWatermarkPercent: 95
  autoExtend:
    thresholdPercent: 80
    percent: 20
- name: hdd.slow-1
  volumeGroup: vg1
  thinPool: tp
  errorWhenFull: false
- name: thick
  type: thick
  volumeGroup: vg1
  spareGB: 2
  lvcreateOptions: ["--stripes", "2"]
`

var yes, no = true, false

func TestParse(t *testing.T) {
	got, err := config.Parse([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	want := &config.Config{DeviceClasses: []config.DeviceClass{
		{
			Name: "ssd", Type: config.Thin, VolumeGroup: "vg0", ThinPool: "pool", Default: true, OverprovisionRatio: 5, SpareGB: 10,
			LVCreateOptions:          []string{"--zero", "n", "-Zn", "--discards=passdown"},
			DataHighWatermarkPercent: 95, MetadataHighWatermarkPercent: 80,
			AutoExtend: &config.AutoExtend{ThresholdPercent: 80, Percent: 20}, ErrorWhenFull: &yes,
		},
		{
			Name: "hdd.slow-1", Type: config.Thin, VolumeGroup: "vg1", ThinPool: "tp",
			OverprovisionRatio: 1, DataHighWatermarkPercent: 90, MetadataHighWatermarkPercent: 80, ErrorWhenFull: &no,
		},
		// Nothing of a thin pool is defaulted in a thick class.
		{Name: "thick", Type: config.Thick, VolumeGroup: "vg1", SpareGB: 2, LVCreateOptions: []string{"--stripes", "2"}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
	if !got.DeviceClasses[0].ManagesWhenFull() || got.DeviceClasses[1].ManagesWhenFull() {
		t.Errorf("ManagesWhenFull() = %t, %t; want true (the default), false", got.DeviceClasses[0].ManagesWhenFull(), got.DeviceClasses[1].ManagesWhenFull())
	}
	if got, want := got.DeviceClasses[0].Spare(), uint64(10)<<30; got != want {
		t.Errorf("Spare() = %d, want %d", got, want)
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lvmd.yaml")
	if err := os.WriteFile(path, []byte(validYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(c.DeviceClasses); got != 3 {
		t.Errorf("Load: %d device classes, want 3", got)
	}
	if _, err := config.Load(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file: %v, want fs.ErrNotExist", err)
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		// want is a fragment of the error.
		want string
	}{
		{name: "unknown field", yaml: "deviceClasses:\n- name: a\n  volumeGroup: vg0\n  thinPool: pool\n  thinPoolName: pool2\n", want: "thinPoolName"},
		{name: "duplicate field", yaml: "deviceClasses:\n- name: a\n  volumeGroup: vg0\n  thinPool: pool\n  thinPool: pool2\n", want: "thinPool"},
		{name: "misspelt top-level field", yaml: "deviceClass:\n- name: a\n", want: "deviceClass"},
		{name: "wrong type", yaml: "deviceClasses:\n- name: a\n  volumeGroup: vg0\n  thinPool: pool\n  spareGB: lots\n", want: "spareGB"},
		{name: "negative spare", yaml: "deviceClasses:\n- name: a\n  volumeGroup: vg0\n  thinPool: pool\n  spareGB: -1\n", want: "spareGB"},
		{name: "not YAML", yaml: "deviceClasses: [", want: "parse config"},
		{name: "empty", yaml: "", want: "deviceClasses: at least one device class is required"},
		{name: "invalid after defaults", yaml: "deviceClasses:\n- name: a\n  volumeGroup: vg0\n  thinPool: pool\n  overprovisionRatio: 0.5\n", want: "deviceClasses[0].overprovisionRatio"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse = %+v, want an error", c)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse error %q, want it to mention %q", err, tt.want)
			}
		})
	}
}

// validClass is a device class that passes validation once defaulted.
func validClass(name string) config.DeviceClass {
	return config.DeviceClass{Name: name, VolumeGroup: "vg0", ThinPool: "pool"}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *config.Config)
		// paths are the field paths of the errors, in order; none for a
		// valid config.
		paths []string
	}{
		{name: "valid", modify: func(*config.Config) {}},
		{name: "no device classes", modify: func(c *config.Config) { c.DeviceClasses = nil }, paths: []string{"deviceClasses"}},
		{name: "name missing", modify: func(c *config.Config) { c.DeviceClasses[0].Name = "" }, paths: []string{"deviceClasses[0].name"}},
		{name: "name duplicate", modify: func(c *config.Config) { c.DeviceClasses[1].Name = "a" }, paths: []string{"deviceClasses[1].name"}},
		{name: "name upper case", modify: func(c *config.Config) { c.DeviceClasses[0].Name = "SSD" }, paths: []string{"deviceClasses[0].name"}},
		{name: "name underscore", modify: func(c *config.Config) { c.DeviceClasses[0].Name = "a_b" }, paths: []string{"deviceClasses[0].name"}},
		{name: "name 63 characters", modify: func(c *config.Config) { c.DeviceClasses[0].Name = strings.Repeat("a", 63) }},
		{name: "name 64 characters", modify: func(c *config.Config) { c.DeviceClasses[0].Name = strings.Repeat("a", 64) }, paths: []string{"deviceClasses[0].name"}},
		{name: "volume group missing", modify: func(c *config.Config) { c.DeviceClasses[1].VolumeGroup = "" }, paths: []string{"deviceClasses[1].volumeGroup"}},
		{name: "volume group invalid", modify: func(c *config.Config) { c.DeviceClasses[0].VolumeGroup = "-vg" }, paths: []string{"deviceClasses[0].volumeGroup"}},
		{name: "thin pool missing", modify: func(c *config.Config) { c.DeviceClasses[0].ThinPool = "" }, paths: []string{"deviceClasses[0].thinPool"}},
		{name: "thin pool reserved name", modify: func(c *config.Config) { c.DeviceClasses[0].ThinPool = "pool_tmeta" }, paths: []string{"deviceClasses[0].thinPool"}},
		{name: "overprovision ratio below 1", modify: func(c *config.Config) { c.DeviceClasses[0].OverprovisionRatio = 0.99 }, paths: []string{"deviceClasses[0].overprovisionRatio"}},
		{name: "data high-water mark over 100", modify: func(c *config.Config) { c.DeviceClasses[0].DataHighWatermarkPercent = 100.5 }, paths: []string{"deviceClasses[0].dataHighWatermarkPercent"}},
		{name: "data high-water mark 100", modify: func(c *config.Config) { c.DeviceClasses[0].DataHighWatermarkPercent = 100 }},
		{name: "data high-water mark negative", modify: func(c *config.Config) { c.DeviceClasses[0].DataHighWatermarkPercent = -1 }, paths: []string{"deviceClasses[0].dataHighWatermarkPercent"}},
		{name: "metadata high-water mark over 100", modify: func(c *config.Config) { c.DeviceClasses[1].MetadataHighWatermarkPercent = 101 }, paths: []string{"deviceClasses[1].metadataHighWatermarkPercent"}},
		{name: "autoextend threshold 49", modify: func(c *config.Config) {
			c.DeviceClasses[0].AutoExtend = &config.AutoExtend{ThresholdPercent: 49, Percent: 20}
		}, paths: []string{"deviceClasses[0].autoExtend.thresholdPercent"}},
		{name: "autoextend threshold 50", modify: func(c *config.Config) {
			c.DeviceClasses[0].AutoExtend = &config.AutoExtend{ThresholdPercent: 50, Percent: 20}
		}},
		{name: "autoextend threshold 99", modify: func(c *config.Config) {
			c.DeviceClasses[0].AutoExtend = &config.AutoExtend{ThresholdPercent: 99, Percent: 100}
		}},
		{name: "autoextend threshold 100", modify: func(c *config.Config) {
			c.DeviceClasses[0].AutoExtend = &config.AutoExtend{ThresholdPercent: 100, Percent: 20}
		}, paths: []string{"deviceClasses[0].autoExtend.thresholdPercent"}},
		{name: "autoextend percent 0", modify: func(c *config.Config) { c.DeviceClasses[0].AutoExtend = &config.AutoExtend{ThresholdPercent: 80} }, paths: []string{"deviceClasses[0].autoExtend.percent"}},
		{name: "autoextend percent 101", modify: func(c *config.Config) {
			c.DeviceClasses[0].AutoExtend = &config.AutoExtend{ThresholdPercent: 80, Percent: 101}
		}, paths: []string{"deviceClasses[0].autoExtend.percent"}},
		{name: "lvcreate option empty", modify: func(c *config.Config) { c.DeviceClasses[0].LVCreateOptions = []string{"--zero", ""} }, paths: []string{"deviceClasses[0].lvcreateOptions[1]"}},
		{name: "lvcreate option with a newline", modify: func(c *config.Config) { c.DeviceClasses[0].LVCreateOptions = []string{"--zero\n"} }, paths: []string{"deviceClasses[0].lvcreateOptions[0]"}},
		{name: "lvcreate option with a NUL", modify: func(c *config.Config) { c.DeviceClasses[0].LVCreateOptions = []string{"--zero", "n\x00"} }, paths: []string{"deviceClasses[0].lvcreateOptions[1]"}},
		{name: "thick", modify: func(c *config.Config) {
			c.DeviceClasses[1] = config.DeviceClass{Name: "b", Type: config.Thick, VolumeGroup: "vg1", SpareGB: 1}
		}},
		{name: "two thick classes of one VG", modify: func(c *config.Config) {
			c.DeviceClasses[0] = config.DeviceClass{Name: "a", Type: config.Thick, VolumeGroup: "vg1"}
			c.DeviceClasses[1] = config.DeviceClass{Name: "b", Type: config.Thick, VolumeGroup: "vg1"}
		}, paths: []string{"deviceClasses[1].volumeGroup"}},
		{name: "type unknown", modify: func(c *config.Config) { c.DeviceClasses[0].Type = "thinn" }, paths: []string{"deviceClasses[0].type"}},
		{name: "thick with a thin pool's settings", modify: func(c *config.Config) {
			c.DeviceClasses[1] = config.DeviceClass{Name: "b", Type: config.Thick, VolumeGroup: "vg1", ThinPool: "pool", OverprovisionRatio: 2,
				DataHighWatermarkPercent: 90, MetadataHighWatermarkPercent: 80, AutoExtend: &config.AutoExtend{ThresholdPercent: 80, Percent: 20},
				ErrorWhenFull: &yes, LVCreateOptions: []string{"--size"}}
		}, paths: []string{"deviceClasses[1].thinPool", "deviceClasses[1].overprovisionRatio", "deviceClasses[1].dataHighWatermarkPercent",
			"deviceClasses[1].metadataHighWatermarkPercent", "deviceClasses[1].autoExtend", "deviceClasses[1].errorWhenFull", "deviceClasses[1].lvcreateOptions[0]"}},
		{name: "two defaults", modify: func(c *config.Config) { c.DeviceClasses[0].Default, c.DeviceClasses[1].Default = true, true }, paths: []string{"deviceClasses"}},
		{
			name: "every error is listed",
			modify: func(c *config.Config) {
				c.DeviceClasses[0] = config.DeviceClass{Name: "A", OverprovisionRatio: 1, DataHighWatermarkPercent: 90, MetadataHighWatermarkPercent: 0,
					LVCreateOptions: []string{"--name"}, Default: true}
				c.DeviceClasses[1].Default = true
			},
			paths: []string{"deviceClasses[0].name", "deviceClasses[0].volumeGroup", "deviceClasses[0].thinPool",
				"deviceClasses[0].metadataHighWatermarkPercent", "deviceClasses[0].lvcreateOptions[0]", "deviceClasses"},
		},
	}
	for _, opt := range []string{"-n", "--name", "-V", "--virtualsize", "-L", "--size", "-l", "--extents", "-T", "--thin", "--thinpool",
		"-s", "--snapshot", "--addtag", "--deltag", "-p", "--permission", "-a", "--activate", "-k", "--setactivationskip",
		"-K", "--ignoreactivationskip", "--type", "--config", "--commandprofile", "--profile", "--metadataprofile", "-y", "--yes",
		"--name=x", "--type=thin",
		// lvm parses its command line with getopt_long: a short option's
		// value may be attached, and a long option may be abbreviated.
		"-L1G", "-an", "-pr", "-ky", "-nfoo", "--virt=1G", "--perm", "--activ"} {
		tests = append(tests, struct {
			name   string
			modify func(c *config.Config)
			paths  []string
		}{
			name:   "lvcreate option " + opt + " reserved",
			modify: func(c *config.Config) { c.DeviceClasses[1].LVCreateOptions = []string{"--zero", "n", opt} },
			paths:  []string{"deviceClasses[1].lvcreateOptions[2]"},
		})
	}
	for _, opt := range []string{"--zero", "-Zn", "--zero=n", "--discards", "--chunksize", "-c", "--wipesignatures", "-W", "--errorwhenfull", "--monitor", "--readahead"} {
		tests = append(tests, struct {
			name   string
			modify func(c *config.Config)
			paths  []string
		}{
			name:   "lvcreate option " + opt + " allowed",
			modify: func(c *config.Config) { c.DeviceClasses[1].LVCreateOptions = []string{opt} },
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &config.Config{DeviceClasses: []config.DeviceClass{validClass("a"), validClass("b")}}
			c.DeviceClasses[1].VolumeGroup = "vg1"
			c.Default()
			tt.modify(c)
			var paths []string
			if err := c.Validate(); err != nil {
				for _, line := range strings.Split(err.Error(), "\n") {
					path, _, _ := strings.Cut(line, ": ")
					paths = append(paths, path)
				}
			}
			if diff := cmp.Diff(tt.paths, paths); diff != "" {
				t.Errorf("error paths (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefault(t *testing.T) {
	c := &config.Config{DeviceClasses: []config.DeviceClass{
		validClass("a"),
		{Name: "b", OverprovisionRatio: 3, DataHighWatermarkPercent: 50, MetadataHighWatermarkPercent: 60},
	}}
	c.Default()
	c.Default() // idempotent
	want := []config.DeviceClass{
		{Name: "a", Type: config.Thin, VolumeGroup: "vg0", ThinPool: "pool", OverprovisionRatio: 1, DataHighWatermarkPercent: 90, MetadataHighWatermarkPercent: 80, ErrorWhenFull: &yes},
		{Name: "b", Type: config.Thin, OverprovisionRatio: 3, DataHighWatermarkPercent: 50, MetadataHighWatermarkPercent: 60, ErrorWhenFull: &yes},
	}
	if diff := cmp.Diff(want, c.DeviceClasses); diff != "" {
		t.Errorf("Default (-want +got):\n%s", diff)
	}
}

func TestClass(t *testing.T) {
	withDefault := &config.Config{DeviceClasses: []config.DeviceClass{validClass("a"), validClass("b")}}
	withDefault.DeviceClasses[1].Default = true
	noDefault := &config.Config{DeviceClasses: []config.DeviceClass{validClass("a"), validClass("b")}}
	single := &config.Config{DeviceClasses: []config.DeviceClass{validClass("only")}}
	tests := []struct {
		name   string
		config *config.Config
		class  string
		want   string // empty: none
	}{
		{name: "by name", config: withDefault, class: "a", want: "a"},
		{name: "by name, the default", config: withDefault, class: "b", want: "b"},
		{name: "empty: the default", config: withDefault, class: "", want: "b"},
		{name: "unknown", config: withDefault, class: "c"},
		{name: "empty without a default", config: noDefault, class: ""},
		{name: "empty, single class without default", config: single, class: "", want: "only"},
		{name: "single class by name", config: single, class: "only", want: "only"},
		{name: "single class, unknown name", config: single, class: "other"},
		{name: "no classes", config: &config.Config{}, class: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dc, ok := tt.config.Class(tt.class)
			got := ""
			if ok {
				got = dc.Name
			}
			if ok != (tt.want != "") || got != tt.want {
				t.Errorf("Class(%q) = %q, %t; want %q", tt.class, got, ok, tt.want)
			}
			if ok && dc != &tt.config.DeviceClasses[slicesIndex(tt.config, got)] {
				t.Errorf("Class(%q) returned a copy, want a pointer into the config", tt.class)
			}
		})
	}
}

func slicesIndex(c *config.Config, name string) int {
	for i := range c.DeviceClasses {
		if c.DeviceClasses[i].Name == name {
			return i
		}
	}
	return -1
}

package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/thinlvm/thinlvm/api/lvmname"
)

// GiB is 2^30 bytes.
const GiB = uint64(1) << 30

// Config is lvmd's configuration file.
type Config struct {
	// DeviceClasses are the volume groups and thin pools lvmd serves.
	DeviceClasses []DeviceClass `json:"deviceClasses"`
}

// Type is how a device class allocates its volumes.
type Type string

const (
	// Thin classes carve thin LVs from a thin pool: snapshots, golden
	// bases, overprovisioning. The default.
	Thin Type = "thin"
	// Thick classes allocate LVs from the volume group's free extents: no
	// thin pool, no snapshots; clones and moves copy every extent.
	Thick Type = "thick"
)

// DeviceClass is one thin pool, or one volume group's free extents, that
// volumes are carved from.
type DeviceClass struct {
	// Name identifies the class in requests and StorageClasses.
	Name string `json:"name"`
	// Type is thin (the default) or thick.
	Type Type `json:"type,omitempty"`
	// VolumeGroup is the LVM volume group.
	VolumeGroup string `json:"volumeGroup"`
	// ThinPool is the thin pool LV in VolumeGroup; thin classes only.
	ThinPool string `json:"thinPool,omitempty"`
	// OverprovisionRatio is how many times the pool's size the thin LVs may
	// add up to. Default 1 (no overprovisioning).
	OverprovisionRatio float64 `json:"overprovisionRatio,omitempty"`
	// Default marks the class used when a request names none. At most one.
	Default bool `json:"default,omitempty"`
	// SpareGB is pool space (GiB) kept free: never offered to new volumes.
	// In a thick class, VG space.
	SpareGB uint64 `json:"spareGB,omitempty"`
	// LVCreateOptions are extra lvcreate options, e.g. ["--zero", "n"].
	LVCreateOptions []string `json:"lvcreateOptions,omitempty"`
	// DataHighWatermarkPercent refuses new thin LVs when the pool's data use
	// is over it. Default 90.
	DataHighWatermarkPercent float64 `json:"dataHighWatermarkPercent,omitempty"`
	// MetadataHighWatermarkPercent refuses new thin LVs when the pool's
	// metadata use is over it. Default 80.
	MetadataHighWatermarkPercent float64 `json:"metadataHighWatermarkPercent,omitempty"`
	// AutoExtend grows the pool from VG free space, as dmeventd would.
	// +optional
	AutoExtend *AutoExtend `json:"autoExtend,omitempty"`
	// ErrorWhenFull, when true (the default), has lvmd keep the pool's
	// errorwhenfull set so that a write that needs space in a full pool
	// fails at once instead of hanging for dm-thin's no_space_timeout (60 s).
	// With AutoExtend lvmd lets such writes queue instead while the VG has
	// room to grow the pool into, and makes them fail once it has none.
	// False leaves the pool's setting to the administrator.
	// +optional
	ErrorWhenFull *bool `json:"errorWhenFull,omitempty"`
}

// AutoExtend is lvm's thin-pool autoextend policy.
type AutoExtend struct {
	// ThresholdPercent: the pool grows when data or metadata use reaches it.
	ThresholdPercent int `json:"thresholdPercent"`
	// Percent: by how much of its size the pool grows each time.
	Percent int `json:"percent"`
}

// ManagesWhenFull tells whether lvmd keeps the pool's errorwhenfull
// setting (ErrorWhenFull, true unless set false).
func (d *DeviceClass) ManagesWhenFull() bool { return d.ErrorWhenFull == nil || *d.ErrorWhenFull }

// IsThick tells whether the class allocates thick LVs.
func (d *DeviceClass) IsThick() bool { return d.Type == Thick }

// Spare returns SpareGB in bytes.
func (d *DeviceClass) Spare() uint64 { return d.SpareGB * GiB }

// Load reads, defaults and validates the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(data)
}

// Parse parses, defaults and validates a configuration. Unknown fields are
// errors, so that a misspelt option is not silently ignored.
func Parse(data []byte) (*Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	c.Default()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	return &c, nil
}

// Default fills in the defaults of unset fields.
func (c *Config) Default() {
	for i := range c.DeviceClasses {
		d := &c.DeviceClasses[i]
		if d.Type == "" {
			d.Type = Thin
		}
		if d.IsThick() {
			// Nothing of a thin pool applies; Validate refuses what was set.
			continue
		}
		if d.OverprovisionRatio == 0 {
			d.OverprovisionRatio = 1
		}
		if d.DataHighWatermarkPercent == 0 {
			d.DataHighWatermarkPercent = 90
		}
		if d.MetadataHighWatermarkPercent == 0 {
			d.MetadataHighWatermarkPercent = 80
		}
		if d.ErrorWhenFull == nil {
			on := true
			d.ErrorWhenFull = &on
		}
	}
}

// options lvmd sets itself; a device class may not override them.
var reservedOptions = []string{"-n", "--name", "-V", "--virtualsize", "-L", "--size", "-l", "--extents",
	"-T", "--thin", "--thinpool", "-s", "--snapshot", "--addtag", "--deltag", "-p", "--permission",
	"-a", "--activate", "-k", "--setactivationskip", "-K", "--ignoreactivationskip", "--type", "--config",
	"--commandprofile", "--profile", "--metadataprofile", "-y", "--yes"}

// Validate checks the configuration; the error lists every problem with
// its field path.
func (c *Config) Validate() error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
	}
	if len(c.DeviceClasses) == 0 {
		add("deviceClasses", "at least one device class is required")
	}
	names := map[string]bool{}
	defaults := 0
	for i := range c.DeviceClasses {
		d := &c.DeviceClasses[i]
		p := fmt.Sprintf("deviceClasses[%d]", i)
		switch {
		case d.Name == "":
			add(p+".name", "required")
		case names[d.Name]:
			add(p+".name", "duplicate device class %q", d.Name)
		case !validClassName(d.Name):
			add(p+".name", "%q: only a-z 0-9 - . are allowed, 1-63 characters", d.Name)
		}
		names[d.Name] = true
		if d.Default {
			defaults++
		}
		if err := lvmname.ValidateVGName(d.VolumeGroup); err != nil {
			add(p+".volumeGroup", "%v", err)
		}
		switch d.Type {
		case Thin, "": // "" before Default
		case Thick:
			validateThick(d, p, add)
			continue
		default:
			add(p+".type", "%q: must be thin or thick", d.Type)
			continue
		}
		if d.ThinPool == "" {
			add(p+".thinPool", "required in a thin device class (type: thick allocates from the volume group without one)")
		} else if err := lvmname.ValidateLVName(d.ThinPool); err != nil {
			add(p+".thinPool", "%v", err)
		}
		if d.OverprovisionRatio < 1 {
			add(p+".overprovisionRatio", "%g: must be >= 1", d.OverprovisionRatio)
		}
		for _, w := range []struct {
			name string
			v    float64
		}{{"dataHighWatermarkPercent", d.DataHighWatermarkPercent}, {"metadataHighWatermarkPercent", d.MetadataHighWatermarkPercent}} {
			if w.v <= 0 || w.v > 100 {
				add(p+"."+w.name, "%g: must be in (0, 100]", w.v)
			}
		}
		if a := d.AutoExtend; a != nil {
			if a.ThresholdPercent < 50 || a.ThresholdPercent >= 100 {
				add(p+".autoExtend.thresholdPercent", "%d: must be in [50, 100)", a.ThresholdPercent)
			}
			if a.Percent <= 0 || a.Percent > 100 {
				add(p+".autoExtend.percent", "%d: must be in (0, 100]", a.Percent)
			}
		}
		validateOptions(d, p, add)
	}
	thickVGs := map[string]string{}
	for i := range c.DeviceClasses {
		d := &c.DeviceClasses[i]
		if !d.IsThick() {
			continue
		}
		if other, ok := thickVGs[d.VolumeGroup]; ok {
			add(fmt.Sprintf("deviceClasses[%d].volumeGroup", i), "%q is thick class %s's already: two thick classes of one volume group would hold each other's LVs", d.VolumeGroup, other)
		}
		thickVGs[d.VolumeGroup] = d.Name
	}
	if defaults > 1 {
		add("deviceClasses", "%d device classes are marked default: at most one may be", defaults)
	}
	return errors.Join(errs...)
}

// validateThick checks a thick class: the thin pool's settings do not
// apply to it, and one set is a mistake to point out, not to ignore.
func validateThick(d *DeviceClass, p string, add func(path, format string, args ...any)) {
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"thinPool", d.ThinPool != ""},
		{"overprovisionRatio", d.OverprovisionRatio != 0},
		{"dataHighWatermarkPercent", d.DataHighWatermarkPercent != 0},
		{"metadataHighWatermarkPercent", d.MetadataHighWatermarkPercent != 0},
		{"autoExtend", d.AutoExtend != nil},
		{"errorWhenFull", d.ErrorWhenFull != nil},
	} {
		if f.set {
			add(p+"."+f.name, "a thin pool's setting: a thick device class has no thin pool")
		}
	}
	validateOptions(d, p, add)
}

// validateOptions checks a class's lvcreateOptions.
func validateOptions(d *DeviceClass, p string, add func(path, format string, args ...any)) {
	for j, o := range d.LVCreateOptions {
		op := fmt.Sprintf("%s.lvcreateOptions[%d]", p, j)
		flag, _, _ := strings.Cut(o, "=")
		switch {
		case o == "":
			add(op, "empty option")
		case isReservedOption(flag):
			add(op, "%q is set by lvmd and cannot be overridden", o)
		case strings.ContainsAny(o, "\x00\n"):
			add(op, "%q has a control character", o)
		}
	}
}

// isReservedOption tells whether flag is, or is taken by lvm's getopt_long
// for, a reserved option: a short option with its value attached ("-L1G",
// "-an"), one inside a cluster of short options ("-vky" is -v -k y, "-qn"
// is -q -n), and an unambiguous prefix of a long one ("--virt") count.
func isReservedOption(flag string) bool {
	if strings.HasPrefix(flag, "--") {
		for _, r := range reservedOptions {
			if strings.HasPrefix(r, "--") && (flag == r || len(flag) > 2 && strings.HasPrefix(r, flag)) {
				return true
			}
		}
		return false
	}
	if !strings.HasPrefix(flag, "-") {
		return false
	}
	// As getopt reads a cluster: options one letter each, until one that
	// takes a value, which is the rest of the word.
	for i := 1; i < len(flag); i++ {
		if slices.Contains(reservedOptions, "-"+flag[i:i+1]) {
			return true
		}
		if strings.IndexByte(shortWithValue, flag[i]) >= 0 {
			return false
		}
	}
	return false
}

// shortWithValue are lvcreate's short options that take a value.
const shortWithValue = "aAcCiIjklLmMnpPrRSVWZ"

func validClassName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// Class returns the device class named name; the default class when name is
// empty. ok is false when there is no such class.
func (c *Config) Class(name string) (d *DeviceClass, ok bool) {
	for i := range c.DeviceClasses {
		dc := &c.DeviceClasses[i]
		if name == "" && dc.Default || name != "" && dc.Name == name {
			return dc, true
		}
	}
	if name == "" && len(c.DeviceClasses) == 1 {
		return &c.DeviceClasses[0], true
	}
	return nil, false
}

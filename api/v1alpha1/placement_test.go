package v1alpha1_test

import (
	"math"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

func class(name string, dflt bool, available string) thinlvmv1.DeviceClassStatus {
	return thinlvmv1.DeviceClassStatus{Name: name, Default: dflt, Available: resource.MustParse(available)}
}

func TestDeviceClass(t *testing.T) {
	ssd, hdd := class("ssd", false, "1Gi"), class("hdd", false, "2Gi")
	ssdDefault := class("ssd", true, "1Gi")
	tests := []struct {
		name    string
		classes []thinlvmv1.DeviceClassStatus
		ask     string
		want    string // the found class's name; "-" for none
	}{
		{"named", []thinlvmv1.DeviceClassStatus{ssd, hdd}, "hdd", "hdd"},
		{"named, missing", []thinlvmv1.DeviceClassStatus{ssd, hdd}, "nvme", "-"},
		{"default: the one marked", []thinlvmv1.DeviceClassStatus{hdd, ssdDefault}, "", "ssd"},
		{"default: the only one", []thinlvmv1.DeviceClassStatus{hdd}, "", "hdd"},
		{"default: none marked among two", []thinlvmv1.DeviceClassStatus{ssd, hdd}, "", "-"},
		{"default: no classes reported", nil, "", "-"},
		{"named: no classes reported", nil, "ssd", "-"},
		// "" is the default, never a class's name: a nameless entry
		// beside a default is not taken for it.
		{"default: a nameless entry is no match", []thinlvmv1.DeviceClassStatus{class("", false, "9Gi"), hdd, ssdDefault}, "", "ssd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &thinlvmv1.LVMNodeStatus{DeviceClasses: tt.classes}
			got := "-"
			if dc := s.DeviceClass(tt.ask); dc != nil {
				got = dc.Name
				if dc != &s.DeviceClasses[indexOf(s.DeviceClasses, dc.Name)] {
					t.Error("DeviceClass returned a copy, not the status's own entry")
				}
			}
			if got != tt.want {
				t.Errorf("DeviceClass(%q) = %s, want %s", tt.ask, got, tt.want)
			}
		})
	}
}

func indexOf(classes []thinlvmv1.DeviceClassStatus, name string) int {
	for i := range classes {
		if classes[i].Name == name {
			return i
		}
	}
	return -1
}

func image(name, uid, class, size string) *thinlvmv1.GoldenImage {
	return &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)},
		Spec: thinlvmv1.GoldenImageSpec{DeviceClass: class, Size: resource.MustParse(size)}}
}

func base(img *thinlvmv1.GoldenImage, state thinlvmv1.GoldenBaseState) thinlvmv1.GoldenBaseStatus {
	return thinlvmv1.GoldenBaseStatus{Name: img.Name, LV: thinlvmv1.BaseLVName(img), Size: img.Spec.Size, State: state}
}

func TestBaseState(t *testing.T) {
	ubuntu := image("ubuntu", "u2", "", "4Gi")
	// The same name made before: its base's LV derives from another UID.
	old := image("ubuntu", "u1", "", "4Gi")
	debian := image("debian", "d1", "", "4Gi")
	tests := []struct {
		name  string
		bases []thinlvmv1.GoldenBaseStatus
		want  thinlvmv1.GoldenBaseState
		held  bool
	}{
		{"ready", []thinlvmv1.GoldenBaseStatus{base(debian, thinlvmv1.GoldenBaseReady), base(ubuntu, thinlvmv1.GoldenBaseReady)}, thinlvmv1.GoldenBaseReady, true},
		{"populating", []thinlvmv1.GoldenBaseStatus{base(ubuntu, thinlvmv1.GoldenBasePopulating)}, thinlvmv1.GoldenBasePopulating, true},
		{"failed", []thinlvmv1.GoldenBaseStatus{base(ubuntu, thinlvmv1.GoldenBaseFailed)}, thinlvmv1.GoldenBaseFailed, false},
		{"missing", []thinlvmv1.GoldenBaseStatus{base(debian, thinlvmv1.GoldenBaseReady)}, "", false},
		{"no bases", nil, "", false},
		{"stale LV of a deleted image of that name", []thinlvmv1.GoldenBaseStatus{base(old, thinlvmv1.GoldenBaseReady)}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &thinlvmv1.LVMNodeStatus{GoldenBases: tt.bases}
			got := s.BaseState(ubuntu)
			if got != tt.want || got.Held() != tt.held {
				t.Errorf("BaseState = %q (held %v), want %q (held %v)", got, got.Held(), tt.want, tt.held)
			}
		})
	}
}

func TestRoomAndMissingBases(t *testing.T) {
	const gi = int64(1) << 30
	ubuntu := image("ubuntu", "u2", "", "4Gi")
	old := image("ubuntu", "u1", "", "4Gi")
	onHDD := image("archive", "a1", "hdd", "3Gi")
	huge := image("huge", "h1", "", "4Ei")
	huger := image("huger", "h2", "", "4Ei")
	twoClasses := []thinlvmv1.DeviceClassStatus{class("ssd", true, "10Gi"), class("hdd", false, "20Gi")}
	tests := []struct {
		name    string
		classes []thinlvmv1.DeviceClassStatus
		bases   []thinlvmv1.GoldenBaseStatus
		class   string
		images  []*thinlvmv1.GoldenImage
		missing int64
		room    int64
		ok      bool
	}{
		{"no images: Available", twoClasses, nil, "hdd", nil, 0, 20 * gi, true},
		{"base missing: less its size", twoClasses, nil, "", []*thinlvmv1.GoldenImage{ubuntu}, 4 * gi, 6 * gi, true},
		{"base missing, class named", twoClasses, nil, "ssd", []*thinlvmv1.GoldenImage{ubuntu}, 4 * gi, 6 * gi, true},
		{"base Ready", twoClasses, []thinlvmv1.GoldenBaseStatus{base(ubuntu, thinlvmv1.GoldenBaseReady)}, "", []*thinlvmv1.GoldenImage{ubuntu}, 0, 10 * gi, true},
		{"base Populating: its LV is counted already", twoClasses, []thinlvmv1.GoldenBaseStatus{base(ubuntu, thinlvmv1.GoldenBasePopulating)}, "", []*thinlvmv1.GoldenImage{ubuntu}, 0, 10 * gi, true},
		{"base Failed: made again", twoClasses, []thinlvmv1.GoldenBaseStatus{base(ubuntu, thinlvmv1.GoldenBaseFailed)}, "", []*thinlvmv1.GoldenImage{ubuntu}, 4 * gi, 6 * gi, true},
		{"stale base: missing", twoClasses, []thinlvmv1.GoldenBaseStatus{base(old, thinlvmv1.GoldenBaseReady)}, "", []*thinlvmv1.GoldenImage{ubuntu}, 4 * gi, 6 * gi, true},
		{"a base of another class counts there only", twoClasses, nil, "ssd", []*thinlvmv1.GoldenImage{ubuntu, onHDD}, 4 * gi, 6 * gi, true},
		{"a base of another class, asked there", twoClasses, nil, "hdd", []*thinlvmv1.GoldenImage{ubuntu, onHDD}, 3 * gi, 17 * gi, true},
		{"class missing", twoClasses, nil, "nvme", []*thinlvmv1.GoldenImage{ubuntu}, 0, 0, false},
		{"no classes reported", nil, nil, "", []*thinlvmv1.GoldenImage{ubuntu}, 0, 0, false},
		{"huge bases saturate, never wrap", twoClasses, nil, "", []*thinlvmv1.GoldenImage{huge, huger}, math.MaxInt64, 10*gi - math.MaxInt64, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &thinlvmv1.LVMNodeStatus{DeviceClasses: tt.classes, GoldenBases: tt.bases}
			if got := s.MissingBases(tt.class, tt.images...); got != tt.missing {
				t.Errorf("MissingBases = %d, want %d", got, tt.missing)
			}
			room, ok := s.Room(tt.class, tt.images...)
			if room != tt.room || ok != tt.ok {
				t.Errorf("Room = %d, %v; want %d, %v", room, ok, tt.room, tt.ok)
			}
		})
	}
}

func TestSourceImage(t *testing.T) {
	vol := func(name string, kind thinlvmv1.SourceKind, source string) *thinlvmv1.LogicalVolume {
		lv := &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if source != "" {
			lv.Spec.Source = &thinlvmv1.VolumeSource{Kind: kind, Name: source}
		}
		return lv
	}
	lvs := map[string]*thinlvmv1.LogicalVolume{}
	for _, lv := range []*thinlvmv1.LogicalVolume{
		vol("disk", thinlvmv1.SourceGoldenImage, "ubuntu"),
		vol("clone", thinlvmv1.SourceVolume, "disk"),
		vol("restore", thinlvmv1.SourceSnapshot, "snap"),
		vol("snap", thinlvmv1.SourceVolume, "clone"),
		vol("empty", "", ""),
		vol("orphan", thinlvmv1.SourceVolume, "gone"),
		vol("loop", thinlvmv1.SourceVolume, "loop"),
	} {
		lvs[lv.Name] = lv
	}
	get := func(name string) *thinlvmv1.LogicalVolume { return lvs[name] }
	for name, want := range map[string]string{"disk": "ubuntu", "clone": "ubuntu", "restore": "ubuntu", "empty": "", "orphan": "", "loop": ""} {
		if got := thinlvmv1.SourceImage(lvs[name], get); got != want {
			t.Errorf("SourceImage(%s) = %q, want %q", name, got, want)
		}
	}
}

package v1alpha1

import "github.com/thinlvm/thinlvm/internal/sizes"

// How an LVMNode's status is read for placement, in one place: the
// controller's CreateVolume and the scheduler plugin decide from the same
// reading of a node's device classes, golden bases and room.

// DeviceClass is the node's entry for the device class name, nil when the
// node does not report it. "" names the node's default class: the one
// marked Default, else the only one, as lvmd resolves an empty class.
func (s *LVMNodeStatus) DeviceClass(name string) *DeviceClassStatus {
	for i := range s.DeviceClasses {
		dc := &s.DeviceClasses[i]
		if name == "" && dc.Default || name != "" && dc.Name == name {
			return dc
		}
	}
	if name == "" && len(s.DeviceClasses) == 1 {
		return &s.DeviceClasses[0]
	}
	return nil
}

// Base is the node's report of image's base, nil when there is none. An
// entry counts only when both its name and its LV (BaseLVName, from the
// UID) are image's: a base left by a deleted GoldenImage of the same name
// is never taken for the current one's.
func (s *LVMNodeStatus) Base(image *GoldenImage) *GoldenBaseStatus {
	for i := range s.GoldenBases {
		b := &s.GoldenBases[i]
		// The LV's name is built only for an entry of image's name: the
		// scheduler asks for every node of every cycle.
		if b.Name == image.Name && b.LV == BaseLVName(image) {
			return b
		}
	}
	return nil
}

// BaseState is the state of image's base on the node (Base), "" when the
// node reports none.
func (s *LVMNodeStatus) BaseState(image *GoldenImage) GoldenBaseState {
	if b := s.Base(image); b != nil {
		return b.State
	}
	return ""
}

// Held tells whether a node whose base is in state s has the base's LV
// already: Ready, or Populating (the LV is made before the bytes are
// written). Its size is then in the class's Available, and no second
// population starts. A Failed population removed its LV.
func (s GoldenBaseState) Held() bool {
	return s == GoldenBaseReady || s == GoldenBasePopulating
}

// MissingBases is the bytes the node must find in device class for the
// images' bases before volumes of them are made there: the size of each
// image whose base lives in that class (its spec.deviceClass resolves to
// the same class on this node) and is not Held. Bases of other classes
// count nothing here. The sum saturates instead of wrapping.
func (s *LVMNodeStatus) MissingBases(class string, images ...*GoldenImage) int64 {
	dc := s.DeviceClass(class)
	if dc == nil {
		return 0
	}
	var sum int64
	for _, img := range images {
		if s.DeviceClass(img.Spec.DeviceClass) == dc && !s.BaseState(img).Held() {
			size := img.BaseSize()
			sum = sizes.Add(sum, size.Value())
		}
	}
	return sum
}

// Room is the largest volume of device class the node can take now, as its
// status tells: the class's Available less the MissingBases of images. ok
// is false when the node does not report the class.
func (s *LVMNodeStatus) Room(class string, images ...*GoldenImage) (room int64, ok bool) {
	dc := s.DeviceClass(class)
	if dc == nil {
		return 0, false
	}
	return sizes.Add(dc.Available.Value(), -s.MissingBases(class, images...)), true
}

// SourceImage is the golden image lv descends from through its sources
// (clones, restores, copies of a golden VM disk), "" when it descends from
// none, when get does not find a source (get returns nil), or when the
// chain is longer than any thinlvm makes. The scheduler places a clone
// near that image's bases; kubectl-thinlvm's evacuate does the same.
func SourceImage(lv *LogicalVolume, get func(name string) *LogicalVolume) string {
	for range 32 {
		if lv == nil || lv.Spec.Source == nil {
			return ""
		}
		if lv.Spec.Source.Kind == SourceGoldenImage {
			return lv.Spec.Source.Name
		}
		lv = get(lv.Spec.Source.Name)
	}
	return ""
}

package main

import (
	"testing"
	"time"

	"github.com/thinlvm/thinlvm/lvmd/config"
	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
	"github.com/thinlvm/thinlvm/lvmd/lvmdtest"
)

// The readiness check fails, naming the class and why, while a device
// class's VG is missing, and passes once it is made.
func TestDeviceClassesServe(t *testing.T) {
	const gib = uint64(1) << 30
	cfg := &config.Config{DeviceClasses: []config.DeviceClass{
		{Name: "ssd", VolumeGroup: "vg0", ThinPool: "pool0", Default: true},
		{Name: "nvme", VolumeGroup: "vgnvme", ThinPool: "pool1"},
	}}
	cfg.Default()
	r := &fake.Runner{VGs: []fake.VG{{Name: "vg0", Size: 16 * gib}}, Pools: []fake.Pool{{VG: "vg0", Name: "pool0", Size: 8 * gib}}}
	l := lvmdtest.Start(t, lvmdtest.Options{Config: cfg, Runner: r})
	err := deviceClassesServe(t.Context(), l)
	if err == nil || err.Error() != "device class nvme: volume group vgnvme not found" {
		t.Fatalf("readiness without nvme's VG: %v, want the class and its missing VG", err)
	}
	r.AddVGAndPool(fake.VG{Name: "vgnvme", Size: 16 * gib}, fake.Pool{VG: "vgnvme", Name: "pool1", Size: 8 * gib})
	// lvmd finds it at its next refresh (lvmdtest.RefreshInterval).
	deadline := time.Now().Add(10 * time.Second)
	for err = deviceClassesServe(t.Context(), l); err != nil; err = deviceClassesServe(t.Context(), l) {
		if time.Now().After(deadline) {
			t.Fatalf("readiness once nvme's VG is there: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

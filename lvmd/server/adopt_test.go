package server

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// AdoptLV takes another driver's LV in place: a thin LV of the class's pool
// or a linear LV of a thick class's VG, tagged and lvmd's from then on.
func TestAdoptLV(t *testing.T) {
	ctx := context.Background()
	e := thickEnv(t)
	e.fake.LVs = append(e.fake.LVs,
		fake.LV{VG: "vg1", Name: "topo-thin", Pool: "tp", Size: gib},
		fake.LV{VG: "vg1", Name: "topo-thick", Size: gib},
		fake.LV{VG: "vg0", Name: "other-pool", Pool: "tp2", Size: gib, Tags: []string{"owner:else"}},
	)
	e.fake.Pools = append(e.fake.Pools, fake.Pool{VG: "vg0", Name: "tp2", Size: gib})
	e.fake.VGs[1].Free -= gib // topo-thick's extents
	adopt := func(name, class string, tags ...string) (*pb.LogicalVolume, error) {
		resp, err := e.lv.AdoptLV(ctx, &pb.AdoptLVRequest{Name: name, DeviceClass: class, Tags: tags})
		return resp.GetVolume(), err
	}
	// Not lvmd's yet: GetLV does not see it, and lvmd would not touch it.
	_, err := e.lv.GetLV(ctx, &pb.GetLVRequest{Name: "topo-thin", DeviceClass: "hdd"})
	wantRefusal(t, err, codes.NotFound, pb.ErrorReason_ERROR_REASON_NOT_FOUND, "topo-thin")

	v, err := adopt("topo-thin", "hdd", "lv:topo-thin")
	if err != nil {
		t.Fatal(err)
	}
	if v.GetSizeBytes() != gib || !slices.Equal(v.GetTags(), []string{"thinlvm", "lv:topo-thin"}) || v.GetThick() {
		t.Errorf("adopted %v: want the 1 GiB thin LV tagged thinlvm and its owner", v)
	}
	if got, err := e.lv.GetLV(ctx, &pb.GetLVRequest{Name: "topo-thin", DeviceClass: "hdd"}); err != nil || got.GetVolume().GetName() != "topo-thin" {
		t.Errorf("GetLV after the adoption: %v, %v", got, err)
	}
	changes := e.fake.Count("lvchange")
	if _, err := adopt("topo-thin", "hdd", "lv:topo-thin"); err != nil {
		t.Errorf("adopting again: %v", err)
	}
	if n := e.fake.Count("lvchange"); n != changes {
		t.Errorf("adopting again ran lvchange")
	}
	_, err = adopt("topo-thin", "hdd", "lv:someone-else")
	wantRefusal(t, err, codes.AlreadyExists, pb.ErrorReason_ERROR_REASON_CONFLICT, "thinlvm's already")

	v, err = adopt("topo-thick", "thick", "lv:topo-thick")
	if err != nil {
		t.Fatal(err)
	}
	if !v.GetThick() || v.GetSizeBytes() != gib {
		t.Errorf("adopted %v: want the thick 1 GiB LV", v)
	}
	if c := thickCapacityOf(t, e); c.GetLvCount() != 1 || c.GetVirtualBytes() != gib {
		t.Errorf("the thick class after the adoption: %v; want its 1 LV", c)
	}

	before := e.fake.Count("lvchange")
	for _, c := range []struct {
		name, class string
		code        codes.Code
		reason      pb.ErrorReason
		fragment    string
	}{
		{"absent", "hdd", codes.NotFound, pb.ErrorReason_ERROR_REASON_NOT_FOUND, "no lv vg1/absent"},
		{"topo-thin", "thick", codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_NOT_MANAGED, "not a plain linear LV"},
		{"topo-thick", "hdd", codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_NOT_MANAGED, "not a thin LV"},
		{"other-pool", "ssd", codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_NOT_MANAGED, `in thin pool "tp2", not the class's "pool"`},
		{"pool", "ssd", codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_NOT_MANAGED, "not a thin LV"},
	} {
		_, err := adopt(c.name, c.class, "lv:x")
		wantRefusal(t, err, c.code, c.reason, c.fragment)
	}
	if n := e.fake.Count("lvchange"); n != before {
		t.Errorf("refused adoptions ran lvchange")
	}
	_, err = adopt("bad/name", "hdd")
	wantRefusal(t, err, codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID, "")
}

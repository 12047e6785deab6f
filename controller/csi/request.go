package csi

import (
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/volcap"
)

// Sizes.
const (
	defaultSize = 1 << 30
	minSize     = 1 << 20
)

func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	for _, c := range caps {
		if err := volcap.Check(c); err != nil {
			return err
		}
	}
	return nil
}

// provisionerPrefix marks the parameters the CSI sidecars read or add
// themselves (fstype, secrets, the claim's name with
// --extra-create-metadata): they are not thinlvm's to refuse.
const provisionerPrefix = "csi.storage.k8s.io/"

// checkParameters refuses parameters thinlvm does not know: a misspelt key
// must fail the claim, not provision into the default class.
func checkParameters(params map[string]string, known ...string) error {
	var unknown []string
	for k := range params {
		if !strings.HasPrefix(k, provisionerPrefix) && !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	if len(known) == 0 {
		return status.Errorf(codes.InvalidArgument, "unknown parameters %q: none are accepted here", unknown)
	}
	return status.Errorf(codes.InvalidArgument, "unknown parameters %q: the known ones are %q", unknown, known)
}

// size picks the volume size from a capacity range, at least floor (the
// smallest its file system can be made at, volcap.MinBytes).
func size(r *csi.CapacityRange, floor int64) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || lim < 0 {
		return 0, status.Error(codes.InvalidArgument, "capacity_range bytes must not be negative")
	}
	if lim > 0 && req > lim {
		return 0, status.Errorf(codes.InvalidArgument, "required_bytes %d is over limit_bytes %d", req, lim)
	}
	n := req
	if n == 0 {
		n = min(defaultSize, max(lim, minSize))
		if lim == 0 {
			n = defaultSize
		}
	}
	n = max(n, minSize)
	if lim > 0 && n > lim {
		return 0, status.Errorf(codes.OutOfRange, "the smallest volume (%d bytes) is over limit_bytes %d", n, lim)
	}
	if n < floor {
		if lim > 0 && floor > lim {
			return 0, status.Errorf(codes.OutOfRange, "xfs needs at least %d bytes (mkfs.xfs refuses smaller), over limit_bytes %d", floor, lim)
		}
		n = floor
	}
	return n, nil
}

func topologyNode(t *csi.Topology) string { return t.GetSegments()[thinlvmv1.TopologyKey] }

// compatible tells whether an existing LogicalVolume answers a repeated
// CreateVolume.
func compatible(lv *thinlvmv1.LogicalVolume, want, limit int64, class string, source *thinlvmv1.VolumeSource) error {
	have := lv.Spec.Size.Value()
	switch {
	case isSnapshot(lv):
		return status.Errorf(codes.AlreadyExists, "%s is a snapshot", lv.Name)
	case have < want || limit > 0 && have > limit:
		return status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes", lv.Name, have)
	case lv.Spec.DeviceClass != class:
		return status.Errorf(codes.AlreadyExists, "volume %s exists in device class %q", lv.Name, lv.Spec.DeviceClass)
	case (lv.Spec.Source == nil) != (source == nil) || source != nil && *lv.Spec.Source != *source:
		return status.Errorf(codes.AlreadyExists, "volume %s exists with another content source", lv.Name)
	}
	return nil
}

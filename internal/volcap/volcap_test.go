package volcap

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCheck(t *testing.T) {
	mode := func(m csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability_AccessMode {
		return &csi.VolumeCapability_AccessMode{Mode: m}
	}
	mount := func(fs string) *csi.VolumeCapability_Mount {
		return &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs}}
	}
	block := &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	for name, tt := range map[string]struct {
		c    *csi.VolumeCapability
		code codes.Code
	}{
		"block, one writer":       {&csi.VolumeCapability{AccessType: block, AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}, codes.OK},
		"xfs, read-only":          {&csi.VolumeCapability{AccessType: mount("xfs"), AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)}, codes.OK},
		"no fs type: the default": {&csi.VolumeCapability{AccessType: mount(""), AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER)}, codes.OK},
		"btrfs":                   {&csi.VolumeCapability{AccessType: mount("btrfs"), AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}, codes.InvalidArgument},
		"many nodes":              {&csi.VolumeCapability{AccessType: block, AccessMode: mode(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}, codes.InvalidArgument},
		"no access type":          {&csi.VolumeCapability{AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}, codes.InvalidArgument},
		"no access mode":          {&csi.VolumeCapability{AccessType: block}, codes.InvalidArgument},
	} {
		if got := status.Code(Check(tt.c)); got != tt.code {
			t.Errorf("%s: code %v, want %v", name, got, tt.code)
		}
	}
}

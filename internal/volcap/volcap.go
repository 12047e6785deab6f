// Package volcap is the one statement of which CSI volume capabilities
// thinlvm serves: the controller checks requests against it before making a
// volume, and the node service before publishing one.
package volcap

import (
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Filesystems are the file systems the node service formats and mounts.
var Filesystems = []string{"ext4", "xfs"}

// DefaultFilesystem is used when a Mount capability names none.
const DefaultFilesystem = "ext4"

// XFSMinBytes is the smallest xfs mkfs.xfs makes: xfsprogs 5.19 and later
// refuse a smaller data volume ("Filesystem must be larger than 300MB").
const XFSMinBytes = 300 << 20

// MinBytes is the smallest volume that every capability of caps can be
// formatted at: XFSMinBytes if one is an xfs mount, else 0. A volume
// smaller than its file system's minimum would be made, and then fail
// every mount.
func MinBytes(caps []*csi.VolumeCapability) int64 {
	var n int64
	for _, c := range caps {
		if c.GetMount().GetFsType() == "xfs" {
			n = max(n, XFSMinBytes)
		}
	}
	return n
}

// Check refuses, with InvalidArgument, a capability thinlvm cannot serve:
// an access mode beyond one node (volumes are node-local), a file system
// other than Filesystems, or no access type.
func Check(c *csi.VolumeCapability) error {
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
	default:
		return status.Errorf(codes.InvalidArgument, "access mode %s is not supported: thinlvm volumes are node-local", c.GetAccessMode().GetMode())
	}
	switch {
	case c.GetBlock() != nil:
	case c.GetMount() != nil:
		if fs := c.GetMount().GetFsType(); fs != "" && !slices.Contains(Filesystems, fs) {
			return status.Errorf(codes.InvalidArgument, "fs_type %q is not supported (supported: %v)", fs, Filesystems)
		}
	default:
		return status.Error(codes.InvalidArgument, "a volume capability needs an access type: block or mount")
	}
	return nil
}

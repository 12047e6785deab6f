package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	mountutils "k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/volcap"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/lvmd"
)

// NodeServer is the CSI Node service.
type NodeServer struct {
	csi.UnimplementedNodeServer
	nodeName string
	lvmd     lvmd.Client
	mounter  *mountutils.SafeFormatAndMount
	resizer  *mountutils.ResizeFs
	locks    keyLock
}

var _ csi.NodeServer = (*NodeServer)(nil)

// NewNodeServer returns the Node service of nodeName; mounter and exec are
// the system's unless a test passes its own.
func NewNodeServer(nodeName string, client lvmd.Client, mounter mountutils.Interface, exec utilexec.Interface) *NodeServer {
	if mounter == nil {
		mounter = mountutils.New("")
	}
	if exec == nil {
		exec = utilexec.New()
	}
	return &NodeServer{
		nodeName: nodeName, lvmd: client,
		mounter: mountutils.NewSafeFormatAndMount(mounter, exec),
		resizer: mountutils.NewResizeFs(exec),
	}
}

// NodeGetInfo implements csi.NodeServer.
func (s *NodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             s.nodeName,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{thinlvmv1.TopologyKey: s.nodeName}},
	}, nil
}

// NodeGetCapabilities implements csi.NodeServer.
func (s *NodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// findLV returns the LV of volumeID (a LogicalVolume's name) in any device
// class: LV names are unique on a node because they derive from
// LogicalVolume names.
func (s *NodeServer) findLV(ctx context.Context, volumeID string) (*pb.LogicalVolume, error) {
	resp, err := s.lvmd.ListLVs(ctx, &pb.ListLVsRequest{})
	if err != nil {
		return nil, status.Errorf(status.Code(err), "list LVs: %s", status.Convert(err).Message())
	}
	name := thinlvmv1.LVNameOf(volumeID)
	for _, lv := range resp.GetVolumes() {
		if lv.GetName() == name {
			return lv, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "volume %s not found on node %s", volumeID, s.nodeName)
}

func checkCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	return volcap.Check(c)
}

// requireIDs checks the two fields every volume request names.
func requireIDs(id, path, pathField string) error {
	switch {
	case id == "":
		return status.Error(codes.InvalidArgument, "volume_id is required")
	case path == "":
		return status.Errorf(codes.InvalidArgument, "%s is required", pathField)
	}
	return nil
}

// lock takes the volume's try-lock: a second operation on a busy volume is
// Aborted at once. The returned func releases it.
func (s *NodeServer) lock(id string) (unlock func(), err error) {
	if !s.locks.tryLock(id) {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %s is in progress", id)
	}
	return func() { s.locks.unlock(id) }, nil
}

// withLV runs f on the LV of volume id with the volume's lock held: the
// preamble of the calls that change a volume. A busy volume is Aborted, an
// unknown one NotFound, before f runs.
func (s *NodeServer) withLV(ctx context.Context, id string, f func(lv *pb.LogicalVolume) error) error {
	unlock, err := s.lock(id)
	if err != nil {
		return err
	}
	defer unlock()
	lv, err := s.findLV(ctx, id)
	if err != nil {
		return err
	}
	return f(lv)
}

// NodePublishVolume implements csi.NodeServer. Filesystem volumes are
// formatted on first use and mounted at the target; a filesystem smaller
// than its LV (a clone made larger than its source) is grown. Block volumes
// are the LV's device bind-mounted onto the target file.
func (s *NodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if err := requireIDs(id, target, "target_path"); err != nil {
		return nil, err
	}
	capability := req.GetVolumeCapability()
	if err := checkCapability(capability); err != nil {
		return nil, err
	}
	err := s.withLV(ctx, id, func(lv *pb.LogicalVolume) error {
		readOnly := req.GetReadonly() || capability.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
		if lv.GetReadOnly() && !readOnly {
			return status.Errorf(codes.FailedPrecondition, "volume %s is a read-only LV: publish it read-only", id)
		}
		if capability.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
			elsewhere, err := publishedElsewhere(lv.GetDevicePath(), target)
			if err != nil {
				return status.Errorf(codes.Internal, "check where volume %s is published: %v", id, err)
			}
			if elsewhere != "" {
				return status.Errorf(codes.FailedPrecondition, "volume %s is single-writer and already published at %s", id, elsewhere)
			}
		}
		if capability.GetBlock() != nil {
			return s.publishBlock(lv, target, readOnly)
		}
		return s.publishMount(lv, target, capability.GetMount(), readOnly)
	})
	if err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (s *NodeServer) publishBlock(lv *pb.LogicalVolume, target string, readOnly bool) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return status.Errorf(codes.Internal, "create target directory: %v", err)
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o640)
	if err != nil {
		return status.Errorf(codes.Internal, "create target file: %v", err)
	}
	f.Close()
	notMnt, err := s.mounter.IsLikelyNotMountPoint(target)
	if err != nil {
		return status.Errorf(codes.Internal, "check target %s: %v", target, err)
	}
	if !notMnt {
		return checkPublished(lv.GetName(), lv.GetDevicePath(), target, readOnly)
	}
	opts := []string{"bind"}
	if readOnly {
		opts = append(opts, "ro")
	}
	if err := s.mounter.Mount(lv.GetDevicePath(), target, "", opts); err != nil {
		return status.Errorf(codes.Internal, "bind-mount %s onto %s: %v", lv.GetDevicePath(), target, err)
	}
	return nil
}

func (s *NodeServer) publishMount(lv *pb.LogicalVolume, target string, m *csi.VolumeCapability_MountVolume, readOnly bool) error {
	fs := m.GetFsType()
	if fs == "" {
		fs = volcap.DefaultFilesystem
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return status.Errorf(codes.Internal, "create target directory: %v", err)
	}
	notMnt, err := s.mounter.IsLikelyNotMountPoint(target)
	if err != nil {
		return status.Errorf(codes.Internal, "check target %s: %v", target, err)
	}
	if !notMnt {
		return checkPublished(lv.GetName(), lv.GetDevicePath(), target, readOnly)
	}
	opts := append([]string(nil), m.GetMountFlags()...)
	if fs == "xfs" {
		// Thin snapshots of one xfs share its UUID; without nouuid the
		// second of them would not mount.
		opts = append(opts, "nouuid")
	}
	if readOnly {
		// mount-utils formats only for a read-write mount: a fresh
		// volume published read-only is formatted by a read-write mount
		// first, then mounted read-only.
		format, err := s.mounter.GetDiskFormat(lv.GetDevicePath())
		if err != nil {
			return status.Errorf(codes.Internal, "read the filesystem of %s: %v", lv.GetDevicePath(), err)
		}
		if format == "" {
			if lv.GetReadOnly() {
				return status.Errorf(codes.FailedPrecondition, "volume %s has no filesystem and is a read-only LV: nothing to mount", lv.GetName())
			}
			if err := s.mounter.FormatAndMount(lv.GetDevicePath(), target, fs, opts); err != nil {
				return status.Errorf(codes.Internal, "format %s: %v", lv.GetDevicePath(), err)
			}
			if err := s.mounter.Unmount(target); err != nil {
				return status.Errorf(codes.Internal, "unmount %s after formatting: %v", target, err)
			}
		}
		opts = append(opts, "ro")
	}
	if err := s.mounter.FormatAndMount(lv.GetDevicePath(), target, fs, opts); err != nil {
		return status.Errorf(codes.Internal, "format and mount %s at %s: %v", lv.GetDevicePath(), target, err)
	}
	if readOnly {
		return nil
	}
	need, err := s.resizer.NeedResize(lv.GetDevicePath(), target)
	if err != nil {
		return status.Errorf(codes.Internal, "check filesystem size of %s: %v", lv.GetDevicePath(), err)
	}
	if need {
		if _, err := s.resizer.Resize(lv.GetDevicePath(), target); err != nil {
			return status.Errorf(codes.Internal, "grow filesystem of %s: %v", lv.GetDevicePath(), err)
		}
	}
	return nil
}

// NodeUnpublishVolume implements csi.NodeServer. An absent target is done.
func (s *NodeServer) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if err := requireIDs(id, target, "target_path"); err != nil {
		return nil, err
	}
	unlock, err := s.lock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Unmount only this volume: whatever else is mounted at target is
	// not ours to take down. A volume whose LV is gone cannot be checked;
	// its target is cleaned up as before.
	if lv, err := s.findLV(ctx, id); err == nil {
		m, ours, err := mountedAt(id, lv.GetDevicePath(), target)
		if err != nil {
			return nil, err
		}
		if m != nil && !ours {
			return nil, status.Errorf(codes.FailedPrecondition, "target %s holds another volume (%s), not %s", target, m.Source, id)
		}
	}
	if err := mountutils.CleanupMountPoint(target, s.mounter, true); err != nil {
		return nil, status.Errorf(codes.Internal, "unmount %s: %v", target, err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// deviceMounts returns a test for mountinfo entries that publish device:
// a filesystem mounted from it, or a bind mount of a device node of it.
// A bind-mounted node is told by what it is, not by its name: the entry's
// root names the node in its devtmpfs (/dm-3 with udev, /mapper/vg-lv
// without; a container's /dev may be a tmpfs), so the mount point itself
// is looked at.
func deviceMounts(device string) (func(mountutils.MountInfo) bool, error) {
	var st unix.Stat_t
	if err := unix.Stat(device, &st); err != nil {
		return nil, err
	}
	rdev := st.Rdev
	major, minor := int(unix.Major(rdev)), int(unix.Minor(rdev))
	return func(m mountutils.MountInfo) bool {
		if m.Major == major && m.Minor == minor {
			return true
		}
		if m.FsType != "devtmpfs" && m.FsType != "tmpfs" { // where device nodes live
			return false
		}
		var node unix.Stat_t
		return unix.Stat(m.MountPoint, &node) == nil && node.Mode&unix.S_IFMT == unix.S_IFBLK && node.Rdev == rdev
	}, nil
}

// publishedElsewhere returns a mount point other than target where device
// is published.
func publishedElsewhere(device, target string) (string, error) {
	publishes, err := deviceMounts(device)
	if err != nil {
		return "", err
	}
	infos, err := mountutils.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, m := range infos {
		if m.MountPoint != target && publishes(m) {
			return m.MountPoint, nil
		}
	}
	return "", nil
}

// checkPublished compares what is mounted at target with a publish
// request: the same volume with the same read-only flag is done already;
// another volume, or this one with the other flag, is ALREADY_EXISTS (CSI
// spec: the target is taken with an incompatible publish).
func checkPublished(id, device, target string, readOnly bool) error {
	m, ours, err := mountedAt(id, device, target)
	switch {
	case err != nil || m == nil:
		return err
	case !ours:
		return status.Errorf(codes.AlreadyExists, "target %s holds another volume (%s)", target, m.Source)
	}
	if ro := slices.Contains(m.MountOptions, "ro"); ro != readOnly {
		return status.Errorf(codes.AlreadyExists, "volume %s is published at %s with readonly=%v", id, target, ro)
	}
	return nil
}

// mountedAt returns the mount on top of target (nil when none) and whether
// it publishes volume id's device; errors are gRPC statuses.
func mountedAt(id, device, target string) (m *mountutils.MountInfo, ours bool, err error) {
	if m, err = mountAt(target); err != nil {
		return nil, false, status.Errorf(codes.Internal, "read the mount at %s: %v", target, err)
	}
	if m == nil {
		return nil, false, nil
	}
	publishes, err := deviceMounts(device)
	if err != nil {
		return nil, false, status.Errorf(codes.Internal, "find the device of volume %s: %v", id, err)
	}
	return m, publishes(*m), nil
}

// mountAt is the mountinfo entry on top of path, nil when none.
func mountAt(path string) (*mountutils.MountInfo, error) {
	infos, err := mountutils.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var top *mountutils.MountInfo
	for i := range infos {
		if infos[i].MountPoint == path {
			top = &infos[i]
		}
	}
	return top, nil
}

// isBlock tells whether path is a block device (a published Block volume).
func isBlock(path string) (bool, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false, err
	}
	return st.Mode&unix.S_IFMT == unix.S_IFBLK, nil
}

// NodeExpandVolume implements csi.NodeServer: it grows a mounted
// filesystem to its LV's size, online. Block volumes need nothing.
func (s *NodeServer) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if err := requireIDs(id, path, "volume_path"); err != nil {
		return nil, err
	}
	var size int64
	err := s.withLV(ctx, id, func(lv *pb.LogicalVolume) error {
		size = int64(lv.GetSizeBytes())
		if req.GetCapacityRange().GetRequiredBytes() > size {
			return status.Errorf(codes.OutOfRange, "volume %s is %d bytes, less than the %d requested: expand it on the controller first",
				id, size, req.GetCapacityRange().GetRequiredBytes())
		}
		block, err := isBlock(path)
		if errors.Is(err, os.ErrNotExist) {
			return status.Errorf(codes.NotFound, "volume path %s does not exist", path)
		}
		if err != nil {
			return status.Errorf(codes.Internal, "stat %s: %v", path, err)
		}
		if block || req.GetVolumeCapability().GetBlock() != nil {
			return nil
		}
		if _, err := s.resizer.Resize(lv.GetDevicePath(), path); err != nil {
			return status.Errorf(codes.Internal, "grow filesystem of %s at %s: %v", lv.GetDevicePath(), path, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}

// NodeGetVolumeStats implements csi.NodeServer: bytes and inodes of a
// mounted filesystem, the size of a Block volume.
func (s *NodeServer) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if err := requireIDs(id, path, "volume_path"); err != nil {
		return nil, err
	}
	block, err := isBlock(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.NotFound, "volume path %s does not exist", path)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "stat %s: %v", path, err)
	}
	lv, err := s.findLV(ctx, id)
	if err != nil {
		return nil, err
	}
	if block {
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES, Total: int64(lv.GetSizeBytes())},
		}}, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", path, err)
	}
	bs := st.Bsize
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}}, nil
}

// NodeGetVolumeHealth implements csi.NodeServer. CSI 1.13 replaced the
// volume condition of NodeGetVolumeStats with this call: a volume whose LV
// is gone is INACCESSIBLE, one whose published path is gone DEGRADED.
func (s *NodeServer) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	health := &csi.VolumeHealth{VolumeId: id}
	_, err := s.findLV(ctx, id)
	switch {
	case status.Code(err) == codes.NotFound:
		health.HealthStatuses = append(health.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{
			Status: csi.VolumeHealthErrorType_INACCESSIBLE, Reason: "LVMissing",
			Message: fmt.Sprintf("the LV of volume %s is gone from node %s", id, s.nodeName)})
	case err != nil:
		return nil, err
	}
	if p := req.GetVolumePublishPath(); p != "" {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			health.HealthStatuses = append(health.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{
				Status: csi.VolumeHealthErrorType_DEGRADED, Reason: "PublishPathMissing",
				Message: fmt.Sprintf("published path %s does not exist", p)})
		}
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: health}, nil
}

package csi

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	mountutils "k8s.io/mount-utils"
	testingexec "k8s.io/utils/exec/testing"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/lvmd/lvmdtest"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// Publishing for real (mkfs, mount, resize) is tested on real devices in the
// VM (e2e/lvmvm/csi_test.go); these tests cover what needs no device.

func newServer(t *testing.T) (*NodeServer, *lvmdtest.LVMD) {
	t.Helper()
	f := lvmdtest.Start(t, lvmdtest.Options{})
	if _, err := f.CreateLV(context.Background(), &pb.CreateLVRequest{Name: "vol", SizeBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	// An exec that fails the test if any command runs.
	return NewNodeServer("node-a", f, mountutils.NewFakeMounter(nil), &testingexec.FakeExec{ExactOrder: true}), f
}

func mountCapability(fs string, mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
}

func TestPublishValidation(t *testing.T) {
	s, f := newServer(t)
	target := filepath.Join(t.TempDir(), "target")
	rwo := csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	tests := []struct {
		name string
		req  *csi.NodePublishVolumeRequest
		want codes.Code
	}{
		{"no volume id", &csi.NodePublishVolumeRequest{TargetPath: target, VolumeCapability: mountCapability("ext4", rwo)}, codes.InvalidArgument},
		{"no target", &csi.NodePublishVolumeRequest{VolumeId: "vol", VolumeCapability: mountCapability("ext4", rwo)}, codes.InvalidArgument},
		{"no capability", &csi.NodePublishVolumeRequest{VolumeId: "vol", TargetPath: target}, codes.InvalidArgument},
		{"no access type", &csi.NodePublishVolumeRequest{VolumeId: "vol", TargetPath: target,
			VolumeCapability: &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: rwo}}}, codes.InvalidArgument},
		{"btrfs", &csi.NodePublishVolumeRequest{VolumeId: "vol", TargetPath: target, VolumeCapability: mountCapability("btrfs", rwo)}, codes.InvalidArgument},
		{"multi-node", &csi.NodePublishVolumeRequest{VolumeId: "vol", TargetPath: target,
			VolumeCapability: mountCapability("ext4", csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)}, codes.InvalidArgument},
		{"unknown volume", &csi.NodePublishVolumeRequest{VolumeId: "nope", TargetPath: target, VolumeCapability: mountCapability("ext4", rwo)}, codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.NodePublishVolume(context.Background(), tt.req)
			if got := status.Code(err); got != tt.want {
				t.Errorf("code %v (%v), want %v", got, err, tt.want)
			}
		})
	}
	if calls := f.Count("ListLVs"); calls != 1 {
		t.Errorf("lvmd was asked %d times: only the valid request may reach it", calls)
	}
}

func TestReadOnlyLVNeedsReadOnlyPublish(t *testing.T) {
	s, f := newServer(t)
	if _, err := f.CreateSnapshot(context.Background(), &pb.CreateSnapshotRequest{Name: "ro", SourceName: "vol", ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	_, err := s.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{VolumeId: "ro", TargetPath: filepath.Join(t.TempDir(), "t"),
		VolumeCapability: mountCapability("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("rw publish of a read-only LV: %v, want FailedPrecondition", err)
	}
}

func TestBusyVolumeIsAborted(t *testing.T) {
	s, _ := newServer(t)
	if !s.locks.tryLock("vol") {
		t.Fatal("lock")
	}
	defer s.locks.unlock("vol")
	_, err := s.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: "vol", TargetPath: "/x"})
	if status.Code(err) != codes.Aborted {
		t.Errorf("unpublish of a busy volume: %v, want Aborted", err)
	}
}

func TestUnpublishAbsentTargetSucceeds(t *testing.T) {
	s, _ := newServer(t)
	if _, err := s.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: "vol", TargetPath: filepath.Join(t.TempDir(), "never")}); err != nil {
		t.Errorf("unpublish of an absent target: %v", err)
	}
}

func TestNodeGetInfo(t *testing.T) {
	s, _ := newServer(t)
	info, err := s.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if err != nil || info.GetNodeId() != "node-a" || info.GetAccessibleTopology().GetSegments()[thinlvmv1.TopologyKey] != "node-a" {
		t.Errorf("NodeGetInfo %v %v", info, err)
	}
}

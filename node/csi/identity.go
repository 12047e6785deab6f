package csi

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/lvmd"
)

// IdentityServer is the CSI Identity service of the node plugin.
type IdentityServer struct {
	csi.UnimplementedIdentityServer
	LVMD    lvmd.Client
	Version string
}

var _ csi.IdentityServer = (*IdentityServer)(nil)

// GetPluginInfo implements csi.IdentityServer.
func (s *IdentityServer) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: thinlvmv1.DriverName, VendorVersion: s.Version}, nil
}

// GetPluginCapabilities implements csi.IdentityServer.
func (s *IdentityServer) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
		{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS}}},
		{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}},
	}}, nil
}

// Probe implements csi.IdentityServer: ready when lvmd answers.
func (s *IdentityServer) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	_, err := s.LVMD.GetCapacity(ctx, &pb.GetCapacityRequest{})
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(err == nil)}, nil
}

// Package csiidentity is thinlvm's CSI Identity service, served by both of
// its plugins: the controller plugin adds the Controller service, the node
// plugin is ready only while its lvmd answers.
package csiidentity

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// Server is the CSI Identity service.
type Server struct {
	csi.UnimplementedIdentityServer
	// Version is the plugin's vendor version.
	Version string
	// Controller tells that the plugin serves the CSI Controller service.
	Controller bool
	// Ready, when set, is Probe's check: the plugin is ready when it
	// returns nil. Without it the plugin is always ready.
	Ready func(context.Context) error
}

var _ csi.IdentityServer = (*Server)(nil)

// GetPluginInfo implements csi.IdentityServer.
func (s *Server) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: thinlvmv1.DriverName, VendorVersion: s.Version}, nil
}

// GetPluginCapabilities implements csi.IdentityServer: topology and online
// expansion, and the Controller service on the controller plugin.
func (s *Server) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	service := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}
	var caps []*csi.PluginCapability
	if s.Controller {
		caps = append(caps, service(csi.PluginCapability_Service_CONTROLLER_SERVICE))
	}
	caps = append(caps, service(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS),
		&csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}})
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe implements csi.IdentityServer.
func (s *Server) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	ready := s.Ready == nil || s.Ready(ctx) == nil
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(ready)}, nil
}

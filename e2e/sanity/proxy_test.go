package sanity

import (
	"context"

	csispec "github.com/container-storage-interface/spec/lib/go/csi"
)

// nodeProxy forwards the Node service to the node plugin in the VM, so that
// csi-sanity sees one endpoint whose Identity is the controller plugin's
// (it decides whether to call ControllerExpandVolume and the like from the
// Identity of its node endpoint; thinlvm's node plugin does not claim the
// controller service it does not serve).
type nodeProxy struct {
	csispec.UnimplementedNodeServer
	to csispec.NodeClient
}

func (p *nodeProxy) NodeGetInfo(ctx context.Context, r *csispec.NodeGetInfoRequest) (*csispec.NodeGetInfoResponse, error) {
	return p.to.NodeGetInfo(ctx, r)
}

func (p *nodeProxy) NodeGetCapabilities(ctx context.Context, r *csispec.NodeGetCapabilitiesRequest) (*csispec.NodeGetCapabilitiesResponse, error) {
	return p.to.NodeGetCapabilities(ctx, r)
}

func (p *nodeProxy) NodePublishVolume(ctx context.Context, r *csispec.NodePublishVolumeRequest) (*csispec.NodePublishVolumeResponse, error) {
	return p.to.NodePublishVolume(ctx, r)
}

func (p *nodeProxy) NodeUnpublishVolume(ctx context.Context, r *csispec.NodeUnpublishVolumeRequest) (*csispec.NodeUnpublishVolumeResponse, error) {
	return p.to.NodeUnpublishVolume(ctx, r)
}

func (p *nodeProxy) NodeExpandVolume(ctx context.Context, r *csispec.NodeExpandVolumeRequest) (*csispec.NodeExpandVolumeResponse, error) {
	return p.to.NodeExpandVolume(ctx, r)
}

func (p *nodeProxy) NodeGetVolumeStats(ctx context.Context, r *csispec.NodeGetVolumeStatsRequest) (*csispec.NodeGetVolumeStatsResponse, error) {
	return p.to.NodeGetVolumeStats(ctx, r)
}

func (p *nodeProxy) NodeGetVolumeHealth(ctx context.Context, r *csispec.NodeGetVolumeHealthRequest) (*csispec.NodeGetVolumeHealthResponse, error) {
	return p.to.NodeGetVolumeHealth(ctx, r)
}

func (p *nodeProxy) NodeStageVolume(ctx context.Context, r *csispec.NodeStageVolumeRequest) (*csispec.NodeStageVolumeResponse, error) {
	return p.to.NodeStageVolume(ctx, r)
}

func (p *nodeProxy) NodeUnstageVolume(ctx context.Context, r *csispec.NodeUnstageVolumeRequest) (*csispec.NodeUnstageVolumeResponse, error) {
	return p.to.NodeUnstageVolume(ctx, r)
}

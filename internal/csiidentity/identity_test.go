package csiidentity

import (
	"context"
	"errors"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

func TestIdentity(t *testing.T) {
	ctx := context.Background()
	var down error
	node := &Server{Version: "test", Ready: func(context.Context) error { return down }}
	info, err := node.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil || info.GetName() != thinlvmv1.DriverName || info.GetVendorVersion() != "test" {
		t.Errorf("GetPluginInfo: %v %v", info, err)
	}
	if p, err := node.Probe(ctx, &csi.ProbeRequest{}); err != nil || !p.GetReady().GetValue() {
		t.Errorf("Probe with its check passing: %v %v, want ready", p, err)
	}
	down = errors.New("lvmd down")
	if p, err := node.Probe(ctx, &csi.ProbeRequest{}); err != nil || p.GetReady().GetValue() {
		t.Errorf("Probe with its check failing: %v %v, want not ready", p, err)
	}

	serves := func(s *Server) bool {
		resp, err := s.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
		if err != nil || len(resp.GetCapabilities()) < 2 {
			t.Fatalf("GetPluginCapabilities: %v %v", resp, err)
		}
		for _, c := range resp.GetCapabilities() {
			if c.GetService().GetType() == csi.PluginCapability_Service_CONTROLLER_SERVICE {
				return true
			}
		}
		return false
	}
	if serves(node) || !serves(&Server{Controller: true}) {
		t.Error("only the controller plugin may announce the Controller service")
	}
}

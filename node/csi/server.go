package csi

import (
	"context"
	"net"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Server serves the Identity and Node services on a listener, as a
// manager.Runnable.
type Server struct {
	Listener net.Listener
	Identity *IdentityServer
	Node     *NodeServer
	Log      logr.Logger
}

var _ manager.Runnable = (*Server)(nil)
var _ manager.LeaderElectionRunnable = (*Server)(nil)

// NeedLeaderElection is false: every node serves its own volumes.
func (s *Server) NeedLeaderElection() bool { return false }

// volumeIDOf is the volume_id of a CSI request, for logs.
type volumeIDOf interface{ GetVolumeId() string }

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	logf := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(logr.NewContext(ctx, s.Log), req)
		kv := []any{"method", info.FullMethod, "duration", time.Since(start)}
		if v, ok := req.(volumeIDOf); ok {
			kv = append(kv, "volumeID", v.GetVolumeId())
		}
		if err != nil {
			s.Log.V(1).Info("csi call failed", append(kv, "code", status.Code(err).String(), "error", status.Convert(err).Message())...)
		} else {
			s.Log.V(2).Info("csi call", kv...)
		}
		return resp, err
	}
	gs := grpc.NewServer(grpc.UnaryInterceptor(logf))
	csi.RegisterIdentityServer(gs, s.Identity)
	csi.RegisterNodeServer(gs, s.Node)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(s.Listener) }()
	s.Log.Info("csi node service serving", "address", s.Listener.Addr().String())
	select {
	case <-ctx.Done():
		gs.GracefulStop()
		return nil
	case err := <-errc:
		return err
	}
}

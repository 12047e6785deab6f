package endpoint

import (
	"context"
	"net"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Server serves gRPC services on a listener until its context ends; it is a
// controller-runtime manager.Runnable that needs no leader election.
type Server struct {
	Listener net.Listener
	// Register adds the services.
	Register func(*grpc.Server)
	Log      logr.Logger
	// Options are extra server options, e.g. TLS credentials.
	Options []grpc.ServerOption
}

// logCall logs a call: failures at the default verbosity (an operator
// running with no -v must see them), others at V(2); with the method,
// duration and volume ID, never the request, which may carry secrets.
func (s *Server) logCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(logr.NewContext(ctx, s.Log), req)
	kv := []any{"method", info.FullMethod, "duration", time.Since(start)}
	if v, ok := req.(volumeIDOf); ok {
		kv = append(kv, "volumeID", v.GetVolumeId())
	}
	if err != nil {
		s.Log.Info("grpc call failed", append(kv, "code", status.Code(err).String(), "error", status.Convert(err).Message())...)
	} else {
		s.Log.V(2).Info("grpc call", kv...)
	}
	return resp, err
}

// NeedLeaderElection is false: every replica serves.
func (s *Server) NeedLeaderElection() bool { return false }

// volumeIDOf is what CSI requests that name a volume have, for logs.
type volumeIDOf interface{ GetVolumeId() string }

// Start serves until ctx ends, logging each call with logCall.
func (s *Server) Start(ctx context.Context) error {
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.UnaryInterceptor(s.logCall)}, s.Options...)...)
	s.Register(gs)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(s.Listener) }()
	s.Log.Info("grpc serving", "address", s.Listener.Addr().String())
	select {
	case <-ctx.Done():
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			gs.Stop()
		}
		return nil
	case err := <-errc:
		return err
	}
}

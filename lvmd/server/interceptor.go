package server

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// UnaryInterceptor logs each call, records its latency and error code, and
// turns handler errors into gRPC status: the one edge where codes are made.
func (d *Daemon) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(logr.NewContext(ctx, d.log), req)
	err = toStatus(err)
	d.record(info.FullMethod, start, err, req)
	return resp, err
}

// StreamInterceptor is UnaryInterceptor for streams (Watch).
func (d *Daemon) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := toStatus(handler(srv, ss))
	d.record(info.FullMethod, start, err, nil)
	return err
}

func (d *Daemon) record(method string, start time.Time, err error, req any) {
	elapsed := time.Since(start)
	code := status.Code(err)
	if d.metrics != nil {
		d.metrics.rpcDuration.WithLabelValues(method).Observe(elapsed.Seconds())
		if err != nil {
			d.metrics.rpcErrors.WithLabelValues(method, code.String()).Inc()
		}
	}
	if err != nil {
		d.log.Info("rpc failed", "method", method, "code", code.String(), "error", status.Convert(err).Message(), "duration", elapsed, "request", req)
		return
	}
	d.log.V(2).Info("rpc", "method", method, "duration", elapsed, "request", req)
}

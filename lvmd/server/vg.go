package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/thinlvm/thinlvm/lvmd/config"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

type vgService struct {
	pb.UnimplementedVGServiceServer
	d *Daemon
}

var _ pb.VGServiceServer = (*vgService)(nil)

// report computes the capacity of the requested device classes from one
// view. It starts no lvm process.
func (d *Daemon) report(v *view, class string) (*pb.GetCapacityResponse, error) {
	classes := d.cfg.DeviceClasses
	if class != "" {
		dc, err := d.class(class)
		if err != nil {
			return nil, err
		}
		classes = []config.DeviceClass{*dc}
	}
	resp := &pb.GetCapacityResponse{Generation: v.generation}
	for i := range classes {
		resp.DeviceClasses = append(resp.DeviceClasses, capacity(&classes[i], v.report))
	}
	return resp, nil
}

func (s *vgService) GetCapacity(_ context.Context, req *pb.GetCapacityRequest) (*pb.GetCapacityResponse, error) {
	return s.d.report(s.d.store.current(), req.GetDeviceClass())
}

// Watch sends the capacity at once and again whenever a published view
// changes it. Watchers share the store's views: a watcher costs no lvm
// process. The stream ends with Unavailable when lvmd stops (the context
// Start was given ends): the watcher dials the next lvmd.
func (s *vgService) Watch(_ *pb.WatchRequest, stream pb.VGService_WatchServer) error {
	wake, cancel := s.d.store.subscribe()
	defer cancel()
	var last *pb.GetCapacityResponse
	for {
		resp, err := s.d.report(s.d.store.current(), "")
		if err != nil {
			return err
		}
		if last == nil || !sameCapacity(last, resp) {
			if err := stream.Send(resp); err != nil {
				return err
			}
			last = resp
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-s.d.stopping:
			return status.Error(codes.Unavailable, "lvmd is stopping")
		case <-wake:
		}
	}
}

// sameCapacity compares two reports but for their generation.
func sameCapacity(a, b *pb.GetCapacityResponse) bool {
	a2, b2 := proto.CloneOf(a), proto.CloneOf(b)
	a2.Generation, b2.Generation = 0, 0
	return proto.Equal(a2, b2)
}

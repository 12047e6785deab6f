// Package fake is an in-memory lvmd for the node agent's unit tests: it keeps
// LVs and a capacity report, answers with lvmd's gRPC codes, can be told to
// fail or block, and records its calls.
package fake

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/lvmd"
)

// LVMD is a fake lvmd.Client. Set its fields before use; use its methods
// while it is shared.
type LVMD struct {
	// DeviceClasses are the known classes; the first is the default.
	DeviceClasses []string
	// Fail maps a method name (e.g. "CreateLV") to the error it returns.
	Fail map[string]error
	// Gate, when set, is received from before CreateLV and CreateSnapshot
	// do their work: a test holds a call in the middle.
	Gate chan struct{}
	// DeviceDir, when set, backs every LV by a sparse file of its size in
	// that directory (its device path), which a snapshot copies: code that
	// writes to devices can run in unit tests.
	DeviceDir string

	mu       sync.Mutex
	lvs      map[string]*pb.LogicalVolume
	capacity *pb.GetCapacityResponse
	calls    []string
	watchers map[chan struct{}]struct{}
}

var _ lvmd.Client = (*LVMD)(nil)

func (f *LVMD) init() {
	if f.lvs == nil {
		f.lvs = map[string]*pb.LogicalVolume{}
		f.watchers = map[chan struct{}]struct{}{}
		f.capacity = &pb.GetCapacityResponse{Generation: 1}
		if len(f.DeviceClasses) == 0 {
			f.DeviceClasses = []string{"ssd"}
		}
	}
}

// begin records a call and returns the error configured for it.
func (f *LVMD) begin(method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.init()
	f.calls = append(f.calls, method)
	return f.Fail[method]
}

func (f *LVMD) class(name string) (string, error) {
	if name == "" {
		return f.DeviceClasses[0], nil
	}
	for _, c := range f.DeviceClasses {
		if c == name {
			return c, nil
		}
	}
	return "", status.Errorf(codes.InvalidArgument, "unknown device class %q", name)
}

// Calls returns the methods called, in order.
func (f *LVMD) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// Count returns how often method was called.
func (f *LVMD) Count(method string) int {
	n := 0
	for _, c := range f.Calls() {
		if c == method {
			n++
		}
	}
	return n
}

// LV returns a copy of the LV named name.
func (f *LVMD) LV(name string) (*pb.LogicalVolume, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.init()
	lv, ok := f.lvs[name]
	if !ok {
		return nil, false
	}
	return proto.CloneOf(lv), true
}

// LVNames returns the names of all LVs, sorted.
func (f *LVMD) LVNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.init()
	var names []string
	for n := range f.lvs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// SetCapacity replaces the capacity report and wakes the watchers.
func (f *LVMD) SetCapacity(classes ...*pb.DeviceClassCapacity) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.init()
	f.capacity = &pb.GetCapacityResponse{DeviceClasses: classes, Generation: f.capacity.GetGeneration() + 1}
	for ch := range f.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (f *LVMD) gate(ctx context.Context) error {
	if f.Gate == nil {
		return nil
	}
	select {
	case <-f.Gate:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

const extent = 4 << 20

func roundUp(n uint64) uint64 { return (n + extent - 1) / extent * extent }

// CreateLV implements lvmd's CreateLV.
func (f *LVMD) CreateLV(ctx context.Context, in *pb.CreateLVRequest, _ ...grpc.CallOption) (*pb.CreateLVResponse, error) {
	if err := f.begin("CreateLV"); err != nil {
		return nil, err
	}
	if err := f.gate(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	class, err := f.class(in.GetDeviceClass())
	if err != nil {
		return nil, err
	}
	size := roundUp(in.GetSizeBytes())
	if lv, ok := f.lvs[in.GetName()]; ok {
		if lv.GetSizeBytes() != size || lv.GetOrigin() != "" {
			return nil, status.Errorf(codes.AlreadyExists, "lv %s exists with size %d", lv.GetName(), lv.GetSizeBytes())
		}
		return &pb.CreateLVResponse{Volume: proto.CloneOf(lv)}, nil
	}
	lv := &pb.LogicalVolume{Name: in.GetName(), DeviceClass: class, VolumeGroup: "vg-" + class, SizeBytes: size,
		DevicePath: f.devicePath("vg-"+class, in.GetName()), Tags: append([]string{"thinlvm"}, in.GetTags()...), Active: true}
	if err := f.backing(lv, nil); err != nil {
		return nil, err
	}
	f.lvs[lv.Name] = lv
	return &pb.CreateLVResponse{Volume: proto.CloneOf(lv)}, nil
}

// CreateSnapshot implements lvmd's CreateSnapshot.
func (f *LVMD) CreateSnapshot(ctx context.Context, in *pb.CreateSnapshotRequest, _ ...grpc.CallOption) (*pb.CreateSnapshotResponse, error) {
	if err := f.begin("CreateSnapshot"); err != nil {
		return nil, err
	}
	if err := f.gate(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	class, err := f.class(in.GetDeviceClass())
	if err != nil {
		return nil, err
	}
	src, ok := f.lvs[in.GetSourceName()]
	if !ok || src.GetDeviceClass() != class {
		return nil, status.Errorf(codes.NotFound, "source lv %s not found", in.GetSourceName())
	}
	size := max(roundUp(in.GetSizeBytes()), src.GetSizeBytes())
	if in.GetSizeBytes() != 0 && roundUp(in.GetSizeBytes()) < src.GetSizeBytes() {
		return nil, status.Errorf(codes.OutOfRange, "snapshot smaller than its source")
	}
	if lv, ok := f.lvs[in.GetName()]; ok {
		if lv.GetOrigin() != src.GetName() || lv.GetSizeBytes() != size || lv.GetReadOnly() != in.GetReadOnly() {
			return nil, status.Errorf(codes.AlreadyExists, "lv %s exists with other parameters", lv.GetName())
		}
		return &pb.CreateSnapshotResponse{Volume: proto.CloneOf(lv)}, nil
	}
	lv := &pb.LogicalVolume{Name: in.GetName(), DeviceClass: class, VolumeGroup: src.GetVolumeGroup(), SizeBytes: size,
		DevicePath: f.devicePath(src.GetVolumeGroup(), in.GetName()), Origin: src.GetName(),
		Tags: append([]string{"thinlvm"}, in.GetTags()...), ReadOnly: in.GetReadOnly(), Active: true}
	if err := f.backing(lv, src); err != nil {
		return nil, err
	}
	f.lvs[lv.Name] = lv
	return &pb.CreateSnapshotResponse{Volume: proto.CloneOf(lv)}, nil
}

// ResizeLV implements lvmd's ResizeLV.
func (f *LVMD) ResizeLV(_ context.Context, in *pb.ResizeLVRequest, _ ...grpc.CallOption) (*pb.ResizeLVResponse, error) {
	if err := f.begin("ResizeLV"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	lv, ok := f.lvs[in.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "lv %s not found", in.GetName())
	}
	size := roundUp(in.GetSizeBytes())
	if size < lv.GetSizeBytes() {
		return nil, status.Errorf(codes.OutOfRange, "lv %s is %d bytes: cannot shrink to %d", lv.GetName(), lv.GetSizeBytes(), size)
	}
	lv.SizeBytes = size
	if f.DeviceDir != "" {
		if err := os.Truncate(lv.DevicePath, int64(size)); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &pb.ResizeLVResponse{Volume: proto.CloneOf(lv)}, nil
}

// RemoveLV implements lvmd's RemoveLV.
func (f *LVMD) RemoveLV(_ context.Context, in *pb.RemoveLVRequest, _ ...grpc.CallOption) (*pb.RemoveLVResponse, error) {
	if err := f.begin("RemoveLV"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// As the real lvmd: the class is checked before anything else.
	if _, err := f.class(in.GetDeviceClass()); err != nil {
		return nil, err
	}
	if lv, ok := f.lvs[in.GetName()]; ok && f.DeviceDir != "" {
		_ = os.Remove(lv.DevicePath)
	}
	delete(f.lvs, in.GetName())
	for _, lv := range f.lvs {
		if lv.Origin == in.GetName() {
			lv.Origin = ""
		}
	}
	return &pb.RemoveLVResponse{}, nil
}

// ChangeLV implements lvmd's ChangeLV.
func (f *LVMD) ChangeLV(_ context.Context, in *pb.ChangeLVRequest, _ ...grpc.CallOption) (*pb.ChangeLVResponse, error) {
	if err := f.begin("ChangeLV"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	lv, ok := f.lvs[in.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "lv %s not found", in.GetName())
	}
	if in.ReadOnly != nil {
		lv.ReadOnly = in.GetReadOnly()
	}
	if in.Active != nil {
		lv.Active = in.GetActive()
	}
	return &pb.ChangeLVResponse{Volume: proto.CloneOf(lv)}, nil
}

func (f *LVMD) devicePath(vg, name string) string {
	if f.DeviceDir != "" {
		return filepath.Join(f.DeviceDir, name)
	}
	return "/dev/" + vg + "/" + name
}

// backing makes lv's backing file when DeviceDir is set: a copy of src's,
// or empty, of lv's size.
func (f *LVMD) backing(lv, src *pb.LogicalVolume) error {
	if f.DeviceDir == "" {
		return nil
	}
	var data []byte
	if src != nil {
		var err error
		if data, err = os.ReadFile(src.GetDevicePath()); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	}
	if err := os.WriteFile(lv.GetDevicePath(), data, 0o600); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if err := os.Truncate(lv.GetDevicePath(), int64(lv.GetSizeBytes())); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// GetLV implements lvmd's GetLV.
func (f *LVMD) GetLV(_ context.Context, in *pb.GetLVRequest, _ ...grpc.CallOption) (*pb.GetLVResponse, error) {
	if err := f.begin("GetLV"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	lv, ok := f.lvs[in.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "lv %s not found", in.GetName())
	}
	return &pb.GetLVResponse{Volume: proto.CloneOf(lv)}, nil
}

// ListLVs implements lvmd's ListLVs.
func (f *LVMD) ListLVs(_ context.Context, in *pb.ListLVsRequest, _ ...grpc.CallOption) (*pb.ListLVsResponse, error) {
	if err := f.begin("ListLVs"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &pb.ListLVsResponse{}
	for _, name := range sortedKeys(f.lvs) {
		lv := f.lvs[name]
		if in.GetDeviceClass() != "" && lv.GetDeviceClass() != in.GetDeviceClass() {
			continue
		}
		if in.GetTag() != "" && !slices.Contains(lv.GetTags(), in.GetTag()) {
			continue
		}
		resp.Volumes = append(resp.Volumes, proto.CloneOf(lv))
	}
	return resp, nil
}

func sortedKeys(m map[string]*pb.LogicalVolume) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// GetCapacity implements lvmd's GetCapacity.
func (f *LVMD) GetCapacity(_ context.Context, _ *pb.GetCapacityRequest, _ ...grpc.CallOption) (*pb.GetCapacityResponse, error) {
	if err := f.begin("GetCapacity"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return proto.CloneOf(f.capacity), nil
}

// Watch implements lvmd's Watch: the current report, then one per
// SetCapacity.
func (f *LVMD) Watch(ctx context.Context, _ *pb.WatchRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[pb.GetCapacityResponse], error) {
	if err := f.begin("Watch"); err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	ch <- struct{}{}
	f.mu.Lock()
	f.watchers[ch] = struct{}{}
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		<-ctx.Done()
		f.mu.Lock()
		delete(f.watchers, ch)
		f.mu.Unlock()
	}()
	return &stream{ctx: ctx, cancel: cancel, wake: ch, f: f}, nil
}

type stream struct {
	grpc.ClientStream
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	f      *LVMD
}

func (s *stream) Recv() (*pb.GetCapacityResponse, error) {
	select {
	case <-s.ctx.Done():
		return nil, status.FromContextError(s.ctx.Err()).Err()
	case <-s.wake:
	}
	if err := s.f.failure("Watch.Recv"); err != nil {
		return nil, err
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return proto.CloneOf(s.f.capacity), nil
}

func (f *LVMD) failure(method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Fail[method]
}

func (s *stream) Header() (metadata.MD, error) { return nil, nil }
func (s *stream) Trailer() metadata.MD         { return nil }
func (s *stream) CloseSend() error             { s.cancel(); return nil }
func (s *stream) Context() context.Context     { return s.ctx }

// Errorf is status.Errorf, for tests that configure Fail.
func Errorf(c codes.Code, format string, args ...any) error {
	return status.Error(c, fmt.Sprintf(format, args...))
}

// SetFail makes method return err (nil: succeed again) while the fake is
// shared.
func (f *LVMD) SetFail(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Fail == nil {
		f.Fail = map[string]error{}
	}
	f.Fail[method] = err
}

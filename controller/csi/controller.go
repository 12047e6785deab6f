package csi

import (
	"context"
	"errors"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/kubestatus"
	"github.com/thinlvm/thinlvm/internal/sizes"
	"github.com/thinlvm/thinlvm/internal/volcap"
)

// ControllerServer is the CSI Controller service.
type ControllerServer struct {
	csi.UnimplementedControllerServer
	// Client reads (from a cache) and writes LogicalVolumes and LVMNodes.
	Client client.Client
	// Timeout bounds a wait for the node agent when the caller set no
	// deadline; default 2m.
	Timeout time.Duration
	// Metrics, when set, observes CreateVolume.
	Metrics *Metrics
	// Recorder, when set, tells a claim why its volume waits (an Event on
	// the PVC the provisioner names with --extra-create-metadata).
	Recorder events.EventRecorder
	// APIReader reads past the cache: a claim for its Event (its UID), a
	// prime claim's GoldenImage, which was just made, and the channel of
	// a class's golden-image-channel parameter, which may just have moved.
	APIReader client.Reader
	// Namespace is the controller's own namespace: only a claim there (a
	// prime claim the populator made) has its
	// thinlvm.io/populate-golden-image annotation honoured. Empty honours
	// none.
	Namespace string

	// changes wakes the waits for LogicalVolumes (SetupWithManager).
	changes *changes
}

var _ csi.ControllerServer = (*ControllerServer)(nil)

// +kubebuilder:rbac:groups=thinlvm.io,resources=logicalvolumes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=thinlvm.io,resources=lvmnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=thinlvm.io,resources=goldenimages;goldenimagechannels,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ControllerGetCapabilities implements csi.ControllerServer.
func (s *ControllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// CreateVolume implements csi.ControllerServer.
func (s *ControllerServer) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	start := time.Now()
	resp, err := s.createVolume(ctx, req)
	if s.Metrics != nil {
		s.Metrics.observeCreate(start, err)
	}
	return resp, err
}

func (s *ControllerServer) createVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	if err := checkParameters(req.GetParameters(), thinlvmv1.DeviceClassParameter, thinlvmv1.GoldenImageParameter, thinlvmv1.GoldenImageChannelParameter); err != nil {
		return nil, err
	}
	if req.GetParameters()[thinlvmv1.GoldenImageParameter] != "" && req.GetParameters()[thinlvmv1.GoldenImageChannelParameter] != "" {
		return nil, status.Errorf(codes.InvalidArgument, "StorageClass parameters %s and %s exclude each other", thinlvmv1.GoldenImageParameter, thinlvmv1.GoldenImageChannelParameter)
	}
	want, err := size(req.GetCapacityRange(), volcap.MinBytes(req.GetVolumeCapabilities()))
	if err != nil {
		return nil, err
	}
	class := req.GetParameters()[thinlvmv1.DeviceClassParameter]
	name := thinlvmv1.ObjectName("vol", req.GetName())

	o, err := s.origin(ctx, req, name, want, class)
	if err != nil {
		return nil, err
	}
	want, class = o.size, o.class

	lv, err := s.getLV(ctx, name)
	switch {
	case err == nil:
		if err := stillDeleting(lv); err != nil {
			return nil, err
		}
		if err := compatible(lv, want, req.GetCapacityRange().GetLimitBytes(), class, o.source); err != nil {
			return nil, err
		}
	case !apierrors.IsNotFound(err):
		return nil, kubestatus.Errorf(err, "get LogicalVolume %s", name)
	default:
		node, err := s.pickNode(ctx, req.GetAccessibilityRequirements(), class, want, o.sourceNode, o.image)
		if err != nil {
			return nil, err
		}
		lv = &thinlvmv1.LogicalVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: thinlvmv1.LogicalVolumeSpec{Name: req.GetName(), NodeName: node, DeviceClass: class,
				Size: *resource.NewQuantity(want, resource.BinarySI), Source: o.source, AccessType: thinlvmv1.AccessReadWrite,
				Role: thinlvmv1.RoleVolume},
		}
		if err := s.Client.Create(ctx, lv); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, kubestatus.Errorf(err, "create LogicalVolume %s", name)
		}
	}
	events := s.claimEvents(ctx, req.GetParameters())
	lv, err = s.waitReady(ctx, name, ready, events)
	if err == nil {
		events(lv) // a copy from another node: its end
	}
	if err != nil {
		if status.Code(err) != codes.DeadlineExceeded && lv != nil {
			// The node refused it (no room, a bad class): leave nothing
			// behind, so that the provisioner can try another node.
			if derr := s.Client.Delete(ctx, lv); derr != nil && !apierrors.IsNotFound(derr) {
				return nil, errors.Join(err, derr)
			}
		}
		return nil, err
	}
	if lim := req.GetCapacityRange().GetLimitBytes(); lim > 0 && lv.Status.CurrentSize.Value() > lim {
		return nil, status.Errorf(codes.OutOfRange, "the volume is %d bytes after rounding to whole extents, over limit_bytes %d", lv.Status.CurrentSize.Value(), lim)
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           lv.Name,
		CapacityBytes:      lv.Status.CurrentSize.Value(),
		VolumeContext:      map[string]string{thinlvmv1.DeviceClassParameter: lv.Spec.DeviceClass},
		ContentSource:      req.GetVolumeContentSource(),
		AccessibleTopology: []*csi.Topology{{Segments: map[string]string{thinlvmv1.TopologyKey: lv.Spec.NodeName}}},
	}}, nil
}

// DeleteVolume implements csi.ControllerServer. An absent volume is done.
func (s *ControllerServer) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	return &csi.DeleteVolumeResponse{}, s.delete(ctx, req.GetVolumeId(), thinlvmv1.RoleVolume)
}

// ControllerExpandVolume implements csi.ControllerServer.
func (s *ControllerServer) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity_range is required")
	}
	want, err := size(req.GetCapacityRange(), 0)
	if err != nil {
		return nil, err
	}
	lv, err := s.getLV(ctx, req.GetVolumeId())
	if apierrors.IsNotFound(err) || err == nil && isSnapshot(lv) {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if err != nil {
		return nil, kubestatus.Errorf(err, "get LogicalVolume %s", req.GetVolumeId())
	}
	nodeExpansion := req.GetVolumeCapability().GetBlock() == nil
	if lv.Spec.Size.Value() < want {
		patch := client.MergeFrom(lv.DeepCopy())
		lv.Spec.Size = *resource.NewQuantity(want, resource.BinarySI)
		if err := s.Client.Patch(ctx, lv, patch); err != nil {
			return nil, kubestatus.Errorf(err, "grow LogicalVolume %s", lv.Name)
		}
	}
	lv, err = s.waitReady(ctx, req.GetVolumeId(), func(l *thinlvmv1.LogicalVolume) bool {
		return ready(l) && l.Status.CurrentSize.Value() >= want
	}, nil)
	if err != nil {
		return nil, err
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: lv.Status.CurrentSize.Value(), NodeExpansionRequired: nodeExpansion}, nil
}

// ValidateVolumeCapabilities implements csi.ControllerServer.
func (s *ControllerServer) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	if _, err := s.getLV(ctx, req.GetVolumeId()); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
		}
		return nil, kubestatus.Errorf(err, "get LogicalVolume %s", req.GetVolumeId())
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
	}}, nil
}

// GetCapacity implements csi.ControllerServer: the available bytes of the
// device class on the topology segment's node, from its LVMNode (read by
// name: the provisioner's capacity tracking asks once per node and class);
// without a segment, the sum over all nodes.
func (s *ControllerServer) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	class := req.GetParameters()[thinlvmv1.DeviceClassParameter]
	var nodes []thinlvmv1.LVMNode
	if want := topologyNode(req.GetAccessibleTopology()); want != "" {
		node := thinlvmv1.LVMNode{}
		if err := s.Client.Get(ctx, types.NamespacedName{Name: want}, &node); err == nil {
			nodes = append(nodes, node)
		} else if !apierrors.IsNotFound(err) {
			return nil, kubestatus.Errorf(err, "get LVMNode %s", want)
		}
	} else {
		list := &thinlvmv1.LVMNodeList{}
		if err := s.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, kubestatus.Errorf(err, "list LVMNodes")
		}
		nodes = list.Items
	}
	var total, largest int64
	for i := range nodes {
		if dc := nodes[i].Status.DeviceClass(class); dc != nil {
			total = sizes.Add(total, dc.Available.Value())
			largest = max(largest, dc.Available.Value())
		}
	}
	return &csi.GetCapacityResponse{AvailableCapacity: total, MaximumVolumeSize: wrapInt64(largest)}, nil
}

// CreateSnapshot implements csi.ControllerServer: a read-only thin
// snapshot on the source's node.
func (s *ControllerServer) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	switch {
	case req.GetName() == "":
		return nil, status.Error(codes.InvalidArgument, "name is required")
	case req.GetSourceVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "source_volume_id is required")
	}
	if err := checkParameters(req.GetParameters()); err != nil {
		return nil, err
	}
	name := thinlvmv1.ObjectName("snap", req.GetName())
	lv, err := s.getLV(ctx, name)
	switch {
	case err == nil:
		if err := stillDeleting(lv); err != nil {
			return nil, err
		}
		if !isSnapshot(lv) || snapshotSource(lv) != req.GetSourceVolumeId() {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %s exists with another source", req.GetName())
		}
	case !apierrors.IsNotFound(err):
		return nil, kubestatus.Errorf(err, "get LogicalVolume %s", name)
	default:
		src, err := s.getLV(ctx, req.GetSourceVolumeId())
		if apierrors.IsNotFound(err) || err == nil && isSnapshot(src) {
			return nil, status.Errorf(codes.NotFound, "source volume %s not found", req.GetSourceVolumeId())
		}
		if err != nil {
			return nil, kubestatus.Errorf(err, "get source %s", req.GetSourceVolumeId())
		}
		if err := s.refuseThick(ctx, src); err != nil {
			return nil, err
		}
		lv = &thinlvmv1.LogicalVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: thinlvmv1.LogicalVolumeSpec{Name: req.GetName(), NodeName: src.Spec.NodeName, DeviceClass: src.Spec.DeviceClass,
				Size: src.Spec.Size, Source: &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: src.Name},
				AccessType: thinlvmv1.AccessReadOnly, Role: thinlvmv1.RoleSnapshot},
		}
		if err := s.Client.Create(ctx, lv); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, kubestatus.Errorf(err, "create LogicalVolume %s", name)
		}
	}
	lv, err = s.waitReady(ctx, name, ready, nil)
	if err != nil {
		if status.Code(err) != codes.DeadlineExceeded && lv != nil {
			_ = s.Client.Delete(ctx, lv)
		}
		return nil, err
	}
	return &csi.CreateSnapshotResponse{Snapshot: toSnapshot(lv)}, nil
}

// refuseThick refuses a snapshot of a volume whose device class is thick
// on its node (its LVMNode says so): a thick LV has no thin snapshot, and
// nothing is made for it.
func (s *ControllerServer) refuseThick(ctx context.Context, src *thinlvmv1.LogicalVolume) error {
	ln := &thinlvmv1.LVMNode{}
	if err := s.Client.Get(ctx, types.NamespacedName{Name: src.Spec.NodeName}, ln); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // the node agent refuses it then
		}
		return kubestatus.Errorf(err, "get LVMNode %s", src.Spec.NodeName)
	}
	if dc := ln.Status.DeviceClass(src.Spec.DeviceClass); dc != nil && dc.Type == thinlvmv1.DeviceClassThick {
		return status.Errorf(codes.FailedPrecondition, "volume %s is in device class %s, which is thick: thick volumes have no snapshots (clone the volume instead, which copies it)",
			src.Name, dc.Name)
	}
	return nil
}

// DeleteSnapshot implements csi.ControllerServer. An absent snapshot is
// done.
func (s *ControllerServer) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot_id is required")
	}
	return &csi.DeleteSnapshotResponse{}, s.delete(ctx, req.GetSnapshotId(), thinlvmv1.RoleSnapshot)
}

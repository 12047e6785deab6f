package csi

import (
	"context"
	"sort"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/kubestatus"
)

func toSnapshot(lv *thinlvmv1.LogicalVolume) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId: lv.Name, SourceVolumeId: snapshotSource(lv), SizeBytes: lv.Status.CurrentSize.Value(),
		CreationTime: timestamppb.New(lv.CreationTimestamp.Time), ReadyToUse: true,
	}
}

// ListSnapshots implements csi.ControllerServer, in name order, paged by an
// index token. It keeps the LogicalVolumes whose spec.role is Snapshot: a
// label selector would let anyone who may label an object decide what is a
// snapshot. A snapshot_id (the snapshotter's look-up of a pre-provisioned
// snapshot) is read by its name; otherwise every LogicalVolume in the
// cache is walked, without copying them.
func (s *ControllerServer) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	var lvs []thinlvmv1.LogicalVolume
	if id := req.GetSnapshotId(); id != "" {
		lv, err := s.getLV(ctx, id)
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, kubestatus.Errorf(err, "get LogicalVolume %s", id)
		}
		if err == nil {
			lvs = append(lvs, *lv)
		}
	} else {
		list := &thinlvmv1.LogicalVolumeList{}
		if err := s.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, kubestatus.Errorf(err, "list snapshots")
		}
		lvs = list.Items
	}
	var snaps []*csi.Snapshot
	for i := range lvs {
		lv := &lvs[i]
		if !isSnapshot(lv) || !ready(lv) || !lv.DeletionTimestamp.IsZero() {
			continue
		}
		if id := req.GetSnapshotId(); id != "" && lv.Name != id {
			continue
		}
		if src := req.GetSourceVolumeId(); src != "" && snapshotSource(lv) != src {
			continue
		}
		snaps = append(snaps, toSnapshot(lv))
	}
	sort.Slice(snaps, func(i, j int) bool { return snaps[i].SnapshotId < snaps[j].SnapshotId })
	snaps, next, err := page(snaps, req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	resp := &csi.ListSnapshotsResponse{NextToken: next}
	for _, sn := range snaps {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: sn})
	}
	return resp, nil
}

// ListVolumes implements csi.ControllerServer: the volumes (not the
// snapshots) that exist, Ready or not, in name order, paged by an index
// token, so that an operator sees what was made and what leaked.
func (s *ControllerServer) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	list := &thinlvmv1.LogicalVolumeList{}
	if err := s.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, kubestatus.Errorf(err, "list volumes")
	}
	var vols []*csi.Volume
	for i := range list.Items {
		lv := &list.Items[i]
		if isSnapshot(lv) || !lv.DeletionTimestamp.IsZero() {
			continue
		}
		v := &csi.Volume{
			VolumeId:           lv.Name,
			CapacityBytes:      lv.Spec.Size.Value(),
			VolumeContext:      map[string]string{thinlvmv1.DeviceClassParameter: lv.Spec.DeviceClass},
			AccessibleTopology: []*csi.Topology{{Segments: map[string]string{thinlvmv1.TopologyKey: lv.Spec.NodeName}}},
		}
		if lv.Status.CurrentSize != nil {
			v.CapacityBytes = lv.Status.CurrentSize.Value()
		}
		vols = append(vols, v)
	}
	sort.Slice(vols, func(i, j int) bool { return vols[i].VolumeId < vols[j].VolumeId })
	vols, next, err := page(vols, req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	resp := &csi.ListVolumesResponse{NextToken: next}
	for _, v := range vols {
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{Volume: v})
	}
	return resp, nil
}

// page cuts one page from a sorted list: the token is the index to start
// at (Aborted when it is not one), max 0 means all; next is "" on the last
// page.
func page[T any](items []T, token string, maxEntries int32) (out []T, next string, err error) {
	start := 0
	if token != "" {
		n, err := strconv.Atoi(token)
		if err != nil || n < 0 || n > len(items) {
			return nil, "", status.Errorf(codes.Aborted, "starting_token %q is not valid", token)
		}
		start = n
	}
	if maxEntries < 0 {
		return nil, "", status.Errorf(codes.InvalidArgument, "max_entries %d is negative", maxEntries)
	}
	end := len(items)
	if m := int(maxEntries); m > 0 && start+m < end {
		end = start + m
		next = strconv.Itoa(end)
	}
	return items[start:end], next, nil
}

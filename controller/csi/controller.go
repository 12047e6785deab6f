package csi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/thinlvm/thinlvm/api/sizes"
	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/api/volcap"
	"github.com/thinlvm/thinlvm/internal/kubestatus"
)

// Sizes.
const (
	defaultSize = 1 << 30
	minSize     = 1 << 20
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

func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	for _, c := range caps {
		if err := volcap.Check(c); err != nil {
			return err
		}
	}
	return nil
}

// provisionerPrefix marks the parameters the CSI sidecars read or add
// themselves (fstype, secrets, the claim's name with
// --extra-create-metadata): they are not thinlvm's to refuse.
const provisionerPrefix = "csi.storage.k8s.io/"

// checkParameters refuses parameters thinlvm does not know: a misspelt key
// must fail the claim, not provision into the default class.
func checkParameters(params map[string]string, known ...string) error {
	var unknown []string
	for k := range params {
		if !strings.HasPrefix(k, provisionerPrefix) && !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	if len(known) == 0 {
		return status.Errorf(codes.InvalidArgument, "unknown parameters %q: none are accepted here", unknown)
	}
	return status.Errorf(codes.InvalidArgument, "unknown parameters %q: the known ones are %q", unknown, known)
}

// size picks the volume size from a capacity range, at least floor (the
// smallest its file system can be made at, volcap.MinBytes).
func size(r *csi.CapacityRange, floor int64) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || lim < 0 {
		return 0, status.Error(codes.InvalidArgument, "capacity_range bytes must not be negative")
	}
	if lim > 0 && req > lim {
		return 0, status.Errorf(codes.InvalidArgument, "required_bytes %d is over limit_bytes %d", req, lim)
	}
	n := req
	if n == 0 {
		n = min(defaultSize, max(lim, minSize))
		if lim == 0 {
			n = defaultSize
		}
	}
	n = max(n, minSize)
	if lim > 0 && n > lim {
		return 0, status.Errorf(codes.OutOfRange, "the smallest volume (%d bytes) is over limit_bytes %d", n, lim)
	}
	if n < floor {
		if lim > 0 && floor > lim {
			return 0, status.Errorf(codes.OutOfRange, "xfs needs at least %d bytes (mkfs.xfs refuses smaller), over limit_bytes %d", floor, lim)
		}
		n = floor
	}
	return n, nil
}

func (s *ControllerServer) waitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	t := s.Timeout
	if t == 0 {
		t = 2 * time.Minute
	}
	return context.WithTimeout(ctx, t)
}

func (s *ControllerServer) getLV(ctx context.Context, name string) (*thinlvmv1.LogicalVolume, error) {
	lv := &thinlvmv1.LogicalVolume{}
	if err := s.Client.Get(ctx, types.NamespacedName{Name: name}, lv); err != nil {
		return nil, err
	}
	return lv, nil
}

// watch subscribes to the changes of the LogicalVolume name, before a
// wait's first read.
func (s *ControllerServer) watch(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if s.changes == nil {
		return nil, nil, status.Error(codes.Internal, "the controller does not watch LogicalVolumes: SetupWithManager was not called")
	}
	wake, stop, err := s.changes.watch(ctx, name)
	if err != nil {
		return nil, nil, kubestatus.Errorf(err, "watch LogicalVolume %s", name)
	}
	return wake, stop, nil
}

// waitReady waits until the node agent made the LogicalVolume (Ready for
// the current generation) or refused it (Failed, whose reason thinlvmv1.Failure maps
// to the call's code). done tells whether the object is where the caller
// wants it; pending, when set, sees each state short of both. It reads the
// object when the informer reports it changed.
func (s *ControllerServer) waitReady(ctx context.Context, name string, done func(*thinlvmv1.LogicalVolume) bool, pending func(*thinlvmv1.LogicalVolume)) (*thinlvmv1.LogicalVolume, error) {
	ctx, cancel := s.waitContext(ctx)
	defer cancel()
	wake, stop, err := s.watch(ctx, name)
	if err != nil {
		return nil, err
	}
	defer stop()
	seen := false
	for {
		lv, err := s.getLV(ctx, name)
		if err == nil {
			seen = true
		} else if seen && apierrors.IsNotFound(err) {
			// Deleted under the wait (a node cleanup, an earlier attempt's
			// refusal): nobody will make it Ready.
			return nil, status.Errorf(codes.Aborted, "LogicalVolume %s was deleted while waiting for its node; retry", name)
		}
		if err == nil && lv.Status.ObservedGeneration == lv.Generation {
			if done(lv) {
				return lv, nil
			}
			if c := meta.FindStatusCondition(lv.Status.Conditions, thinlvmv1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
				code, _ := thinlvmv1.Failure(c.Reason)
				return lv, status.Error(code, c.Message)
			}
			if pending != nil {
				pending(lv)
			}
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, kubestatus.Errorf(err, "get LogicalVolume %s", name)
		}
		select {
		case <-ctx.Done():
			return nil, status.Errorf(codes.DeadlineExceeded, "LogicalVolume %s: the node agent has not reported yet", name)
		case <-wake:
		}
	}
}

// stillDeleting refuses to wait on a LogicalVolume that an earlier,
// refused attempt deleted and that its node has not removed yet (its agent
// or lvmd is down): it will go, and waiting for it to become Ready would
// only run out the caller's deadline. Aborted: the provisioner retries,
// and the retry after it is gone makes a new one.
func stillDeleting(lv *thinlvmv1.LogicalVolume) error {
	if lv.DeletionTimestamp.IsZero() {
		return nil
	}
	return status.Errorf(codes.Aborted, "LogicalVolume %s is still being deleted by node %s after an earlier attempt; retry once it is gone", lv.Name, lv.Spec.NodeName)
}

func ready(lv *thinlvmv1.LogicalVolume) bool {
	return meta.IsStatusConditionTrue(lv.Status.Conditions, thinlvmv1.ConditionReady) && lv.Status.CurrentSize != nil
}

// waitGone waits until the LogicalVolume is deleted (its agent removed the
// LV and the finalizer).
func (s *ControllerServer) waitGone(ctx context.Context, name string) error {
	ctx, cancel := s.waitContext(ctx)
	defer cancel()
	wake, stop, err := s.watch(ctx, name)
	if err != nil {
		return err
	}
	defer stop()
	for {
		_, err := s.getLV(ctx, name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return status.Errorf(codes.DeadlineExceeded, "LogicalVolume %s: its node agent has not removed the LV yet", name)
		case <-wake:
		}
	}
}

func topologyNode(t *csi.Topology) string { return t.GetSegments()[thinlvmv1.TopologyKey] }

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

	var source *thinlvmv1.VolumeSource
	var sourceNode string
	if cs := req.GetVolumeContentSource(); cs != nil {
		var kind thinlvmv1.SourceKind
		var id string
		switch {
		case cs.GetSnapshot() != nil:
			kind, id = thinlvmv1.SourceSnapshot, cs.GetSnapshot().GetSnapshotId()
		case cs.GetVolume() != nil:
			kind, id = thinlvmv1.SourceVolume, cs.GetVolume().GetVolumeId()
		default:
			return nil, status.Error(codes.InvalidArgument, "volume_content_source has neither a snapshot nor a volume")
		}
		src, err := s.getLV(ctx, id)
		if apierrors.IsNotFound(err) || err == nil && isSnapshot(src) != (kind == thinlvmv1.SourceSnapshot) {
			return nil, status.Errorf(codes.NotFound, "source %s %s not found", kind, id)
		}
		if err != nil {
			return nil, kubestatus.Errorf(err, "get source %s", id)
		}
		if want < src.Spec.Size.Value() {
			if req.GetCapacityRange().GetLimitBytes() > 0 && req.GetCapacityRange().GetLimitBytes() < src.Spec.Size.Value() {
				return nil, status.Errorf(codes.OutOfRange, "source %s is %d bytes, over limit_bytes %d", id, src.Spec.Size.Value(), req.GetCapacityRange().GetLimitBytes())
			}
			want = src.Spec.Size.Value()
		}
		if class != "" && class != src.Spec.DeviceClass {
			return nil, status.Errorf(codes.InvalidArgument, "source %s is in device class %q, not %q", id, src.Spec.DeviceClass, class)
		}
		class = src.Spec.DeviceClass
		source, sourceNode = &thinlvmv1.VolumeSource{Kind: kind, Name: id}, src.Spec.NodeName
	}
	var image *thinlvmv1.GoldenImage
	// A clone or restore in a golden class is a thin snapshot of its
	// source, which already holds the image's blocks (KubeVirt clones and
	// restores VM disks in their own class): the class's image is not used.
	var imageName, from string
	if source == nil {
		if imageName, from, err = s.goldenImageFor(ctx, req.GetParameters(), name); err != nil {
			return nil, err
		}
	}
	if imageName != "" {
		image = &thinlvmv1.GoldenImage{}
		if err := s.Client.Get(ctx, types.NamespacedName{Name: imageName}, image); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, status.Errorf(codes.NotFound, "GoldenImage %s (%s) not found", imageName, from)
			}
			return nil, kubestatus.Errorf(err, "get GoldenImage %s", imageName)
		}
		if class != "" && class != image.Spec.DeviceClass {
			return nil, status.Errorf(codes.InvalidArgument, "GoldenImage %s (%s) is in device class %q, the StorageClass asks for %q", imageName, from, image.Spec.DeviceClass, class)
		}
		size := image.BaseSize()
		if size.IsZero() {
			// Taken from a volume the controller has not resolved yet: the
			// provisioner asks again.
			return nil, status.Errorf(codes.Unavailable, "GoldenImage %s: its source volume is not resolved yet", imageName)
		}
		if base := size.Value(); want < base {
			if lim := req.GetCapacityRange().GetLimitBytes(); lim > 0 && lim < base {
				return nil, status.Errorf(codes.OutOfRange, "GoldenImage %s is %d bytes, over limit_bytes %d", imageName, base, lim)
			}
			want = base
		}
		class = image.Spec.DeviceClass
		source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceGoldenImage, Name: imageName}
	}

	lv, err := s.getLV(ctx, name)
	switch {
	case err == nil:
		if err := stillDeleting(lv); err != nil {
			return nil, err
		}
		if err := compatible(lv, want, req.GetCapacityRange().GetLimitBytes(), class, source); err != nil {
			return nil, err
		}
	case !apierrors.IsNotFound(err):
		return nil, kubestatus.Errorf(err, "get LogicalVolume %s", name)
	default:
		node, err := s.pickNode(ctx, req.GetAccessibilityRequirements(), class, want, sourceNode, image)
		if err != nil {
			return nil, err
		}
		lv = &thinlvmv1.LogicalVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: thinlvmv1.LogicalVolumeSpec{Name: req.GetName(), NodeName: node, DeviceClass: class,
				Size: *resource.NewQuantity(want, resource.BinarySI), Source: source, AccessType: thinlvmv1.AccessReadWrite,
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

// goldenImageFor names the GoldenImage a new volume without a content
// source is made from, "" for none, and says where the name came from:
//
//   - the thinlvm.io/populate-golden-image annotation of the claim the
//     provisioner names (--extra-create-metadata), honoured only for a
//     claim in the controller's own namespace: the populator's prime
//     claim, which no tenant can make;
//   - the StorageClass's golden-image parameter;
//   - the GoldenImage the class's golden-image-channel parameter points at
//     now; a repeated call for a volume already made keeps the GoldenImage
//     its LogicalVolume records, wherever the channel moved since.
func (s *ControllerServer) goldenImageFor(ctx context.Context, params map[string]string, lvName string) (name, from string, err error) {
	if ns, claim := params[pvcNamespaceParameter], params[pvcNameParameter]; s.Namespace != "" && ns == s.Namespace && claim != "" {
		reader := s.APIReader
		if reader == nil {
			reader = s.Client
		}
		pvc := &corev1.PersistentVolumeClaim{}
		if err := reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: claim}, pvc); err != nil {
			if apierrors.IsNotFound(err) {
				return "", "", status.Errorf(codes.NotFound, "claim %s/%s not found: a volume of the controller's namespace is made for a claim that exists", ns, claim)
			}
			return "", "", kubestatus.Errorf(err, "get claim %s/%s", ns, claim)
		}
		if img := pvc.Annotations[thinlvmv1.PopulateGoldenImageAnnotation]; img != "" {
			return img, fmt.Sprintf("annotation %s of claim %s/%s", thinlvmv1.PopulateGoldenImageAnnotation, ns, claim), nil
		}
	}
	if img := params[thinlvmv1.GoldenImageParameter]; img != "" {
		return img, "StorageClass parameter " + thinlvmv1.GoldenImageParameter, nil
	}
	chName := params[thinlvmv1.GoldenImageChannelParameter]
	if chName == "" {
		return "", "", nil
	}
	from = fmt.Sprintf("GoldenImageChannel %s of StorageClass parameter %s", chName, thinlvmv1.GoldenImageChannelParameter)
	if lv, err := s.getLV(ctx, lvName); err == nil && lv.Spec.Source != nil && lv.Spec.Source.Kind == thinlvmv1.SourceGoldenImage {
		return lv.Spec.Source.Name, from, nil
	} else if err != nil && !apierrors.IsNotFound(err) {
		return "", "", kubestatus.Errorf(err, "get LogicalVolume %s", lvName)
	}
	// From the API server, not the cache: a claim made right after its
	// channel moved is made from the new version, whichever event the
	// cache would have delivered first.
	reader := s.APIReader
	if reader == nil {
		reader = s.Client
	}
	ch := &thinlvmv1.GoldenImageChannel{}
	if err := reader.Get(ctx, types.NamespacedName{Name: chName}, ch); err != nil {
		if apierrors.IsNotFound(err) {
			return "", "", status.Errorf(codes.NotFound, "GoldenImageChannel %s (StorageClass parameter %s) not found", chName, thinlvmv1.GoldenImageChannelParameter)
		}
		return "", "", kubestatus.Errorf(err, "get GoldenImageChannel %s", chName)
	}
	return ch.Spec.GoldenImage, from, nil
}

// isSnapshot tells whether a LogicalVolume is a CSI snapshot. Only the
// immutable spec.role decides, never a label: an empty role is the API's
// default, Volume.
func isSnapshot(lv *thinlvmv1.LogicalVolume) bool { return lv.Spec.Role == thinlvmv1.RoleSnapshot }

// snapshotSource is the volume ID a snapshot was taken of: its
// spec.source, which the API server keeps immutable.
func snapshotSource(lv *thinlvmv1.LogicalVolume) string {
	if src := lv.Spec.Source; src != nil && src.Kind == thinlvmv1.SourceVolume {
		return src.Name
	}
	return ""
}

// compatible tells whether an existing LogicalVolume answers a repeated
// CreateVolume.
func compatible(lv *thinlvmv1.LogicalVolume, want, limit int64, class string, source *thinlvmv1.VolumeSource) error {
	have := lv.Spec.Size.Value()
	switch {
	case isSnapshot(lv):
		return status.Errorf(codes.AlreadyExists, "%s is a snapshot", lv.Name)
	case have < want || limit > 0 && have > limit:
		return status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes", lv.Name, have)
	case lv.Spec.DeviceClass != class:
		return status.Errorf(codes.AlreadyExists, "volume %s exists in device class %q", lv.Name, lv.Spec.DeviceClass)
	case (lv.Spec.Source == nil) != (source == nil) || source != nil && *lv.Spec.Source != *source:
		return status.Errorf(codes.AlreadyExists, "volume %s exists with another content source", lv.Name)
	}
	return nil
}

// DeleteVolume implements csi.ControllerServer. An absent volume is done.
func (s *ControllerServer) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	return &csi.DeleteVolumeResponse{}, s.delete(ctx, req.GetVolumeId(), thinlvmv1.RoleVolume)
}

// delete deletes the LogicalVolume id if it has role and waits until it is
// gone.
func (s *ControllerServer) delete(ctx context.Context, id string, role thinlvmv1.VolumeRole) error {
	lv, err := s.getLV(ctx, id)
	if apierrors.IsNotFound(err) || err == nil && isSnapshot(lv) != (role == thinlvmv1.RoleSnapshot) {
		return nil // absent, or an ID of the other role: no such volume
	}
	if err != nil {
		return kubestatus.Errorf(err, "get LogicalVolume %s", id)
	}
	if err := s.Client.Delete(ctx, lv); err != nil && !apierrors.IsNotFound(err) {
		return kubestatus.Errorf(err, "delete LogicalVolume %s", id)
	}
	return s.waitGone(ctx, id)
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

func toSnapshot(lv *thinlvmv1.LogicalVolume) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId: lv.Name, SourceVolumeId: snapshotSource(lv), SizeBytes: lv.Status.CurrentSize.Value(),
		CreationTime: timestamppb.New(lv.CreationTimestamp.Time), ReadyToUse: true,
	}
}

// DeleteSnapshot implements csi.ControllerServer. An absent snapshot is
// done.
func (s *ControllerServer) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot_id is required")
	}
	return &csi.DeleteSnapshotResponse{}, s.delete(ctx, req.GetSnapshotId(), thinlvmv1.RoleSnapshot)
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

package csi

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/container-storage-interface/spec/lib/go/csi"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/kubestatus"
)

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
	img, chName := thinlvmv1.GoldenImageOf(nil, params)
	if img != "" {
		return img, "StorageClass parameter " + thinlvmv1.GoldenImageParameter, nil
	}
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

// origin is what a new volume is made from: its source (nil for an empty
// volume), the node that holds a clone's or restore's source, the
// GoldenImage of a golden class, and the size and device class these
// impose on it.
type origin struct {
	source     *thinlvmv1.VolumeSource
	sourceNode string
	image      *thinlvmv1.GoldenImage
	size       int64
	class      string
}

// origin resolves a CreateVolume's content source, or else the golden
// image its class or prime claim names. want and class are the request's;
// a source makes the volume at least its size, in its class.
func (s *ControllerServer) origin(ctx context.Context, req *csi.CreateVolumeRequest, name string, want int64, class string) (origin, error) {
	if cs := req.GetVolumeContentSource(); cs != nil {
		return s.contentSource(ctx, cs, req.GetCapacityRange().GetLimitBytes(), want, class)
	}
	// A clone or restore in a golden class is a thin snapshot of its
	// source, which already holds the image's blocks (KubeVirt clones and
	// restores VM disks in their own class): the class's image is used
	// only for a volume without a content source.
	imageName, from, err := s.goldenImageFor(ctx, req.GetParameters(), name)
	if err != nil || imageName == "" {
		return origin{size: want, class: class}, err
	}
	image := &thinlvmv1.GoldenImage{}
	if err := s.Client.Get(ctx, types.NamespacedName{Name: imageName}, image); err != nil {
		if apierrors.IsNotFound(err) {
			return origin{}, status.Errorf(codes.NotFound, "GoldenImage %s (%s) not found", imageName, from)
		}
		return origin{}, kubestatus.Errorf(err, "get GoldenImage %s", imageName)
	}
	if class != "" && class != image.Spec.DeviceClass {
		return origin{}, status.Errorf(codes.InvalidArgument, "GoldenImage %s (%s) is in device class %q, the StorageClass asks for %q", imageName, from, image.Spec.DeviceClass, class)
	}
	size := image.BaseSize()
	if size.IsZero() {
		// Taken from a volume the controller has not resolved yet: the
		// provisioner asks again.
		return origin{}, status.Errorf(codes.Unavailable, "GoldenImage %s: its source volume is not resolved yet", imageName)
	}
	if base := size.Value(); want < base {
		if lim := req.GetCapacityRange().GetLimitBytes(); lim > 0 && lim < base {
			return origin{}, status.Errorf(codes.OutOfRange, "GoldenImage %s is %d bytes, over limit_bytes %d", imageName, base, lim)
		}
		want = base
	}
	return origin{source: &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceGoldenImage, Name: imageName},
		image: image, size: want, class: image.Spec.DeviceClass}, nil
}

// contentSource resolves a clone's or restore's source volume or snapshot.
func (s *ControllerServer) contentSource(ctx context.Context, cs *csi.VolumeContentSource, limit, want int64, class string) (origin, error) {
	var kind thinlvmv1.SourceKind
	var id string
	switch {
	case cs.GetSnapshot() != nil:
		kind, id = thinlvmv1.SourceSnapshot, cs.GetSnapshot().GetSnapshotId()
	case cs.GetVolume() != nil:
		kind, id = thinlvmv1.SourceVolume, cs.GetVolume().GetVolumeId()
	default:
		return origin{}, status.Error(codes.InvalidArgument, "volume_content_source has neither a snapshot nor a volume")
	}
	src, err := s.getLV(ctx, id)
	if apierrors.IsNotFound(err) || err == nil && isSnapshot(src) != (kind == thinlvmv1.SourceSnapshot) {
		return origin{}, status.Errorf(codes.NotFound, "source %s %s not found", kind, id)
	}
	if err != nil {
		return origin{}, kubestatus.Errorf(err, "get source %s", id)
	}
	if want < src.Spec.Size.Value() {
		if limit > 0 && limit < src.Spec.Size.Value() {
			return origin{}, status.Errorf(codes.OutOfRange, "source %s is %d bytes, over limit_bytes %d", id, src.Spec.Size.Value(), limit)
		}
		want = src.Spec.Size.Value()
	}
	if class != "" && class != src.Spec.DeviceClass {
		return origin{}, status.Errorf(codes.InvalidArgument, "source %s is in device class %q, not %q", id, src.Spec.DeviceClass, class)
	}
	return origin{source: &thinlvmv1.VolumeSource{Kind: kind, Name: id}, sourceNode: src.Spec.NodeName,
		size: want, class: src.Spec.DeviceClass}, nil
}

package transfer

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/kubestatus"
	lvmdpb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/directio"
	"github.com/thinlvm/thinlvm/node/lvmd"
	pb "github.com/thinlvm/thinlvm/node/transfer/proto"
)

// ChunkSize is the most data one Chunk carries.
const ChunkSize = 1 << 20

// castagnoli is the CRC-32C table of the chunks' checksums.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Server serves the data of this node's volumes to the agents of the nodes
// where their clones and restores are made.
type Server struct {
	pb.UnimplementedTransferServer
	// Reader reads LogicalVolumes and GoldenImages; read past any cache,
	// since a target may have been made a moment ago.
	Reader   client.Reader
	LVMD     lvmd.Client
	NodeName string
	Log      logr.Logger
	// SweepInterval is how often snapshots whose copy ended are removed;
	// default one minute.
	SweepInterval time.Duration
	// MaxBaseStreams is how many copies of golden bases the server sends
	// at once; more are refused with ResourceExhausted, and their callers
	// copy from another node or wait. Default 2.
	MaxBaseStreams int

	baseOnce    sync.Once
	baseStreams chan struct{}
}

var _ pb.TransferServer = (*Server)(nil)

// grant is what an authorized call may read: the target being made on the
// caller's node and its source here, or this node's base of an image.
type grant struct {
	caller string
	// key names the copy's snapshot: the target's name, or
	// baseKey(image, caller).
	key            string
	target, source *thinlvmv1.LogicalVolume
	image          *thinlvmv1.GoldenImage
}

// class is the device class of what the grant reads.
func (g *grant) class() string {
	if g.image != nil {
		return g.image.Spec.DeviceClass
	}
	return g.source.Spec.DeviceClass
}

// baseKeyPrefix starts the key of a base's copy: "base:<image>:<caller>".
const baseKeyPrefix = "base:"

func baseKey(image, caller string) string { return baseKeyPrefix + image + ":" + caller }

// authorize authenticates the caller (authenticate) and checks what it asks for:
// target, a LogicalVolume of the caller's node whose source is a
// LogicalVolume of this node; or base, a GoldenImage whose base this node
// holds (any node agent may copy a base: every node may make one from the
// image's source anyway). Nothing else is ever served.
func (s *Server) authorize(ctx context.Context, target string, base *pb.BaseRef) (*grant, error) {
	switch {
	case base != nil && target != "":
		return nil, status.Error(codes.InvalidArgument, "target and base are exclusive")
	case base != nil && (base.GetGoldenImage() == "" || base.GetUid() == ""):
		return nil, status.Error(codes.InvalidArgument, "base needs golden_image and uid")
	case base == nil && target == "":
		return nil, status.Error(codes.InvalidArgument, "target is required")
	}
	caller, err := s.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	if base != nil {
		gi := &thinlvmv1.GoldenImage{}
		if err := s.Reader.Get(ctx, types.NamespacedName{Name: base.GetGoldenImage()}, gi); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, status.Errorf(codes.NotFound, "GoldenImage %s not found", base.GetGoldenImage())
			}
			return nil, kubestatus.Errorf(err, "get GoldenImage %s", base.GetGoldenImage())
		}
		if string(gi.UID) != base.GetUid() || !gi.DeletionTimestamp.IsZero() {
			return nil, status.Errorf(codes.NotFound, "GoldenImage %s of uid %s not found", base.GetGoldenImage(), base.GetUid())
		}
		return &grant{caller: caller, key: baseKey(gi.Name, caller), image: gi}, nil
	}
	g := &grant{caller: caller, key: target, target: &thinlvmv1.LogicalVolume{}}
	if err := s.Reader.Get(ctx, types.NamespacedName{Name: target}, g.target); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, status.Errorf(codes.NotFound, "LogicalVolume %s not found", target)
		}
		return nil, kubestatus.Errorf(err, "get LogicalVolume %s", target)
	}
	if g.target.Spec.NodeName != caller {
		return nil, status.Errorf(codes.PermissionDenied, "LogicalVolume %s is made on node %s, not on the caller's node %s", target, g.target.Spec.NodeName, caller)
	}
	src := g.target.Spec.Source
	if src == nil || (src.Kind != thinlvmv1.SourceVolume && src.Kind != thinlvmv1.SourceSnapshot) {
		return nil, status.Errorf(codes.PermissionDenied, "LogicalVolume %s is not a clone or restore", target)
	}
	g.source = &thinlvmv1.LogicalVolume{}
	if err := s.Reader.Get(ctx, types.NamespacedName{Name: src.Name}, g.source); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, status.Errorf(codes.NotFound, "source LogicalVolume %s not found", src.Name)
		}
		return nil, kubestatus.Errorf(err, "get LogicalVolume %s", src.Name)
	}
	if g.source.Spec.NodeName != s.NodeName {
		return nil, status.Errorf(codes.PermissionDenied, "source LogicalVolume %s is on node %s, not on %s", src.Name, g.source.Spec.NodeName, s.NodeName)
	}
	if (g.source.Spec.Role == thinlvmv1.RoleSnapshot) != (src.Kind == thinlvmv1.SourceSnapshot) {
		return nil, status.Errorf(codes.PermissionDenied, "source LogicalVolume %s is not a %s", src.Name, src.Kind)
	}
	return g, nil
}

// snapshot is the point-in-time snapshot of g's source, made on the first
// Open: by name, so that every later call (and a restarted server) finds it.
func (s *Server) snapshot(ctx context.Context, g *grant, create bool) (*lvmdpb.LogicalVolume, error) {
	name := thinlvmv1.TransferLVName(g.key)
	class := g.class()
	got, err := s.LVMD.GetLV(ctx, &lvmdpb.GetLVRequest{Name: name, DeviceClass: class})
	if err == nil {
		if !slices.Contains(got.GetVolume().GetTags(), thinlvmv1.TransferTagPrefix+g.key) {
			return nil, status.Errorf(codes.FailedPrecondition, "LV %s is not the transfer snapshot of %s", name, g.key)
		}
		return got.GetVolume(), nil
	}
	if status.Code(err) != codes.NotFound {
		return nil, err
	}
	if !create {
		return nil, status.Errorf(codes.FailedPrecondition, "the copy of %s is not open (or its snapshot was removed): Open it again", g.key)
	}
	var srcLV, owner string
	if g.image != nil {
		// A base is read only once sealed: a writable one is still being
		// populated and is never served.
		srcLV, owner = thinlvmv1.BaseLVName(g.image), thinlvmv1.BaseTagPrefix+g.image.Name
	} else {
		if !g.target.DeletionTimestamp.IsZero() || meta.IsStatusConditionTrue(g.target.Status.Conditions, thinlvmv1.ConditionReady) {
			return nil, status.Errorf(codes.FailedPrecondition, "LogicalVolume %s is deleted or made already", g.target.Name)
		}
		// The source's LV is found by its object's identity (name and
		// owner tag), as the reconciler finds it.
		srcLV, owner = thinlvmv1.LVName(g.source), thinlvmv1.OwnerTagPrefix+g.source.Name
	}
	sl, err := s.LVMD.GetLV(ctx, &lvmdpb.GetLVRequest{Name: srcLV, DeviceClass: class})
	switch {
	case status.Code(err) == codes.NotFound && g.image != nil:
		return nil, status.Errorf(codes.NotFound, "node %s holds no base of GoldenImage %s", s.NodeName, g.image.Name)
	case status.Code(err) == codes.NotFound:
		return nil, status.Errorf(codes.NotFound, "the LV of source LogicalVolume %s is not made yet", g.source.Name)
	case err != nil:
		return nil, err
	case !slices.Contains(sl.GetVolume().GetTags(), owner):
		return nil, status.Errorf(codes.FailedPrecondition, "LV %s is not tagged %s", srcLV, owner)
	case g.image != nil && !sl.GetVolume().GetReadOnly():
		return nil, status.Errorf(codes.FailedPrecondition, "the base of GoldenImage %s on node %s is not Ready", g.image.Name, s.NodeName)
	}
	resp, err := s.LVMD.CreateSnapshot(ctx, &lvmdpb.CreateSnapshotRequest{Name: name, DeviceClass: class, SourceName: srcLV,
		ReadOnly: true, Transient: true, Tags: []string{thinlvmv1.TransferTagPrefix + g.key}})
	if err != nil {
		return nil, err
	}
	s.Log.Info("transfer snapshot made", "snapshot", name, "source", srcLV, "copy", g.key, "caller", g.caller)
	return resp.GetVolume(), nil
}

// contentSHA256 is the checksum this node publishes of its Ready base of
// image: the base's LV must be the one its LVMNode names.
func (s *Server) contentSHA256(ctx context.Context, image *thinlvmv1.GoldenImage) (string, error) {
	ln := &thinlvmv1.LVMNode{}
	if err := s.Reader.Get(ctx, types.NamespacedName{Name: s.NodeName}, ln); err != nil {
		if apierrors.IsNotFound(err) {
			// Not published yet (the agent is starting): the caller retries.
			return "", status.Errorf(codes.Unavailable, "node %s has not published its LVMNode yet", s.NodeName)
		}
		return "", kubestatus.Errorf(err, "get LVMNode %s", s.NodeName)
	}
	for _, b := range ln.Status.GoldenBases {
		if b.Name == image.Name && b.LV == thinlvmv1.BaseLVName(image) && b.State == thinlvmv1.GoldenBaseReady && b.ContentSHA256 != "" {
			return b.ContentSHA256, nil
		}
	}
	return "", status.Errorf(codes.FailedPrecondition, "the base of GoldenImage %s on node %s is not Ready", image.Name, s.NodeName)
}

// acquireBase takes one of the server's base streams, or fails with
// ResourceExhausted when all are taken.
func (s *Server) acquireBase() (release func(), err error) {
	s.baseOnce.Do(func() {
		n := s.MaxBaseStreams
		if n <= 0 {
			n = 2
		}
		s.baseStreams = make(chan struct{}, n)
	})
	select {
	case s.baseStreams <- struct{}{}:
		return func() { <-s.baseStreams }, nil
	default:
		return nil, status.Errorf(codes.ResourceExhausted, "node %s sends %d bases already", s.NodeName, cap(s.baseStreams))
	}
}

// base finds the golden base vol descends from: up its chain of origins
// to the LV that carries a base tag, whose GoldenImage still exists with
// that LV's UID. Nil when there is none.
func (s *Server) base(ctx context.Context, vol *lvmdpb.LogicalVolume) (*lvmdpb.LogicalVolume, *thinlvmv1.GoldenImage, error) {
	cur := vol
	for range 64 {
		for _, t := range cur.GetTags() {
			name, ok := strings.CutPrefix(t, thinlvmv1.BaseTagPrefix)
			if !ok {
				continue
			}
			gi := &thinlvmv1.GoldenImage{}
			if err := s.Reader.Get(ctx, types.NamespacedName{Name: name}, gi); err != nil {
				if apierrors.IsNotFound(err) {
					return nil, nil, nil
				}
				return nil, nil, kubestatus.Errorf(err, "get GoldenImage %s", name)
			}
			if thinlvmv1.BaseLVName(gi) != cur.GetName() {
				return nil, nil, nil // the GoldenImage was made again: another base
			}
			return cur, gi, nil
		}
		if cur.GetOrigin() == "" {
			return nil, nil, nil
		}
		got, err := s.LVMD.GetLV(ctx, &lvmdpb.GetLVRequest{Name: cur.GetOrigin(), DeviceClass: cur.GetDeviceClass()})
		if status.Code(err) == codes.NotFound {
			return nil, nil, nil // an origin removed since: no base
		}
		if err != nil {
			return nil, nil, err
		}
		cur = got.GetVolume()
	}
	return nil, nil, nil
}

// Open implements pb.TransferServer.
func (s *Server) Open(ctx context.Context, req *pb.OpenRequest) (*pb.OpenResponse, error) {
	g, err := s.authorize(ctx, req.GetTarget(), req.GetBase())
	if err != nil {
		return nil, err
	}
	var sum string
	if g.image != nil {
		// Refused early when busy: the caller asks another node.
		release, err := s.acquireBase()
		if err != nil {
			return nil, err
		}
		release()
		if sum, err = s.contentSHA256(ctx, g.image); err != nil {
			return nil, err
		}
	}
	snap, err := s.snapshot(ctx, g, true)
	if err != nil {
		return nil, err
	}
	resp := &pb.OpenResponse{SizeBytes: snap.GetSizeBytes(), ContentSha256: sum}
	if g.image != nil {
		return resp, nil
	}
	_, gi, err := s.base(ctx, snap)
	if err != nil {
		return nil, err
	}
	if gi != nil {
		resp.Base = &pb.Base{GoldenImage: gi.Name, Uid: string(gi.UID), Sha256: ImageSHA256(gi)}
	}
	return resp, nil
}

// ImageSHA256 is the checksum a GoldenImage's base was verified against;
// two nodes hold the same base when their bases are of one GoldenImage UID
// and this checksum.
func ImageSHA256(gi *thinlvmv1.GoldenImage) string {
	switch src := gi.Spec.Source; {
	case src.HTTP != nil:
		return src.HTTP.SHA256
	case src.Registry != nil:
		_, digest, _ := strings.Cut(src.Registry.Image, "@sha256:")
		return digest
	}
	return "" // taken from a volume: the UID alone tells
}

// Read implements pb.TransferServer.
func (s *Server) Read(req *pb.ReadRequest, stream pb.Transfer_ReadServer) error {
	ctx := stream.Context()
	g, err := s.authorize(ctx, req.GetTarget(), req.GetBase())
	if err != nil {
		return err
	}
	if g.image != nil {
		if req.GetAgainstBase() {
			return status.Error(codes.InvalidArgument, "a base is copied whole: against_base does not apply")
		}
		release, err := s.acquireBase()
		if err != nil {
			return err
		}
		defer release()
	}
	snap, err := s.snapshot(ctx, g, false)
	if err != nil {
		return err
	}
	delta := &lvmdpb.GetThinDeltaRequest{Name: snap.GetName(), DeviceClass: snap.GetDeviceClass()}
	if req.GetAgainstBase() {
		base, _, err := s.base(ctx, snap)
		if err != nil {
			return err
		}
		if base == nil {
			return status.Errorf(codes.FailedPrecondition, "the source of %s descends from no golden base any more", g.target.Name)
		}
		delta.BaseName = base.GetName()
	}
	ranges, err := s.LVMD.GetThinDelta(ctx, delta)
	if err != nil {
		return err
	}
	plan := &pb.Plan{Ranges: uint32(len(ranges.GetRanges()))}
	from := req.GetFromOffset()
	for _, r := range ranges.GetRanges() {
		plan.TotalBytes += r.GetLengthBytes()
		end := r.GetOffsetBytes() + r.GetLengthBytes()
		plan.DoneBytes += min(end, max(from, r.GetOffsetBytes())) - r.GetOffsetBytes()
	}
	if err := stream.Send(&pb.ReadResponse{Msg: &pb.ReadResponse_Plan{Plan: plan}}); err != nil {
		return err
	}
	dev, err := directio.Open(snap.GetDevicePath(), os.O_RDONLY)
	if err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	defer dev.Close()
	var enc *zstd.Encoder
	if req.GetCompression() == pb.Compression_COMPRESSION_ZSTD {
		if enc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1)); err != nil {
			return status.Errorf(codes.Internal, "zstd: %v", err)
		}
		defer enc.Close()
	}
	buf := directio.Buffer(ChunkSize)
	var out []byte
	skip := 0 // chunks not to try compressing: the last ones did not compress
	for _, r := range ranges.GetRanges() {
		off, end := max(r.GetOffsetBytes(), from), r.GetOffsetBytes()+r.GetLengthBytes()
		for ; off < end; off += min(ChunkSize, end-off) {
			n := min(ChunkSize, end-off)
			c := &pb.Chunk{Offset: off, Length: n, Zero: r.GetZero()}
			if !r.GetZero() {
				if _, err := dev.ReadAt(buf[:n], int64(off)); err != nil && !errors.Is(err, io.EOF) {
					return status.Errorf(codes.Internal, "read %s at %d: %v", snap.GetDevicePath(), off, err)
				}
				c.Crc32C = crc32.Checksum(buf[:n], castagnoli)
				c.Data = buf[:n]
				switch {
				case enc == nil:
				case skip > 0:
					skip--
				default:
					// Data that does not shrink by an eighth (random, already
					// compressed) goes as it is, and the next 16 chunks are
					// not tried: zstd would only cost both sides CPU.
					if out = enc.EncodeAll(buf[:n], out[:0]); uint64(len(out)) < n-n/8 {
						c.Data, c.Compression = out, pb.Compression_COMPRESSION_ZSTD
					} else {
						skip = 16
					}
				}
			}
			if err := stream.Send(&pb.ReadResponse{Msg: &pb.ReadResponse_Chunk{Chunk: c}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close implements pb.TransferServer.
func (s *Server) Close(ctx context.Context, req *pb.CloseRequest) (*pb.CloseResponse, error) {
	g, err := s.authorize(ctx, req.GetTarget(), req.GetBase())
	if err != nil {
		return nil, err
	}
	if err := s.removeSnapshot(ctx, g.key, g.class()); err != nil {
		return nil, err
	}
	return &pb.CloseResponse{}, nil
}

func (s *Server) removeSnapshot(ctx context.Context, key, class string) error {
	name := thinlvmv1.TransferLVName(key)
	got, err := s.LVMD.GetLV(ctx, &lvmdpb.GetLVRequest{Name: name, DeviceClass: class})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if !slices.Contains(got.GetVolume().GetTags(), thinlvmv1.TransferTagPrefix+key) {
		return nil
	}
	if _, err := s.LVMD.RemoveLV(ctx, &lvmdpb.RemoveLVRequest{Name: name, DeviceClass: class}); err != nil && status.Code(err) != codes.NotFound {
		return err
	}
	s.Log.Info("transfer snapshot removed", "snapshot", name, "copy", key)
	return nil
}

// Start runs the sweep of transfer snapshots whose copy ended (target
// deleted, or Ready) until ctx ends: a target agent that died, or a Close
// that never came, leaves nothing behind. It makes the Server a
// controller-runtime Runnable.
func (s *Server) Start(ctx context.Context) error {
	every := s.SweepInterval
	if every <= 0 {
		every = time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := s.sweep(ctx); err != nil && ctx.Err() == nil {
			s.Log.Error(err, "sweep transfer snapshots")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection is false: every node sweeps its own snapshots.
func (s *Server) NeedLeaderElection() bool { return false }

func (s *Server) sweep(ctx context.Context) error {
	list, err := s.LVMD.ListLVs(ctx, &lvmdpb.ListLVsRequest{})
	if err != nil {
		return fmt.Errorf("list LVs: %w", err)
	}
	var errs []error
	for _, v := range list.GetVolumes() {
		for _, t := range v.GetTags() {
			key, ok := strings.CutPrefix(t, thinlvmv1.TransferTagPrefix)
			if !ok || v.GetName() != thinlvmv1.TransferLVName(key) {
				continue
			}
			ended, err := s.copyEnded(ctx, key)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if !ended {
				continue
			}
			if err := s.removeSnapshot(ctx, key, v.GetDeviceClass()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// copyEnded tells whether the copy of key is over: its target is Ready or
// gone; for a base, the caller's LVMNode no longer shows its base of the
// image Populating.
func (s *Server) copyEnded(ctx context.Context, key string) (bool, error) {
	if rest, ok := strings.CutPrefix(key, baseKeyPrefix); ok {
		image, caller, ok := strings.Cut(rest, ":")
		if !ok {
			return true, nil
		}
		ln := &thinlvmv1.LVMNode{}
		err := s.Reader.Get(ctx, types.NamespacedName{Name: caller}, ln)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		for _, b := range ln.Status.GoldenBases {
			if b.Name == image && b.State == thinlvmv1.GoldenBasePopulating {
				return false, nil
			}
		}
		return true, nil
	}
	lv := &thinlvmv1.LogicalVolume{}
	err := s.Reader.Get(ctx, types.NamespacedName{Name: key}, lv)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return !lv.DeletionTimestamp.IsZero() || meta.IsStatusConditionTrue(lv.Status.Conditions, thinlvmv1.ConditionReady), nil
}

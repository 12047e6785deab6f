package reconciler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/jobs"
	"github.com/thinlvm/thinlvm/node/transfer"
	transferpb "github.com/thinlvm/thinlvm/node/transfer/proto"
)

// copyingMessage is the Ready condition's message of a LogicalVolume whose
// data is being copied from its source's node: not Ready, not Failed.
func copyingMessage(st *thinlvmv1.TransferStatus) string {
	msg := fmt.Sprintf("copying the data of the source from node %s", st.SourceNode)
	if st.BytesTotal > 0 {
		msg += fmt.Sprintf(": %d of %d bytes (%d%%)", st.BytesDone, st.BytesTotal, st.BytesDone*100/st.BytesTotal)
	}
	return msg
}

// copyState is a running copy's state, which its job writes and the
// reconcile reports.
type copyState struct {
	mu      sync.Mutex
	st      thinlvmv1.TransferStatus
	session *transfer.Session
}

func (c *copyState) status() thinlvmv1.TransferStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := *c.st.DeepCopy()
	if s := c.session; s != nil {
		p := s.Progress()
		st.BytesDone, st.BytesTotal, st.BytesSent = p.Done, p.Total, p.Sent
		if secs := time.Since(p.Start).Seconds(); secs > 0 && !p.Start.IsZero() {
			st.BytesPerSecond = int64(float64(p.Done) / secs)
		}
	}
	return st
}

// incomplete tells whether vol is still being filled by a copy.
func incomplete(vol *pb.LogicalVolume) bool {
	return slices.Contains(vol.GetTags(), thinlvmv1.IncompleteTag)
}

// copyFrom makes lv's LV as a copy of from, a LogicalVolume of another
// node. The copy runs in the background: copyFrom starts it and reports
// its progress (outcome.copying) until it ended; then it returns the LV, or the copy's failure
// (TransferFailed) after which the next reconcile starts over. An
// incomplete LV found with no copy running (this agent restarted in the
// middle of one) is removed first: a copy starts over from its start.
func (r *LogicalVolumeReconciler) copyFrom(ctx context.Context, lv *thinlvmv1.LogicalVolume, found *pb.LogicalVolume) (outcome, error) {
	name := thinlvmv1.LVName(lv)
	if j := r.copies.Get(lv.Name); j != nil {
		if !j.Ended() {
			return outcome{copying: new(j.State.status())}, nil
		}
		r.copies.Forget(lv.Name, j)
		old := lv.DeepCopy()
		st := j.State.status()
		lv.Status.Transfer = &st
		if err := r.patchStatus(ctx, old, lv); err != nil {
			return outcome{}, err
		}
		if j.Err() != nil {
			return outcome{}, refuse(thinlvmv1.ReasonTransferFailed, "copy from node %s: %v", st.SourceNode, j.Err())
		}
		got, err := r.LVMD.GetLV(ctx, &pb.GetLVRequest{Name: name, DeviceClass: lv.Spec.DeviceClass})
		if err != nil {
			return outcome{}, err
		}
		if incomplete(got.GetVolume()) { // never Ready while marked
			return outcome{}, fmt.Errorf("LV %s is still marked %s after its copy", name, thinlvmv1.IncompleteTag)
		}
		return outcome{vol: got.GetVolume()}, nil
	}
	if found != nil && !incomplete(found) {
		return outcome{vol: found}, nil
	}
	from, err := r.remoteSource(ctx, lv)
	if err != nil {
		return outcome{}, err
	}
	if err := r.checkCopyTypes(ctx, lv, from); err != nil {
		return outcome{}, err
	}
	if r.Copier == nil {
		if from.Spec.NodeName == lv.Spec.NodeName {
			return outcome{}, refuse(thinlvmv1.ReasonUnsupported, "source LogicalVolume %s is thick, and this agent has no transfer endpoint to copy it through (no transfer endpoint configured)", from.Name)
		}
		return outcome{}, refuse(thinlvmv1.ReasonUnsupported, "source LogicalVolume %s is on node %s and this agent copies from no other node (no transfer endpoint configured)", from.Name, from.Spec.NodeName)
	}
	if found != nil {
		log.FromContext(ctx).Info("removing the LV of an interrupted copy", "lv", name)
		if _, err := r.LVMD.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name, DeviceClass: lv.Spec.DeviceClass}); err != nil {
			return outcome{}, err
		}
	}
	attempts := int32(1)
	if t := lv.Status.Transfer; t != nil {
		attempts = t.Attempts + 1
	}
	state := &copyState{st: thinlvmv1.TransferStatus{SourceNode: from.Spec.NodeName, Attempts: attempts, StartTime: new(metav1.NowMicro())}}
	target := lv.DeepCopy() // the reconcile goes on writing lv's status
	r.copies.Start(ctx, lv.Name, state, func(ctx context.Context, j *jobs.Job[*copyState]) error {
		return r.runCopy(ctx, target, from, j.State)
	}, func(j *jobs.Job[*copyState]) {
		err := j.Err()
		st := state.status()
		r.Metrics.copyEnded(string(st.Mode), st.BytesDone, st.BytesSent, err)
		if err != nil {
			log.FromContext(ctx).Info("copy failed", "lv", name, "source", from.Name, "node", from.Spec.NodeName, "error", err.Error())
		}
		r.wake(target.Name)
	})
	return outcome{copying: new(state.status())}, nil
}

// checkCopyTypes refuses a copy from a thin class into a thick one: it
// writes only what the source maps, and a new thick LV reads what its
// extents held elsewhere, not zeros. A device class is thin on one node and
// thick on another only by a mistake in the nodes' lvmd configurations.
func (r *LogicalVolumeReconciler) checkCopyTypes(ctx context.Context, lv, from *thinlvmv1.LogicalVolume) error {
	typeOn := func(node, class string) (thinlvmv1.DeviceClassType, error) {
		ln := &thinlvmv1.LVMNode{}
		err := r.Client.Get(ctx, types.NamespacedName{Name: node}, ln)
		if apierrors.IsNotFound(err) && r.APIReader != nil {
			err = r.APIReader.Get(ctx, types.NamespacedName{Name: node}, ln)
		}
		if err != nil {
			return "", client.IgnoreNotFound(err)
		}
		if dc := ln.Status.DeviceClass(class); dc != nil {
			return dc.Type, nil
		}
		return "", nil
	}
	here, err := typeOn(lv.Spec.NodeName, lv.Spec.DeviceClass)
	if err != nil || here != thinlvmv1.DeviceClassThick {
		return err
	}
	there, err := typeOn(from.Spec.NodeName, from.Spec.DeviceClass)
	if err != nil {
		return err
	}
	if there != thinlvmv1.DeviceClassThick {
		return refuse(thinlvmv1.ReasonSourceMismatch, "device class %q is thick on node %s and thin on node %s: a copy into a thick LV must write all of it, and one from a thin LV writes only what it maps; give the class one type on every node",
			lv.Spec.DeviceClass, lv.Spec.NodeName, from.Spec.NodeName)
	}
	return nil
}

// runCopy is a copy job: it opens the copy on the source's node, makes the
// LV (a snapshot of the local base the source descends from when this node
// holds the same one, else an empty thin LV), fills it, and marks it
// complete. On failure it removes the LV: nothing half-made is left.
func (r *LogicalVolumeReconciler) runCopy(ctx context.Context, lv, from *thinlvmv1.LogicalVolume, j *copyState) (err error) {
	logger := log.FromContext(ctx).WithValues("lv", lv.Name, "source", from.Name, "sourceNode", from.Spec.NodeName)
	sess, open, err := r.Copier.Open(ctx, from.Spec.NodeName, lv.Name)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := sess.Close(cctx); cerr != nil {
			logger.Info("close the copy on the source's node (its sweep removes the snapshot)", "error", cerr.Error())
		}
	}()
	name := thinlvmv1.LVName(lv)
	// At least the source's size: its LV may have been rounded up to whole
	// extents past the size its spec asks for, which the volume's asks too.
	size := max(uint64(lv.Spec.Size.Value()), open.GetSizeBytes())
	tags := []string{OwnerTagPrefix + lv.Name, thinlvmv1.IncompleteTag}
	base, err := r.sharedBase(ctx, lv, open.GetBase())
	if err != nil {
		return err
	}
	mode := thinlvmv1.TransferMapped
	var vol *pb.LogicalVolume
	if base != nil {
		mode = thinlvmv1.TransferDelta
		resp, err := r.LVMD.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: name, DeviceClass: lv.Spec.DeviceClass,
			SourceName: base.GetName(), SizeBytes: size, Tags: tags})
		if err != nil {
			return err
		}
		vol = resp.GetVolume()
	} else {
		resp, err := r.LVMD.CreateLV(ctx, &pb.CreateLVRequest{Name: name, DeviceClass: lv.Spec.DeviceClass, SizeBytes: size, Tags: tags})
		if err != nil {
			return err
		}
		vol = resp.GetVolume()
	}
	defer func() {
		if err == nil {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if _, rerr := r.LVMD.RemoveLV(rctx, &pb.RemoveLVRequest{Name: name, DeviceClass: lv.Spec.DeviceClass}); rerr != nil && status.Code(rerr) != codes.NotFound {
			err = errors.Join(err, fmt.Errorf("remove the half-filled LV %s: %w", name, rerr))
		}
	}()
	j.mu.Lock()
	j.st.Mode = mode
	if base != nil {
		j.st.Base = open.GetBase().GetGoldenImage()
	}
	j.session = sess
	j.mu.Unlock()
	logger.Info("copy started", "mode", mode, "bytes", open.GetSizeBytes())
	if err := sess.CopyTo(ctx, vol.GetDevicePath(), base != nil); err != nil {
		return err
	}
	if _, err := r.LVMD.ChangeLV(ctx, &pb.ChangeLVRequest{Name: name, DeviceClass: lv.Spec.DeviceClass, DelTags: []string{thinlvmv1.IncompleteTag}}); err != nil {
		return fmt.Errorf("mark the LV complete: %w", err)
	}
	j.mu.Lock()
	j.st.CompletionTime = new(metav1.NowMicro())
	j.mu.Unlock()
	st := j.status()
	logger.Info("copy done", "mode", mode, "bytes", st.BytesDone, "sent", st.BytesSent, "bytesPerSecond", st.BytesPerSecond)
	return nil
}

// sharedBase is this node's base of the GoldenImage b names, when it holds
// one of the same UID and sha256, sealed (Ready) in the volume's device
// class; nil otherwise.
func (r *LogicalVolumeReconciler) sharedBase(ctx context.Context, lv *thinlvmv1.LogicalVolume, b *transferpb.Base) (*pb.LogicalVolume, error) {
	if b == nil || b.GetGoldenImage() == "" {
		return nil, nil
	}
	gi := &thinlvmv1.GoldenImage{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: b.GetGoldenImage()}, gi); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if string(gi.UID) != b.GetUid() || transfer.ImageSHA256(gi) != b.GetSha256() || gi.Spec.DeviceClass != lv.Spec.DeviceClass {
		return nil, nil
	}
	got, err := r.LVMD.GetLV(ctx, &pb.GetLVRequest{Name: thinlvmv1.BaseLVName(gi), DeviceClass: lv.Spec.DeviceClass})
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !got.GetVolume().GetReadOnly() { // not sealed yet: still populating
		return nil, nil
	}
	return got.GetVolume(), nil
}

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// The annotations a move keeps its state in, on the objects it changes, so
// that a run after an interruption (the command killed, the machine gone)
// continues where the last one stopped, and so that no state lives only in
// the process.
const (
	// annMoveOf is on the clone claim the move makes and, once the copy is
	// complete, on the clone's PersistentVolume: the claim moved,
	// "namespace/name".
	annMoveOf = "thinlvm.io/move-of"
	// annMoveTo is on the clone claim: the node it is for.
	annMoveTo = "thinlvm.io/move-to"
	// annMoveFrom and annMoveClaim are on the new PersistentVolume: the old
	// PersistentVolume, and the claim as it was before the move deleted it
	// (JSON), to make it again bound to the new volume.
	annMoveFrom  = "thinlvm.io/move-from"
	annMoveClaim = "thinlvm.io/move-claim"
	// annMoveReclaim is on both PersistentVolumes while the move runs: their
	// reclaim policy before it. The move holds both at Retain, so that no
	// step (nor anyone deleting a claim meanwhile) can delete data.
	annMoveReclaim = "thinlvm.io/move-reclaim-policy"
	// annStoppedFor is on a workload the move stopped: the claim it stopped
	// it for; annStoppedFrom, what to set again when the move is done (a
	// Deployment's or StatefulSet's replicas, a VirtualMachine's run
	// strategy).
	annStoppedFor  = "thinlvm.io/stopped-for-move"
	annStoppedFrom = "thinlvm.io/stopped-from"

	// annSelectedNode is the node the scheduler chose for a claim; the CSI
	// provisioner creates the volume there. The move sets it on its clone.
	annSelectedNode = "volume.kubernetes.io/selected-node"
)

func newMoveCommand(o *options) *cobra.Command {
	m := &mover{poll: 2 * time.Second}
	var to string
	cmd := &cobra.Command{
		Use:   "move CLAIM --to NODE",
		Short: "Move a claim's volume to another node, keeping the claim's name and data",
		Long: `Move copies a stopped claim's volume to another node through thinlvm's
cross-node copy (only the blocks that differ from a golden base both nodes
hold), then binds a claim of the same name and namespace to the copy and
deletes the old volume once the claim is Bound again.

The claim's pods must be stopped: move refuses and names them otherwise.
With --scale-down it stops them itself when their workload is a Deployment
or StatefulSet of one replica or a KubeVirt VirtualMachine, and starts the
workload again at the end.

Both volumes are held at reclaim policy Retain while the move runs, so no
step loses data. Run the same command again after an interruption: it
continues from where the last run stopped.`,
		Example: `  # Move a stopped VM's disk to node n2, first showing what would happen
  kubectl thinlvm move vm1-root --to n2 --dry-run
  kubectl thinlvm move vm1-root --to n2

  # Stop the claim's single-replica Deployment for the move, start it after
  kubectl thinlvm move -n db data-postgres --to n3 --scale-down`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			m.c, m.out = c, o.streams.Out
			return m.move(cmd.Context(), ns, args[0], to)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "The node to move the volume to (required).")
	_ = cmd.MarkFlagRequired("to")
	m.flags(cmd)
	return cmd
}

// mover moves claims; evacuate runs several at once.
type mover struct {
	c   client.Client
	out io.Writer
	// mu orders the lines of moves that run at once.
	mu        sync.Mutex
	dryRun    bool
	scaleDown bool
	poll      time.Duration
	timeout   time.Duration
}

func (m *mover) flags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&m.dryRun, "dry-run", false, "Print what would be done, and change nothing.")
	cmd.Flags().BoolVar(&m.scaleDown, "scale-down", false, "Stop the claim's workload (a Deployment or StatefulSet of one replica, a KubeVirt VirtualMachine) for the move and start it again after.")
	cmd.Flags().DurationVar(&m.timeout, "timeout", 0, "Give up waiting after this long (0: wait as long as it takes; run the command again to continue).")
}

// claimRun is one claim's run of a command that changes it (move,
// adopt): its lines and steps, and what both do to a claim and its
// volumes.
type claimRun struct {
	*mover
	ns, claim string
	// prefix starts each line (evacuate's and adopt's: the claim).
	prefix string
}

// moveRun is one claim's move.
type moveRun struct {
	claimRun
	to string
	// stopped are the workloads a dry run would stop.
	stopped []workload
}

func (m *mover) move(ctx context.Context, ns, claim, to string) error {
	if m.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.timeout)
		defer cancel()
	}
	return (&moveRun{claimRun: claimRun{mover: m, ns: ns, claim: claim}, to: to}).run(ctx)
}

func (r *claimRun) say(format string, args ...any) { r.mover.say(r.prefix, format, args...) }

// step does one step and says it is done, or with --dry-run says what it
// would do.
func (r *claimRun) step(what string, do func() error) error {
	if r.dryRun {
		r.say("would %s", what)
		return nil
	}
	if err := do(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	r.say("%s: done", what)
	return nil
}

func (r *claimRun) key() string { return r.ns + "/" + r.claim }

// cloneName is the clone claim's name: the same for every run of a claim's
// move, so that a run finds the last one's.
func (r *moveRun) cloneName() string {
	sum := sha256.Sum256([]byte(r.key()))
	name := r.claim
	if len(name) > 200 {
		name = name[:200]
	}
	return strings.TrimRight(name, "-.") + "-move-" + hex.EncodeToString(sum[:4])
}

func (r *moveRun) run(ctx context.Context) error {
	if r.to == "" {
		return errors.New("--to names no node")
	}
	moved, err := r.movedVolume(ctx)
	if err != nil {
		return err
	}
	if moved != nil {
		_, lv, err := r.volume(ctx, moved.Name)
		if err != nil {
			return err
		}
		if lv.Spec.NodeName != r.to {
			return fmt.Errorf("a move of %s to node %s is past its copy: run it again with --to %s", r.key(), lv.Spec.NodeName, lv.Spec.NodeName)
		}
		return r.finish(ctx, moved.Name, moved.Annotations[annMoveFrom])
	}
	claim := &corev1.PersistentVolumeClaim{}
	if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: r.claim}, claim); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("claim %s not found", r.key())
		}
		return fmt.Errorf("reading claim %s: %w", r.key(), err)
	}
	if claim.DeletionTimestamp != nil {
		return fmt.Errorf("claim %s is being deleted", r.key())
	}
	if claim.Status.Phase != corev1.ClaimBound {
		return fmt.Errorf("claim %s is %s, not Bound: it has no volume to move yet", r.key(), claim.Status.Phase)
	}
	pv, lv, err := r.volume(ctx, claim.Spec.VolumeName)
	if err != nil {
		return err
	}
	clone := &corev1.PersistentVolumeClaim{}
	err = r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: r.cloneName()}, clone)
	switch {
	case apierrors.IsNotFound(err):
		clone = nil
	case err != nil:
		return fmt.Errorf("reading claim %s/%s: %w", r.ns, r.cloneName(), err)
	case clone.Annotations[annMoveOf] != r.key():
		return fmt.Errorf("claim %s/%s exists and is not a move of %s: rename or delete it", r.ns, clone.Name, r.key())
	case clone.Annotations[annMoveTo] != r.to:
		return fmt.Errorf("a move of %s to node %s has begun (claim %s/%s): run it again with --to %s, or delete that claim to abandon it",
			r.key(), clone.Annotations[annMoveTo], r.ns, clone.Name, clone.Annotations[annMoveTo])
	}
	if lv.Spec.NodeName == r.to {
		r.say("claim %s is on node %s: nothing to move", r.key(), r.to)
		return nil
	}
	if clone == nil { // a clone begun holds its room on the node already
		if err := r.checkTarget(ctx, lv); err != nil {
			return err
		}
	}
	stop, pods, err := r.toStop(ctx)
	if err != nil {
		return err
	}
	verb := "moving"
	if r.dryRun {
		verb = "would move"
	}
	r.say("%s claim %s (persistentvolume/%s, %s) from node %s to node %s", verb, r.key(), pv.Name, pv.Spec.Capacity.Storage(), lv.Spec.NodeName, r.to)
	if err := r.stopWorkloads(ctx, stop, pods); err != nil {
		return err
	}
	if err := r.step(fmt.Sprintf("hold persistentvolume/%s at reclaim policy Retain", pv.Name), func() error {
		return r.hold(ctx, pv.Name)
	}); err != nil {
		return err
	}
	if clone == nil {
		if err := r.step(fmt.Sprintf("create claim %s/%s, a clone of %s on node %s", r.ns, r.cloneName(), r.key(), r.to), func() error {
			return r.createClone(ctx, claim, pv)
		}); err != nil {
			return err
		}
	}
	if r.dryRun {
		r.say("would wait for the copy to node %s to complete (the clone Bound)", r.to)
		return r.finish(ctx, "", pv.Name)
	}
	newPV, err := r.waitCopied(ctx)
	if err != nil {
		return err
	}
	if pods, err := podsUsing(ctx, r.c, r.ns, r.claim); err != nil {
		return err
	} else if len(pods) > 0 {
		// What they wrote since the copy began is not in the copy: drop it.
		if err := r.c.Delete(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: r.cloneName()}}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting the stale clone %s/%s: %w", r.ns, r.cloneName(), err)
		}
		return fmt.Errorf("pod(s) %s started using claim %s during the copy: the copy was dropped; stop them and run the move again", strings.Join(pods, ", "), r.key())
	}
	if err := r.step(fmt.Sprintf("record the move on persistentvolume/%s and hold it at reclaim policy Retain", newPV), func() error {
		return r.record(ctx, newPV, claim, pv)
	}); err != nil {
		return err
	}
	return r.finish(ctx, newPV, pv.Name)
}

// movedVolume is the PersistentVolume a move of the claim copied to and
// recorded itself on (the move is past its copy), or nil.
func (r *moveRun) movedVolume(ctx context.Context) (*corev1.PersistentVolume, error) {
	pvs := &corev1.PersistentVolumeList{}
	if err := r.c.List(ctx, pvs); err != nil {
		return nil, fmt.Errorf("listing PersistentVolumes: %w", err)
	}
	for i := range pvs.Items {
		if moveRecord(&pvs.Items[i]) == r.key() {
			return &pvs.Items[i], nil
		}
	}
	return nil, nil
}

// moveRecord is the claim ("namespace/name") whose move recorded itself on
// the PersistentVolume it copied to, "" when the volume holds no record.
func moveRecord(pv *corev1.PersistentVolume) string {
	if pv.Annotations[annMoveClaim] == "" {
		return ""
	}
	return pv.Annotations[annMoveOf]
}

// volume is a thinlvm PersistentVolume and its LogicalVolume.
func (r *moveRun) volume(ctx context.Context, name string) (*corev1.PersistentVolume, *thinlvmv1.LogicalVolume, error) {
	pv := &corev1.PersistentVolume{}
	if err := r.c.Get(ctx, types.NamespacedName{Name: name}, pv); err != nil {
		return nil, nil, fmt.Errorf("reading persistentvolume/%s: %w", name, err)
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != thinlvmv1.DriverName {
		return nil, nil, fmt.Errorf("claim %s's persistentvolume/%s is not thinlvm's (%s)", r.key(), name, thinlvmv1.DriverName)
	}
	lv := &thinlvmv1.LogicalVolume{}
	if err := r.c.Get(ctx, types.NamespacedName{Name: pv.Spec.CSI.VolumeHandle}, lv); err != nil {
		return nil, nil, fmt.Errorf("reading logicalvolume/%s of persistentvolume/%s: %w", pv.Spec.CSI.VolumeHandle, name, err)
	}
	return pv, lv, nil
}

// checkTarget refuses a node that cannot take the volume: no thinlvm, no
// such device class, not enough room.
func (r *moveRun) checkTarget(ctx context.Context, lv *thinlvmv1.LogicalVolume) error {
	ln := &thinlvmv1.LVMNode{}
	if err := r.c.Get(ctx, types.NamespacedName{Name: r.to}, ln); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("node %s does not run thinlvm (no LVMNode %s)", r.to, r.to)
		}
		return fmt.Errorf("reading lvmnode/%s: %w", r.to, err)
	}
	dc := ln.Status.DeviceClass(lv.Spec.DeviceClass)
	if dc == nil {
		return fmt.Errorf("node %s has no device class %q", r.to, lv.Spec.DeviceClass)
	}
	if dc.Unavailable != "" {
		return fmt.Errorf("node %s's device class %s is unavailable: %s", r.to, dc.Name, dc.Unavailable)
	}
	if dc.Available.Cmp(lv.Spec.Size) < 0 {
		return fmt.Errorf("node %s's device class %s has room for %s, the volume is %s", r.to, dc.Name, dc.Available.String(), lv.Spec.Size.String())
	}
	return nil
}

// hold sets a PersistentVolume's reclaim policy to Retain, keeping the one
// it had in annMoveReclaim (once: a second run keeps the first's).
func (r *moveRun) hold(ctx context.Context, name string) error {
	return r.holdAtRetain(ctx, name, annMoveReclaim)
}

// holdAtRetain sets a PersistentVolume's reclaim policy to Retain, keeping
// the one it had in the annotation ann (once: a second run keeps the
// first's).
func (r *claimRun) holdAtRetain(ctx context.Context, name, ann string) error {
	return r.patchPV(ctx, name, func(pv *corev1.PersistentVolume) {
		if _, ok := pv.Annotations[ann]; !ok {
			metav1.SetMetaDataAnnotation(&pv.ObjectMeta, ann, string(pv.Spec.PersistentVolumeReclaimPolicy))
		}
		pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	})
}

// release gives a PersistentVolume back the reclaim policy hold kept and
// drops the move's annotations from it.
func (r *moveRun) release(ctx context.Context, name string) error {
	return r.patchPV(ctx, name, func(pv *corev1.PersistentVolume) {
		if p, ok := pv.Annotations[annMoveReclaim]; ok && p != "" {
			pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimPolicy(p)
		}
		for _, a := range []string{annMoveReclaim, annMoveOf, annMoveFrom, annMoveClaim} {
			delete(pv.Annotations, a)
		}
	})
}

// patchPV changes a PersistentVolume as it is now: the PV controller
// writes it too (its phase), so a conflict reads it again.
func (r *claimRun) patchPV(ctx context.Context, name string, change func(*corev1.PersistentVolume)) error {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}}
	return patchFresh(ctx, r.c, pv, func() error {
		change(pv)
		return nil
	})
}

// patchFresh reads obj, changes it and patches what changed, guarded by its
// resource version; a conflict (a controller wrote it meanwhile) reads it
// again and changes that.
func patchFresh(ctx context.Context, c client.Client, obj client.Object, change func() error) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		base := obj.DeepCopyObject().(client.Object)
		if err := change(); err != nil {
			return err
		}
		return c.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	})
}

// createClone makes the clone claim: the claim as its data source, the
// target as its selected node, the volume's size.
func (r *moveRun) createClone(ctx context.Context, claim *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) error {
	size := pv.Spec.Capacity[corev1.ResourceStorage]
	clone := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: r.cloneName(), Annotations: map[string]string{
			annMoveOf: r.key(), annMoveTo: r.to, annSelectedNode: r.to}},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: claim.Spec.StorageClassName,
			AccessModes:      claim.Spec.AccessModes,
			VolumeMode:       claim.Spec.VolumeMode,
			DataSource:       &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: r.claim},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if err := r.c.Create(ctx, clone); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// waitCopied waits until the clone is Bound (its data is complete on the
// target), saying how the copy goes, and returns its PersistentVolume.
func (r *moveRun) waitCopied(ctx context.Context) (string, error) {
	r.say("copying to node %s (claim %s/%s)", r.to, r.ns, r.cloneName())
	var last string
	var pv string
	err := wait.PollUntilContextCancel(ctx, r.poll, true, func(ctx context.Context) (bool, error) {
		clone := &corev1.PersistentVolumeClaim{}
		if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: r.cloneName()}, clone); err != nil {
			return false, fmt.Errorf("reading the clone %s/%s: %w", r.ns, r.cloneName(), err)
		}
		if clone.Status.Phase == corev1.ClaimBound {
			pv = clone.Spec.VolumeName
			return true, nil
		}
		// The provisioner names the volume after the claim's UID.
		lv := &thinlvmv1.LogicalVolume{}
		if err := r.c.Get(ctx, types.NamespacedName{Name: thinlvmv1.ObjectName("vol", "pvc-"+string(clone.UID))}, lv); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if now := copyProgress(lv); now != last {
			last = now
			r.say("  %s", now)
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("waiting for the copy of %s to node %s (run the move again to go on waiting): %w", r.key(), r.to, err)
	}
	r.say("copied to node %s: persistentvolume/%s", r.to, pv)
	return pv, nil
}

// copyProgress is a line on a copy's state, in tenths.
func copyProgress(lv *thinlvmv1.LogicalVolume) string {
	if t := lv.Status.Transfer; t != nil && t.BytesTotal > 0 {
		tenth := t.BytesDone * 10 / t.BytesTotal
		return fmt.Sprintf("%s copy from node %s: %d%% (%s of %s)", t.Mode, t.SourceNode, tenth*10,
			resource.NewQuantity(t.BytesDone, resource.BinarySI), resource.NewQuantity(t.BytesTotal, resource.BinarySI))
	}
	for _, c := range lv.Status.Conditions {
		if c.Type == thinlvmv1.ConditionReady {
			return fmt.Sprintf("volume %s: %s", lv.Name, c.Reason)
		}
	}
	return ""
}

// record holds the new volume at Retain and writes on it what the rest of
// the move needs once the claim is deleted: the claim as it is, the old
// volume.
func (r *moveRun) record(ctx context.Context, name string, claim *corev1.PersistentVolumeClaim, old *corev1.PersistentVolume) error {
	saved := corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: claim.Namespace, Name: claim.Name, Labels: claim.Labels,
			Annotations: claimAnnotations(claim.Annotations), OwnerReferences: claim.OwnerReferences},
		Spec: *claim.Spec.DeepCopy(),
	}
	saved.Spec.VolumeName = ""
	b, err := json.Marshal(saved)
	if err != nil {
		return err
	}
	return r.patchPV(ctx, name, func(pv *corev1.PersistentVolume) {
		if _, ok := pv.Annotations[annMoveReclaim]; !ok {
			metav1.SetMetaDataAnnotation(&pv.ObjectMeta, annMoveReclaim, string(pv.Spec.PersistentVolumeReclaimPolicy))
		}
		metav1.SetMetaDataAnnotation(&pv.ObjectMeta, annMoveOf, r.key())
		metav1.SetMetaDataAnnotation(&pv.ObjectMeta, annMoveFrom, old.Name)
		metav1.SetMetaDataAnnotation(&pv.ObjectMeta, annMoveClaim, string(b))
		pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	})
}

// claimAnnotations are a claim's annotations without those that describe
// its binding and provisioning: the claim made again binds anew.
func claimAnnotations(in map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range in {
		switch k {
		case "pv.kubernetes.io/bind-completed", "pv.kubernetes.io/bound-by-controller", annSelectedNode,
			"volume.beta.kubernetes.io/storage-provisioner", "volume.kubernetes.io/storage-provisioner":
			continue
		}
		out[k] = v
	}
	return out
}

// finish is the move after the copy: the claim deleted and made again bound
// to the new volume, the old volume deleted, the workloads started. Each
// step finds whether it is done already. newPV is empty in a dry run that
// has not copied yet.
func (r *moveRun) finish(ctx context.Context, newPV, oldPV string) error {
	newName := "the copy's persistentvolume"
	if newPV != "" {
		newName = "persistentvolume/" + newPV
	}
	var saved corev1.PersistentVolumeClaim
	if newPV != "" {
		pv := &corev1.PersistentVolume{}
		if err := r.c.Get(ctx, types.NamespacedName{Name: newPV}, pv); err != nil {
			return fmt.Errorf("reading persistentvolume/%s: %w", newPV, err)
		}
		if s := pv.Annotations[annMoveClaim]; s != "" {
			if err := json.Unmarshal([]byte(s), &saved); err != nil {
				return fmt.Errorf("persistentvolume/%s's %s: %w", newPV, annMoveClaim, err)
			}
		}
	}
	clone := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: r.cloneName()}}
	if err := r.c.Get(ctx, client.ObjectKeyFromObject(clone), clone); err == nil || r.dryRun {
		if err := r.step(fmt.Sprintf("delete the clone's claim %s/%s (%s is kept)", r.ns, clone.Name, newName), func() error {
			return r.deleteClaim(ctx, clone)
		}); err != nil {
			return err
		}
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading claim %s/%s: %w", r.ns, clone.Name, err)
	}
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: r.claim}}
	err := r.c.Get(ctx, client.ObjectKeyFromObject(claim), claim)
	switch {
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading claim %s: %w", r.key(), err)
	case err == nil && claim.Spec.VolumeName == oldPV:
		if pods, err := podsUsing(ctx, r.c, r.ns, r.claim); err != nil {
			return err
		} else if len(pods) > 0 && !r.dryRun {
			return fmt.Errorf("pod(s) %s use claim %s: stop them and run the move again (the copy on node %s is kept, but what they write now is not in it)",
				strings.Join(pods, ", "), r.key(), r.to)
		}
		if err := r.step(fmt.Sprintf("delete claim %s (persistentvolume/%s is kept)", r.key(), oldPV), func() error {
			return r.deleteClaim(ctx, claim)
		}); err != nil {
			return err
		}
	case err == nil && newPV != "" && claim.Spec.VolumeName != newPV:
		return fmt.Errorf("claim %s is bound to persistentvolume/%s, neither the old volume %s nor the new %s: resolve by hand", r.key(), claim.Spec.VolumeName, oldPV, newPV)
	}
	if err := r.step(fmt.Sprintf("make claim %s again, bound to %s on node %s", r.key(), newName, r.to), func() error {
		return r.rebind(ctx, newPV, &saved)
	}); err != nil {
		return err
	}
	if err := r.step(fmt.Sprintf("give the old persistentvolume/%s its reclaim policy back (thinlvm deletes a Delete one)", oldPV), func() error {
		return r.dropOld(ctx, oldPV)
	}); err != nil {
		return err
	}
	if err := r.startWorkloads(ctx); err != nil {
		return err
	}
	// Last: the record on the new volume is what a run after an
	// interruption finds the move by.
	if err := r.step(fmt.Sprintf("give %s its reclaim policy back", newName), func() error {
		return r.release(ctx, newPV)
	}); err != nil {
		return err
	}
	if !r.dryRun {
		r.say("claim %s is on node %s", r.key(), r.to)
	}
	return nil
}

// deleteClaim deletes a claim and waits until it is gone.
func (r *claimRun) deleteClaim(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	if err := r.c.Delete(ctx, claim, client.Preconditions{UID: &claim.UID}); client.IgnoreNotFound(err) != nil {
		return err
	}
	return wait.PollUntilContextCancel(ctx, r.poll, true, func(ctx context.Context) (bool, error) {
		got := &corev1.PersistentVolumeClaim{}
		err := r.c.Get(ctx, client.ObjectKeyFromObject(claim), got)
		if apierrors.IsNotFound(err) || err == nil && got.UID != claim.UID {
			return true, nil
		}
		return false, err
	})
}

// rebind points the new volume at the claim's name (pre-bound: no UID) and
// makes the claim again with that volume, then waits until the two are
// bound.
func (r *claimRun) rebind(ctx context.Context, pvName string, saved *corev1.PersistentVolumeClaim) error {
	if err := r.patchPV(ctx, pvName, func(pv *corev1.PersistentVolume) {
		if ref := pv.Spec.ClaimRef; ref == nil || ref.Namespace != r.ns || ref.Name != r.claim {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: r.ns, Name: r.claim}
		}
	}); err != nil {
		return fmt.Errorf("pointing persistentvolume/%s at claim %s: %w", pvName, r.key(), err)
	}
	claim := saved.DeepCopy()
	if claim.Name == "" {
		return fmt.Errorf("persistentvolume/%s has no %s: resolve by hand", pvName, annMoveClaim)
	}
	claim.Spec.VolumeName = pvName
	if err := r.c.Create(ctx, claim); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return wait.PollUntilContextCancel(ctx, r.poll, true, func(ctx context.Context) (bool, error) {
		got := &corev1.PersistentVolumeClaim{}
		if err := r.c.Get(ctx, client.ObjectKeyFromObject(claim), got); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if got.Spec.VolumeName != pvName {
			return false, fmt.Errorf("claim %s was made again by someone else, bound to %q", r.key(), got.Spec.VolumeName)
		}
		return got.Status.Phase == corev1.ClaimBound, nil
	})
}

// dropOld gives the old volume its reclaim policy back; a Delete one is then
// deleted by the provisioner (its LV with it), which dropOld waits for.
func (r *moveRun) dropOld(ctx context.Context, name string) error {
	pv := &corev1.PersistentVolume{}
	if err := r.c.Get(ctx, types.NamespacedName{Name: name}, pv); err != nil {
		return client.IgnoreNotFound(err)
	}
	if _, ok := pv.Annotations[annMoveReclaim]; ok {
		if err := r.release(ctx, name); err != nil {
			return err
		}
		if err := r.c.Get(ctx, types.NamespacedName{Name: name}, pv); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		r.say("persistentvolume/%s keeps its data (reclaim policy %s): delete it when you no longer need it", name, pv.Spec.PersistentVolumeReclaimPolicy)
		return nil
	}
	return wait.PollUntilContextCancel(ctx, r.poll, true, func(ctx context.Context) (bool, error) {
		err := r.c.Get(ctx, types.NamespacedName{Name: name}, &corev1.PersistentVolume{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// podsUsing are the pods (namespace's names) that use a claim and have not
// ended.
func podsUsing(ctx context.Context, c client.Client, ns, claim string) ([]string, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing pods in %s: %w", ns, err)
	}
	var out []string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool {
			return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim
		}) {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

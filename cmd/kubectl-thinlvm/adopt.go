package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/thinlvm/thinlvm/api/lvmname"
	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// TopoLVM's names, as its v0.41 makes its objects.
const (
	topoDriver = "topolvm.io"
	// topoFinalizer is on TopoLVM's LogicalVolume: its node agent removes
	// the LV, then the finalizer, when the object is deleted.
	topoFinalizer = "topolvm.io/logicalvolume"
	// topoPendingDeletion on a TopoLVM LogicalVolume makes its node agent
	// leave the object and its LV alone.
	topoPendingDeletion = "topolvm.io/pendingdeletion"
	// provisionerFinalizer is the CSI provisioner's on the volumes it
	// provisioned with reclaim policy Delete; TopoLVM's provisioner would
	// remove it (without deleting anything: the volume is held at Retain).
	provisionerFinalizer = "external-provisioner.volume.kubernetes.io/finalizer"
	annProvisionedBy     = "pv.kubernetes.io/provisioned-by"
)

var topoLogicalVolume = schema.GroupVersionKind{Group: "topolvm.io", Version: "v1", Kind: "LogicalVolume"}

// The annotations an adoption keeps its state in, on the thinlvm
// LogicalVolume it makes first (which outlives every other object it
// changes): a run after an interruption finds it by annAdoptOf.
const (
	// annAdoptOf: the claim adopted, "namespace/name"; the node agent
	// keeps the LV of a LogicalVolume deleted while it is there.
	annAdoptOf = thinlvmv1.AdoptOfAnnotation
	// annAdoptClaim: the claim as it is made again (JSON), bound to the
	// volume and in the thinlvm StorageClass.
	annAdoptClaim = "thinlvm.io/adopt-claim"
	// annAdoptVolume: the thinlvm PersistentVolume that replaces TopoLVM's
	// (JSON).
	annAdoptVolume = "thinlvm.io/adopt-volume"
	// annAdoptFrom: TopoLVM's LogicalVolume.
	annAdoptFrom = "thinlvm.io/adopt-from"
	// annAdoptReclaim is on TopoLVM's PersistentVolume while the adoption
	// runs: its reclaim policy before the adoption held it at Retain.
	annAdoptReclaim = "thinlvm.io/adopt-reclaim-policy"
)

func newAdoptCommand(o *options) *cobra.Command {
	a := &adopter{mover: &mover{poll: 2 * time.Second}}
	var fromTopoLVM, all bool
	var classes []string
	cmd := &cobra.Command{
		Use:   "adopt --from-topolvm [CLAIM...] --storage-class TOPOLVM=THINLVM...",
		Short: "Take over TopoLVM's volumes in place: the LV stays, the claim keeps its name",
		Long: `Adopt makes thinlvm the driver of claims TopoLVM provisioned, without copying:
the LV stays where it is on its node, and thinlvm's LogicalVolume and
PersistentVolume take it over. The claim is made again with the same name,
bound to the new volume, in the thinlvm StorageClass --storage-class maps its
TopoLVM StorageClass to. TopoLVM's LogicalVolume and PersistentVolume are
removed in a way that makes TopoLVM leave the LV alone.

The thinlvm StorageClass's device class must hold the LV on the node: a thin
class whose thin pool is the one TopoLVM's thin LV is in, or a thick class on
its volume group (thinlvm's node agent checks, and refuses otherwise).

A claim in use is refused, naming its pods: stop them first. Without CLAIM,
every TopoLVM claim of the namespace (-A: of every namespace) is adopted.
TopoLVM's PersistentVolume is held at reclaim policy Retain while the
adoption runs. Run the same command again after an interruption: it
continues from where the last run stopped.`,
		Example: `  # See what adopting a namespace's TopoLVM claims would do
  kubectl thinlvm adopt --from-topolvm -n db --storage-class topolvm-provisioner=thinlvm-ext4 --dry-run

  # Adopt two claims, thin and thick
  kubectl thinlvm adopt --from-topolvm data-0 data-1 \
    --storage-class topolvm-thin=thinlvm-ext4 --storage-class topolvm-thick=thinlvm-thick-ext4`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !fromTopoLVM {
				return errors.New("adopt takes volumes from TopoLVM only: --from-topolvm is required")
			}
			if all && len(args) > 0 {
				return errors.New("claims are named in one namespace: -A takes no names")
			}
			m, err := classMap(classes)
			if err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			if all {
				ns = ""
			}
			a.c, a.out, a.classes = c, o.streams.Out, m
			return a.adoptAll(cmd.Context(), ns, args)
		},
	}
	cmd.Flags().BoolVar(&fromTopoLVM, "from-topolvm", false, "Adopt TopoLVM's volumes (the only source for now).")
	cmd.Flags().StringArrayVar(&classes, "storage-class", nil, "TOPOLVM=THINLVM: the thinlvm StorageClass that takes the claims of a TopoLVM StorageClass (repeat for each).")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "Adopt the claims of every namespace.")
	cmd.Flags().BoolVar(&a.dryRun, "dry-run", false, "Print what would be done, and change nothing.")
	cmd.Flags().DurationVar(&a.timeout, "timeout", 0, "Give up waiting after this long (0: wait as long as it takes; run the command again to continue).")
	return cmd
}

// classMap parses --storage-class's TOPOLVM=THINLVM pairs.
func classMap(pairs []string) (map[string]string, error) {
	m := map[string]string{}
	for _, p := range pairs {
		from, to, ok := strings.Cut(p, "=")
		if !ok || from == "" || to == "" {
			return nil, fmt.Errorf("--storage-class %q: want TOPOLVM=THINLVM", p)
		}
		if prev, dup := m[from]; dup && prev != to {
			return nil, fmt.Errorf("--storage-class maps %s twice (to %s and %s)", from, prev, to)
		}
		m[from] = to
	}
	return m, nil
}

// adopter adopts claims, one after the other.
type adopter struct {
	*mover
	classes map[string]string
}

// adoptAll adopts the named claims of ns, or all its TopoLVM claims and
// the adoptions begun there (ns "" for every namespace). It goes on past a
// claim it cannot adopt and fails at the end if any failed.
func (a *adopter) adoptAll(ctx context.Context, ns string, names []string) error {
	if a.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.timeout)
		defer cancel()
	}
	begun, err := a.begun(ctx)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(names))
	for _, n := range names {
		keys = append(keys, ns+"/"+n)
	}
	if len(names) == 0 {
		if keys, err = a.topoClaims(ctx, ns, begun); err != nil {
			return err
		}
		if len(keys) == 0 {
			a.say("", "no claim of TopoLVM's to adopt")
			return nil
		}
	}
	var failed []string
	for _, k := range keys {
		cns, name, _ := strings.Cut(k, "/")
		r := &adoptRun{claimRun: claimRun{mover: a.mover, ns: cns, claim: name}, classes: a.classes, begun: begun[k]}
		if len(keys) > 1 {
			r.prefix = k + ": "
		}
		if err := r.run(ctx); err != nil {
			r.say("%v", err)
			failed = append(failed, k)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d claims not adopted: %s", len(failed), len(keys), strings.Join(failed, ", "))
	}
	return nil
}

// begun are the LogicalVolumes of the adoptions earlier runs began, by
// claim ("namespace/name").
func (a *adopter) begun(ctx context.Context) (map[string]*thinlvmv1.LogicalVolume, error) {
	lvs := &thinlvmv1.LogicalVolumeList{}
	if err := a.c.List(ctx, lvs); err != nil {
		return nil, fmt.Errorf("listing LogicalVolumes: %w", err)
	}
	begun := map[string]*thinlvmv1.LogicalVolume{}
	for i := range lvs.Items {
		if k := lvs.Items[i].Annotations[annAdoptOf]; k != "" {
			begun[k] = &lvs.Items[i]
		}
	}
	return begun, nil
}

// topoClaims are the claims ("namespace/name") of ns bound to TopoLVM's
// volumes, and those whose adoption has begun.
func (a *adopter) topoClaims(ctx context.Context, ns string, begun map[string]*thinlvmv1.LogicalVolume) ([]string, error) {
	pvs := &corev1.PersistentVolumeList{}
	if err := a.c.List(ctx, pvs); err != nil {
		return nil, fmt.Errorf("listing PersistentVolumes: %w", err)
	}
	claims := &corev1.PersistentVolumeClaimList{}
	if err := a.c.List(ctx, claims, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing PersistentVolumeClaims: %w", err)
	}
	// A claim's volume, by the claim: a Released volume's claim is gone.
	volumeOf := map[string]string{}
	for _, c := range claims.Items {
		volumeOf[c.Namespace+"/"+c.Name] = c.Spec.VolumeName
	}
	var keys []string
	for _, pv := range pvs.Items {
		ref := pv.Spec.ClaimRef
		if ref == nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != topoDriver {
			continue
		}
		if k := ref.Namespace + "/" + ref.Name; volumeOf[k] == pv.Name {
			keys = append(keys, k)
		}
	}
	for k := range begun {
		if ns == "" || strings.HasPrefix(k, ns+"/") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// adoptRun is one claim's adoption.
type adoptRun struct {
	claimRun
	classes map[string]string
	// begun is the LogicalVolume of the adoption an earlier run began, or
	// nil.
	begun *thinlvmv1.LogicalVolume
}

func (r *adoptRun) run(ctx context.Context) error {
	if r.begun != nil {
		if err := r.waitAdopted(ctx, r.begun.Name); err != nil {
			return err
		}
		return r.finish(ctx, r.begun)
	}
	claim := &corev1.PersistentVolumeClaim{}
	if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: r.claim}, claim); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("claim %s not found", r.key())
		}
		return fmt.Errorf("reading claim %s: %w", r.key(), err)
	}
	if claim.Status.Phase != corev1.ClaimBound || claim.Spec.VolumeName == "" {
		return fmt.Errorf("claim %s is %s, not Bound: it has no volume to adopt", r.key(), claim.Status.Phase)
	}
	pv := &corev1.PersistentVolume{}
	if err := r.c.Get(ctx, types.NamespacedName{Name: claim.Spec.VolumeName}, pv); err != nil {
		return fmt.Errorf("reading persistentvolume/%s: %w", claim.Spec.VolumeName, err)
	}
	switch {
	case pv.Spec.CSI != nil && pv.Spec.CSI.Driver == thinlvmv1.DriverName:
		r.say("claim %s is thinlvm's already (persistentvolume/%s)", r.key(), pv.Name)
		return nil
	case pv.Spec.CSI == nil || pv.Spec.CSI.Driver != topoDriver:
		return fmt.Errorf("claim %s's persistentvolume/%s is not TopoLVM's (%s)", r.key(), pv.Name, topoDriver)
	}
	lv, err := r.plan(ctx, claim, pv)
	if err != nil {
		return err
	}
	if pods, err := podsUsing(ctx, r.c, r.ns, r.claim); err != nil {
		return err
	} else if len(pods) > 0 {
		return fmt.Errorf("claim %s is in use by pod(s) %s: stop them first", r.key(), strings.Join(pods, ", "))
	}
	verb := "adopting"
	if r.dryRun {
		verb = "would adopt"
	}
	r.say("%s claim %s (persistentvolume/%s, %s): LV %s on node %s into device class %q of storageclass/%s",
		verb, r.key(), pv.Name, pv.Spec.Capacity.Storage(), lv.Name, lv.Spec.NodeName, lv.Spec.DeviceClass, r.classes[ptr.Deref(claim.Spec.StorageClassName, "")])
	if err := r.step(fmt.Sprintf("hold TopoLVM's persistentvolume/%s at reclaim policy Retain", pv.Name), func() error {
		return r.holdAtRetain(ctx, pv.Name, annAdoptReclaim)
	}); err != nil {
		return err
	}
	if err := r.step(fmt.Sprintf("create logicalvolume/%s, taking over the LV in place", lv.Name), func() error {
		if err := r.c.Create(ctx, lv); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return r.waitAdopted(ctx, lv.Name)
	}); err != nil {
		return err
	}
	return r.finish(ctx, lv)
}

// plan checks what the adoption needs and returns the LogicalVolume that
// takes the LV over, with the claim and volume to make recorded on it.
func (r *adoptRun) plan(ctx context.Context, claim *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) (*thinlvmv1.LogicalVolume, error) {
	id := pv.Spec.CSI.VolumeHandle
	if err := lvmname.ValidateLVName(id); err != nil {
		return nil, fmt.Errorf("persistentvolume/%s's volume %q cannot be a thinlvm volume's LV name: %w", pv.Name, id, err)
	}
	if errs := validation.IsDNS1123Subdomain(id); len(errs) > 0 {
		return nil, fmt.Errorf("persistentvolume/%s's volume %q cannot name a thinlvm LogicalVolume: %s", pv.Name, id, strings.Join(errs, "; "))
	}
	topo := &unstructured.Unstructured{}
	topo.SetGroupVersionKind(topoLogicalVolume)
	if err := r.c.Get(ctx, types.NamespacedName{Name: pv.Name}, topo); err != nil {
		return nil, fmt.Errorf("reading TopoLVM's logicalvolume/%s (topolvm.io/v1) of persistentvolume/%s: %w", pv.Name, pv.Name, err)
	}
	node, _, _ := unstructured.NestedString(topo.Object, "spec", "nodeName")
	volumeID, _, _ := unstructured.NestedString(topo.Object, "status", "volumeID")
	if volumeID != id || node == "" {
		return nil, fmt.Errorf("TopoLVM's logicalvolume/%s has volume %q on node %q, persistentvolume/%s names volume %q", pv.Name, volumeID, node, pv.Name, id)
	}
	from := ptr.Deref(claim.Spec.StorageClassName, "")
	to, ok := r.classes[from]
	if !ok {
		return nil, fmt.Errorf("claim %s is of TopoLVM's storageclass %q: say which thinlvm StorageClass takes it (--storage-class %s=THINLVM)", r.key(), from, from)
	}
	sc := &storagev1.StorageClass{}
	if err := r.c.Get(ctx, types.NamespacedName{Name: to}, sc); err != nil {
		return nil, fmt.Errorf("reading storageclass/%s: %w", to, err)
	}
	if sc.Provisioner != thinlvmv1.DriverName {
		return nil, fmt.Errorf("storageclass/%s is %s's, not thinlvm's", to, sc.Provisioner)
	}
	if sc.Parameters[thinlvmv1.GoldenImageParameter] != "" || sc.Parameters[thinlvmv1.GoldenImageChannelParameter] != "" {
		return nil, fmt.Errorf("storageclass/%s makes golden-image disks: adopt into a class of plain volumes", to)
	}
	class := sc.Parameters[thinlvmv1.DeviceClassParameter]
	ln := &thinlvmv1.LVMNode{}
	if err := r.c.Get(ctx, types.NamespacedName{Name: node}, ln); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("node %s does not run thinlvm (no LVMNode %s)", node, node)
		}
		return nil, fmt.Errorf("reading lvmnode/%s: %w", node, err)
	}
	dc := ln.Status.DeviceClass(class)
	switch {
	case dc == nil:
		return nil, fmt.Errorf("node %s has no device class %q (storageclass/%s's)", node, class, to)
	case dc.Unavailable != "":
		return nil, fmt.Errorf("node %s's device class %s is unavailable: %s", node, dc.Name, dc.Unavailable)
	}
	size := pv.Spec.Capacity[corev1.ResourceStorage]
	if cur, ok, _ := unstructured.NestedString(topo.Object, "status", "currentSize"); ok {
		if q, err := resource.ParseQuantity(cur); err == nil && q.Cmp(size) > 0 {
			size = q
		}
	}
	// The claim as it is made again, and the volume it binds to.
	saved := corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: claim.Namespace, Name: claim.Name, Labels: claim.Labels,
			Annotations: claimAnnotations(claim.Annotations), OwnerReferences: claim.OwnerReferences},
		Spec: *claim.Spec.DeepCopy(),
	}
	saved.Spec.StorageClassName = &to
	saved.Spec.VolumeName = pv.Name
	saved.Spec.DataSource, saved.Spec.DataSourceRef = nil, nil
	policy := pv.Spec.PersistentVolumeReclaimPolicy
	if p, ok := pv.Annotations[annAdoptReclaim]; ok {
		policy = corev1.PersistentVolumeReclaimPolicy(p)
	}
	fsType := ""
	if pv.Spec.VolumeMode == nil || *pv.Spec.VolumeMode == corev1.PersistentVolumeFilesystem {
		fsType = pv.Spec.CSI.FSType
		if fsType == "" {
			fsType = sc.Parameters["csi.storage.k8s.io/fstype"]
		}
	}
	newPV := corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv.Name, Labels: pv.Labels, Annotations: map[string]string{annProvisionedBy: thinlvmv1.DriverName}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   pv.Spec.AccessModes,
			VolumeMode:                    pv.Spec.VolumeMode,
			MountOptions:                  pv.Spec.MountOptions,
			StorageClassName:              to,
			PersistentVolumeReclaimPolicy: policy,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: claim.Namespace, Name: claim.Name},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: thinlvmv1.DriverName, VolumeHandle: id, FSType: fsType,
				VolumeAttributes: map[string]string{thinlvmv1.DeviceClassParameter: class},
			}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: thinlvmv1.TopologyKey, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}},
		},
	}
	savedJSON, err := json.Marshal(saved)
	if err != nil {
		return nil, err
	}
	pvJSON, err := json.Marshal(newPV)
	if err != nil {
		return nil, err
	}
	return &thinlvmv1.LogicalVolume{
		ObjectMeta: metav1.ObjectMeta{Name: id, Annotations: map[string]string{annAdoptOf: r.key(), annAdoptClaim: string(savedJSON),
			annAdoptVolume: string(pvJSON), annAdoptFrom: topo.GetName()}},
		Spec: thinlvmv1.LogicalVolumeSpec{Name: pv.Name, NodeName: node, DeviceClass: class, Size: size, Adopt: true,
			AccessType: thinlvmv1.AccessReadWrite, Role: thinlvmv1.RoleVolume},
	}, nil
}

// waitAdopted waits until thinlvm's node agent took the LV over (the
// LogicalVolume Ready), and stops at its refusal.
func (r *adoptRun) waitAdopted(ctx context.Context, name string) error {
	if r.dryRun {
		return nil
	}
	var said string
	return wait.PollUntilContextCancel(ctx, r.poll, true, func(ctx context.Context) (bool, error) {
		lv := &thinlvmv1.LogicalVolume{}
		if err := r.c.Get(ctx, types.NamespacedName{Name: name}, lv); err != nil {
			if apierrors.IsNotFound(err) {
				return false, fmt.Errorf("logicalvolume/%s is gone: someone deleted it; run adopt again to start over", name)
			}
			return false, err
		}
		switch {
		case !lv.DeletionTimestamp.IsZero():
			return false, fmt.Errorf("logicalvolume/%s is being deleted: the adoption stops here; run adopt again once it is gone", name)
		case !lv.Spec.Adopt:
			return false, fmt.Errorf("logicalvolume/%s lost spec.adopt: the cluster's LogicalVolume CRD predates adoption; upgrade thinlvm's CRDs, delete logicalvolume/%s and run adopt again", name, name)
		case meta.IsStatusConditionTrue(lv.Status.Conditions, thinlvmv1.ConditionReady):
			return true, nil
		}
		c := meta.FindStatusCondition(lv.Status.Conditions, thinlvmv1.ConditionFailed)
		if c == nil || c.Status != metav1.ConditionTrue {
			return false, nil
		}
		switch c.Reason {
		case thinlvmv1.ReasonForeignLV, thinlvmv1.ReasonInvalidSpec, thinlvmv1.ReasonConflict:
			// Not retried, and the LV was not taken over: the refusal is
			// the agent's only step.
			return false, fmt.Errorf("thinlvm's node agent on node %s refuses it (%s): %s; the LV is TopoLVM's still and its claim unchanged "+
				"(its persistentvolume is held at reclaim policy Retain, the policy before in its annotation %s): "+
				"delete logicalvolume/%s (its LV stays: the agent removes only an LV it took over), fix the cause and run adopt again",
				lv.Spec.NodeName, c.Reason, c.Message, annAdoptReclaim, name)
		}
		if c.Message != said { // retried by the agent: say why, and wait
			said = c.Message
			r.say("  thinlvm's node agent on node %s: %s (%s); it tries again", lv.Spec.NodeName, c.Message, c.Reason)
		}
		return false, nil
	})
}

// finish is the adoption after the LV is thinlvm's: the claim and TopoLVM's
// volume replaced by thinlvm's, TopoLVM's LogicalVolume removed. Each step
// finds whether it is done already.
func (r *adoptRun) finish(ctx context.Context, lv *thinlvmv1.LogicalVolume) error {
	var saved corev1.PersistentVolumeClaim
	var newPV corev1.PersistentVolume
	if err := json.Unmarshal([]byte(lv.Annotations[annAdoptClaim]), &saved); err != nil {
		return fmt.Errorf("logicalvolume/%s's %s: %w", lv.Name, annAdoptClaim, err)
	}
	if err := json.Unmarshal([]byte(lv.Annotations[annAdoptVolume]), &newPV); err != nil {
		return fmt.Errorf("logicalvolume/%s's %s: %w", lv.Name, annAdoptVolume, err)
	}
	pvName := newPV.Name
	// First, now that the LV is thinlvm's: TopoLVM's LogicalVolume, whose
	// deletion would have TopoLVM's node agent remove the LV.
	from := lv.Annotations[annAdoptFrom]
	if err := r.step(fmt.Sprintf("remove TopoLVM's logicalvolume/%s, marked for TopoLVM to leave its LV alone", from), func() error {
		return r.removeTopoLV(ctx, from)
	}); err != nil {
		return err
	}
	claim := &corev1.PersistentVolumeClaim{}
	err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: r.claim}, claim)
	old := &corev1.PersistentVolume{}
	oldErr := r.c.Get(ctx, types.NamespacedName{Name: pvName}, old)
	oldIsTopo := oldErr == nil && old.Spec.CSI != nil && old.Spec.CSI.Driver == topoDriver
	switch {
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading claim %s: %w", r.key(), err)
	case oldErr != nil && !apierrors.IsNotFound(oldErr):
		return fmt.Errorf("reading persistentvolume/%s: %w", pvName, oldErr)
	case err == nil && claim.Spec.VolumeName != pvName:
		return fmt.Errorf("claim %s was made again by someone else, bound to %q, not persistentvolume/%s: resolve by hand (logicalvolume/%s holds the data)",
			r.key(), claim.Spec.VolumeName, pvName, lv.Name)
	case err == nil && oldIsTopo && claim.Spec.VolumeName == pvName:
		if pods, err := podsUsing(ctx, r.c, r.ns, r.claim); err != nil {
			return err
		} else if len(pods) > 0 && !r.dryRun {
			return fmt.Errorf("pod(s) %s use claim %s: stop them and run adopt again", strings.Join(pods, ", "), r.key())
		}
		if err := r.step(fmt.Sprintf("delete claim %s (TopoLVM's persistentvolume/%s is kept)", r.key(), pvName), func() error {
			return r.deleteClaim(ctx, claim)
		}); err != nil {
			return err
		}
	}
	if oldIsTopo || r.dryRun {
		if err := r.step(fmt.Sprintf("delete TopoLVM's persistentvolume/%s (Retain: its LV is kept)", pvName), func() error {
			return r.deleteTopoPV(ctx, pvName)
		}); err != nil {
			return err
		}
	}
	if err := r.step(fmt.Sprintf("create thinlvm's persistentvolume/%s for logicalvolume/%s on node %s, for claim %s", pvName, lv.Name, lv.Spec.NodeName, r.key()), func() error {
		if err := r.c.Create(ctx, &newPV); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	}); err != nil {
		return err
	}
	if err := r.step(fmt.Sprintf("make claim %s again in storageclass/%s, bound to persistentvolume/%s", r.key(), *saved.Spec.StorageClassName, pvName), func() error {
		return r.rebind(ctx, pvName, &saved)
	}); err != nil {
		return err
	}
	if err := r.step(fmt.Sprintf("drop the adoption's record from logicalvolume/%s", lv.Name), func() error {
		got := &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: lv.Name}}
		return patchFresh(ctx, r.c, got, func() error {
			for _, a := range []string{annAdoptOf, annAdoptClaim, annAdoptVolume, annAdoptFrom} {
				delete(got.Annotations, a)
			}
			return nil
		})
	}); err != nil {
		return err
	}
	if !r.dryRun {
		r.say("claim %s is thinlvm's: logicalvolume/%s on node %s", r.key(), lv.Name, lv.Spec.NodeName)
	}
	return nil
}

// deleteTopoPV deletes TopoLVM's volume, held at Retain, and waits until it
// is gone. TopoLVM's provisioner would drop its finalizer from a Retain
// volume without deleting anything; the adoption drops it itself, as
// TopoLVM's provisioner may be gone.
func (r *adoptRun) deleteTopoPV(ctx context.Context, name string) error {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}}
	err := patchFresh(ctx, r.c, pv, func() error {
		if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
			return fmt.Errorf("persistentvolume/%s is not held at Retain", name)
		}
		pv.Finalizers = slices.DeleteFunc(pv.Finalizers, func(f string) bool { return f == provisionerFinalizer })
		return nil
	})
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	if err := r.c.Delete(ctx, pv, client.Preconditions{UID: &pv.UID}); client.IgnoreNotFound(err) != nil {
		return err
	}
	return wait.PollUntilContextCancel(ctx, r.poll, true, func(ctx context.Context) (bool, error) {
		got := &corev1.PersistentVolume{}
		err := r.c.Get(ctx, types.NamespacedName{Name: name}, got)
		if apierrors.IsNotFound(err) || err == nil && got.UID != pv.UID {
			return true, nil
		}
		return false, err
	})
}

// removeTopoLV deletes TopoLVM's LogicalVolume so that TopoLVM's node agent
// does not remove the LV: marked pending deletion (its agent then leaves the
// object alone) and without its finalizer (which would have the agent
// remove the LV), then deleted.
func (r *adoptRun) removeTopoLV(ctx context.Context, name string) error {
	topo := &unstructured.Unstructured{}
	topo.SetGroupVersionKind(topoLogicalVolume)
	topo.SetName(name)
	err := patchFresh(ctx, r.c, topo, func() error {
		ann := topo.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[topoPendingDeletion] = "true"
		topo.SetAnnotations(ann)
		topo.SetFinalizers(slices.DeleteFunc(topo.GetFinalizers(), func(f string) bool { return f == topoFinalizer }))
		return nil
	})
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := r.c.Delete(ctx, topo); client.IgnoreNotFound(err) != nil {
		return err
	}
	return wait.PollUntilContextCancel(ctx, r.poll, true, func(ctx context.Context) (bool, error) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(topoLogicalVolume)
		err := r.c.Get(ctx, types.NamespacedName{Name: name}, got)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

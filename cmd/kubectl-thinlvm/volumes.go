package main

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// Volume is one claim of a thinlvm StorageClass, as `volumes` shows it.
type Volume struct {
	Namespace string `json:"namespace"`
	Claim     string `json:"claim"`
	// Phase is the claim's phase; State, its LogicalVolume's (Ready,
	// Pending with the reason, or Failed with it).
	Phase string `json:"phase"`
	State string `json:"state"`
	// Volume is the LogicalVolume (the CSI volume handle), Node where it is.
	Volume      string `json:"volume,omitempty"`
	Node        string `json:"node,omitempty"`
	DeviceClass string `json:"deviceClass,omitempty"`
	Size        string `json:"size,omitempty"`
	// Origin is what the volume was made from: empty, a golden image's base,
	// a clone of a volume, a restore of a snapshot; CopiedFrom, the node
	// its data was copied from when that was another node.
	Origin     string `json:"origin"`
	CopiedFrom string `json:"copiedFrom,omitempty"`
	// Base is the golden base the copy sent only the differing blocks
	// against.
	Base string `json:"base,omitempty"`
	// PoolDataPercent is the data use of the thin pool the volume is in.
	PoolDataPercent string `json:"poolDataPercent,omitempty"`
}

func newVolumesCommand(o *options) *cobra.Command {
	var all bool
	var node string
	cmd := &cobra.Command{
		Use:   "volumes [CLAIM...]",
		Short: "thinlvm's claims: node, size, what each was made from, its pool's use",
		RunE: func(cmd *cobra.Command, args []string) error {
			return volumes(cmd.Context(), o, all, node, args)
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "Claims of every namespace.")
	cmd.Flags().StringVar(&node, "node", "", "Only the volumes on this node.")
	return cmd
}

func volumes(ctx context.Context, o *options, all bool, node string, names []string) error {
	c, err := o.client()
	if err != nil {
		return err
	}
	var inNS []client.ListOption
	ns := ""
	if !all {
		if ns, err = o.namespace(); err != nil {
			return err
		}
		inNS = append(inNS, client.InNamespace(ns))
	} else if len(names) > 0 {
		return fmt.Errorf("claims are named in one namespace: -A takes no names")
	}
	claims := &corev1.PersistentVolumeClaimList{}
	if err := c.List(ctx, claims, inNS...); err != nil {
		return fmt.Errorf("listing claims: %w", err)
	}
	classes := &storagev1.StorageClassList{}
	if err := c.List(ctx, classes); err != nil {
		return fmt.Errorf("listing StorageClasses: %w", err)
	}
	ours := map[string]bool{}
	for _, sc := range classes.Items {
		ours[sc.Name] = sc.Provisioner == thinlvmv1.DriverName
	}
	lvmNodes := &thinlvmv1.LVMNodeList{}
	if err := c.List(ctx, lvmNodes); err != nil {
		return fmt.Errorf("listing LVMNodes: %w", err)
	}
	byName := map[string]*thinlvmv1.LVMNode{}
	for i := range lvmNodes.Items {
		byName[lvmNodes.Items[i].Name] = &lvmNodes.Items[i]
	}
	r := report[Volume]{
		columns: []metav1.TableColumnDefinition{
			column("Namespace", "The claim's namespace.", false),
			column("Claim", "The claim.", false),
			column("Node", "The node the volume is on.", false),
			column("Size", "The volume's size.", false),
			column("Origin", "What the volume was made from.", false),
			column("State", "The LogicalVolume's state.", false),
			column("Pool-Data%", "The data use of the volume's thin pool.", false),
			column("Volume", "The LogicalVolume (the CSI volume handle).", true),
			column("Class", "The device class.", true),
			column("Copied-From", "The node the data was copied from.", true),
			column("Base", "The golden base a copy sent the differing blocks against.", true),
		},
		row: func(v Volume) []any {
			origin := v.Origin
			if v.CopiedFrom != "" {
				origin += ", copied from " + v.CopiedFrom
			}
			return []any{v.Namespace, v.Claim, dash(v.Node), dash(v.Size), origin, v.State, dash(v.PoolDataPercent),
				dash(v.Volume), dash(v.DeviceClass), dash(v.CopiedFrom), dash(v.Base)}
		},
	}
	found := map[string]bool{}
	for i := range claims.Items {
		pvc := &claims.Items[i]
		if len(names) > 0 && !slices.Contains(names, pvc.Name) {
			continue
		}
		found[pvc.Name] = true
		v, ok, err := volume(ctx, c, pvc, ours, byName)
		if err != nil {
			return err
		}
		if !ok || node != "" && v.Node != node {
			if len(names) > 0 && !ok {
				return fmt.Errorf("claim %s/%s is not thinlvm's", pvc.Namespace, pvc.Name)
			}
			continue
		}
		r.items = append(r.items, v)
	}
	for _, name := range names {
		if !found[name] {
			return fmt.Errorf("claim %s/%s not found", ns, name)
		}
	}
	sort.Slice(r.items, func(i, j int) bool {
		a, b := r.items[i], r.items[j]
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Claim < b.Claim
	})
	return show(o, r)
}

// volume is what `volumes` shows of a claim, and false when the claim is
// not thinlvm's (neither its class nor its bound volume).
func volume(ctx context.Context, c client.Client, pvc *corev1.PersistentVolumeClaim, ours map[string]bool, lvmNodes map[string]*thinlvmv1.LVMNode) (Volume, bool, error) {
	v := Volume{Namespace: pvc.Namespace, Claim: pvc.Name, Phase: string(pvc.Status.Phase), State: "-", Origin: "-"}
	class := ""
	if pvc.Spec.StorageClassName != nil {
		class = *pvc.Spec.StorageClassName
	}
	if pvc.Spec.VolumeName == "" {
		if !ours[class] {
			return v, false, nil
		}
		v.State = "Pending: no volume yet"
		if node := pvc.Annotations["volume.kubernetes.io/selected-node"]; node != "" {
			v.Node = node
		}
		return v, true, nil
	}
	pv := &corev1.PersistentVolume{}
	if err := c.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return v, false, fmt.Errorf("reading PersistentVolume %s of claim %s/%s: %w", pvc.Spec.VolumeName, pvc.Namespace, pvc.Name, err)
		}
		if !ours[class] {
			return v, false, nil
		}
		v.State = "PersistentVolume " + pvc.Spec.VolumeName + " not found"
		return v, true, nil
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != thinlvmv1.DriverName {
		return v, false, nil
	}
	v.Volume = pv.Spec.CSI.VolumeHandle
	lv := &thinlvmv1.LogicalVolume{}
	if err := c.Get(ctx, client.ObjectKey{Name: v.Volume}, lv); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return v, false, fmt.Errorf("reading LogicalVolume %s of claim %s/%s: %w", v.Volume, pvc.Namespace, pvc.Name, err)
		}
		v.State = "LogicalVolume not found"
		return v, true, nil
	}
	v.Node, v.DeviceClass, v.Size = lv.Spec.NodeName, lv.Spec.DeviceClass, lv.Spec.Size.String()
	if lv.Status.CurrentSize != nil {
		v.Size = lv.Status.CurrentSize.String()
	}
	v.Origin = origin(lv.Spec.Source)
	if t := lv.Status.Transfer; t != nil && t.SourceNode != lv.Spec.NodeName {
		v.CopiedFrom, v.Base = t.SourceNode, t.Base
	}
	v.State = lvState(lv)
	if ln := lvmNodes[v.Node]; ln != nil {
		if dc := ln.Status.DeviceClass(v.DeviceClass); dc != nil {
			v.PoolDataPercent, v.DeviceClass = dc.DataPercent, dc.Name
		}
	}
	return v, true, nil
}

// origin says what a volume was made from.
func origin(src *thinlvmv1.VolumeSource) string {
	if src == nil {
		return "empty"
	}
	switch src.Kind {
	case thinlvmv1.SourceGoldenImage:
		return "golden image " + src.Name
	case thinlvmv1.SourceVolume:
		return "clone of " + src.Name
	case thinlvmv1.SourceSnapshot:
		return "restore of " + src.Name
	}
	return string(src.Kind) + " " + src.Name
}

// lvState is Ready, or Failed or Pending with the condition's reason.
func lvState(lv *thinlvmv1.LogicalVolume) string {
	if f := meta.FindStatusCondition(lv.Status.Conditions, thinlvmv1.ConditionFailed); f != nil && f.Status == metav1.ConditionTrue {
		return "Failed: " + f.Reason
	}
	r := meta.FindStatusCondition(lv.Status.Conditions, thinlvmv1.ConditionReady)
	switch {
	case r == nil:
		return "Pending"
	case r.Status == metav1.ConditionTrue:
		if t := lv.Status.Transfer; t != nil && t.CompletionTime == nil && t.BytesTotal > 0 {
			return fmt.Sprintf("Copying %d%%", t.BytesDone*100/t.BytesTotal)
		}
		return "Ready"
	}
	if t := lv.Status.Transfer; t != nil && t.BytesTotal > 0 && t.CompletionTime == nil {
		return fmt.Sprintf("Pending: %s %d%%", r.Reason, t.BytesDone*100/t.BytesTotal)
	}
	return "Pending: " + r.Reason
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

package main

import (
	"cmp"
	"context"
	"fmt"
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
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

func newEvacuateCommand(o *options) *cobra.Command {
	m := &mover{poll: 2 * time.Second}
	var to []string
	parallel := 2
	cmd := &cobra.Command{
		Use:   "evacuate NODE",
		Short: "Cordon a node and move every thinlvm claim on it to other nodes",
		Long: `Evacuate cordons the node, then moves every thinlvm claim whose volume is
on it (as move does, keeping each claim's name), up to --parallel at a time,
and reports what it moved and what it could not. Each claim goes to the node
with the most room among --to's (default: every other schedulable node
running thinlvm), nodes holding the claim's golden base first.

Claims whose pods run are refused unless --scale-down stops their workload.
Run it again after an interruption or a refusal: moves begun continue,
claims already moved are not on the node any more.`,
		Example: `  kubectl thinlvm evacuate n1 --dry-run
  kubectl thinlvm evacuate n1 --scale-down --parallel 4`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			m.c, m.out = c, o.streams.Out
			return m.evacuate(cmd.Context(), args[0], to, parallel)
		},
	}
	cmd.Flags().StringSliceVar(&to, "to", nil, "The nodes to move to (default: every other schedulable node running thinlvm).")
	cmd.Flags().IntVar(&parallel, "parallel", parallel, "How many moves run at once.")
	m.flags(cmd)
	return cmd
}

// evacuation is one claim of an evacuated node.
type evacuation struct {
	ns, claim, to string
	class         string
	size          resource.Quantity
	base          string
	result        string
}

func (m *mover) evacuate(ctx context.Context, node string, to []string, parallel int) error {
	if parallel < 1 {
		return fmt.Errorf("--parallel %d: want at least 1", parallel)
	}
	if slices.Contains(to, node) {
		return fmt.Errorf("--to names the node evacuated, %s", node)
	}
	if m.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.timeout)
		defer cancel()
	}
	n := &corev1.Node{}
	if err := m.c.Get(ctx, types.NamespacedName{Name: node}, n); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("node %s not found", node)
		}
		return fmt.Errorf("reading node %s: %w", node, err)
	}
	run := &claimRun{mover: m}
	if !n.Spec.Unschedulable {
		if err := run.step("cordon node "+node, func() error {
			base := n.DeepCopy()
			n.Spec.Unschedulable = true
			return m.c.Patch(ctx, n, client.MergeFrom(base))
		}); err != nil {
			return err
		}
	}
	todo, snapshots, err := m.onNode(ctx, node)
	if err != nil {
		return err
	}
	if len(todo) == 0 {
		m.say("", "node %s holds no thinlvm claim", node)
	}
	if err := m.placeAll(ctx, node, to, todo); err != nil {
		return err
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for _, e := range todo {
		if e.to == "" {
			continue
		}
		sem <- struct{}{} // in order: with --parallel 1, one after the other
		wg.Go(func() {
			defer func() { <-sem }()
			r := &moveRun{claimRun: claimRun{mover: m, ns: e.ns, claim: e.claim, prefix: e.ns + "/" + e.claim + ": "}, to: e.to}
			if err := r.run(ctx); err != nil {
				e.result = err.Error()
			} else if m.dryRun {
				e.result = "would move"
			} else {
				e.result = "moved"
			}
		})
	}
	wg.Wait()
	return m.report(node, todo, snapshots)
}

func (m *mover) say(prefix, format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fmt.Fprintf(m.out, prefix+format+"\n", args...)
}

// onNode are the claims whose volumes are on the node, moves of them begun
// by an earlier run included, and the node's snapshots (which evacuate
// does not move).
func (m *mover) onNode(ctx context.Context, node string) ([]*evacuation, int, error) {
	pvs := &corev1.PersistentVolumeList{}
	if err := m.c.List(ctx, pvs); err != nil {
		return nil, 0, fmt.Errorf("listing PersistentVolumes: %w", err)
	}
	lvs := &thinlvmv1.LogicalVolumeList{}
	if err := m.c.List(ctx, lvs); err != nil {
		return nil, 0, fmt.Errorf("listing LogicalVolumes: %w", err)
	}
	byName := map[string]*thinlvmv1.LogicalVolume{}
	snapshots := 0
	for i := range lvs.Items {
		lv := &lvs.Items[i]
		byName[lv.Name] = lv
		if lv.Spec.NodeName == node && lv.Spec.Role == thinlvmv1.RoleSnapshot {
			snapshots++
		}
	}
	oldOf := map[string]string{}  // old PV -> the claim a half-done move records
	handle := map[string]string{} // PV -> its LogicalVolume
	for _, pv := range pvs.Items {
		if of := moveRecord(&pv); of != "" {
			oldOf[pv.Annotations[annMoveFrom]] = of
		}
		if pv.Spec.CSI != nil {
			handle[pv.Name] = pv.Spec.CSI.VolumeHandle
		}
	}
	var out []*evacuation
	for _, pv := range pvs.Items {
		if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != thinlvmv1.DriverName {
			continue
		}
		lv := byName[pv.Spec.CSI.VolumeHandle]
		if of := moveRecord(&pv); of != "" && lv != nil {
			// A move past its copy: finish it to where it copied.
			if old := byName[handle[pv.Annotations[annMoveFrom]]]; old == nil || old.Spec.NodeName == node {
				ns, claim := splitKey(of)
				out = append(out, &evacuation{ns: ns, claim: claim, to: lv.Spec.NodeName, class: lv.Spec.DeviceClass, size: lv.Spec.Size})
			}
			continue
		}
		if lv == nil || lv.Spec.NodeName != node || pv.Spec.ClaimRef == nil || pv.Status.Phase != corev1.VolumeBound || oldOf[pv.Name] != "" {
			continue
		}
		out = append(out, &evacuation{ns: pv.Spec.ClaimRef.Namespace, claim: pv.Spec.ClaimRef.Name, class: lv.Spec.DeviceClass,
			size: lv.Spec.Size, base: thinlvmv1.SourceImage(lv, func(name string) *thinlvmv1.LogicalVolume { return byName[name] })})
	}
	slices.SortFunc(out, func(a, b *evacuation) int { return cmp.Or(cmp.Compare(a.ns, b.ns), cmp.Compare(a.claim, b.claim)) })
	return out, snapshots, nil
}

func splitKey(key string) (string, string) {
	ns, name, _ := strings.Cut(key, "/")
	return ns, name
}

// placeAll chooses each claim's node: a move begun keeps its own; the rest
// go, largest first, to the candidate holding the claim's golden base with
// the most room left, or to the roomiest other one.
func (m *mover) placeAll(ctx context.Context, node string, to []string, todo []*evacuation) error {
	lnodes := &thinlvmv1.LVMNodeList{}
	if err := m.c.List(ctx, lnodes); err != nil {
		return fmt.Errorf("listing LVMNodes: %w", err)
	}
	nodes := &corev1.NodeList{}
	if err := m.c.List(ctx, nodes); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	schedulable := map[string]bool{}
	for _, n := range nodes.Items {
		schedulable[n.Name] = !n.Spec.Unschedulable
	}
	for _, name := range to {
		if _, ok := schedulable[name]; !ok {
			return fmt.Errorf("--to names node %s, which does not exist", name)
		}
	}
	images := &thinlvmv1.GoldenImageList{}
	if err := m.c.List(ctx, images); err != nil {
		return fmt.Errorf("listing GoldenImages: %w", err)
	}
	image := map[string]*thinlvmv1.GoldenImage{}
	for i := range images.Items {
		image[images.Items[i].Name] = &images.Items[i]
	}
	// The candidates, and the room left in each of their available device
	// classes as placements take it.
	var candidates []*thinlvmv1.LVMNode
	room := map[string]map[string]*resource.Quantity{} // node -> class -> room left
	for i := range lnodes.Items {
		ln := &lnodes.Items[i]
		if ln.Name == node || !schedulable[ln.Name] || len(to) > 0 && !slices.Contains(to, ln.Name) {
			continue
		}
		candidates = append(candidates, ln)
		room[ln.Name] = map[string]*resource.Quantity{}
		for _, dc := range ln.Status.DeviceClasses {
			if dc.Unavailable == "" {
				room[ln.Name][dc.Name] = new(dc.Available.DeepCopy())
			}
		}
	}
	// left is the room left on a node in a volume's device class ("" is the
	// node's default), nil when it has no such class available.
	left := func(ln *thinlvmv1.LVMNode, class string) *resource.Quantity {
		if dc := ln.Status.DeviceClass(class); dc != nil {
			return room[ln.Name][dc.Name]
		}
		return nil
	}
	// holds tells whether a node holds a Ready base of the image (this
	// image's: its UID, not only its name), so that the copy sends only
	// the blocks that differ from it.
	holds := func(ln *thinlvmv1.LVMNode, name string) bool {
		gi := image[name]
		return gi != nil && ln.Status.BaseState(gi) == thinlvmv1.GoldenBaseReady
	}
	order := slices.Clone(todo)
	slices.SortStableFunc(order, func(a, b *evacuation) int { return b.size.Cmp(a.size) })
	for _, e := range order {
		if e.to != "" {
			continue
		}
		if clone := m.cloneTarget(ctx, e); clone != "" {
			e.to = clone
			continue
		}
		var best *thinlvmv1.LVMNode
		for _, ln := range candidates {
			q := left(ln, e.class)
			if q == nil || q.Cmp(e.size) < 0 {
				continue
			}
			if best == nil {
				best = ln
				continue
			}
			hb, hn := holds(best, e.base), holds(ln, e.base)
			if hn && !hb || hn == hb && q.Cmp(*left(best, e.class)) > 0 {
				best = ln
			}
		}
		if best == nil {
			e.result = fmt.Sprintf("no node has room for %s in device class %q", e.size.String(), e.class)
			continue
		}
		e.to = best.Name
		left(best, e.class).Sub(e.size)
	}
	return nil
}

// cloneTarget is the node an earlier run's move of the claim copies to, or
// "".
func (m *mover) cloneTarget(ctx context.Context, e *evacuation) string {
	r := &moveRun{claimRun: claimRun{mover: m, ns: e.ns, claim: e.claim}}
	clone := &corev1.PersistentVolumeClaim{}
	if err := m.c.Get(ctx, types.NamespacedName{Namespace: e.ns, Name: r.cloneName()}, clone); err != nil || clone.Annotations[annMoveOf] != r.key() {
		return ""
	}
	return clone.Annotations[annMoveTo]
}

// report prints each claim's outcome and fails when any was not moved.
func (m *mover) report(node string, todo []*evacuation, snapshots int) error {
	table := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		column("Namespace", "", false), column("Claim", "", false), column("Size", "", false),
		column("To", "", false), column("Result", "", false)}}
	failed := 0
	for _, e := range todo {
		if e.result != "moved" && e.result != "would move" {
			failed++
		}
		table.Rows = append(table.Rows, metav1.TableRow{Cells: []any{e.ns, e.claim, e.size.String(), dash(e.to), e.result}})
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(todo) > 0 {
		if err := printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(table, m.out); err != nil {
			return err
		}
	}
	if snapshots > 0 {
		fmt.Fprintf(m.out, "node %s still holds %d volume snapshot(s): restore them on another node or delete them\n", node, snapshots)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d claims on node %s were not moved: see above, then run evacuate again", failed, len(todo), node)
	}
	return nil
}

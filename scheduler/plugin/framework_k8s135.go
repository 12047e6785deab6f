//go:build !k8s1.34

package plugin

// Kubernetes 1.35 and later: every interface a plugin implements is in
// k8s.io/kube-scheduler/framework. What differs from 1.34 is this file and
// framework_k8s134.go, nothing else (docs/scheduler.md).

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// maxScore is the top of the framework's node score range. MaxScore, which
// deprecates MaxNodeScore, is 1.36's; this file builds 1.35 too.
const maxScore = fwk.MaxNodeScore //nolint:staticcheck // SA1019: 1.35 has no MaxScore

type (
	handle              = fwk.Handle
	fwPlugin            = fwk.Plugin
	preFilterResult     = fwk.PreFilterResult
	preFilterExtensions = fwk.PreFilterExtensions
	scoreExtensions     = fwk.ScoreExtensions
	nodeScoreList       = fwk.NodeScoreList
)

var (
	_ fwk.PreFilterPlugin   = (*Plugin)(nil)
	_ fwk.FilterPlugin      = (*Plugin)(nil)
	_ fwk.PreScorePlugin    = (*Plugin)(nil)
	_ fwk.ReservePlugin     = (*Plugin)(nil)
	_ fwk.ScorePlugin       = (*Plugin)(nil)
	_ fwk.EnqueueExtensions = (*Plugin)(nil)
	_ fwk.SignPlugin        = (*Plugin)(nil)
)

// SignPod lets kube-scheduler batch pods with the same thinlvm demand: it
// reuses one pod's node ranking for the next. That is sound here because
// placing a pod changes this plugin's verdict only for the chosen node
// (its ledger), and the batch re-checks that node.
func (p *Plugin) SignPod(ctx context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	d, err := p.demandOf(ctx, pod)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	var images []string
	for _, gi := range d.images {
		images = append(images, gi.Name)
	}
	slices.Sort(images)
	return []fwk.SignFragment{{Key: "thinlvm.io/demand()", Value: struct {
		Bytes  map[string]int64
		Images []string
		Source string
	}{d.bytes, images, d.sourceNode}}}, nil
}

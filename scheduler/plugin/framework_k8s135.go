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

// SignPod lets kube-scheduler batch pods whose thinlvm claims are the same:
// it reuses one pod's node ranking for the next. The signature is the
// pod's claims (their names, in its namespace), not their demand. The
// queue signs a pod once, when it is added or changes, and keeps the
// signature while the pod waits: a demand read then would go stale as its
// claims bind or their sources move, and it would cost each pod a second
// computation of its demand, which PreFilter makes once per cycle.
// Nothing is lost by it: VolumeBinding, which every profile that binds
// claims runs, signs the claims' names too.
func (p *Plugin) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	claims := []string{}
	for _, c := range podClaims(pod) {
		claims = append(claims, c.claim)
	}
	slices.Sort(claims)
	return []fwk.SignFragment{{Key: "thinlvm.io/claims", Value: struct {
		Namespace string
		Claims    []string
	}{pod.Namespace, claims}}}, nil
}

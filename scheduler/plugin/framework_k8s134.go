//go:build k8s1.34

package plugin

// Kubernetes 1.34 (the scheduler-plugins build, scheduler/k8s1.34): the
// plugin interfaces, the Handle and the results are still in
// k8s.io/kubernetes/pkg/scheduler/framework (the cycle state, node infos and
// statuses already in k8s.io/kube-scheduler/framework), and the framework
// has no SignPlugin: pods are not batched by signature, so every pod is
// ranked on its own.

import (
	framework "k8s.io/kubernetes/pkg/scheduler/framework"
)

// maxScore is the top of the framework's node score range.
const maxScore = framework.MaxNodeScore

type (
	handle              = framework.Handle
	fwPlugin            = framework.Plugin
	preFilterResult     = framework.PreFilterResult
	preFilterExtensions = framework.PreFilterExtensions
	scoreExtensions     = framework.ScoreExtensions
	nodeScoreList       = framework.NodeScoreList
)

var (
	_ framework.PreFilterPlugin   = (*Plugin)(nil)
	_ framework.FilterPlugin      = (*Plugin)(nil)
	_ framework.PreScorePlugin    = (*Plugin)(nil)
	_ framework.ReservePlugin     = (*Plugin)(nil)
	_ framework.ScorePlugin       = (*Plugin)(nil)
	_ framework.EnqueueExtensions = (*Plugin)(nil)
)

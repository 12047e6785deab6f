// Package agent assembles the node agent's API side for one node: the cache
// that sees only that node's objects, the LogicalVolume and golden base
// reconcilers, and the LVMNode publisher. thinlvm-node runs one; the
// hollow-node benchmark runs thousands in a few processes, each on its own
// manager and client identity.
package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/node/diskimage"
	"github.com/thinlvm/thinlvm/node/golden"
	"github.com/thinlvm/thinlvm/node/lvmd"
	"github.com/thinlvm/thinlvm/node/lvmnode"
	"github.com/thinlvm/thinlvm/node/reconciler"
	"github.com/thinlvm/thinlvm/node/transfer"
)

// Cache is the cache of the agent of node: its own LogicalVolumes (selected
// on the API server by spec.nodeName, a selectable field of the CRD), its
// own Node and its own LVMNode. GoldenImages are the only objects it keeps
// cluster-wide. An object of another node is read past the cache, by name,
// where the agent needs one (the source of a copy, a transfer's caller).
func Cache(node string) cache.Options {
	byName := fields.OneTermEqualSelector("metadata.name", node)
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&thinlvmv1.LogicalVolume{}: {Field: fields.OneTermEqualSelector(thinlvmv1.LogicalVolumeNodeField, node)},
		&corev1.Node{}:             {Field: byName},
		&thinlvmv1.LVMNode{}:       {Field: byName},
	}}
}

// Options are what the agent of one node is made of besides its manager.
type Options struct {
	NodeName string
	LVMD     lvmd.Client
	// Metrics registers the agent's metrics.
	Metrics prometheus.Registerer

	// PublishInterval is the least time between two LVMNode writes;
	// PublishDriftInterval the least time between two writes that change
	// only the pools' data and metadata use (lvmnode.Publisher).
	PublishInterval, PublishDriftInterval time.Duration
	// NoSpaceRetryAfter retries a LogicalVolume lvmd refused for lack of
	// space after this long.
	NoSpaceRetryAfter time.Duration
	// Copier copies volumes from other nodes; nil refuses such clones.
	// Peers copies golden bases from nodes that hold them; nil downloads
	// every base from its image's origin.
	Copier, Peers *transfer.Copier
	// Transfer is the node's transfer endpoint the LVMNode publishes; nil
	// for none.
	Transfer *thinlvmv1.TransferEndpoint
	// Golden writes golden bases; GoldenRetry is the first wait after a
	// failed population.
	Golden      *diskimage.Writer
	GoldenRetry time.Duration
	// Namespace is the agent's namespace (golden image download Leases).
	Namespace string
}

// Setup registers the node's reconcilers and publisher with mgr, whose
// cache must be Cache(o.NodeName).
func Setup(mgr ctrl.Manager, o Options) error {
	recorder := mgr.GetEventRecorder("thinlvm-node")
	if err := (&reconciler.LogicalVolumeReconciler{Client: mgr.GetClient(), LVMD: o.LVMD, NodeName: o.NodeName, RetryAfter: o.NoSpaceRetryAfter,
		APIReader: mgr.GetAPIReader(), Recorder: recorder, Metrics: reconciler.NewMetrics(o.Metrics), Copier: o.Copier}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&golden.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), LVMD: o.LVMD, NodeName: o.NodeName,
		Writer: o.Golden, Recorder: recorder, RetryAfter: o.GoldenRetry, Metrics: golden.NewMetrics(o.Metrics), Copier: o.Peers,
		Namespace: o.Namespace}).SetupWithManager(mgr); err != nil {
		return err
	}
	var synced prometheus.Gauge
	if o.Metrics != nil {
		synced = lvmnode.NewSyncedGauge(o.Metrics)
	}
	return mgr.Add(&lvmnode.Publisher{Client: mgr.GetClient(), LVMD: o.LVMD, NodeName: o.NodeName, Interval: o.PublishInterval,
		DriftInterval: o.PublishDriftInterval, Recorder: recorder, Transfer: o.Transfer, Synced: synced})
}

// Package reconciler holds the controller's reconcilers. NodeReconciler
// cleans up after lost nodes: when a Node that runs thinlvm is deleted, it
// deletes the PVCs bound to volumes on that node and the node's
// LogicalVolumes, whose agent is gone with it; it creates nothing and
// touches no node that is still there. GoldenImageReconciler sums up the
// golden bases the nodes report into each GoldenImage's status.
package reconciler

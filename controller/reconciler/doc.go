// Package reconciler holds the controller's reconcilers. NodeReconciler
// cleans up after lost nodes: once a Node that held thinlvm volumes is
// gone, it deletes the PVCs bound to volumes on that node and the node's
// LogicalVolumes, whose agent is gone with it; it creates nothing, holds
// no Node with a finalizer, and touches no node that is still there.
// GoldenImageReconciler sums up the golden bases the nodes report into each
// GoldenImage's status, resolves a pvc or volumeSnapshot source to its
// LogicalVolume once, and keeps an image a channel points at from going;
// GoldenImageChannelReconciler writes each channel's versions. Neither
// makes or removes a base: the node agents do.
package reconciler

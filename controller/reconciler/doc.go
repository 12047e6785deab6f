// Package reconciler is the controller's cleanup after lost nodes: when a
// Node that runs thinlvm is deleted, it deletes the PVCs bound to volumes on
// that node and the node's LogicalVolumes, whose agent is gone with it. It
// creates nothing and touches no node that is still there.
package reconciler

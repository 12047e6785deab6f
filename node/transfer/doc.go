// Package transfer moves a volume's data between nodes: the source node's
// agent serves the ranges of a point-in-time snapshot of the source (only
// what differs from a golden base both nodes hold, or what the source
// maps), and the target node's agent writes them into the new LV. It
// authenticates callers by their pod-bound ServiceAccount token and pins
// the server's certificate from its LVMNode; it must not touch an LV that
// no LogicalVolume of the right nodes names.
package transfer

// Package csi is thinlvm's CSI Controller and Identity services. Volumes and
// snapshots are LogicalVolume objects that the chosen node's agent turns into
// LVs; this package creates, grows and deletes those objects, waits for the
// agent's verdict and answers with lvmd's gRPC code. It runs no lvm command
// and talks to no lvmd.
package csi

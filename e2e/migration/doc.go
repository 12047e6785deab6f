// Package migration is the suite of volumes that move: two real-LVM nodes
// (each its own VM, with its own VG, lvmd and node agent) on the local
// cluster, clones and restores made on the other node than their source's,
// their data sent between the agents' transfer endpoints over the VMs'
// network. It checks that a copy is byte-identical, sends only what differs
// from a golden base both nodes hold (or what the source maps), survives
// its agent's death, refuses another node's token, and that the scheduler
// sends a clone away from a full source node. BenchmarkMove (make bench)
// measures moves of a 4 GiB VM disk.
package migration

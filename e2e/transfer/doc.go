// Package transfer is the end-to-end suite of two real-LVM nodes: the
// local cluster with thinlvm installed from deploy/ and two VM nodes whose
// agents reach each other's transfer endpoint over the VMs' network. It
// only tests; it starts nothing the other suites share.
package transfer

// Package sanity runs the official csi-sanity suite against thinlvm: the CSI
// Controller service on the host over a real kube-apiserver, and the CSI Node
// service with lvmd on real lvm2 in the test VM, joined by a node agent that
// reconciles LogicalVolumes through lvmd's forwarded port.
package sanity

// Package diskimage writes a disk image onto a block device: from an HTTP
// source or an OCI registry (a KubeVirt container disk pinned by digest),
// resuming broken downloads, decompressing gzip, xz and zstd, converting
// qcow2 with qemu-img under resource limits, verifying the sha256 or
// digests while streaming and skipping zero blocks, so that a thin LV
// takes pool space only for the image's data. An image and its server are
// untrusted: they must never reach the node's files, devices or
// link-local network, and credentials never cross the network in clear
// nor follow a redirect to another host.
//
// Its only need of Kubernetes is the Secrets and ConfigMaps a source names,
// which it asks its Credentials for; node/golden, which keeps the node's
// golden bases, gives it the agent's.
package diskimage

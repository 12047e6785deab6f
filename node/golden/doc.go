// Package golden keeps a node's golden bases: for each GoldenImage that a
// LogicalVolume on the node is made from (or whose prewarm selector matches
// the node) it populates one thin LV, once, from the image's HTTP source or
// OCI registry (a KubeVirt container disk pinned by digest): resuming
// broken downloads, decompressing gzip, xz and zstd, converting qcow2 with
// qemu-img, verifying the sha256 or digests while streaming and skipping
// zero blocks, so the base takes pool space only for the image's data. A
// populated base is sealed read-only and inactive; every volume made from
// it is a thin snapshot. Progress and state go to the LVMNode's status and
// to Events on the GoldenImage; a failed population leaves no base. An image
// and its server are untrusted: it must never let them reach the node's
// files, devices or link-local network.
package golden

// Package images is the suite of golden images the KubeVirt way, on two
// real-LVM nodes (each its own VM) of the local cluster: a base pulled from
// an OCI registry's container-disk image, a base downloaded once and copied
// to the other node by its peer, a base taken from a claim's volume, volumes
// made through a claim's dataSourceRef naming a GoldenImage or a
// GoldenImageChannel, and a channel moved to a new version. BenchmarkPrewarm
// (make bench) measures prewarming N nodes with and without peers.
package images

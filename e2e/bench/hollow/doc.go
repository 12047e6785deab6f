// Package hollow measures thinlvm at cluster scale, as Kubernetes' kubemark
// does with hollow nodes: thousands of node agents (the real agent code,
// each with its own client identity and simulated lvmd) in a few
// hollow-node processes (hollownode), against the local control plane of
// e2e/cluster with thinlvm's controller, the real external-provisioner,
// kube-controller-manager and thinlvm's scheduler. BenchmarkHollowNodes is
// in `make bench`; docs/scale.md has what it found.
package hollow

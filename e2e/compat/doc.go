// Package compat is the compatibility suite: thinlvm installed on the
// control plane of one supported Kubernetes minor (its kube-apiserver,
// kube-controller-manager, kube-scheduler and kubectl, and that minor's
// thinlvm scheduler image, deploy/k8s<minor>), with the controller and
// node agents on simulated nodes: the install applies, and pods with
// thinlvm claims are placed and bound by that minor's scheduler.
//
//	go test ./e2e/compat -args -compat.minor=1.34
//
// `make test` runs it for the oldest and the newest supported minor,
// `make compat` for every one (docs/install.md has the last result).
package compat

// Package cluster runs a real, loopback-only Kubernetes control plane for
// thinlvm's end-to-end tests and demo: etcd, kube-apiserver,
// kube-controller-manager, a scheduler, kwok (fake nodes and pod status), the
// CSI sidecars, thinlvm's controller and scheduler, and per node an lvmd and
// node agent — on fake nodes lvmd runs the simulated lvm (fakelvm), on the
// VM node real lvm2. thinlvm's containers run from its images (built as
// `make images` does) under podrun, the harness's container runtime; the
// Kubernetes binaries come from build.sh (cached outside the repo). Every
// process listens on 127.0.0.1 or a unix socket and is stopped by PID.
//
// A Cluster is four parts, each a type it embeds: the Supervisor runs the
// processes, the ControlPlane is the Kubernetes control plane and its API
// clients, the Kubelet is the stand-in that runs pods' containers, and the
// Cluster's own methods install thinlvm on them and add its nodes.
package cluster

// Package node is the real-node suite: a test VM that is a real Kubernetes
// node (the kubelet, containerd and runc, kube-proxy, the CNI bridge) on
// real lvm2, with thinlvm's node DaemonSet from deploy/ run there by the
// kubelet, and the tests' pods too. Nothing here plays the kubelet: every
// NodeStage, NodePublish, NodeExpand and NodeGetVolumeStats comes from the
// real one.
package node

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/thinlvm/thinlvm/e2e/cluster"
	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

// Node is the real node's name.
const Node = "real-node"

var (
	k  *cluster.Cluster
	vm *lvmvm.VM
)

// prepare makes the node's VG and thin pool on its first disk, on the
// first boot only: what a node's provisioning does before the kubelet.
const prepare = `lvm vgs vg0 >/dev/null 2>&1 || {
  lvm pvcreate --yes /dev/vda && lvm vgcreate vg0 /dev/vda &&
  lvm lvcreate --yes --type thin-pool --size 12G --poolmetadatasize 64M --name pool0 vg0; }
`

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	t0 := time.Now()
	var err error
	k, err = cluster.Start(ctx, cluster.Options{Log: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the control plane:", err)
		return 1
	}
	defer k.Stop()
	if err := k.Install(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "install thinlvm from deploy/:", err)
		return 1
	}
	if err := k.CreateClasses(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	vm, err = k.StartRealNode(ctx, Node, cluster.RealNodeOptions{Disks: []string{"16G"}, Prepare: prepare,
		Labels: map[string]string{"thinlvm.io/test-vm": "true"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the real node:", err)
		return 1
	}
	defer vm.Stop()
	if err := k.WaitLVMNode(ctx, Node); err != nil {
		fmt.Fprintln(os.Stderr, err, "\n", k.RealNodeLogs(vm))
		return 1
	}
	if err := k.WaitCapacity(ctx, Node); err != nil {
		fmt.Fprintln(os.Stderr, err, "\n", k.RealNodeLogs(vm))
		return 1
	}
	fmt.Fprintf(os.Stderr, "node: test bed ready in %.1fs\n", time.Since(t0).Seconds())
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, k.RealNodeLogs(vm))
	}
	return code
}

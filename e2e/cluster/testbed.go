package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

// The test bed's StorageClasses, VolumeSnapshotClass and (unless
// TestbedOptions.VMNodes names others) real-LVM node.
const (
	FilesystemClass = "thinlvm-wfc"   // xfs, WaitForFirstConsumer, expandable
	BlockClass      = "thinlvm-block" // raw block volumes
	SnapshotClass   = "thinlvm"
	VMNode          = "vm-node"
)

// Testbed is what the end-to-end suites run on: the local control plane
// with thinlvm installed from its chart, simulated nodes, real-LVM nodes
// (VMNode unless TestbedOptions.VMNodes names others) whose lvmd and agent
// run on real lvm2, each in its own VM (VG vg0, thin pool pool0), or one
// real node (TestbedOptions.RealNode), the
// StorageClasses FilesystemClass and BlockClass and the
// VolumeSnapshotClass SnapshotClass.
//
// The agents in the VMs reach each other's transfer endpoint over the
// network: each VM forwards lvmvm.TransferPort from a port of the host's
// loopback, and its agent advertises that port at lvmvm.HostAddress, which
// the other VMs reach.
type Testbed struct {
	*Cluster
	// VM is the first real-LVM node's VM; VMs are every real-LVM node's,
	// by node name.
	VM  *lvmvm.VM
	VMs map[string]*lvmvm.VM
	// real: the VM node is a real node.
	real bool
}

// TestbedOptions size a Testbed.
type TestbedOptions struct {
	// Log receives progress lines.
	Log io.Writer
	// Nodes are the simulated nodes' names.
	Nodes []string
	// VMNodes are the real-LVM nodes' names, each its own VM; empty for
	// one, VMNode.
	VMNodes []string
	// VMDisk and Pool size each VM's disk and its thin pool ("16G", "8G").
	VMDisk, Pool string
	// NoVM: no real-LVM node, the simulated nodes only (VMNodes, VMDisk,
	// Pool and RealNode unused).
	NoVM bool
	// K8sMinor is the control plane's Kubernetes minor (Options.K8sMinor).
	K8sMinor string
	// Kustomize installs thinlvm from deploy/'s kustomize tree instead of
	// the chart (Options.Kustomize).
	Kustomize bool
	// RealNode makes the real-LVM node a real node (StartRealNode): its
	// kubelet, containerd and runc run deploy/'s node DaemonSet and the
	// tests' pods on it. One VM node only: real nodes do not yet reach
	// each other's pods.
	RealNode bool
	// StorageSuite readies the real node for Kubernetes' storage suite
	// (RunStorageSuite): its test images.
	StorageSuite bool
	// DeviceClasses replace the chart's (Options.DeviceClasses).
	DeviceClasses []map[string]any
}

// realNodePrepare makes a real node's VG vg0 and thin pool pool0 of the
// given size on its first disk, on its first boot only: what a node's
// provisioning does before the kubelet starts.
func realNodePrepare(pool string) string {
	return fmt.Sprintf(`lvm vgs vg0 >/dev/null 2>&1 || {
  lvm pvcreate --yes /dev/vda && lvm vgcreate vg0 /dev/vda &&
  lvm lvcreate --yes --type thin-pool --size %s --poolmetadatasize 64M --name pool0 vg0; }
`, pool)
}

// StartTestbed starts a Testbed; Stop ends it.
func StartTestbed(ctx context.Context, o TestbedOptions) (tb *Testbed, err error) {
	k, err := Start(ctx, Options{Log: o.Log, K8sMinor: o.K8sMinor, Kustomize: o.Kustomize, DeviceClasses: o.DeviceClasses})
	if err != nil {
		return nil, fmt.Errorf("start the control plane: %w", err)
	}
	tb = &Testbed{Cluster: k, VMs: map[string]*lvmvm.VM{}}
	defer func() {
		if err != nil {
			tb.DumpLogs(o.Log)
			tb.Stop()
		}
	}()
	if err := k.Install(ctx); err != nil {
		return tb, fmt.Errorf("install thinlvm: %w", err)
	}
	if err := k.TuneNodeAgents(ctx); err != nil {
		return tb, err
	}
	vmNodes := o.VMNodes
	if len(vmNodes) == 0 && !o.NoVM {
		vmNodes = []string{VMNode}
	}
	var nodes, vms, real []Node
	if o.RealNode {
		if len(vmNodes) != 1 {
			return tb, fmt.Errorf("a test bed has one real node, not %d", len(vmNodes))
		}
		vm, err := k.StartRealNode(ctx, vmNodes[0], RealNodeOptions{Disks: []string{o.VMDisk}, Prepare: realNodePrepare(o.Pool),
			Labels: map[string]string{"thinlvm.io/test-vm": "true"}, StorageSuite: o.StorageSuite})
		if err != nil {
			return tb, err
		}
		tb.VMs[vmNodes[0]], tb.VM, tb.real = vm, vm, true
		// Its kubelet runs its pod: nothing to add, only to wait for.
		real = []Node{{Name: vmNodes[0]}}
		vmNodes = nil
	} else if len(vmNodes) > 0 {
		if err := tb.startVMs(ctx, vmNodes, o); err != nil {
			return tb, err
		}
		tb.VM = tb.VMs[vmNodes[0]]
	}
	for _, n := range o.Nodes {
		nodes = append(nodes, Node{Name: n})
	}
	for _, n := range vmNodes {
		vm := tb.VMs[n]
		// The other VMs reach this one's transfer endpoint through the
		// host's loopback and the port forwarded to it.
		_, port, _ := net.SplitHostPort(vm.Addr(lvmvm.TransferPort))
		vms = append(vms, Node{Name: n, VM: vm, Labels: map[string]string{"thinlvm.io/test-vm": "true"},
			AgentArgs: []string{"--transfer-advertise-address=" + net.JoinHostPort(lvmvm.HostAddress, port)}})
	}
	for _, n := range nodes {
		if err := k.AddNode(ctx, n); err != nil {
			return tb, fmt.Errorf("add node %s: %w", n.Name, err)
		}
	}
	// The VM nodes' pods start at once: each unpacks the node images in
	// its own VM.
	if err := eachAtOnce(vms, func(n Node) error {
		if err := k.AddNode(ctx, n); err != nil {
			return fmt.Errorf("add node %s: %w", n.Name, err)
		}
		return nil
	}); err != nil {
		return tb, err
	}
	nodes = append(append(nodes, vms...), real...)
	for _, n := range nodes {
		if err := k.WaitLVMNode(ctx, n.Name); err != nil {
			return tb, err
		}
	}
	if err := k.CreateClasses(ctx); err != nil {
		return tb, err
	}
	for _, n := range nodes {
		if err := k.WaitCapacity(ctx, n.Name); err != nil {
			return tb, err
		}
	}
	return tb, nil
}

// CreateClasses makes the test bed's StorageClasses (FilesystemClass,
// BlockClass) and VolumeSnapshotClass (SnapshotClass).
func (c *Cluster) CreateClasses(ctx context.Context) error {
	for _, sc := range []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: FilesystemClass}, Provisioner: thinlvmv1.DriverName,
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), AllowVolumeExpansion: ptr.To(true),
			ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete),
			Parameters:    map[string]string{thinlvmv1.DeviceClassParameter: "ssd", "csi.storage.k8s.io/fstype": "xfs"}},
		{ObjectMeta: metav1.ObjectMeta{Name: BlockClass}, Provisioner: thinlvmv1.DriverName,
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), AllowVolumeExpansion: ptr.To(true),
			ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete)},
	} {
		if err := IgnoreAlreadyExists(c.Client.Create(ctx, sc)); err != nil {
			return fmt.Errorf("StorageClass: %w", err)
		}
	}
	vsc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
		"metadata": map[string]any{"name": SnapshotClass}, "driver": thinlvmv1.DriverName, "deletionPolicy": "Delete",
	}}
	if err := IgnoreAlreadyExists(c.Client.Create(ctx, vsc)); err != nil {
		return fmt.Errorf("VolumeSnapshotClass: %w", err)
	}
	return nil
}

// startVMs boots a VM per node, at once (each runs on one vCPU), and makes
// its thin pool.
func (tb *Testbed) startVMs(ctx context.Context, nodes []string, o TestbedOptions) error {
	var mu sync.Mutex
	return eachAtOnce(nodes, func(n string) error {
		vm, err := lvmvm.Start(ctx, lvmvm.Options{Disks: []string{o.VMDisk}, HostLoopback: true,
			GuestPorts: []int{lvmvm.TransferPort}, Packages: VMPackages, Log: o.Log})
		if err != nil {
			return fmt.Errorf("boot the VM of node %s: %w", n, err)
		}
		mu.Lock()
		tb.VMs[n] = vm
		mu.Unlock()
		if err := vm.SetupThinPool(ctx, "/dev/vda", "vg0", "pool0", o.Pool, "64M"); err != nil {
			return fmt.Errorf("thin pool of node %s: %w", n, err)
		}
		return nil
	})
}

// eachAtOnce runs f for every item at the same time and joins their
// errors.
func eachAtOnce[T any](items []T, f func(T) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(items))
	for i, item := range items {
		wg.Go(func() { errs[i] = f(item) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Stop stops the VMs and the cluster.
func (tb *Testbed) Stop() {
	for _, vm := range tb.VMs {
		vm.Stop()
	}
	tb.Cluster.Stop()
}

// DumpLogs writes the tails of thinlvm's processes' logs, on the host and
// in the VM, to w, then what ended a process anywhere in them (restarts,
// panics), which a tail may have cut off.
func (tb *Testbed) DumpLogs(w io.Writer) {
	if w == nil {
		return
	}
	var ends []string
	for _, p := range tb.Procs() {
		if strings.HasPrefix(p, "thinlvm-") || strings.HasPrefix(p, "csi-") || strings.HasPrefix(p, "lvmd@") {
			fmt.Fprintf(w, "--- %s log (tail) ---\n%s\n", p, tb.Log(p))
			ends = append(ends, processEnds(p, filepath.Join(tb.Dir, "logs", p+".log"))...)
		}
	}
	for _, node := range slices.Sorted(maps.Keys(tb.VMs)) {
		if tb.real {
			fmt.Fprint(w, tb.realNodeLogs(node))
			continue
		}
		logs, _ := filepath.Glob(filepath.Join(tb.VMs[node].ShareDir(), "pods", "*", "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			fmt.Fprintf(w, "--- %s: %s (tail) ---\n%s\n", node, filepath.Base(l), b)
			ends = append(ends, processEnds(node+": "+filepath.Base(l), l)...)
		}
	}
	fmt.Fprintf(w, "--- restarts and panics in those logs: %d ---\n", len(ends))
	for _, e := range ends[max(0, len(ends)-12):] {
		fmt.Fprintln(w, e)
	}
}

// processEnds is the lines of a whole log that tell of its process's end:
// podrun's restarts and Go's panics and fatal errors, each named by log.
func processEnds(name, path string) []string {
	b, _ := os.ReadFile(path)
	var out []string
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "podrun: container exited") || strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
			out = append(out, name+": "+strings.TrimSpace(line))
		}
	}
	return out
}

// realNodeLogs are the tails of a real node's services' logs and of its
// thinlvm pod's containers' logs (every start of each).
func (tb *Testbed) realNodeLogs(node string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vm := tb.VMs[node]
	var b strings.Builder
	b.WriteString(tb.RealNodeLogs(vm))
	pods, err := tb.WaitPods(ctx, Namespace, nodePods, node, 1)
	if err != nil {
		fmt.Fprintf(&b, "--- %s: thinlvm's pod: %v\n", node, err)
		return b.String()
	}
	for _, ct := range pods[0].Spec.Containers {
		log, err := RealNodePodLog(ctx, vm, &pods[0], ct.Name)
		if len(log) > 8000 {
			log = log[len(log)-8000:]
		}
		fmt.Fprintf(&b, "--- %s: %s (tail; %v) ---\n%s\n", node, ct.Name, err, log)
	}
	return b.String()
}

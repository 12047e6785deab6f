package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

// The test bed's StorageClasses, VolumeSnapshotClass and real-LVM node.
const (
	FilesystemClass = "thinlvm-wfc"   // xfs, WaitForFirstConsumer, expandable
	BlockClass      = "thinlvm-block" // raw block volumes
	SnapshotClass   = "thinlvm"
	VMNode          = "vm-node"
)

// Testbed is what the end-to-end suites run on: the local control plane
// with thinlvm installed from deploy/, simulated nodes, the node VMNode
// whose lvmd and agent run on real lvm2 in the VM (VG vg0, thin pool
// pool0), the StorageClasses FilesystemClass and BlockClass and the
// VolumeSnapshotClass SnapshotClass.
type Testbed struct {
	*Cluster
	VM *lvmvm.VM
}

// TestbedOptions size a Testbed.
type TestbedOptions struct {
	// Log receives progress lines.
	Log io.Writer
	// Nodes are the simulated nodes' names.
	Nodes []string
	// VMDisk and Pool size the VM's disk and its thin pool ("16G", "8G").
	VMDisk, Pool string
}

// StartTestbed starts a Testbed; Stop ends it.
func StartTestbed(ctx context.Context, o TestbedOptions) (tb *Testbed, err error) {
	k, err := Start(ctx, Options{Log: o.Log})
	if err != nil {
		return nil, fmt.Errorf("start the control plane: %w", err)
	}
	tb = &Testbed{Cluster: k}
	defer func() {
		if err != nil {
			tb.DumpLogs(o.Log)
			tb.Stop()
		}
	}()
	if err := k.Install(ctx); err != nil {
		return tb, fmt.Errorf("install thinlvm from deploy/: %w", err)
	}
	if tb.VM, err = lvmvm.Start(ctx, lvmvm.Options{Disks: []string{o.VMDisk}, HostLoopback: true, Packages: VMPackages, Log: o.Log}); err != nil {
		return tb, fmt.Errorf("boot the VM: %w", err)
	}
	if err := tb.VM.SetupThinPool(ctx, "/dev/vda", "vg0", "pool0", o.Pool, "64M"); err != nil {
		return tb, fmt.Errorf("thin pool: %w", err)
	}
	var nodes []Node
	for _, n := range o.Nodes {
		nodes = append(nodes, Node{Name: n})
	}
	nodes = append(nodes, Node{Name: VMNode, VM: tb.VM, Labels: map[string]string{"thinlvm.io/test-vm": "true"}})
	for _, n := range nodes {
		if err := k.AddNode(ctx, n); err != nil {
			return tb, fmt.Errorf("add node %s: %w", n.Name, err)
		}
	}
	for _, n := range nodes {
		if err := k.WaitLVMNode(ctx, n.Name); err != nil {
			return tb, err
		}
	}
	for _, sc := range []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: FilesystemClass}, Provisioner: thinlvmv1.DriverName,
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), AllowVolumeExpansion: ptr.To(true),
			ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete),
			Parameters:    map[string]string{thinlvmv1.DeviceClassParameter: "ssd", "csi.storage.k8s.io/fstype": "xfs"}},
		{ObjectMeta: metav1.ObjectMeta{Name: BlockClass}, Provisioner: thinlvmv1.DriverName,
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), AllowVolumeExpansion: ptr.To(true),
			ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete)},
	} {
		if err := IgnoreAlreadyExists(k.Client.Create(ctx, sc)); err != nil {
			return tb, fmt.Errorf("StorageClass: %w", err)
		}
	}
	vsc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
		"metadata": map[string]any{"name": SnapshotClass}, "driver": thinlvmv1.DriverName, "deletionPolicy": "Delete",
	}}
	if err := IgnoreAlreadyExists(k.Client.Create(ctx, vsc)); err != nil {
		return tb, fmt.Errorf("VolumeSnapshotClass: %w", err)
	}
	for _, n := range nodes {
		if err := k.WaitCapacity(ctx, n.Name); err != nil {
			return tb, err
		}
	}
	return tb, nil
}

// Stop stops the VM and the cluster.
func (tb *Testbed) Stop() {
	if tb.VM != nil {
		tb.VM.Stop()
	}
	tb.Cluster.Stop()
}

// DumpLogs writes the tails of thinlvm's processes' logs, on the host and
// in the VM, to w.
func (tb *Testbed) DumpLogs(w io.Writer) {
	if w == nil {
		return
	}
	for _, p := range tb.Procs() {
		if strings.HasPrefix(p, "thinlvm-") || strings.HasPrefix(p, "csi-") || strings.HasPrefix(p, "lvmd@") {
			fmt.Fprintf(w, "--- %s log (tail) ---\n%s\n", p, tb.Log(p))
		}
	}
	if tb.VM == nil {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(tb.VM.ShareDir(), "pods", "*", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 8000 {
			b = b[len(b)-8000:]
		}
		fmt.Fprintf(w, "--- %s: %s (tail) ---\n%s\n", VMNode, filepath.Base(l), b)
	}
}

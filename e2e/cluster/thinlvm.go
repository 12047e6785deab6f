package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

// StartThinlvm installs the CRDs and CSIDriver and starts thinlvm's
// controller with the CSI sidecars (provisioner with topology and capacity,
// resizer, snapshotter and the snapshot controller).
func (c *Cluster) StartThinlvm(ctx context.Context) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, filepath.Join(root, "deploy", "crds")); err != nil {
		return err
	}
	snapCRDs, err := snapshotCRDs(root)
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, snapCRDs); err != nil {
		return err
	}
	driver := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: thinlvmv1.DriverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), PodInfoOnMount: ptr.To(true), StorageCapacity: ptr.To(true),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}},
	}
	if err := IgnoreAlreadyExists(c.Client.Create(ctx, driver)); err != nil {
		return err
	}
	sock := filepath.Join(c.Dir, "controller", "csi.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		return err
	}
	if err := c.Run("thinlvm-controller", nil, filepath.Join(c.Bin, "thinlvm-controller"), "--kubeconfig="+c.Kubeconfig,
		"--csi-address=unix://"+sock, "--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0", "-v=2"); err != nil {
		return err
	}
	if err := c.WaitFor(ctx, "the controller's CSI socket", time.Minute, func() (bool, error) {
		_, err := os.Stat(sock)
		return err == nil, nil
	}, "thinlvm-controller"); err != nil {
		return err
	}
	common := []string{"--csi-address=" + sock, "--kubeconfig=" + c.Kubeconfig, "--timeout=2m", "-v=2"}
	// The provisioner publishes CSIStorageCapacity objects in a namespace
	// given by its pod's environment.
	podEnv := []string{"NAMESPACE=default", "POD_NAME=csi-provisioner"}
	if err := c.Run("csi-provisioner", podEnv, append([]string{filepath.Join(c.K8sBin, "csi-provisioner"),
		"--feature-gates=Topology=true", "--strict-topology", "--enable-capacity", "--capacity-ownerref-level=-1", "--capacity-poll-interval=" + c.CapacityPoll.String(),
		"--extra-create-metadata", "--leader-election=false", "--retry-interval-start=1s", "--retry-interval-max=10s",
		"--kube-api-qps=50", "--kube-api-burst=100"}, common...)...); err != nil {
		return err
	}
	if err := c.Run("csi-resizer", nil, append([]string{filepath.Join(c.K8sBin, "csi-resizer"), "--leader-election=false"}, common...)...); err != nil {
		return err
	}
	if err := c.Run("csi-snapshotter", nil, append([]string{filepath.Join(c.K8sBin, "csi-snapshotter"), "--leader-election=false"}, common...)...); err != nil {
		return err
	}
	return c.Run("snapshot-controller", nil, filepath.Join(c.K8sBin, "snapshot-controller"), "--kubeconfig="+c.Kubeconfig, "--leader-election=false", "-v=2")
}

// snapshotCRDs is the directory of the VolumeSnapshot CRDs in the
// external-snapshotter client module the snapshotter is built from.
func snapshotCRDs(root string) (string, error) {
	dir, err := moduleDir(filepath.Join(root, "e2e", "cluster", "csi-snapshotter"), "github.com/kubernetes-csi/external-snapshotter/client/v8")
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "config", "crd"), nil
}

// Node describes a node of the local cluster.
type Node struct {
	Name string
	// VGSize is the fake VG's thin pool size; 0 for 100 GiB.
	VGSize uint64
	// LVMDAddress is a real lvmd (e.g. the VM's forwarded port); empty for a
	// fake lvmd started here.
	LVMDAddress string
	// Labels are extra Node labels.
	Labels map[string]string
	// VM, when set, runs the node agent inside the real-LVM VM (booted
	// with HostLoopback, lvmd started), as on a real node: it reaches the
	// API server through the VM's gateway and writes golden bases to the
	// VM's devices. LVMDAddress is then ignored.
	VM *lvmvm.VM
}

// AddNode creates a kwok-managed Node with thinlvm's topology label and its
// CSINode entry (there is no kubelet to do it), and starts its lvmd (fake,
// unless LVMDAddress is set) and node agent.
func (c *Cluster) AddNode(ctx context.Context, n Node) error {
	dir := filepath.Join(c.Dir, "nodes", n.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	labels := map[string]string{thinlvmv1.TopologyKey: n.Name, "kubernetes.io/hostname": n.Name, "type": "kwok", "kubernetes.io/os": "linux"}
	for k, v := range n.Labels {
		labels[k] = v
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels:      labels},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "kwok.x-k8s.io/node", Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110")}},
	}
	if err := IgnoreAlreadyExists(c.Client.Create(ctx, node)); err != nil {
		return fmt.Errorf("create node %s: %w", n.Name, err)
	}
	csiNode := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: thinlvmv1.DriverName, NodeID: n.Name,
			TopologyKeys: []string{thinlvmv1.TopologyKey}}}},
	}
	if err := IgnoreAlreadyExists(c.Client.Create(ctx, csiNode)); err != nil {
		return fmt.Errorf("create CSINode %s: %w", n.Name, err)
	}
	if n.VM != nil {
		return c.startVMAgent(ctx, n)
	}
	lvmdAddr := n.LVMDAddress
	if lvmdAddr == "" {
		size := n.VGSize
		if size == 0 {
			size = 100 << 30
		}
		cfg := filepath.Join(dir, "lvmd.yaml")
		if err := os.WriteFile(cfg, []byte("deviceClasses:\n- name: ssd\n  volumeGroup: vg0\n  thinPool: pool0\n  default: true\n"), 0o644); err != nil {
			return err
		}
		sock := filepath.Join(dir, "lvmd.sock")
		if err := c.startFakeLVMD(n.Name, size); err != nil {
			return err
		}
		lvmdAddr = "unix://" + sock
	}
	csiAddr := "unix://" + filepath.Join(dir, "csi.sock")
	return c.Run("node-"+n.Name, nil, filepath.Join(c.Bin, "thinlvm-node"), "--node-name="+n.Name, "--kubeconfig="+c.Kubeconfig,
		"--lvmd-address="+lvmdAddr, "--csi-address="+csiAddr, "--lvmnode-interval=500ms", "--no-space-retry=5s", "-v=2")
}

// VMAgentProcess is the VM guest agent's name for the node agent.
const VMAgentProcess = "thinlvm-node"

// startVMAgent starts thinlvm-node in the VM with a kubeconfig whose server
// is the host's API server as the guest reaches it.
func (c *Cluster) startVMAgent(ctx context.Context, n Node) error {
	share := n.VM.ShareDir()
	ca, err := os.ReadFile(filepath.Join(c.Dir, "pki", "ca.crt"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(share, "ca.crt"), ca, 0o644); err != nil {
		return err
	}
	if err := kubeconfig(filepath.Join(share, "node.kubeconfig"), "/share/ca.crt", lvmvm.HostAddress, c.apiPort, c.token); err != nil {
		return err
	}
	return c.RestartVMAgent(ctx, n.VM, n.Name)
}

// RestartVMAgent (re)starts the VM's node agent, e.g. after a test killed
// it.
func (c *Cluster) RestartVMAgent(ctx context.Context, vm *lvmvm.VM, name string) error {
	return vm.Spawn(ctx, VMAgentProcess, "/share/thinlvm-node.log", "/share/bin/thinlvm-node", "--node-name="+name,
		"--kubeconfig=/share/node.kubeconfig", fmt.Sprintf("--lvmd-address=tcp://127.0.0.1:%d", lvmvm.LVMDPort),
		fmt.Sprintf("--csi-address=tcp://0.0.0.0:%d", lvmvm.CSIPort), "--lvmnode-interval=500ms", "--no-space-retry=5s",
		"--golden-retry=5s", "--qemu-img=/usr/bin/qemu-img", "--scratch-dir=/tmp", "-v=2")
}

// WaitLVMNode waits until the node's LVMNode reports a device class.
func (c *Cluster) WaitLVMNode(ctx context.Context, name string) error {
	var procs []string
	if c.started("node-" + name) { // not when the agent runs in the VM
		procs = append(procs, "node-"+name)
	}
	return c.WaitFor(ctx, "LVMNode "+name, 2*time.Minute, func() (bool, error) {
		ln := &thinlvmv1.LVMNode{}
		err := c.Client.Get(ctx, types.NamespacedName{Name: name}, ln)
		return err == nil && len(ln.Status.DeviceClasses) > 0, client.IgnoreNotFound(err)
	}, procs...)
}

func (c *Cluster) startFakeLVMD(node string, size uint64) error {
	dir := filepath.Join(c.Dir, "nodes", node)
	env := []string{"FAKELVM_STATE=" + filepath.Join(dir, "lvm.json"), "FAKELVM_VG_SIZE=" + strconv.FormatUint(size, 10)}
	return c.Run("lvmd-"+node, env, filepath.Join(c.Bin, "thinlvm-lvmd"), "--config="+filepath.Join(dir, "lvmd.yaml"),
		"--listen=unix://"+filepath.Join(dir, "lvmd.sock"), "--lvm-path="+filepath.Join(c.Bin, "fakelvm"), "--refresh-interval=5s")
}

// FillFakePool makes a fake node's thin pool 100% full of data, as if its
// volumes had been written: lvm then refuses new thin volumes. lvmd is
// restarted around the change, so that it reads the new state at once.
func (c *Cluster) FillFakePool(node string) error {
	c.Kill("lvmd-" + node)
	path := filepath.Join(c.Dir, "nodes", node, "lvm.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var st map[string]any
	if err := json.Unmarshal(data, &st); err != nil {
		return err
	}
	pools, _ := st["Pools"].([]any)
	if len(pools) == 0 {
		return fmt.Errorf("fake node %s has no thin pool", node)
	}
	pools[0].(map[string]any)["DataPercent"] = 100.0
	if data, err = json.Marshal(st); err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	return c.startFakeLVMD(node, 0)
}

// AddFakeBase gives a fake node a sealed golden base of image, as if its
// agent had populated it (a fake node has no devices to write): a
// read-only, inactive thin LV tagged for the image. lvmd is restarted
// around the change.
func (c *Cluster) AddFakeBase(node string, image *thinlvmv1.GoldenImage) error {
	c.Kill("lvmd-" + node)
	path := filepath.Join(c.Dir, "nodes", node, "lvm.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var st map[string]any
	if err := json.Unmarshal(data, &st); err != nil {
		return err
	}
	lvs, _ := st["LVs"].([]any)
	st["LVs"] = append(lvs, map[string]any{"VG": "vg0", "Name": thinlvmv1.BaseLVName(image), "Pool": "pool0",
		"UUID": "fakebase-" + string(image.UID)[:8], "Size": image.Spec.Size.Value(),
		"Tags": []string{"thinlvm", thinlvmv1.BaseTagPrefix + image.Name}, "ReadOnly": true, "Inactive": true})
	if data, err = json.Marshal(st); err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	return c.startFakeLVMD(node, 0)
}

// WaitCapacity waits until the provisioner published a CSIStorageCapacity
// for the node (the scheduler treats a node without one as full).
func (c *Cluster) WaitCapacity(ctx context.Context, node string) error {
	return c.WaitCapacityFor(ctx, node, "")
}

// WaitCapacityFor is WaitCapacity for one StorageClass ("" for any).
func (c *Cluster) WaitCapacityFor(ctx context.Context, node, storageClass string) error {
	return c.WaitFor(ctx, "CSIStorageCapacity of "+node, 2*time.Minute, func() (bool, error) {
		list := &storagev1.CSIStorageCapacityList{}
		if err := c.Client.List(ctx, list); err != nil {
			return false, err
		}
		for _, sc := range list.Items {
			if sc.NodeTopology != nil && sc.NodeTopology.MatchLabels[thinlvmv1.TopologyKey] == node && sc.Capacity != nil && !sc.Capacity.IsZero() &&
				(storageClass == "" || sc.StorageClassName == storageClass) {
				return true, nil
			}
		}
		return false, nil
	}, "csi-provisioner")
}

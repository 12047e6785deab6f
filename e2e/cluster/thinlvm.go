package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
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

// Namespace is where deploy/ installs thinlvm.
const Namespace = "thinlvm-system"

// Release is the Helm release Install installs the chart as.
const Release = "thinlvm"

// ControlNode is the kwok node the install's Deployments are scheduled to
// (the storage nodes are tainted); it holds no volumes.
const ControlNode = "control-plane"

// Component pod labels of deploy/.
var (
	controllerPods = map[string]string{"app.kubernetes.io/name": "thinlvm", "app.kubernetes.io/component": "controller"}
	schedulerPods  = map[string]string{"app.kubernetes.io/name": "thinlvm", "app.kubernetes.io/component": "scheduler"}
	nodePods       = map[string]string{"app.kubernetes.io/name": "thinlvm", "app.kubernetes.io/component": "node"}
)

// Install installs thinlvm as a user would (docs/install.md): `helm
// install` of deploy/chart into a namespace labelled for privileged pods,
// or with Options.Kustomize `kubectl apply -k deploy/` (deploy/k8s<minor>
// on an older minor's control plane), after what the cluster must provide
// (the VolumeSnapshot CRDs and the snapshot controller). Then it runs, as
// the kubelet would, the controller and scheduler pods the Deployments
// made, each with its ServiceAccount's token. Node pods start with
// AddNode.
func (c *Cluster) Install(ctx context.Context) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	snapCRDs, err := snapshotCRDs(root)
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, snapCRDs); err != nil {
		return err
	}
	if err := c.Run("snapshot-controller", nil, filepath.Join(c.K8sBin, "snapshot-controller"), "--kubeconfig="+c.Kubeconfig, "--leader-election=false", "-v=2"); err != nil {
		return err
	}
	if c.Kustomize {
		if _, err := c.kubectl(ctx, "apply", "-k", c.Deploy); err != nil {
			return err
		}
	} else if err := c.helmInstall(ctx); err != nil {
		return err
	}
	control := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: ControlNode, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{"kubernetes.io/hostname": ControlNode, "type": "kwok", "kubernetes.io/os": "linux"}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110")}},
	}
	if err := IgnoreAlreadyExists(c.Client.Create(ctx, control)); err != nil {
		return fmt.Errorf("create node %s: %w", ControlNode, err)
	}
	pods, err := c.WaitPods(ctx, Namespace, controllerPods, "", 2) // the Deployment's replicas
	if err != nil {
		return err
	}
	for i := range pods {
		if err := c.RunPod(ctx, &pods[i], PodOptions{ExtraArgs: map[string][]string{
			"csi-provisioner": {"--capacity-poll-interval=" + c.CapacityPoll.String()},
		}}); err != nil {
			return err
		}
	}
	if pods, err = c.WaitPods(ctx, Namespace, schedulerPods, "", 2); err != nil {
		return err
	}
	for i := range pods {
		if err := c.RunPod(ctx, &pods[i], PodOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// snapshotCRDs is the directory of the VolumeSnapshot CRDs in the
// external-snapshotter client module the snapshotter is built from.
func snapshotCRDs(root string) (string, error) {
	dir, err := moduleDir(filepath.Join(root, "e2e", "cluster", "addons"), "github.com/kubernetes-csi/external-snapshotter/client/v8")
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
	// Labels are extra Node labels.
	Labels map[string]string
	// VM, when set, makes the real-LVM VM (booted with HostLoopback, its VG
	// and thin pool made) this node: the node pod's lvmd and agent run
	// inside it, on real lvm2, reaching the API server through the VM's
	// gateway. Without it lvmd runs here on the simulated lvm.
	VM *lvmvm.VM
	// AgentArgs are added to the node agent's args, after the test-speed
	// intervals (e.g. the transfer address it advertises).
	AgentArgs []string
}

// AddNode creates a kwok-managed Node with thinlvm's topology label and its
// CSINode entry (there is no kubelet to do it), waits for the pod the node
// DaemonSet of deploy/ makes for it, and runs that pod's lvmd and node
// agent.
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
		// Only pods that tolerate it (the DaemonSet's, the tests') land on
		// a storage node: the install's Deployments run on ControlNode, which
		// no test deletes.
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "kwok.x-k8s.io/node", Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110")}},
	}
	if err := IgnoreAlreadyExists(c.Client.Create(ctx, node)); err != nil {
		return fmt.Errorf("create node %s: %w", n.Name, err)
	}
	// Owned by its Node, as the kubelet makes it: deleting the Node
	// deletes it, and the provisioner drops the node's capacity.
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	csiNode := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: thinlvmv1.DriverName, NodeID: n.Name,
			TopologyKeys: []string{thinlvmv1.TopologyKey}}}},
	}
	if err := IgnoreAlreadyExists(c.Client.Create(ctx, csiNode)); err != nil {
		return fmt.Errorf("create CSINode %s: %w", n.Name, err)
	}
	pods, err := c.WaitPods(ctx, Namespace, nodePods, n.Name, 1)
	if err != nil {
		return err
	}
	pod := &pods[0]
	c.mu.Lock()
	if c.nodePods == nil {
		c.nodePods = map[string]string{}
	}
	c.nodePods[n.Name] = pod.Name
	if c.agentArgs == nil {
		c.agentArgs = map[string][]string{}
	}
	base := agentArgs
	if c.agentsTuned { // the pod's own args have them
		base = nil
	}
	c.agentArgs[n.Name] = append(slices.Clone(base), n.AgentArgs...)
	c.mu.Unlock()
	if n.VM != nil {
		// The VM is the node: the pod's hostPath directories are the VM's.
		for _, v := range pod.Spec.Volumes {
			if v.HostPath != nil {
				if _, err := n.VM.Run(ctx, "mkdir", "-p", v.HostPath.Path); err != nil {
					return err
				}
			} else if v.EmptyDir != nil {
				if _, err := n.VM.Run(ctx, "mkdir", "-p", "/run/pods/"+pod.Name+"/"+v.Name); err != nil {
					return err
				}
			}
		}
		// The kubelet's host shares the directories its pods mount
		// Bidirectional (systemd makes every mount shared).
		for _, ct := range pod.Spec.Containers {
			for _, m := range ct.VolumeMounts {
				if ptr.Deref(m.MountPropagation, "") != corev1.MountPropagationBidirectional {
					continue
				}
				for _, v := range pod.Spec.Volumes {
					if v.Name == m.Name && v.HostPath != nil {
						if _, err := n.VM.Run(ctx, "/share/bin/podrun", "share", v.HostPath.Path); err != nil {
							return err
						}
					}
				}
			}
		}
		c.mu.Lock()
		if c.vmPods == nil {
			c.vmPods = map[string]*lvmvm.VM{}
		}
		c.vmPods[pod.Name] = n.VM
		c.mu.Unlock()
		if err := c.RunPod(ctx, pod, PodOptions{VM: n.VM, ExtraArgs: map[string][]string{
			"thinlvm-node": c.nodeAgentArgs(n.Name),
		}}); err != nil {
			return err
		}
		// Tests play the kubelet on the agent's CSI socket from the host,
		// through the VM's forwarded CSI port (lvmvm.VM.DialCSI).
		return n.VM.Spawn(ctx, "csi-forward@"+pod.Name, "/share/pods/"+pod.Name+"/csi-forward.log", "/share/bin/podrun", "forward",
			"--listen=:"+strconv.Itoa(lvmvm.CSIPort), "--to=/var/lib/kubelet/plugins/thinlvm.io/csi.sock")
	}
	size := n.VGSize
	if size == 0 {
		size = 100 << 30
	}
	// The image's lvmd runs fakelvm, mounted in with the directory of its
	// state, instead of the image's lvm2: one process per command, as
	// fakelvm simulates lvm's command line, not its shell.
	return c.RunPod(ctx, pod, PodOptions{
		ExtraArgs: map[string][]string{
			"thinlvm-node": c.nodeAgentArgs(n.Name),
			"lvmd":         {"--lvm-path=/usr/local/bin/fakelvm", "--lvm-runner=exec", "--refresh-interval=5s"},
		},
		Env:    map[string][]string{"lvmd": {"FAKELVM_STATE=/var/lib/fakelvm/lvm.json", "FAKELVM_VG_SIZE=" + strconv.FormatUint(size, 10)}},
		Mounts: map[string][]string{"lvmd": {filepath.Join(c.Bin, "fakelvm") + ":/usr/local/bin/fakelvm:ro", dir + ":/var/lib/fakelvm"}},
	})
}

// agentArgs are the node agent's test-speed intervals, after the
// DaemonSet's args.
var agentArgs = []string{"--lvmnode-interval=500ms", "--lvmnode-use-interval=500ms", "--no-space-retry=5s", "--golden-retry=5s"}

// TuneNodeAgents adds the node agent's test-speed intervals (agentArgs)
// to the args of the node DaemonSet, as an operator tunes an install: the
// chart's node.extraArgs (helm upgrade), or on a kustomize install an edit
// of the DaemonSet. Every node's agent has them, a real node's too (its
// kubelet runs the DaemonSet's pod as it is). Call it after Install,
// before the first node.
func (c *Cluster) TuneNodeAgents(ctx context.Context) error {
	if c.Kustomize {
		ds := &appsv1.DaemonSet{}
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "thinlvm-node"}, ds); err != nil {
			return fmt.Errorf("the node DaemonSet: %w", err)
		}
		i := slices.IndexFunc(ds.Spec.Template.Spec.Containers, func(ct corev1.Container) bool { return ct.Name == "thinlvm-node" })
		if i < 0 {
			return errors.New("the node DaemonSet has no thinlvm-node container")
		}
		ct := &ds.Spec.Template.Spec.Containers[i]
		ct.Args = append(ct.Args, agentArgs...)
		if err := c.Client.Update(ctx, ds); err != nil {
			return fmt.Errorf("tune the node DaemonSet: %w", err)
		}
	} else {
		args, err := json.Marshal(agentArgs)
		if err != nil {
			return err
		}
		if _, err := c.Helm(ctx, "upgrade", Release, c.Chart, "--namespace", Namespace,
			"--reuse-values", "--set-json", "node.extraArgs="+string(args)); err != nil {
			return fmt.Errorf("tune the node agents: %w", err)
		}
	}
	c.mu.Lock()
	c.agentsTuned = true
	c.mu.Unlock()
	return nil
}

// nodeAgentArgs are the args AddNode adds to a node's agent, then those
// of the last RestartVMAgent.
func (c *Cluster) nodeAgentArgs(node string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(slices.Clone(c.agentArgs[node]), c.agentExtraArgs[node]...)
}

// RestartVMAgent stops a VM node's agent and starts it again with extra
// after AddNode's args; extra replaces an earlier call's, so none restores
// the agent's first args.
func (c *Cluster) RestartVMAgent(ctx context.Context, node string, extra ...string) error {
	if err := c.StopVMContainers(ctx, node, "thinlvm-node"); err != nil {
		return err
	}
	c.mu.Lock()
	if c.agentExtraArgs == nil {
		c.agentExtraArgs = map[string][]string{}
	}
	c.agentExtraArgs[node] = slices.Clone(extra)
	c.mu.Unlock()
	return c.StartVMContainers(ctx, node, "thinlvm-node")
}

// VMPackages are what the VM node needs of this module besides lvmvm's own:
// podrun, the container runtime. Pass them as lvmvm.Options.Packages.
var VMPackages = []string{"./e2e/cluster/podrun"}

// NodeProcess is the harness's name of a container of a node's pod, e.g.
// NodeProcess("node-a", "lvmd").
func (c *Cluster) NodeProcess(node, container string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return container + "@" + c.nodePods[node]
}

// StopVMContainers stops containers of a VM node's pod (SIGTERM, and their
// podrun with them): nothing starts them again until StartVMContainers.
func (c *Cluster) StopVMContainers(ctx context.Context, node string, containers ...string) error {
	c.mu.Lock()
	vm := c.vmPods[c.nodePods[node]]
	c.mu.Unlock()
	if vm == nil {
		return fmt.Errorf("node %s is not a VM node", node)
	}
	for _, ct := range containers {
		if err := vm.Signal(ctx, c.NodeProcess(node, ct), syscall.SIGTERM, true); err != nil {
			return fmt.Errorf("stop %s on %s: %w", ct, node, err)
		}
	}
	return nil
}

// StartVMContainers starts containers of a VM node's pod again, e.g. after
// a test stopped or killed them.
func (c *Cluster) StartVMContainers(ctx context.Context, node string, containers ...string) error {
	c.mu.Lock()
	podName := c.nodePods[node]
	vm := c.vmPods[podName]
	c.mu.Unlock()
	pod := &corev1.Pod{}
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: Namespace, Name: podName}, pod); err != nil {
		return err
	}
	pod.Spec.Containers = slices.DeleteFunc(pod.Spec.Containers, func(ct corev1.Container) bool { return !slices.Contains(containers, ct.Name) })
	return c.RunPod(ctx, pod, PodOptions{VM: vm, ExtraArgs: map[string][]string{
		"thinlvm-node": c.nodeAgentArgs(node),
	}})
}

// AddLabelledNodes adds a simulated node labelled label=true for each of
// the thin pool sizes (0 for AddNode's default), named <prefix>-<i>, and
// waits until each has its LVMNode and reports its capacity.
func (c *Cluster) AddLabelledNodes(ctx context.Context, prefix, label string, sizes ...uint64) ([]string, error) {
	var names []string
	for i, size := range sizes {
		name := fmt.Sprintf("%s-%d", prefix, i)
		names = append(names, name)
		if err := c.AddNode(ctx, Node{Name: name, VGSize: size, Labels: map[string]string{label: "true"}}); err != nil {
			return nil, err
		}
	}
	for _, name := range names {
		if err := c.WaitLVMNode(ctx, name); err != nil {
			return nil, err
		}
		if err := c.WaitCapacity(ctx, name); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// WaitLVMNode waits until the node's LVMNode reports a device class: two
// minutes for a node pod the harness runs, six for a real node's, which
// its kubelet starts in the emulated guest (a loaded run took 82 s for
// the pod's sandbox alone).
func (c *Cluster) WaitLVMNode(ctx context.Context, name string) error {
	var procs []string
	timeout := 6 * time.Minute
	if agent := c.NodeProcess(name, "thinlvm-node"); c.started(agent) { // not when the agent runs in the VM
		procs, timeout = append(procs, agent), 2*time.Minute
	}
	return c.WaitFor(ctx, "LVMNode "+name, timeout, func() (bool, error) {
		ln := &thinlvmv1.LVMNode{}
		err := c.Client.Get(ctx, types.NamespacedName{Name: name}, ln)
		return err == nil && len(ln.Status.DeviceClasses) > 0, client.IgnoreNotFound(err)
	}, procs...)
}

// editFakeLVM changes a fake node's simulated lvm state with edit while its
// lvmd is stopped, so that lvmd reads the new state at once when it starts
// again.
func (c *Cluster) editFakeLVM(node string, edit func(st map[string]any) error) error {
	// It returns once lvmd serves again: a request in the window would
	// find no socket and fail as LVMDUnavailable instead of meeting the
	// new state.
	defer c.waitLVMDSocket(node)
	return c.Restart(c.NodeProcess(node, "lvmd"), func() error {
		path := filepath.Join(c.Dir, "nodes", node, "lvm.json")
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var st map[string]any
		if err := json.Unmarshal(data, &st); err != nil {
			return err
		}
		if err := edit(st); err != nil {
			return err
		}
		if data, err = json.Marshal(st); err != nil {
			return err
		}
		return os.WriteFile(path, data, 0o644)
	})
}

// waitLVMDSocket waits (up to a minute) until a fake node's lvmd accepts
// connections on its socket.
func (c *Cluster) waitLVMDSocket(node string) {
	sock := filepath.Join(c.Dir, "nodes", node, "root", "run", "thinlvm", "lvmd.sock")
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if conn, err := net.Dial("unix", sock); err == nil {
			conn.Close()
			return
		}
	}
}

// FakeLVs are the names of the LVs a fake node's simulated lvm holds: its
// disks, which outlive its processes and its Node object.
func (c *Cluster) FakeLVs(node string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(c.Dir, "nodes", node, "lvm.json"))
	if err != nil {
		return nil, err
	}
	var st struct{ LVs []struct{ Name string } }
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("fake lvm state of %s: %w", node, err)
	}
	var names []string
	for _, lv := range st.LVs {
		names = append(names, lv.Name)
	}
	return names, nil
}

// FillFakePool makes a fake node's thin pool 100% full of data, as if its
// volumes had been written: lvm then refuses new thin volumes.
func (c *Cluster) FillFakePool(node string) error {
	return c.editFakeLVM(node, func(st map[string]any) error {
		pools, _ := st["Pools"].([]any)
		if len(pools) == 0 {
			return fmt.Errorf("fake node %s has no thin pool", node)
		}
		pools[0].(map[string]any)["DataPercent"] = 100.0
		return nil
	})
}

// AddFakeBase gives a fake node a sealed golden base of image, as if its
// agent had populated it (a fake node has no devices to write): a
// read-only, inactive thin LV tagged for the image.
func (c *Cluster) AddFakeBase(node string, image *thinlvmv1.GoldenImage) error {
	return c.editFakeLVM(node, func(st map[string]any) error {
		lvs, _ := st["LVs"].([]any)
		st["LVs"] = append(lvs, map[string]any{"VG": "vg0", "Name": thinlvmv1.BaseLVName(image), "Pool": "pool0",
			"UUID": "fakebase-" + string(image.UID)[:8], "Size": image.Spec.Size.Value(),
			"Tags": []string{"thinlvm", thinlvmv1.BaseTagPrefix + image.Name}, "ReadOnly": true, "Inactive": true})
		return nil
	})
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
	})
}

// helmInstall is docs/install.md's Helm install: the namespace made and
// labelled for the node pods' privileges, then the chart with its
// defaults (the scheduler image of the control plane's minor) but its
// example classes, as deploy/ installs it: the test bed makes its own
// (CreateClasses), and every class adds a CSIStorageCapacity object per
// node that the many-node tests and benchmarks would pay for.
func (c *Cluster) helmInstall(ctx context.Context) error {
	if _, err := c.kubectl(ctx, "create", "namespace", Namespace); err != nil {
		return err
	}
	if _, err := c.kubectl(ctx, "label", "namespace", Namespace, "pod-security.kubernetes.io/enforce=privileged",
		"pod-security.kubernetes.io/audit=privileged", "pod-security.kubernetes.io/warn=privileged"); err != nil {
		return err
	}
	args := []string{"install", Release, c.Chart, "--namespace", Namespace,
		"--set-json", "storageClasses=[]", "--set", "volumeSnapshotClass.enabled=false"}
	if len(c.deviceClasses) > 0 {
		// The chart's default pool with other device classes.
		pools, err := json.Marshal([]map[string]any{{"name": "default", "nodeSelector": map[string]any{}, "affinity": map[string]any{},
			"tolerations": []any{map[string]any{"operator": "Exists"}}, "deviceClasses": c.deviceClasses}})
		if err != nil {
			return err
		}
		args = append(args, "--set-json", "node.pools="+string(pools))
	}
	_, err := c.Helm(ctx, args...)
	return err
}

// Helm runs the built helm with the admin kubeconfig (its own config and
// cache directories under the cluster's).
func (c *Cluster) Helm(ctx context.Context, args ...string) ([]byte, error) {
	return c.client(ctx, filepath.Join(c.K8sBin, "helm"), []string{"HELM_CONFIG_HOME=" + filepath.Join(c.Dir, "helm", "config"),
		"HELM_CACHE_HOME=" + filepath.Join(c.Dir, "helm", "cache"), "HELM_DATA_HOME=" + filepath.Join(c.Dir, "helm", "data")}, args...)
}

// Uninstall removes what Install installed (docs/uninstall.md, step 2):
// `helm uninstall` and the chart's CRDs, which Helm leaves, or with
// Options.Kustomize `kubectl delete -k deploy/`. It does not wait for the
// namespace to go: its pods are this harness's processes, which Stop ends.
func (c *Cluster) Uninstall(ctx context.Context) error {
	if c.Kustomize {
		_, err := c.kubectl(ctx, "delete", "-k", c.Deploy, "--wait=false", "--ignore-not-found")
		return err
	}
	if _, err := c.Helm(ctx, "uninstall", Release, "--namespace", Namespace); err != nil {
		return err
	}
	if _, err := c.kubectl(ctx, "delete", "-f", filepath.Join(c.Chart, "crds"), "--wait=false", "--ignore-not-found"); err != nil {
		return err
	}
	_, err := c.kubectl(ctx, "delete", "namespace", Namespace, "--wait=false", "--ignore-not-found")
	return err
}

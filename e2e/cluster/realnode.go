package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

// A real node is a test VM that runs what a Kubernetes node runs: the
// kubelet, containerd 2 with runc, kube-proxy (nftables) and the CNI bridge
// plugin, all built from this tree's pinned modules (build.sh) or Debian's
// packages (the VM image). Its kubelet joins the cluster as
// system:node:NAME (a client certificate of the cluster's CA), and runs
// the pods the API server gives it: thinlvm's DaemonSet from deploy/, found
// through the kubelet's plugin watcher, and the tests' workloads. The node
// reaches the API server through the VM network's gateway (the host's
// loopback); its pods reach it through the kubernetes Service, which
// kube-proxy sends there.

//go:embed node-init.sh
var nodeInit []byte

// nodeBinaries are the node's programs, from build.sh.
var nodeBinaries = []string{"kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr", "runc"}

// Images of the real node besides thinlvm's (whose names are deploy/'s).
const (
	// PauseImage is the pod sandbox (e2e/cluster/pause).
	PauseImage = "thinlvm.test/pause:1"
	// BusyboxImage is the tests' workload image: Debian's busybox-static,
	// /bin/sh and its applets (dd, sha256sum, sleep, ...).
	BusyboxImage = "thinlvm.test/busybox:1"
)

// realNodePodCIDR is every real node's pod network (one node per VM, and
// pods talk to other nodes only through the host).
const realNodePodCIDR = "10.244.0.0/24"

// RealNodeOptions configure StartRealNode.
type RealNodeOptions struct {
	// Disks are the VM's disks for LVM ("16G"); the node's system disk
	// (/var/lib: containerd's images, the kubelet's state) comes after
	// them.
	Disks []string
	// Prepare is shell run at every boot before the kubelet starts, as a
	// node's provisioning would (e.g. make the VG on the first boot).
	Prepare string
	// Labels are the node's --node-labels.
	Labels map[string]string
	// GuestPorts are forwarded from the host, besides the kubelet's.
	GuestPorts []int
	// StorageSuite imports the images of Kubernetes' storage suite
	// (RunStorageSuite) too.
	StorageSuite bool
}

// KubeletPort is the kubelet's port in the guest (forwarded: VM.Addr).
const KubeletPort = 10250

// StartRealNode boots a VM as node name and waits until the Node is Ready.
func (c *Cluster) StartRealNode(ctx context.Context, nodeName string, o RealNodeOptions) (*lvmvm.VM, error) {
	t0 := time.Now()
	bins, err := c.nodeBins(ctx)
	if err != nil {
		return nil, err
	}
	images, sum, err := c.nodeImages(ctx, o)
	if err != nil {
		return nil, err
	}
	files, err := c.nodeFiles(nodeName, o, len(o.Disks), sum)
	if err != nil {
		return nil, err
	}
	if err := c.kubernetesEndpoints(ctx); err != nil {
		return nil, err
	}
	links := map[string]string{"node-images.tar": images}
	for _, b := range nodeBinaries {
		links["bin/"+b] = bins[b]
	}
	vm, err := lvmvm.Start(ctx, lvmvm.Options{Disks: append(append([]string{}, o.Disks...), "8G"), HostLoopback: true,
		GuestPorts: append([]int{KubeletPort}, o.GuestPorts...), Log: c.log, Init: "/ctl/node/init.sh", Files: files, Links: links,
		// Two vCPUs: with one, the kubelet, containerd, its shims and the
		// pods starved containerd's 10 s handling of container exits.
		TmpfsRoot: true, CPUs: 2})
	if err != nil {
		return nil, fmt.Errorf("boot the VM of node %s: %w", nodeName, err)
	}
	c.kubelets.route(nodeName, func() string { return vm.Addr(KubeletPort) })
	if err := c.WaitNodeReady(ctx, nodeName, vm); err != nil {
		vm.Stop()
		return nil, err
	}
	fmt.Fprintf(c.log, "cluster: real node %s Ready after %.1fs (guest booted in %.1fs)\n", nodeName, time.Since(t0).Seconds(), vm.BootSeconds)
	return vm, nil
}

// WaitNodeReady waits until the kubelet of node reports it Ready (after a
// boot: the images' import and the kubelet's start take minutes under the
// emulated CPU, more beside other suites: the import took 3.8 to 4.0
// minutes beside the other lane, and 8.2 with builds beside both). The
// bound is against a hang, not a measure.
func (c *Cluster) WaitNodeReady(ctx context.Context, nodeName string, vm *lvmvm.VM) error {
	deadline := time.Now().Add(15 * time.Minute)
	for {
		node := &corev1.Node{}
		err := c.Client.Get(ctx, client.ObjectKey{Name: nodeName}, node)
		if err == nil {
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not Ready after 10m (%w): %+v\n%s", nodeName, err, node.Status.Conditions, c.RealNodeLogs(vm))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// RealNodePodLog is what a container of a pod on a real node printed
// (container "" for the pod's first), as kubectl logs would show it: the
// lines of the log files the kubelet keeps on the node (/var/log/pods, the
// CRI log format, one file per start of the container), without each
// line's time, stream and tag.
func RealNodePodLog(ctx context.Context, vm *lvmvm.VM, pod *corev1.Pod, container string) (string, error) {
	if container == "" {
		container = pod.Spec.Containers[0].Name
	}
	dir := path.Join("/var/log/pods", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID), container)
	out, err := vm.Run(ctx, "sh", "-c", "cat "+dir+"/*.log")
	if err != nil {
		return "", fmt.Errorf("log of pod %s: %w", pod.Name, err)
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		// <time> <stream> <P|F> <text>
		if f := strings.SplitN(l, " ", 4); len(f) == 4 {
			lines = append(lines, f[3])
		}
	}
	return strings.Join(lines, "\n"), nil
}

// RealNodeLogs returns the tails of a real node's service logs.
func (c *Cluster) RealNodeLogs(vm *lvmvm.VM) string {
	var b strings.Builder
	for _, f := range []string{"init.log", "log/import.log", "log/containerd.log", "log/kubelet.log", "log/kube-proxy.log"} {
		data, _ := os.ReadFile(filepath.Join(vm.ShareDir(), f))
		if len(data) > 6000 {
			data = data[len(data)-6000:]
		}
		fmt.Fprintf(&b, "=== %s\n%s\n", f, data)
	}
	return b.String()
}

// nodeBins builds (cached) the node's programs.
func (c *Cluster) nodeBins(ctx context.Context) (map[string]string, error) {
	dir, err := buildK8s(ctx, c.log, func(Progress) {}, nil, nodeBinaries...)
	if err != nil {
		return nil, err
	}
	bins := map[string]string{}
	for _, b := range nodeBinaries {
		bins[b] = filepath.Join(dir, b)
	}
	return bins, nil
}

// nodeImages writes (once per cluster) the node's images as one docker
// archive that containerd imports: thinlvm's images from Bin/images under
// the names deploy/ gives them, the pause and busybox images. It returns
// the archive's path and a digest of what it holds.
func (c *Cluster) nodeImages(ctx context.Context, o RealNodeOptions) (path, sum string, err error) {
	path = filepath.Join(c.Dir, "node-images.tar")
	if data, err := os.ReadFile(path + ".sum"); err == nil {
		return path, string(data), nil
	}
	refs := map[name.Reference]v1.Image{}
	add := func(ref string, img v1.Image) error {
		r, err := name.ParseReference(ref)
		if err != nil {
			return err
		}
		refs[r] = img
		return nil
	}
	thinlvm, err := thinlvmImages(filepath.Join(c.Bin, "images"))
	if err != nil {
		return "", "", err
	}
	for ref, img := range thinlvm {
		if err := add(ref, img); err != nil {
			return "", "", err
		}
	}
	pause, err := c.pauseImage(ctx)
	if err != nil {
		return "", "", err
	}
	if err := add(PauseImage, pause); err != nil {
		return "", "", err
	}
	applets, err := busyboxEntries()
	if err != nil {
		return "", "", err
	}
	busybox, err := imageOf(applets, []string{"/bin/sh"}, nil)
	if err != nil {
		return "", "", err
	}
	if err := add(BusyboxImage, busybox); err != nil {
		return "", "", err
	}
	if o.StorageSuite {
		suite, err := c.storageSuiteImages(ctx, pause, applets)
		if err != nil {
			return "", "", err
		}
		for ref, img := range suite {
			if err := add(ref, img); err != nil {
				return "", "", err
			}
		}
	}
	if err := tarball.MultiRefWriteToFile(path, refs); err != nil {
		return "", "", fmt.Errorf("write the node's images: %w", err)
	}
	var ids []string
	for r, img := range refs {
		d, err := img.Digest()
		if err != nil {
			return "", "", err
		}
		ids = append(ids, r.String()+"@"+d.String())
	}
	sort.Strings(ids)
	h := sha256.Sum256([]byte(strings.Join(ids, "\n")))
	sum = hex.EncodeToString(h[:])
	return path, sum, os.WriteFile(path+".sum", []byte(sum), 0o644)
}

// nodeImages are thinlvm's images that a node runs (the DaemonSet's).
var nodeImages = map[string]bool{"thinlvm-node": true, "thinlvm-lvmd": true}

// thinlvmImages reads this machine's arch of each node image in the OCI
// layout at dir, named as the chart names them (its image.registry).
func thinlvmImages(dir string) (map[string]v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("thinlvm's images: %w", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	out := map[string]v1.Image{}
	for _, desc := range m.Manifests {
		ref := desc.Annotations["org.opencontainers.image.ref.name"] // thinlvm-node:v0.1.0
		if !nodeImages[strings.SplitN(ref, ":", 2)[0]] {
			continue // the controller's and the scheduler's run on the host
		}
		child, err := idx.ImageIndex(desc.Digest)
		if err != nil {
			return nil, err
		}
		cm, err := child.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, d := range cm.Manifests {
			if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == hostArch() {
				img, err := child.Image(d.Digest)
				if err != nil {
					return nil, err
				}
				out[ImageRegistry+"/"+ref] = img
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s image in %s", hostArch(), dir)
	}
	return out, nil
}

// pauseImage builds e2e/cluster/pause into an image.
func (c *Cluster) pauseImage(ctx context.Context) (v1.Image, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	out := filepath.Join(c.Dir, "pause")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./e2e/cluster/pause")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build pause: %w\n%s", err, msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	return imageOf([]tarEntry{{name: "pause", data: data, mode: 0o755}}, []string{"/pause"}, nil)
}

// busyboxEntries are /bin/busybox (Debian's busybox-static), a link in
// /bin for each applet, and /tmp.
func busyboxEntries() ([]tarEntry, error) {
	data, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		return nil, fmt.Errorf("busybox (Debian's busybox-static): %w", err)
	}
	list, err := exec.Command("/usr/bin/busybox", "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list: %w", err)
	}
	entries := []tarEntry{{name: "bin/", mode: 0o755}, {name: "tmp/", mode: 0o1777}, {name: "bin/busybox", data: data, mode: 0o755}}
	for _, a := range strings.Fields(string(list)) {
		if a != "busybox" {
			entries = append(entries, tarEntry{name: "bin/" + a, link: "busybox"})
		}
	}
	return entries, nil
}

type tarEntry struct {
	name string
	data []byte
	mode int64
	link string // a symlink's target
}

// imageOf is a one-layer image of entries with entrypoint and cmd.
func imageOf(entries []tarEntry, entrypoint, cmd []string) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.data)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		switch {
		case e.link != "":
			h.Typeflag, h.Linkname, h.Mode, h.Size = tar.TypeSymlink, e.link, 0o777, 0
		case strings.HasSuffix(e.name, "/"):
			h.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", hostArch()
	cf.Config.Entrypoint, cf.Config.Cmd = entrypoint, cmd
	cf.Config.Env = []string{"PATH=/bin"}
	return mutate.ConfigFile(img, cf)
}

// nodeFiles are the node's /ctl/node: its identity, credentials and the
// configuration of its services.
func (c *Cluster) nodeFiles(nodeName string, o RealNodeOptions, disks int, imagesSum string) (map[string][]byte, error) {
	pkiDir := filepath.Join(c.Dir, "pki")
	ca, err := os.ReadFile(filepath.Join(pkiDir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	kubeletCert, kubeletKey, err := clientCert(pkiDir, "system:node:"+nodeName, "system:nodes")
	if err != nil {
		return nil, err
	}
	proxyCert, proxyKey, err := clientCert(pkiDir, "system:kube-proxy")
	if err != nil {
		return nil, err
	}
	var labels []string
	for k, v := range o.Labels {
		labels = append(labels, k+"="+v)
	}
	sort.Strings(labels)
	server := fmt.Sprintf("https://%s:%d", lvmvm.HostAddress, c.apiPort)
	return map[string][]byte{
		"node/init.sh":            nodeInit,
		"node/prepare.sh":         []byte(o.Prepare),
		"node/name":               []byte(nodeName),
		"node/disk":               []byte("/dev/vd" + string(rune('a'+disks))),
		"node/labels":             []byte(strings.Join(labels, ",")),
		"node/images.sum":         []byte(imagesSum),
		"node/ca.crt":             ca,
		"node/kubelet.crt":        kubeletCert,
		"node/kubelet.key":        kubeletKey,
		"node/kube-proxy.crt":     proxyCert,
		"node/kube-proxy.key":     proxyKey,
		"node/kubelet.kubeconfig": nodeKubeconfig(server, "kubelet"),
		"node/proxy.kubeconfig":   nodeKubeconfig(server, "kube-proxy"),
		"node/kubelet.yaml":       []byte(kubeletConfig),
		"node/kube-proxy.yaml":    []byte(kubeProxyConfig),
		"node/containerd.toml":    []byte(containerdConfig),
		"node/cni.conflist":       []byte(cniConfig),
		"node/pod-cidr":           []byte(realNodePodCIDR),
	}, nil
}

// nodeKubeconfig is a kubeconfig with the client certificate user.crt/.key
// in /ctl/node.
func nodeKubeconfig(server, user string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: %q, certificate-authority: /ctl/node/ca.crt}
users:
- name: %[2]s
  user: {client-certificate: /ctl/node/%[2]s.crt, client-key: /ctl/node/%[2]s.key}
contexts:
- name: e2e
  context: {cluster: e2e, user: %[2]s}
current-context: e2e
`, server, user)
}

// The kubelet as a node's would run: webhook authentication and
// authorization against the API server, cgroup v2 through cgroupfs (the
// guest has no systemd), and what a 2 GiB node with emulated CPUs needs
// (no swap check, small eviction thresholds). Volume stats every 30 s
// (a minute by default), so that kubelet_volume_stats_* follow a test's
// writes sooner.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cgroupDriver: cgroupfs
failSwapOn: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: /ctl/node/ca.crt}
authorization: {mode: Webhook}
readOnlyPort: 0
resolvConf: /etc/resolv.conf
maxPods: 30
serializeImagePulls: false
volumeStatsAggPeriod: 30s
nodeStatusReportFrequency: 1m
evictionHard: {memory.available: "64Mi", nodefs.available: "2%", imagefs.available: "2%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
shutdownGracePeriod: 0s
`

// kube-proxy in nftables mode; every connection to a Service is
// masqueraded to the node's address, which is what the VM network's
// gateway answers.
const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {kubeconfig: /ctl/node/proxy.kubeconfig}
clusterCIDR: ` + realNodePodCIDR + `
nftables: {masqueradeAll: true}
conntrack: {maxPerCore: 0}
`

// containerd 2 for the CRI with runc (the guest runs from a tmpfs root,
// lvmvm.Options.TmpfsRoot, so that runc's pivot_root works), the shim and
// runc from that root (node-init.sh copies them there: exec from the 9p
// share is slow), the local pause image. Its CPU statistics every 10 s, not every second: each
// round asks every container's shim, and on the emulated CPUs that load
// is what made a container's exit outlast containerd's fixed 10 s for
// handling it (docs/conformance.md).
const containerdConfig = `version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "` + PauseImage + `"
[plugins.'io.containerd.cri.v1.runtime']
  stats_collect_period = "10s"
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = "/usr/local/bin/containerd-shim-runc-v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "/usr/local/bin/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/opt/cni/bin"]
    conf_dir = "/etc/cni/net.d"
`

// The pod network: a bridge on the node, addresses from host-local, no
// masquerade of its own (kube-proxy masquerades what goes to Services).
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "thinlvm-test",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "` + realNodePodCIDR + `"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
`

// kubernetesEndpoints points the kubernetes Service at the API server as
// the real nodes reach it (the API server runs with
// --endpoint-reconciler-type=none: nothing else writes them). The harness's
// own processes do not use the Service.
func (c *Cluster) kubernetesEndpoints(ctx context.Context) error {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default",
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "thinlvm-e2e"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{lvmvm.HostAddress}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(c.apiPort)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	return IgnoreAlreadyExists(c.Client.Create(ctx, slice))
}

// hostArch is this machine's GOARCH, the real node's.
func hostArch() string { return runtime.GOARCH }

// ImageRegistry is where the chart (image.registry) names thinlvm's images.
const ImageRegistry = "ghcr.io/thinlvm"

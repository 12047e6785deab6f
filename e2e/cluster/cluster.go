package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/thinlvm/thinlvm/e2e/lvmvm"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// Options configure a Cluster.
type Options struct {
	// Dir holds logs, certificates, etcd data and sockets; a new temporary
	// directory when empty (removed by Stop unless CLUSTER_KEEP is set).
	Dir string
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Progress, when set, is told each step Start begins (each binary it
	// builds, then the processes it starts), one call at a time.
	Progress func(Progress)
	// ControllerManagerArgs are added to kube-controller-manager's.
	ControllerManagerArgs []string
	// SlowHeartbeats: kwok writes each node's status every 10 to 20 minutes
	// and renews its Lease every 150 s (a 600 s lease), not every 20 to 45
	// s and 10 s as a kubelet does. At 5,000 nodes the kubelet's rate is
	// about 650 writes a second, all of one small host's API server. Pair
	// it with a --node-monitor-grace-period longer than 20 minutes.
	SlowHeartbeats bool
	// K8sMinor, when set to an older supported minor than the product's
	// (e.g. "1.34"), runs that minor's kube-apiserver,
	// kube-controller-manager, kube-scheduler and kubectl, built in
	// scheduler/k8s<minor>: the install on that minor's control plane
	// (e2e/compat; the chart picks that minor's scheduler image). The rest
	// (etcd, kwok, the CSI sidecars) is the same for every minor.
	K8sMinor string
	// Kustomize makes Install apply deploy/'s kustomize tree
	// (deploy/k8s<minor> on an older minor) instead of installing the
	// chart: the other documented install.
	Kustomize bool
	// DeviceClasses, when set, replace the chart's device classes of its
	// default node pool (ssd on vg0/pool0), as an operator's values do;
	// the chart's install only.
	DeviceClasses []map[string]any
}

// Cluster is the test bed: the harness's processes (Supervisor), the
// local control plane (ControlPlane), the kubelet stand-in (Kubelet), and
// on them thinlvm's install and its nodes (this type's own methods: the
// install, the simulated and VM nodes, the real nodes, the storage suite).
// The parts are embedded, so a test reaches each through the Cluster.
type Cluster struct {
	*Supervisor
	*ControlPlane
	*Kubelet

	// Deploy is the kustomization Install applies with
	// Options.Kustomize: deploy/, or deploy/k8s<minor> for
	// Options.K8sMinor.
	Deploy string
	// Chart is the Helm chart Install installs (deploy/chart) unless
	// Options.Kustomize.
	Chart string
	// Kustomize is Options.Kustomize.
	Kustomize bool
	// deviceClasses is Options.DeviceClasses.
	deviceClasses []map[string]any
	// CapacityPoll is how often the provisioner refreshes
	// CSIStorageCapacity; set before StartThinlvm. Default 5s.
	CapacityPoll time.Duration

	temp bool
	// mu guards the install's state below.
	mu sync.Mutex
	// nodePods maps a node to its thinlvm pod; vmPods a pod run in the VM
	// to the VM.
	nodePods map[string]string
	vmPods   map[string]*lvmvm.VM
	// agentArgs are the extra args of each node's agent (AddNode's);
	// agentExtraArgs follow them (RestartVMAgent's).
	agentArgs, agentExtraArgs map[string][]string
	// agentsTuned: the node DaemonSet has agentArgs (TuneNodeAgents).
	agentsTuned bool
}

// Scheme has client-go's and thinlvm's types.
var Scheme = runtime.NewScheme()

func init() {
	_ = clientgoscheme.AddToScheme(Scheme)
	_ = thinlvmv1.AddToScheme(Scheme)
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// k8sBinaries are what the control plane runs from build.sh.
var k8sBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok",
	"csi-provisioner", "csi-resizer", "csi-snapshotter", "snapshot-controller", "helm"}

// buildK8s has build.sh build (cached) the named binaries and returns their
// directory; build.sh's stderr goes to log, each binary it starts to build
// to progress.
func buildK8s(ctx context.Context, log io.Writer, progress func(Progress), env []string, names ...string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "e2e", "cluster", "build.sh"), names...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = &buildLog{log: log, progress: progress}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build.sh %s: %w", strings.Join(names, " "), err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// Build builds (cached) the Kubernetes binaries and thinlvm's, returning
// their directories; the images have the scheduler of Kubernetes minor
// ("" for the newest). It tells progress (not nil) each binary it starts
// to build; build.sh's output goes to log unchanged.
func Build(ctx context.Context, log io.Writer, progress func(Progress), minor string) (k8sBin, bin string, err error) {
	root, err := repoRoot()
	if err != nil {
		return "", "", err
	}
	progress(Progress{Step: "checking the cached Kubernetes binaries", Since: time.Now()})
	k8sBin, err = buildK8s(ctx, log, progress, nil, k8sBinaries...)
	if err != nil {
		return "", "", err
	}
	bin, err = os.MkdirTemp("", "thinlvm-bin-")
	if err != nil {
		return "", "", err
	}
	progress(Progress{Step: "building thinlvm", N: buildComponents, Of: buildComponents, Since: time.Now()})
	// The images (the same build as `make images`) are what the pods run;
	// fakelvm plays lvm on the simulated nodes; podrun is the harness's
	// container runtime, on the host and in the VM.
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+"/", "./e2e/cluster/fakelvm", "./e2e/cluster/podrun")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("build thinlvm: %w\n%s", err, out)
	}
	// THINLVM_E2E_IMAGES names the images (an OCI layout, this machine's
	// arch) when the caller built them from this tree: make test-vm builds
	// them once for all its suites, which otherwise each build the same.
	if dir := os.Getenv("THINLVM_E2E_IMAGES"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
			return "", "", fmt.Errorf("THINLVM_E2E_IMAGES: %w", err)
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", "", err
		}
		if err := os.Symlink(abs, filepath.Join(bin, "images")); err != nil {
			return "", "", err
		}
		fmt.Fprintf(log, "cluster: images from %s\n", abs)
		return k8sBin, bin, nil
	}
	progress(Progress{Step: "building thinlvm's images", N: buildComponents, Of: buildComponents, Since: time.Now()})
	// This machine's arch only (the pods run here), and the scheduler of
	// one Kubernetes minor: the control plane's.
	images := exec.CommandContext(ctx, "go", "run", "./hack/images", "-arch="+goruntime.GOARCH, "-k8s-minors="+cmp.Or(minor, "newest"),
		"-out", filepath.Join(bin, "images"))
	images.Dir = root
	built, err := images.CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("build the images: %w\n%s", err, built)
	}
	fmt.Fprintf(log, "cluster: images built\n%s", built)
	return k8sBin, bin, nil
}

// Start builds what is missing and starts etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok, waiting until each is
// ready.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	logw := o.Log
	if logw == nil {
		logw = io.Discard
	}
	setLogger(logw)
	progress := o.Progress
	if progress == nil {
		progress = func(Progress) {}
	}
	sup := &Supervisor{Dir: o.Dir, log: logw}
	cp := &ControlPlane{Supervisor: sup}
	c = &Cluster{Supervisor: sup, ControlPlane: cp, Kubelet: &Kubelet{ControlPlane: cp}, CapacityPoll: 5 * time.Second}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "thinlvm-cluster-"); err != nil {
			return nil, err
		}
		c.temp = true
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if c.K8sBin, c.Bin, err = Build(ctx, logw, progress, o.K8sMinor); err != nil {
		return c, err
	}
	root, err := repoRoot()
	if err != nil {
		return c, err
	}
	c.ControlBin, c.Deploy, c.Chart, c.Kustomize = c.K8sBin, filepath.Join(root, "deploy"), filepath.Join(root, "deploy", "chart"), o.Kustomize
	c.deviceClasses = o.DeviceClasses
	if o.Kustomize && len(o.DeviceClasses) > 0 {
		return c, errors.New("Options.DeviceClasses apply to the chart's install, not to Kustomize's")
	}
	if o.K8sMinor != "" {
		module := filepath.Join("scheduler", "k8s"+o.K8sMinor)
		if _, err := os.Stat(filepath.Join(root, module, "go.mod")); err != nil {
			return c, fmt.Errorf("no scheduler build for Kubernetes %s (%w)", o.K8sMinor, err)
		}
		c.Deploy = filepath.Join(root, "deploy", "k8s"+o.K8sMinor)
		if c.ControlBin, err = buildK8s(ctx, logw, progress, []string{"K8S_MODULE=" + module},
			"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"); err != nil {
			return c, err
		}
	}
	if err := cp.start(ctx, o, progress); err != nil {
		return c, err
	}
	return c, nil
}

// KillContainer kills a pod's container with SIGKILL, as the OOM killer
// would, and leaves it to its kubelet to start again: podrun (on the host
// or in vm, when the pod runs there) or, for a container run as a plain
// process, RunContainer's loop.
func (c *Cluster) KillContainer(ctx context.Context, name string) error {
	c.mu.Lock()
	var vm *lvmvm.VM
	if _, pod, ok := strings.Cut(name, "@"); ok {
		vm = c.vmPods[pod]
	}
	c.mu.Unlock()
	if vm != nil {
		return vm.Signal(ctx, name, syscall.SIGHUP, false) // podrun kills its container
	}
	ps := c.named(name)
	if len(ps) == 0 {
		return fmt.Errorf("no container %s", name)
	}
	p := ps[len(ps)-1]
	cmd := p.current()
	if filepath.Base(p.argv[0]) == "podrun" && p.argv[1] == "run" {
		return cmd.Process.Signal(syscall.SIGHUP)
	}
	if !p.restart {
		return fmt.Errorf("%s is not a container: nothing would start it again", name)
	}
	return cmd.Process.Kill()
}

// Stop stops every process, last started first, and removes the
// temporary directories.
func (c *Cluster) Stop() {
	c.StopAll()
	if c.kubelets != nil {
		c.kubelets.close()
	}
	if c.temp && os.Getenv("CLUSTER_KEEP") == "" {
		_ = os.RemoveAll(c.Dir)
	}
	if c.Bin != "" {
		_ = os.RemoveAll(c.Bin)
	}
}

// IgnoreAlreadyExists returns nil for an AlreadyExists error.
func IgnoreAlreadyExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

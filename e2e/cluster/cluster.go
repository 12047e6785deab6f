package cluster

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"

	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
}

// Cluster is a running local control plane.
type Cluster struct {
	Dir        string
	Kubeconfig string
	Config     *rest.Config
	Client     client.Client
	// K8sBin holds the Kubernetes binaries; Bin the harness's own (podrun,
	// fakelvm) and, in Bin/images, thinlvm's images as an OCI layout.
	K8sBin, Bin string
	// ControlBin holds kube-apiserver, kube-controller-manager,
	// kube-scheduler and kubectl: K8sBin's, or Options.K8sMinor's.
	ControlBin string
	// Deploy is the kustomization Install applies with
	// Options.Kustomize: deploy/, or deploy/k8s<minor> for
	// Options.K8sMinor.
	Deploy string
	// Chart is the Helm chart Install installs (deploy/chart) unless
	// Options.Kustomize.
	Chart string
	// Kustomize is Options.Kustomize.
	Kustomize bool
	// CapacityPoll is how often the provisioner refreshes
	// CSIStorageCapacity; set before StartThinlvm. Default 5s.
	CapacityPoll time.Duration

	log     io.Writer
	temp    bool
	apiPort int
	token   string
	// nodePods maps a node to its thinlvm pod; vmPods a pod run in the VM
	// to the VM.
	nodePods map[string]string
	vmPods   map[string]*lvmvm.VM
	// agentArgs are the extra args of each node's agent (AddNode's);
	// agentExtraArgs follow them (RestartVMAgent's).
	agentArgs, agentExtraArgs map[string][]string
	// agentsTuned: the node DaemonSet has agentArgs (TuneNodeAgents).
	agentsTuned bool
	// roots are the images unpacked for pods, by "host" or the VM's
	// share directory.
	roots   map[string]*imageRoots
	rootsMu sync.Mutex
	// kubelets carries the API server's connections to real nodes'
	// kubelets.
	kubelets *kubeletProxy
	mu       sync.Mutex
	procs    []*proc
}

type proc struct {
	name string
	env  []string
	argv []string
	// restart: started again when it exits, as the kubelet does with a
	// pod's containers (restartPolicy Always).
	restart bool
	// done is closed when the process has stopped for good; stopping when
	// Kill or Crash asked it to.
	done     chan struct{}
	stopping chan struct{}
	stopOnce sync.Once

	mu  sync.Mutex
	cmd *exec.Cmd // the current run
}

func (p *proc) current() *exec.Cmd {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd
}

func (p *proc) stop() { p.stopOnce.Do(func() { close(p.stopping) }) }

// Restart stops the named process, runs between (nil for nothing), and
// starts it again with the same arguments and environment (and, for a
// container, restarted again when it exits).
func (c *Cluster) Restart(name string, between func() error) error {
	c.mu.Lock()
	var last *proc
	for _, p := range c.procs {
		if p.name == name {
			last = p
		}
	}
	c.mu.Unlock()
	if last == nil {
		return fmt.Errorf("no process %s", name)
	}
	c.Kill(name)
	if between != nil {
		if err := between(); err != nil {
			return err
		}
	}
	return c.run(&proc{name: name, env: last.env, argv: last.argv, restart: last.restart})
}

// Args are the arguments the named process was last started with (nil if
// none was).
func (c *Cluster) Args(name string) []string {
	ps := c.named(name)
	if len(ps) == 0 {
		return nil
	}
	return slices.Clone(ps[len(ps)-1].argv)
}

// Procs are the names of the processes started here.
func (c *Cluster) Procs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, p := range c.procs {
		if !slices.Contains(out, p.name) {
			out = append(out, p.name)
		}
	}
	return out
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
	c = &Cluster{Dir: o.Dir, log: logw, CapacityPoll: 5 * time.Second}
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
	for _, d := range []string{"logs", "pki", "etcd"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return c, err
		}
	}
	token, err := pki(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return c, err
	}
	c.token = token
	p := func(n string) string { return filepath.Join(c.Dir, "pki", n) }
	ports := make([]int, 6)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return c, err
		}
	}
	etcdPort, peerPort, kcmPort, schedPort := ports[0], ports[1], ports[3], ports[4]
	c.apiPort = ports[2]
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := kubeconfig(c.Kubeconfig, p("ca.crt"), "127.0.0.1", c.apiPort, token); err != nil {
		return c, err
	}

	t0 := time.Now()
	progress(Progress{Step: "starting etcd and kube-apiserver", Since: t0})
	if err := c.Run("etcd", nil, filepath.Join(c.K8sBin, "etcd"), "--name=e2e", "--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:"+strconv.Itoa(etcdPort), "--advertise-client-urls=http://127.0.0.1:"+strconv.Itoa(etcdPort),
		"--listen-peer-urls=http://127.0.0.1:"+strconv.Itoa(peerPort), "--initial-advertise-peer-urls=http://127.0.0.1:"+strconv.Itoa(peerPort),
		"--initial-cluster=e2e=http://127.0.0.1:"+strconv.Itoa(peerPort), "--unsafe-no-fsync", "--log-level=warn"); err != nil {
		return c, err
	}
	kubelets, egress, err := startKubeletProxy(c.Dir, logw)
	if err != nil {
		return c, err
	}
	c.kubelets = kubelets
	// The API server's identity at kubelets (their webhook authorizer
	// asks it back): a member of system:masters, as kubeadm's was.
	kcert, kkey, err := clientCert(filepath.Join(c.Dir, "pki"), "kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return c, err
	}
	if err := os.WriteFile(p("apiserver-kubelet-client.crt"), kcert, 0o644); err != nil {
		return c, err
	}
	if err := os.WriteFile(p("apiserver-kubelet-client.key"), kkey, 0o600); err != nil {
		return c, err
	}
	if err := c.Run("kube-apiserver", nil, filepath.Join(c.ControlBin, "kube-apiserver"),
		"--egress-selector-config-file="+egress, "--kubelet-client-certificate="+p("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+p("apiserver-kubelet-client.key"), "--kubelet-preferred-address-types=InternalIP",
		"--etcd-servers=http://127.0.0.1:"+strconv.Itoa(etcdPort), "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(c.apiPort), "--tls-cert-file="+p("apiserver.crt"), "--tls-private-key-file="+p("apiserver.key"),
		"--client-ca-file="+p("ca.crt"), "--token-auth-file="+p("tokens.csv"), "--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file="+p("sa.pub"),
		"--service-account-signing-key-file="+p("sa.key"), "--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type=none", "--allow-privileged=true", "--v=0"); err != nil {
		return c, err
	}
	if err := c.waitHTTPS(ctx, "kube-apiserver", fmt.Sprintf("https://127.0.0.1:%d/readyz", c.apiPort), p("ca.crt"), token); err != nil {
		return c, err
	}
	fmt.Fprintf(logw, "cluster: kube-apiserver ready after %.1fs\n", time.Since(t0).Seconds())
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return c, err
	}
	c.Config.QPS, c.Config.Burst = 200, 400
	if c.Client, err = client.New(c.Config, client.Options{Scheme: Scheme}); err != nil {
		return c, err
	}
	progress(Progress{Step: "starting controller-manager, scheduler, kwok", Since: time.Now()})
	if err := c.Run("kube-controller-manager", nil, append([]string{filepath.Join(c.ControlBin, "kube-controller-manager"),
		"--kubeconfig=" + c.Kubeconfig, "--authentication-kubeconfig=" + c.Kubeconfig, "--authorization-kubeconfig=" + c.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(kcmPort), "--leader-elect=false",
		"--service-account-private-key-file=" + p("sa.key"), "--root-ca-file=" + p("ca.crt"), "--use-service-account-credentials=true",
		"--controllers=*", "--cluster-signing-cert-file=" + p("ca.crt"), "--cluster-signing-key-file=" + p("ca.key"),
		"--kube-api-qps=50", "--kube-api-burst=100"}, o.ControllerManagerArgs...)...); err != nil {
		return c, err
	}
	// The cluster's own default scheduler; thinlvm's scheduler comes with
	// the install (deploy/scheduler) as a second profile.
	schedCfg := filepath.Join(c.Dir, "scheduler.yaml")
	if err := os.WriteFile(schedCfg, fmt.Appendf(nil, "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection: {kubeconfig: %q}\nleaderElection: {leaderElect: false}\n", c.Kubeconfig), 0o644); err != nil {
		return c, err
	}
	if err := c.Run("kube-scheduler", nil, filepath.Join(c.ControlBin, "kube-scheduler"), "--config="+schedCfg,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(schedPort), "--authentication-kubeconfig="+c.Kubeconfig,
		"--authorization-kubeconfig="+c.Kubeconfig); err != nil {
		return c, err
	}
	heartbeat, lease := "node/heartbeat/node-heartbeat.yaml", "40"
	if o.SlowHeartbeats {
		heartbeat, lease = "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml", "600"
	}
	stages, err := c.kwokStages(heartbeat)
	if err != nil {
		return c, err
	}
	if err := c.Run("kwok", nil, filepath.Join(c.K8sBin, "kwok"), "--kubeconfig="+c.Kubeconfig, "--config="+stages,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr=10.244.0.0/16", "--node-ip=127.0.0.1", "--node-lease-duration-seconds="+lease); err != nil {
		return c, err
	}
	// Pods need the default ServiceAccount, which the controller manager makes.
	if err := c.WaitFor(ctx, "the default ServiceAccount", time.Minute, func() (bool, error) {
		err := c.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "default"}, &corev1.ServiceAccount{})
		return err == nil, client.IgnoreNotFound(err)
	}); err != nil {
		return c, err
	}
	fmt.Fprintf(logw, "cluster: control plane ready after %.1fs (dir %s)\n", time.Since(t0).Seconds(), c.Dir)
	return c, nil
}

// kwokStages writes the kwok module's "fast" node and pod stages, and the
// node heartbeat stage named.
func (c *Cluster) kwokStages(heartbeat string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	dir, err := moduleDir(filepath.Join(root, "e2e", "cluster", "addons"), "sigs.k8s.io/kwok")
	if err != nil {
		return "", err
	}
	var all []byte
	for _, f := range []string{"node/fast/node-initialize.yaml", heartbeat,
		"pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml"} {
		b, err := os.ReadFile(filepath.Join(dir, "kustomize", "stage", f))
		if err != nil {
			return "", err
		}
		all = append(append(all, "---\n"...), b...)
	}
	path := filepath.Join(c.Dir, "kwok-stages.yaml")
	return path, os.WriteFile(path, all, 0o644)
}

// Run starts a named process logging to logs/NAME.log.
func (c *Cluster) Run(name string, env []string, argv ...string) error {
	return c.run(&proc{name: name, env: env, argv: argv})
}

// RunContainer is Run for a pod's container: when it exits it is started
// again after a back-off (1s, doubled up to 30s, back to 1s after a minute
// of running), as the kubelet does, until Kill, Crash or Stop.
func (c *Cluster) RunContainer(name string, env []string, argv ...string) error {
	return c.run(&proc{name: name, env: env, argv: argv, restart: true})
}

func (c *Cluster) run(p *proc) error {
	logf, err := os.OpenFile(filepath.Join(c.Dir, "logs", p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.done, p.stopping = make(chan struct{}), make(chan struct{})
	start := func() (<-chan error, error) {
		cmd := exec.Command(p.argv[0], p.argv[1:]...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = append(os.Environ(), p.env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", p.name, err)
		}
		p.mu.Lock()
		p.cmd = cmd
		p.mu.Unlock()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		return exited, nil
	}
	exited, err := start()
	if err != nil {
		logf.Close()
		return err
	}
	go func() {
		defer close(p.done)
		defer logf.Close()
		delay := time.Second
		for {
			started := time.Now()
			err := <-exited
			select {
			case <-p.stopping:
				return
			default:
			}
			if !p.restart {
				return
			}
			if time.Since(started) > time.Minute {
				delay = time.Second
			}
			fmt.Fprintf(logf, "kubelet: %s exited (%v) after %s; restarting in %s\n", p.name, err, time.Since(started).Round(time.Millisecond), delay)
			select {
			case <-p.stopping:
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, 30*time.Second)
			if exited, err = start(); err != nil {
				fmt.Fprintf(logf, "kubelet: %v\n", err)
				return
			}
		}
	}()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return nil
}

// started tells whether a process of that name was started here.
func (c *Cluster) started(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name == name {
			return true
		}
	}
	return false
}

// Alive tells whether the named process still runs.
func (c *Cluster) Alive(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name == name {
			select {
			case <-p.done:
			default:
				return true
			}
		}
	}
	return false
}

// named are the processes of that name started here, oldest first.
func (c *Cluster) named(name string) []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ps []*proc
	for _, p := range c.procs {
		if p.name == name {
			ps = append(ps, p)
		}
	}
	return ps
}

// Kill stops the named processes (SIGTERM, then SIGKILL) and waits.
func (c *Cluster) Kill(name string) {
	for _, p := range c.named(name) {
		stop(p)
	}
}

// Crash kills the named processes with SIGKILL, as a node losing power or
// the OOM killer would: no signal handler runs, no lease is released.
// Nothing starts them again; Restart does.
func (c *Cluster) Crash(name string) {
	for _, p := range c.named(name) {
		p.stop()
		_ = p.current().Process.Kill()
		<-p.done
	}
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

func stop(p *proc) {
	p.stop()
	_ = p.current().Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.current().Process.Kill()
		<-p.done
	}
}

// RestartControlPlane kills etcd and kube-apiserver with SIGKILL, starts
// them again on the same data and port, and waits until the API server is
// ready.
func (c *Cluster) RestartControlPlane(ctx context.Context) error {
	c.Crash("kube-apiserver")
	c.Crash("etcd")
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if err := c.Restart(name, nil); err != nil {
			return err
		}
	}
	return c.waitHTTPS(ctx, "kube-apiserver", fmt.Sprintf("https://127.0.0.1:%d/readyz", c.apiPort), filepath.Join(c.Dir, "pki", "ca.crt"), c.token)
}

// Log returns the tail of a process's log.
func (c *Cluster) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "logs", name+".log"))
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// Stop stops every process, last started first.
func (c *Cluster) Stop() {
	c.mu.Lock()
	ps := c.procs
	c.procs = nil
	c.mu.Unlock()
	for i := len(ps) - 1; i >= 0; i-- {
		stop(ps[i])
	}
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

func (c *Cluster) waitHTTPS(ctx context.Context, name, url, caFile, token string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return c.WaitFor(ctx, name, 2*time.Minute, func() (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}, name)
}

// WaitFor polls cond until it is true, it errs, timeout passes, or one of
// the named processes dies (its log tail is in the error).
func (c *Cluster) WaitFor(ctx context.Context, what string, timeout time.Duration, cond func() (bool, error), procs ...string) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		for _, p := range procs {
			if !c.Alive(p) {
				return fmt.Errorf("%s died while waiting for %s; log:\n%s", p, what, c.Log(p))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// IgnoreAlreadyExists returns nil for an AlreadyExists error.
func IgnoreAlreadyExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

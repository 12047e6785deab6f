package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

// There is no container runtime here: the harness plays the kubelet. For a
// Pod that deploy/ made (through a Deployment or DaemonSet), it starts each
// container's program as a process, on the host or in the VM, with the
// container's args and env, its volumes as directories, and a kubeconfig
// holding a token of the pod's ServiceAccount, so that the RBAC of deploy/
// is what the components run with.

// apiClients are the programs that talk to the API server: they get the
// pod's kubeconfig as --kubeconfig (in a cluster: the in-cluster config).
var apiClients = map[string]bool{"thinlvm-controller": true, "thinlvm-node": true,
	"csi-provisioner": true, "csi-resizer": true, "csi-snapshotter": true}

// kubeletSide are sidecars that serve the kubelet (plugin registration, a
// probe endpoint); without a kubelet they have nothing to do and are not
// run.
var kubeletSide = map[string]bool{"csi-node-driver-registrar": true, "livenessprobe": true}

// PodOptions adjust how the harness runs a pod's containers.
type PodOptions struct {
	// VM runs the pod in the VM (it is the VM node's pod).
	VM *lvmvm.VM
	// ExtraArgs are appended to a container's args, by container name
	// (later flags win): test-speed intervals, the fake lvm binary.
	ExtraArgs map[string][]string
	// Env is added to a container's environment, by container name.
	Env map[string][]string
}

// program is the binary an image runs: the image's last path element
// without its tag, e.g. ghcr.io/thinlvm/thinlvm-controller:v0.1.0 ->
// thinlvm-controller.
func program(image string) string {
	name := image[strings.LastIndex(image, "/")+1:]
	if i := strings.IndexAny(name, ":@"); i >= 0 {
		name = name[:i]
	}
	return name
}

// RunPod starts the containers of a pod. Process names are
// "<container>@<pod>".
func (c *Cluster) RunPod(ctx context.Context, pod *corev1.Pod, o PodOptions) error {
	podDir := filepath.Join(c.Dir, "pods", pod.Name)
	guestDir := "/share/pods/" + pod.Name // the same directory, seen from the VM
	if o.VM != nil {
		podDir = filepath.Join(o.VM.ShareDir(), "pods", pod.Name)
	}
	if err := os.MkdirAll(podDir, 0o755); err != nil {
		return err
	}
	local := func(p string) string { // a path in podDir as the process sees it
		if o.VM == nil {
			return p
		}
		return guestDir + strings.TrimPrefix(p, podDir)
	}
	kubeconfigPath, token, err := c.podKubeconfig(ctx, pod, podDir, o.VM != nil)
	if err != nil {
		return err
	}
	volumes, err := c.podVolumes(ctx, pod, podDir, token, o.VM != nil, local)
	if err != nil {
		return err
	}
	for _, ct := range pod.Spec.Containers {
		prog := program(ct.Image)
		if kubeletSide[prog] {
			fmt.Fprintf(c.log, "kubelet: %s of %s not run: it serves a kubelet, and there is none here\n", ct.Name, pod.Name)
			continue
		}
		env, err := c.containerEnv(ctx, pod, ct)
		if err != nil {
			return err
		}
		mounts := map[string]string{}
		for _, m := range ct.VolumeMounts {
			dir, ok := volumes[m.Name]
			if !ok {
				return fmt.Errorf("pod %s container %s mounts unknown volume %s", pod.Name, ct.Name, m.Name)
			}
			mounts[m.MountPath] = dir
		}
		args := slices.Clone(append(slices.Clone(ct.Command), ct.Args...))
		for i, a := range args {
			a = expand(a, env)
			a = remap(a, mounts)
			if o.VM == nil {
				if a, err = freePorts(a); err != nil {
					return err
				}
			}
			args[i] = a
		}
		if apiClients[prog] {
			args = append(args, "--kubeconfig="+local(kubeconfigPath))
		}
		if prog == "thinlvm-scheduler" {
			if args, err = c.schedulerArgs(args, local(kubeconfigPath), o.VM != nil); err != nil {
				return err
			}
		}
		args = append(args, o.ExtraArgs[ct.Name]...)
		name := ct.Name + "@" + pod.Name
		if o.VM != nil {
			if err := o.VM.Spawn(ctx, name, "/share/pods/"+pod.Name+"/"+ct.Name+".log", append([]string{"/share/bin/" + prog}, args...)...); err != nil {
				return fmt.Errorf("start %s in the VM: %w", name, err)
			}
			continue
		}
		bin := filepath.Join(c.Bin, prog)
		if _, err := os.Stat(bin); err != nil {
			bin = filepath.Join(c.K8sBin, prog)
		}
		var envList []string
		for k, v := range env {
			envList = append(envList, k+"="+v)
		}
		if err := c.Run(name, append(envList, o.Env[ct.Name]...), append([]string{bin}, args...)...); err != nil {
			return err
		}
	}
	return nil
}

// podKubeconfig asks the API server for a token of the pod's ServiceAccount,
// bound to the pod, and writes a kubeconfig with it.
func (c *Cluster) podKubeconfig(ctx context.Context, pod *corev1.Pod, dir string, inVM bool) (path, token string, err error) {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return "", "", err
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: new(int64(24 * 3600)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("token of ServiceAccount %s/%s: %w", pod.Namespace, sa, err)
	}
	ca, err := os.ReadFile(filepath.Join(c.Dir, "pki", "ca.crt"))
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o644); err != nil {
		return "", "", err
	}
	host, caPath := "127.0.0.1", filepath.Join(dir, "ca.crt")
	if inVM {
		host, caPath = lvmvm.HostAddress, "/share/pods/"+pod.Name+"/ca.crt"
	}
	path = filepath.Join(dir, "kubeconfig")
	return path, tr.Status.Token, kubeconfig(path, caPath, host, c.apiPort, tr.Status.Token)
}

// podVolumes makes a directory for each volume: emptyDir and configMap
// volumes in the pod's directory (a ConfigMap's keys as files), hostPath
// volumes under the node's root (on the host, a directory per node; in the
// VM, the path itself: the VM is the node).
func (c *Cluster) podVolumes(ctx context.Context, pod *corev1.Pod, podDir, token string, inVM bool, local func(string) string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.Projected != nil:
			// The ServiceAccount token volume admission adds: the same
			// token as the kubeconfig's.
			dir := filepath.Join(podDir, "volumes", v.Name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
			ca, err := os.ReadFile(filepath.Join(c.Dir, "pki", "ca.crt"))
			if err != nil {
				return nil, err
			}
			for name, data := range map[string][]byte{"token": []byte(token), "ca.crt": ca, "namespace": []byte(pod.Namespace)} {
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
					return nil, err
				}
			}
			out[v.Name] = local(dir)
		case v.EmptyDir != nil:
			if inVM { // sockets do not work on 9p: AddNode makes it in the VM
				out[v.Name] = "/run/pods/" + pod.Name + "/" + v.Name
				continue
			}
			dir := filepath.Join(podDir, "volumes", v.Name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
			out[v.Name] = dir
		case v.ConfigMap != nil:
			cm := &corev1.ConfigMap{}
			if err := c.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: v.ConfigMap.Name}, cm); err != nil {
				return nil, fmt.Errorf("ConfigMap %s of pod %s: %w", v.ConfigMap.Name, pod.Name, err)
			}
			dir := filepath.Join(podDir, "volumes", v.Name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
			for k, data := range cm.Data {
				if err := os.WriteFile(filepath.Join(dir, k), []byte(data), 0o644); err != nil {
					return nil, err
				}
			}
			out[v.Name] = local(dir)
		case v.HostPath != nil:
			if inVM {
				out[v.Name] = v.HostPath.Path
				continue
			}
			dir := filepath.Join(c.Dir, "nodes", pod.Spec.NodeName, "root", v.HostPath.Path)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
			out[v.Name] = dir
		default:
			return nil, fmt.Errorf("pod %s volume %s: only emptyDir, configMap, hostPath and the token volume are supported here", pod.Name, v.Name)
		}
	}
	return out, nil
}

// containerEnv resolves a container's env: values, and the pod fields a
// Downward API reference names.
func (c *Cluster) containerEnv(ctx context.Context, pod *corev1.Pod, ct corev1.Container) (map[string]string, error) {
	env := map[string]string{}
	for _, e := range ct.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				env[e.Name] = pod.Name
			case "metadata.namespace":
				env[e.Name] = pod.Namespace
			case "spec.nodeName":
				env[e.Name] = pod.Spec.NodeName
			case "spec.serviceAccountName":
				env[e.Name] = pod.Spec.ServiceAccountName
			default:
				return nil, fmt.Errorf("pod %s env %s: field %s is not supported here", pod.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		default:
			return nil, fmt.Errorf("pod %s env %s: only values and field references are supported here", pod.Name, e.Name)
		}
	}
	return env, nil
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(VAR) with the container's env, as the kubelet does.
func expand(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// remap rewrites paths under a volume's mount path to the volume's
// directory: at each path boundary the longest mount path that matches is
// replaced, and the scan goes on after the replacement.
func remap(arg string, mounts map[string]string) string {
	paths := make([]string, 0, len(mounts))
	for p := range mounts {
		paths = append(paths, p)
	}
	slices.SortFunc(paths, func(a, b string) int { return len(b) - len(a) })
	var out strings.Builder
	for i := 0; i < len(arg); {
		matched := false
		if arg[i] == '/' && (i == 0 || !isPathChar(arg[i-1]) || strings.HasSuffix(arg[:i], "://")) {
			for _, p := range paths {
				end := i + len(p)
				if strings.HasPrefix(arg[i:], p) && (end == len(arg) || arg[end] == '/' || !isPathChar(arg[end])) {
					out.WriteString(mounts[p])
					i, matched = end, true
					break
				}
			}
		}
		if !matched {
			out.WriteByte(arg[i])
			i++
		}
	}
	return out.String()
}

// isPathChar tells whether b may be part of a path component.
func isPathChar(b byte) bool {
	return b == '/' || b == '.' || b == '-' || b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

var (
	listenFlag = regexp.MustCompile(`^(--[a-z-]*(?:address|endpoint)=)(?:0\.0\.0\.0)?:(\d+)$`)
	portFlag   = regexp.MustCompile(`^(--[a-z-]*port=)(\d+)$`)
)

// freePorts gives a flag that listens on a fixed port of every address a
// free port on 127.0.0.1 instead: on the host all pods share one network.
func freePorts(arg string) (string, error) {
	for _, re := range []*regexp.Regexp{listenFlag, portFlag} {
		if m := re.FindStringSubmatch(arg); m != nil {
			p, err := freePort()
			if err != nil {
				return "", err
			}
			if re == listenFlag {
				return m[1] + "127.0.0.1:" + strconv.Itoa(p), nil
			}
			return m[1] + strconv.Itoa(p), nil
		}
	}
	return arg, nil
}

// schedulerArgs points the KubeSchedulerConfiguration of --config at the
// pod's kubeconfig (in a cluster the scheduler uses the in-cluster config)
// and has the scheduler delegate its authentication with it.
func (c *Cluster) schedulerArgs(args []string, kubeconfigPath string, inVM bool) ([]string, error) {
	if inVM {
		return nil, fmt.Errorf("the scheduler runs on the host")
	}
	for _, a := range args {
		path, ok := strings.CutPrefix(a, "--config=")
		if !ok {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var cfg map[string]any
		if err := yaml.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("scheduler config %s: %w", path, err)
		}
		cc, _ := cfg["clientConnection"].(map[string]any)
		if cc == nil {
			cc = map[string]any{}
		}
		cc["kubeconfig"] = kubeconfigPath
		cfg["clientConnection"] = cc
		if data, err = yaml.Marshal(cfg); err != nil {
			return nil, err
		}
		// The ConfigMap's copy is the pod's own: rewriting it is like the
		// in-cluster config the scheduler would read.
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return nil, err
		}
	}
	return append(args, "--bind-address=127.0.0.1", "--authentication-kubeconfig="+kubeconfigPath,
		"--authorization-kubeconfig="+kubeconfigPath), nil
}

// WaitPods waits until the pods matching labels in namespace exist (a
// Deployment's ReplicaSet or a DaemonSet made them) and returns them; with
// node set, only the one on that node.
func (c *Cluster) WaitPods(ctx context.Context, namespace string, labels map[string]string, node string, want int) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := c.WaitFor(ctx, fmt.Sprintf("%d pod(s) %v on %q", want, labels, node), 2*time.Minute, func() (bool, error) {
		list := &corev1.PodList{}
		if err := c.Client.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels(labels)); err != nil {
			return false, err
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp.IsZero() && (node == "" || p.Spec.NodeName == node) {
				pods = append(pods, p)
			}
		}
		return len(pods) >= want, nil
	})
	return pods, err
}

// kubectl runs the built kubectl with the admin kubeconfig.
func (c *Cluster) kubectl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.K8sBin, "kubectl"), append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

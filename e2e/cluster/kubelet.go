package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/thinlvm/thinlvm/e2e/lvmvm"
	"github.com/thinlvm/thinlvm/internal/imageroot"
)

// There is no container runtime here: the harness plays the kubelet. For a
// Pod that deploy/ made (through a Deployment or DaemonSet), it runs each
// container of thinlvm's own images from the image itself: podrun unpacks
// the image built from this tree and runs its entrypoint in a chroot with
// the pod's volumes bind-mounted, the container's env and the in-cluster
// API config (the pod's ServiceAccount token, so the RBAC of deploy/ is
// what the components run with), and restarts it when it exits. The node
// pods of the VM node run in the VM from the same images. The
// kubernetes-csi sidecars come from registry.k8s.io's images, which
// cannot be fetched here: they run from binaries built from the same Go
// modules, as processes on the host with their volumes as directories,
// started again when they exit.

// Kubelet is that stand-in. It reads pods and writes tokens through its
// ControlPlane and runs containers under its Supervisor.
type Kubelet struct {
	*ControlPlane
	// Bin holds the harness's own binaries (podrun, fakelvm) and, in
	// Bin/images, thinlvm's images as an OCI layout.
	Bin string

	// roots are the images unpacked for pods, by "host" or the VM's
	// share directory.
	roots   map[string]*imageRoots
	rootsMu sync.Mutex
}

// apiClients are the sidecars that talk to the API server: they get the
// pod's kubeconfig as --kubeconfig (in a cluster: the in-cluster config).
var apiClients = map[string]bool{"csi-provisioner": true, "csi-resizer": true, "csi-snapshotter": true}

// fromImage tells whether a container runs from thinlvm's own image.
func fromImage(image string) bool { return strings.HasPrefix(program(image), "thinlvm-") }

// PodOptions adjust how the harness runs a pod's containers.
type PodOptions struct {
	// VM runs the pod in the VM (it is the VM node's pod).
	VM *lvmvm.VM
	// ExtraArgs are appended to a container's args, by container name
	// (later flags win): test-speed intervals, the fake lvm binary.
	ExtraArgs map[string][]string
	// Env is added to a container's environment, by container name.
	Env map[string][]string
	// Mounts are extra SRC:DST volumes of a container run from its image,
	// by container name (the fake lvm binary and its state).
	Mounts map[string][]string
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

// layoutRef is how the images' OCI layout names an image: its last path
// element with its tag, e.g. ghcr.io/thinlvm/thinlvm-scheduler:v0.1.0-k8s1.34
// -> thinlvm-scheduler:v0.1.0-k8s1.34 (the scheduler has one per
// Kubernetes minor); without a tag, any image of that name.
func layoutRef(image string) string {
	ref := image[strings.LastIndex(image, "/")+1:]
	ref, _, _ = strings.Cut(ref, "@")
	return ref
}

// RunPod starts the containers of a pod. Process names are
// "<container>@<pod>".
func (k *Kubelet) RunPod(ctx context.Context, pod *corev1.Pod, o PodOptions) error {
	podDir := filepath.Join(k.Dir, "pods", pod.Name)
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
	// The sidecars' kubeconfig: they run on the host, thinlvm's containers
	// use the in-cluster config.
	var kubeconfigPath string
	if o.VM == nil {
		token, err := k.podToken(ctx, pod)
		if err != nil {
			return err
		}
		if kubeconfigPath, err = k.sidecarKubeconfig(podDir, token); err != nil {
			return err
		}
	}
	volumes, err := k.podVolumes(ctx, pod, podDir, o.VM != nil, local)
	if err != nil {
		return err
	}
	// The pod's and its node's address: on the host every pod shares the
	// loopback; in the VM, the guest's own.
	podIP := "127.0.0.1"
	if o.VM != nil {
		podIP = lvmvm.GuestAddress
	}
	for _, ct := range pod.Spec.Containers {
		prog := program(ct.Image)
		env, err := containerEnv(pod, ct, podIP)
		if err != nil {
			return err
		}
		if fromImage(ct.Image) {
			if err := k.runContainer(ctx, pod, ct, env, volumes, o); err != nil {
				return fmt.Errorf("pod %s container %s: %w", pod.Name, ct.Name, err)
			}
			continue
		}
		if o.VM != nil {
			return fmt.Errorf("pod %s container %s: only thinlvm's images run in the VM", pod.Name, ct.Name)
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
			a = remap(expand(a, env), mounts)
			if args[i], err = freePorts(a); err != nil {
				return err
			}
		}
		if apiClients[prog] {
			args = append(args, "--kubeconfig="+kubeconfigPath)
		}
		args = append(args, o.ExtraArgs[ct.Name]...)
		var envList []string
		for k, v := range env {
			envList = append(envList, k+"="+v)
		}
		// Each pod has its own hostname, as under a kubelet: the sidecars'
		// leader election tells the replicas apart by it.
		argv := append([]string{filepath.Join(k.Bin, "podrun"), "exec", "--hostname=" + pod.Name, "--", filepath.Join(k.K8sBin, prog)}, args...)
		if err := k.RunContainer(ct.Name+"@"+pod.Name, append(envList, o.Env[ct.Name]...), argv...); err != nil {
			return err
		}
	}
	return nil
}

// runContainer runs a container of thinlvm's images with podrun: on the
// host, or in the VM (o.VM). volumes are the pod's volume directories as
// the place it runs sees them.
func (k *Kubelet) runContainer(ctx context.Context, pod *corev1.Pod, ct corev1.Container, env map[string]string, volumes map[string]string, o PodOptions) error {
	img, err := imageroot.Find(filepath.Join(k.Bin, "images"), layoutRef(ct.Image))
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	root, err := k.imageRoot(ctx, layoutRef(ct.Image), img, o.VM)
	if err != nil {
		return err
	}
	// The runtime's env: the image's, then the in-cluster API address,
	// then the container's.
	envList := slices.Clone(cf.Config.Env)
	host := "127.0.0.1"
	if o.VM != nil {
		host = lvmvm.HostAddress
	}
	envList = append(envList, "KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+strconv.Itoa(k.apiPort))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		envList = append(envList, k+"="+env[k])
	}
	envList = append(envList, o.Env[ct.Name]...)
	// Entrypoint and command as the kubelet resolves them.
	argv := slices.Clone(cf.Config.Entrypoint)
	args := cf.Config.Cmd
	if len(ct.Command) > 0 {
		argv, args = slices.Clone(ct.Command), nil
	}
	if len(ct.Args) > 0 {
		args = ct.Args
	}
	for _, a := range args {
		a = expand(a, env)
		if o.VM == nil { // on the host every pod shares one network
			if a, err = freePorts(a); err != nil {
				return err
			}
		}
		argv = append(argv, a)
	}
	if program(ct.Image) == "thinlvm-scheduler" && o.VM == nil {
		argv = append(argv, "--bind-address=127.0.0.1")
	}
	argv = append(argv, o.ExtraArgs[ct.Name]...)

	run := []string{"run", "--root=" + root, "--restart-delay=1s", "--hostname=" + pod.Name}
	if cf.Config.User != "" {
		run = append(run, "--user="+cf.Config.User)
	}
	if cf.Config.WorkingDir != "" {
		run = append(run, "--workdir="+cf.Config.WorkingDir)
	}
	if !pod.Spec.HostIPC {
		run = append(run, "--private-ipc")
	}
	for _, m := range ct.VolumeMounts {
		src, ok := volumes[m.Name]
		if !ok {
			return fmt.Errorf("mounts unknown volume %s", m.Name)
		}
		if m.SubPath != "" {
			src = path.Join(src, m.SubPath)
		}
		var opts []string
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		switch ptr.Deref(m.MountPropagation, corev1.MountPropagationNone) {
		case corev1.MountPropagationBidirectional:
			opts = append(opts, "rshared")
		case corev1.MountPropagationHostToContainer:
			opts = append(opts, "rslave")
		}
		run = append(run, "--mount="+src+":"+m.MountPath+":"+strings.Join(opts, ","))
	}
	for _, m := range o.Mounts[ct.Name] {
		run = append(run, "--mount="+m)
	}
	for _, e := range envList {
		run = append(run, "--env="+e)
	}
	run = append(append(run, "--"), argv...)
	name := ct.Name + "@" + pod.Name
	if o.VM != nil {
		if err := o.VM.Spawn(ctx, name, "/share/pods/"+pod.Name+"/"+ct.Name+".log", append([]string{"/share/bin/podrun"}, run...)...); err != nil {
			return fmt.Errorf("start %s in the VM: %w", name, err)
		}
		return nil
	}
	return k.Run(name, nil, append([]string{filepath.Join(k.Bin, "podrun")}, run...)...)
}

// imageRoot unpacks img (named image) once per place it runs (the host, or a VM)
// and returns its root's path there: on the host under the cluster's
// directory, in the VM on its tmpfs (podrun unpacks there the flattened
// image the host writes to the share). Places unpack one image at a time
// each, and at the same time as each other.
func (k *Kubelet) imageRoot(ctx context.Context, image string, img v1.Image, vm *lvmvm.VM) (string, error) {
	where := "host"
	if vm != nil {
		where = vm.ShareDir()
	}
	k.rootsMu.Lock()
	if k.roots == nil {
		k.roots = map[string]*imageRoots{}
	}
	if k.roots[where] == nil {
		k.roots[where] = &imageRoots{roots: map[string]string{}}
	}
	place := k.roots[where]
	k.rootsMu.Unlock()
	place.mu.Lock()
	defer place.mu.Unlock()
	if root, ok := place.roots[image]; ok {
		return root, nil
	}
	flat := imageroot.Flatten(img)
	defer flat.Close()
	var root string
	dir := strings.ReplaceAll(image, ":", "_") // name_tag
	if vm == nil {
		root = filepath.Join(k.Dir, "images", dir)
		if err := imageroot.Unpack(flat, root); err != nil {
			return "", err
		}
	} else {
		if err := os.MkdirAll(filepath.Join(vm.ShareDir(), "images"), 0o755); err != nil {
			return "", err
		}
		tarPath := filepath.Join(vm.ShareDir(), "images", dir+".tar")
		f, err := os.Create(tarPath)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(f, flat)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", err
		}
		root = "/run/images/" + dir
		if _, err := vm.Run(ctx, "/share/bin/podrun", "unpack", "--tar=/share/images/"+dir+".tar", "--to="+root); err != nil {
			return "", fmt.Errorf("unpack %s in the VM: %w", image, err)
		}
		_ = os.Remove(tarPath)
	}
	place.roots[image] = root
	return root, nil
}

// imageRoots are the images unpacked in one place: each root's path there,
// by image name.
type imageRoots struct {
	mu    sync.Mutex
	roots map[string]string
}

// podToken asks the API server for a token of the pod's ServiceAccount,
// bound to the pod, for the API server: the sidecars' kubeconfig.
func (k *Kubelet) podToken(ctx context.Context, pod *corev1.Pod) (string, error) {
	return k.boundToken(ctx, pod, "", 24*3600)
}

// boundToken asks the API server for a token of the pod's ServiceAccount,
// bound to the pod, for audience (empty: the API server's own audiences),
// valid for seconds.
func (k *Kubelet) boundToken(ctx context.Context, pod *corev1.Pod, audience string, seconds int64) (string, error) {
	cs, err := kubernetes.NewForConfig(k.Config)
	if err != nil {
		return "", err
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	var audiences []string
	if audience != "" {
		audiences = []string{audience}
	}
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         audiences,
		ExpirationSeconds: &seconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of ServiceAccount %s/%s: %w", pod.Namespace, sa, err)
	}
	return tr.Status.Token, nil
}

// sidecarKubeconfig writes to dir a kubeconfig of the API server on
// 127.0.0.1 with token, and returns its path.
func (k *Kubelet) sidecarKubeconfig(dir, token string) (string, error) {
	ca, err := os.ReadFile(filepath.Join(k.Dir, "pki", "ca.crt"))
	if err != nil {
		return "", err
	}
	caPath := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caPath, ca, 0o644); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, kubeconfig(path, caPath, "127.0.0.1", k.apiPort, token)
}

// podVolumes makes a directory for each volume: emptyDir, configMap and
// projected volumes in the pod's directory (their files as the kubelet
// writes them), hostPath volumes under the node's root (on the host, a
// directory per node; in the VM, the path itself: the VM is the node).
func (k *Kubelet) podVolumes(ctx context.Context, pod *corev1.Pod, podDir string, inVM bool, local func(string) string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(podDir, "volumes", v.Name)
		switch {
		case v.Projected != nil:
			files, err := k.projectedFiles(ctx, pod, v.Projected)
			if err != nil {
				return nil, fmt.Errorf("pod %s volume %s: %w", pod.Name, v.Name, err)
			}
			if err := writeVolume(dir, files); err != nil {
				return nil, err
			}
			out[v.Name] = local(dir)
		case v.EmptyDir != nil:
			if inVM { // sockets do not work on 9p: AddNode makes it in the VM
				out[v.Name] = "/run/pods/" + pod.Name + "/" + v.Name
				continue
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
			if err := os.Chmod(dir, 0o777); err != nil { // as the kubelet makes it: any user of the pod writes
				return nil, err
			}
			out[v.Name] = dir
		case v.ConfigMap != nil:
			mode := ptr.Deref(v.ConfigMap.DefaultMode, corev1.ConfigMapVolumeSourceDefaultMode)
			files, err := k.configMapFiles(ctx, pod, v.ConfigMap.LocalObjectReference, v.ConfigMap.Items, v.ConfigMap.Optional, mode)
			if err != nil {
				return nil, fmt.Errorf("pod %s volume %s: %w", pod.Name, v.Name, err)
			}
			if err := writeVolume(dir, files); err != nil {
				return nil, err
			}
			out[v.Name] = local(dir)
		case v.HostPath != nil:
			if inVM {
				out[v.Name] = v.HostPath.Path
				continue
			}
			if v.HostPath.Path == "/dev" { // the machine's devices: the nodes here share it
				out[v.Name] = "/dev"
				continue
			}
			dir := filepath.Join(k.Dir, "nodes", pod.Spec.NodeName, "root", v.HostPath.Path)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
			out[v.Name] = dir
		default:
			return nil, fmt.Errorf("pod %s volume %s: only emptyDir, configMap, projected and hostPath volumes are supported here", pod.Name, v.Name)
		}
	}
	return out, nil
}

// volumeFile is a file of a configMap or projected volume: its path in the
// volume, content and mode.
type volumeFile struct {
	path string
	data []byte
	mode int32
}

// writeVolume writes files into dir (made if need be).
func writeVolume(dir string, files []volumeFile) error {
	for _, f := range files {
		p := filepath.Join(dir, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, os.FileMode(f.mode)); err != nil {
			return err
		}
		if err := os.Chmod(p, os.FileMode(f.mode)); err != nil { // past the umask
			return err
		}
	}
	return os.MkdirAll(dir, 0o755) // a volume with no files is still there
}

// projectedFiles are the files of a projected volume, source by source as
// the kubelet makes them: a token of the pod's ServiceAccount bound to the
// pod (for the source's audience, valid as long as it asks; the harness
// does not renew it), a ConfigMap's keys, the Downward API's pod fields.
func (k *Kubelet) projectedFiles(ctx context.Context, pod *corev1.Pod, p *corev1.ProjectedVolumeSource) ([]volumeFile, error) {
	mode := ptr.Deref(p.DefaultMode, corev1.ProjectedVolumeSourceDefaultMode)
	var files []volumeFile
	for _, src := range p.Sources {
		switch {
		case src.ServiceAccountToken != nil:
			t := src.ServiceAccountToken
			token, err := k.boundToken(ctx, pod, t.Audience, ptr.Deref(t.ExpirationSeconds, 3600))
			if err != nil {
				return nil, err
			}
			files = append(files, volumeFile{t.Path, []byte(token), mode})
		case src.ConfigMap != nil:
			cm, err := k.configMapFiles(ctx, pod, src.ConfigMap.LocalObjectReference, src.ConfigMap.Items, src.ConfigMap.Optional, mode)
			if err != nil {
				return nil, err
			}
			files = append(files, cm...)
		case src.DownwardAPI != nil:
			for _, item := range src.DownwardAPI.Items {
				if item.FieldRef == nil {
					return nil, fmt.Errorf("downward API file %s: only field references are supported here", item.Path)
				}
				val, err := volumeField(pod, item.FieldRef.FieldPath)
				if err != nil {
					return nil, fmt.Errorf("downward API file %s: %w", item.Path, err)
				}
				files = append(files, volumeFile{item.Path, []byte(val), ptr.Deref(item.Mode, mode)})
			}
		default:
			return nil, errors.New("only serviceAccountToken, configMap and downwardAPI sources are supported here")
		}
	}
	return files, nil
}

// configMapFiles are a ConfigMap's keys as a volume's files: the items
// named, or every key under its own name. The kubelet waits for a
// ConfigMap that is not optional; so does this, a little (kube-root-ca.crt
// appears with its namespace, made by the controller-manager).
func (k *Kubelet) configMapFiles(ctx context.Context, pod *corev1.Pod, ref corev1.LocalObjectReference, items []corev1.KeyToPath, optional *bool, mode int32) ([]volumeFile, error) {
	cm := &corev1.ConfigMap{}
	key := types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}
	err := k.WaitFor(ctx, "ConfigMap "+key.String(), 30*time.Second, func() (bool, error) {
		err := k.Client.Get(ctx, key, cm)
		if apierrors.IsNotFound(err) && !ptr.Deref(optional, false) {
			return false, nil
		}
		return true, client.IgnoreNotFound(err)
	})
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %w", ref.Name, err)
	}
	data := maps.Clone(cm.Data)
	if data == nil {
		data = map[string]string{}
	}
	for k, b := range cm.BinaryData {
		data[k] = string(b)
	}
	var files []volumeFile
	if len(items) == 0 {
		for _, k := range slices.Sorted(maps.Keys(data)) {
			files = append(files, volumeFile{k, []byte(data[k]), mode})
		}
		return files, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if ptr.Deref(optional, false) {
				continue
			}
			return nil, fmt.Errorf("ConfigMap %s has no key %s", ref.Name, it.Key)
		}
		files = append(files, volumeFile{it.Path, []byte(v), ptr.Deref(it.Mode, mode)})
	}
	return files, nil
}

// volumeField is a pod field as a Downward API volume file holds it.
func volumeField(pod *corev1.Pod, path string) (string, error) {
	format := func(m map[string]string) string {
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(&b, "%s=%q\n", k, m[k])
		}
		return strings.TrimSuffix(b.String(), "\n")
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return format(pod.Labels), nil
	case "metadata.annotations":
		return format(pod.Annotations), nil
	}
	return "", fmt.Errorf("field %s is not supported here", path)
}

// containerEnv resolves a container's env: values, and the pod fields a
// Downward API reference names. podIP is the pod's and its node's address
// (status.podIP, status.hostIP): where the pod's listeners are reached.
func containerEnv(pod *corev1.Pod, ct corev1.Container, podIP string) (map[string]string, error) {
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
			case "metadata.uid":
				env[e.Name] = string(pod.UID)
			case "spec.nodeName":
				env[e.Name] = pod.Spec.NodeName
			case "spec.serviceAccountName":
				env[e.Name] = pod.Spec.ServiceAccountName
			case "status.podIP", "status.hostIP":
				env[e.Name] = podIP
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

// WaitPods waits until the pods matching labels in namespace exist (a
// Deployment's ReplicaSet or a DaemonSet made them) and returns them; with
// node set, only the one on that node.
func (k *Kubelet) WaitPods(ctx context.Context, namespace string, labels map[string]string, node string, want int) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := k.WaitFor(ctx, fmt.Sprintf("%d pod(s) %v on %q", want, labels, node), 2*time.Minute, func() (bool, error) {
		list := &corev1.PodList{}
		if err := k.Client.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels(labels)); err != nil {
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

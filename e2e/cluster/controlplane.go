package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ControlPlane is the local control plane, run by its Supervisor: etcd,
// kube-apiserver (RBAC and the Node authorizer on, its connections to real
// nodes' kubelets through the kubelet proxy), kube-controller-manager, the
// cluster's default kube-scheduler and kwok; and the clients of its API.
type ControlPlane struct {
	*Supervisor
	Kubeconfig string
	Config     *rest.Config
	Client     client.Client
	// K8sBin holds the Kubernetes binaries (build.sh's).
	K8sBin string
	// ControlBin holds kube-apiserver, kube-controller-manager,
	// kube-scheduler and kubectl: K8sBin's, or Options.K8sMinor's.
	ControlBin string

	apiPort int
	token   string
	// kubelets carries the API server's connections to real nodes'
	// kubelets.
	kubelets *kubeletProxy
}

// start starts etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok, waiting until each is ready.
func (cp *ControlPlane) start(ctx context.Context, o Options, progress func(Progress)) error {
	for _, d := range []string{"logs", "pki", "etcd"} {
		if err := os.MkdirAll(filepath.Join(cp.Dir, d), 0o755); err != nil {
			return err
		}
	}
	token, err := pki(filepath.Join(cp.Dir, "pki"))
	if err != nil {
		return err
	}
	cp.token = token
	p := func(n string) string { return filepath.Join(cp.Dir, "pki", n) }
	ports := make([]int, 6)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return err
		}
	}
	etcdPort, peerPort, kcmPort, schedPort := ports[0], ports[1], ports[3], ports[4]
	cp.apiPort = ports[2]
	cp.Kubeconfig = filepath.Join(cp.Dir, "admin.kubeconfig")
	if err := kubeconfig(cp.Kubeconfig, p("ca.crt"), "127.0.0.1", cp.apiPort, token); err != nil {
		return err
	}

	t0 := time.Now()
	progress(Progress{Step: "starting etcd and kube-apiserver", Since: t0})
	if err := cp.Run("etcd", nil, filepath.Join(cp.K8sBin, "etcd"), "--name=e2e", "--data-dir="+filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:"+strconv.Itoa(etcdPort), "--advertise-client-urls=http://127.0.0.1:"+strconv.Itoa(etcdPort),
		"--listen-peer-urls=http://127.0.0.1:"+strconv.Itoa(peerPort), "--initial-advertise-peer-urls=http://127.0.0.1:"+strconv.Itoa(peerPort),
		"--initial-cluster=e2e=http://127.0.0.1:"+strconv.Itoa(peerPort), "--unsafe-no-fsync", "--log-level=warn"); err != nil {
		return err
	}
	kubelets, egress, err := startKubeletProxy(cp.Dir, cp.log)
	if err != nil {
		return err
	}
	cp.kubelets = kubelets
	// The API server's identity at kubelets (their webhook authorizer
	// asks it back): a member of system:masters, as kubeadm's was.
	kcert, kkey, err := clientCert(filepath.Join(cp.Dir, "pki"), "kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return err
	}
	if err := os.WriteFile(p("apiserver-kubelet-client.crt"), kcert, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(p("apiserver-kubelet-client.key"), kkey, 0o600); err != nil {
		return err
	}
	if err := cp.Run("kube-apiserver", nil, filepath.Join(cp.ControlBin, "kube-apiserver"),
		"--egress-selector-config-file="+egress, "--kubelet-client-certificate="+p("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+p("apiserver-kubelet-client.key"), "--kubelet-preferred-address-types=InternalIP",
		"--etcd-servers=http://127.0.0.1:"+strconv.Itoa(etcdPort), "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(cp.apiPort), "--tls-cert-file="+p("apiserver.crt"), "--tls-private-key-file="+p("apiserver.key"),
		"--client-ca-file="+p("ca.crt"), "--token-auth-file="+p("tokens.csv"), "--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file="+p("sa.pub"),
		"--service-account-signing-key-file="+p("sa.key"), "--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type=none", "--allow-privileged=true", "--v=0"); err != nil {
		return err
	}
	if err := cp.waitHTTPS(ctx, "kube-apiserver", fmt.Sprintf("https://127.0.0.1:%d/readyz", cp.apiPort), p("ca.crt"), token); err != nil {
		return err
	}
	fmt.Fprintf(cp.log, "cluster: kube-apiserver ready after %.1fs\n", time.Since(t0).Seconds())
	if cp.Config, err = clientcmd.BuildConfigFromFlags("", cp.Kubeconfig); err != nil {
		return err
	}
	cp.Config.QPS, cp.Config.Burst = 200, 400
	if cp.Client, err = client.New(cp.Config, client.Options{Scheme: Scheme}); err != nil {
		return err
	}
	progress(Progress{Step: "starting controller-manager, scheduler, kwok", Since: time.Now()})
	if err := cp.Run("kube-controller-manager", nil, append([]string{filepath.Join(cp.ControlBin, "kube-controller-manager"),
		"--kubeconfig=" + cp.Kubeconfig, "--authentication-kubeconfig=" + cp.Kubeconfig, "--authorization-kubeconfig=" + cp.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(kcmPort), "--leader-elect=false",
		"--service-account-private-key-file=" + p("sa.key"), "--root-ca-file=" + p("ca.crt"), "--use-service-account-credentials=true",
		"--controllers=*", "--cluster-signing-cert-file=" + p("ca.crt"), "--cluster-signing-key-file=" + p("ca.key"),
		"--kube-api-qps=50", "--kube-api-burst=100"}, o.ControllerManagerArgs...)...); err != nil {
		return err
	}
	// The cluster's own default scheduler; thinlvm's scheduler comes with
	// the install (deploy/scheduler) as a second profile.
	schedCfg := filepath.Join(cp.Dir, "scheduler.yaml")
	if err := os.WriteFile(schedCfg, fmt.Appendf(nil, "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection: {kubeconfig: %q}\nleaderElection: {leaderElect: false}\n", cp.Kubeconfig), 0o644); err != nil {
		return err
	}
	if err := cp.Run("kube-scheduler", nil, filepath.Join(cp.ControlBin, "kube-scheduler"), "--config="+schedCfg,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(schedPort), "--authentication-kubeconfig="+cp.Kubeconfig,
		"--authorization-kubeconfig="+cp.Kubeconfig); err != nil {
		return err
	}
	heartbeat, lease := "node/heartbeat/node-heartbeat.yaml", "40"
	if o.SlowHeartbeats {
		heartbeat, lease = "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml", "600"
	}
	stages, err := cp.kwokStages(heartbeat)
	if err != nil {
		return err
	}
	if err := cp.Run("kwok", nil, filepath.Join(cp.K8sBin, "kwok"), "--kubeconfig="+cp.Kubeconfig, "--config="+stages,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr=10.244.0.0/16", "--node-ip=127.0.0.1", "--node-lease-duration-seconds="+lease); err != nil {
		return err
	}
	// Pods need the default ServiceAccount, which the controller manager makes.
	if err := cp.WaitFor(ctx, "the default ServiceAccount", time.Minute, func() (bool, error) {
		err := cp.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "default"}, &corev1.ServiceAccount{})
		return err == nil, client.IgnoreNotFound(err)
	}); err != nil {
		return err
	}
	fmt.Fprintf(cp.log, "cluster: control plane ready after %.1fs (dir %s)\n", time.Since(t0).Seconds(), cp.Dir)
	return nil
}

// kwokStages writes the kwok module's "fast" node and pod stages, and the
// node heartbeat stage named.
func (cp *ControlPlane) kwokStages(heartbeat string) (string, error) {
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
	path := filepath.Join(cp.Dir, "kwok-stages.yaml")
	return path, os.WriteFile(path, all, 0o644)
}

// RestartControlPlane kills etcd and kube-apiserver with SIGKILL, starts
// them again on the same data and port, and waits until the API server is
// ready.
func (cp *ControlPlane) RestartControlPlane(ctx context.Context) error {
	cp.Crash("kube-apiserver")
	cp.Crash("etcd")
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if err := cp.Restart(name, nil); err != nil {
			return err
		}
	}
	return cp.waitHTTPS(ctx, "kube-apiserver", fmt.Sprintf("https://127.0.0.1:%d/readyz", cp.apiPort), filepath.Join(cp.Dir, "pki", "ca.crt"), cp.token)
}

func (cp *ControlPlane) waitHTTPS(ctx context.Context, name, url, caFile, token string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return cp.WaitFor(ctx, name, 2*time.Minute, func() (bool, error) {
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

// kubectl runs the built kubectl with the admin kubeconfig.
func (cp *ControlPlane) kubectl(ctx context.Context, args ...string) ([]byte, error) {
	return cp.client(ctx, filepath.Join(cp.ControlBin, "kubectl"), nil, args...)
}

// client runs a command-line client of the API server (kubectl, helm)
// with the admin kubeconfig and env added to the environment; its error
// holds the command and its output.
func (cp *ControlPlane) client(ctx context.Context, bin string, env []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig=" + cp.Kubeconfig}, args...)...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return out, nil
}

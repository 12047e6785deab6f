package hollow_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sync/errgroup"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
)

var (
	sizesFlag   = flag.String("hollow.sizes", "1000,2500", "Cluster sizes (nodes) to grow through, in order (5,000 does not complete on a 2-core host: docs/scale.md).")
	volumesFlag = flag.Int("hollow.volumes", 2, "LogicalVolumes made on each node besides the claims.")
	claimsFlag  = flag.Int("hollow.claims", 1000, "Claims (with a pod each) provisioned at each size.")
	perProcFlag = flag.Int("hollow.per-process", 1000, "Hollow agents per process.")
	steadyFlag  = flag.Duration("hollow.steady", time.Minute, "The steady-state window measured at each size.")
)

// observed is the node whose agent runs alone in a process of its own: its
// memory and watch events are read as other nodes and their volumes come.
const observed = "hollow-observed"

const storageClass = "hollow-wfc"

// BenchmarkHollowNodes grows the local control plane (real kube-apiserver,
// kube-controller-manager, kwok, thinlvm's controller with the real
// external-provisioner, thinlvm's scheduler) through -hollow.sizes nodes,
// each with its real node agent code in a hollow-node process (its own
// client identity and simulated lvmd), and at each size measures:
// -hollow.volumes LogicalVolumes per node made, a batch of -hollow.claims
// WaitForFirstConsumer claims from creation to Bound (p50, p99, total),
// the steady state's API requests and watch events per node per minute,
// the memory of the controller, the scheduler and one agent (the observed
// node's, alone in its process, which must stay flat), and the observed
// node's LVMNode writes during a burst of volumes. Run with -benchtime 1x.
func BenchmarkHollowNodes(b *testing.B) {
	var sizes []int
	for _, s := range strings.Split(*sizesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			b.Fatalf("-hollow.sizes %q: %v", *sizesFlag, err)
		}
		sizes = append(sizes, n)
	}
	ctx := context.Background()
	dir := b.TempDir()
	logf, err := os.Create(filepath.Join(dir, "cluster.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	// kwok heartbeats every node from this one machine, beside thousands of
	// agents, the API server and the rest: it falls behind, and the node
	// lifecycle controller would take the nodes for lost (NotReady, pods
	// evicted). Real nodes heartbeat from their own machines. And it
	// heartbeats slowly: at a kubelet's rate, 5,000 nodes' heartbeats are
	// about 650 writes a second to this host's API server, the harness's
	// load and not thinlvm's.
	k, err := cluster.Start(ctx, cluster.Options{Log: logf, ControllerManagerArgs: []string{"--node-monitor-grace-period=1h"}, SlowHeartbeats: true})
	if err != nil {
		b.Fatal(err)
	}
	defer k.Stop()
	k.CapacityPoll = time.Minute // the provisioner's default
	if err := k.Install(ctx); err != nil {
		b.Fatal(err)
	}
	// Storage capacity tracking off: kube-scheduler's volume binding checks
	// every CSIStorageCapacity object for every node it filters (and
	// converts each one's selector every time), O(nodes^2) per pod: at
	// 1,000 nodes it was 79% of the scheduler's CPU and placed 0.6 pods/s.
	// thinlvm's scheduler plugin reads each node's room from its LVMNode.
	csiDriver := &storagev1.CSIDriver{}
	if err := k.Client.Get(ctx, client.ObjectKey{Name: thinlvmv1.DriverName}, csiDriver); err != nil {
		b.Fatal(err)
	}
	csiDriver.Spec.StorageCapacity = ptr.To(false)
	if err := k.Client.Update(ctx, csiDriver); err != nil {
		b.Fatal(err)
	}
	if err := k.Client.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: storageClass}, Provisioner: thinlvmv1.DriverName,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete)}); err != nil {
		b.Fatal(err)
	}
	h := &bench{b: b, ctx: ctx, k: k, dir: dir}
	h.cs, err = kubernetes.NewForConfig(k.Config)
	if err != nil {
		b.Fatal(err)
	}
	h.build()
	defer h.stopAll()

	var rows []row
	for _, size := range sizes {
		r := row{nodes: size}
		h.grow(size)
		r.obsBefore = h.observedMemory()
		h.volumes(*volumesFlag)
		r.obsAfterVolumes = h.observedMemory()
		r.p50, r.p99, r.batch = h.claims(size, *claimsFlag)
		r.steady = h.steady(size, *steadyFlag)
		r.writingWrites = h.writing(size, 2*time.Minute)
		r.controller, r.scheduler, r.apiserver = h.rss("thinlvm-controller"), h.rss("thinlvm-scheduler"), h.rss("kube-apiserver")
		r.obsEnd = h.observedMemory()
		r.shared = h.sharedMemory()
		r.obsForeign = h.observedForeign()
		r.burstWrites, r.burstMinutes = h.burst(20)
		rows = append(rows, r)
		fmt.Printf("\n%s\n", r)
	}
	fmt.Println("\n| nodes | volumes | claims | claim-to-Bound p50 / p99 / batch | steady: agent requests /node/min | API server thinlvm.io requests /node/min | watch events sent /node/min | observed agent RSS / heap (start, +volumes, end) | other nodes' events to it | RSS per agent, shared process | controller RSS | scheduler RSS | kube-apiserver RSS | LVMNode writes /node/min: idle, all pools written | LVMNode writes in a 20-volume burst |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Println(r.markdown(*volumesFlag, *claimsFlag))
	}
	for _, r := range rows {
		if r.obsForeign != 0 {
			b.Errorf("at %d nodes the observed agent received %.0f watch events of other nodes' objects", r.nodes, r.obsForeign)
		}
	}
}

type memory struct{ rss, heap float64 }

type steadyState struct {
	minutes                                   float64
	agentRequests, apiThinlvm, apiWatchEvents float64 // per node per minute
	agentDetail, apiDetail                    string
	lvmnodeWrites                             float64 // per node per minute
}

type row struct {
	nodes                            int
	obsBefore, obsAfterVolumes       memory
	obsEnd                           memory
	obsForeign                       float64
	p50, p99, batch                  time.Duration
	steady                           steadyState
	controller, scheduler, apiserver float64
	burstWrites                      float64
	burstMinutes                     float64
	shared                           float64 // RSS per agent in a process of many
	writingWrites                    float64 // LVMNode writes per node per minute while every pool's use grows
}

func mib(v float64) string { return fmt.Sprintf("%.0f MiB", v/(1<<20)) }

func (r row) String() string {
	return fmt.Sprintf("%d nodes: claim-to-Bound p50 %.1fs p99 %.1fs batch %.1fs; steady %.1f min: agents %.2f req/node/min (%s), API server thinlvm.io %.2f req/node/min (%s), watch events sent %.2f /node/min, LVMNode writes %.3f /node/min (%.2f while every volume is written); observed agent RSS %s/%s/%s heap %s/%s/%s, other nodes' events %.0f; %s RSS per agent in the shared processes; controller %s scheduler %s kube-apiserver %s; burst of 20 volumes: %.0f LVMNode writes in %.2f min",
		r.nodes, r.p50.Seconds(), r.p99.Seconds(), r.batch.Seconds(), r.steady.minutes, r.steady.agentRequests, r.steady.agentDetail,
		r.steady.apiThinlvm, r.steady.apiDetail, r.steady.apiWatchEvents, r.steady.lvmnodeWrites, r.writingWrites,
		mib(r.obsBefore.rss), mib(r.obsAfterVolumes.rss), mib(r.obsEnd.rss), mib(r.obsBefore.heap), mib(r.obsAfterVolumes.heap), mib(r.obsEnd.heap),
		r.obsForeign, fmt.Sprintf("%.1f MiB", r.shared/(1<<20)), mib(r.controller), mib(r.scheduler), mib(r.apiserver), r.burstWrites, r.burstMinutes)
}

func (r row) markdown(volumes, claims int) string {
	return fmt.Sprintf("| %d | %d | %d | %.1f s / %.1f s / %.0f s | %.2f | %.2f | %.2f | %s / %s, %s / %s, %s / %s | %.0f | %.1f MiB | %s | %s | %s | %.3f, %.2f | %.0f in %.1f s |",
		r.nodes, (r.nodes-1)*volumes, claims, r.p50.Seconds(), r.p99.Seconds(), r.batch.Seconds(), r.steady.agentRequests, r.steady.apiThinlvm,
		r.steady.apiWatchEvents, mib(r.obsBefore.rss), mib(r.obsBefore.heap), mib(r.obsAfterVolumes.rss), mib(r.obsAfterVolumes.heap),
		mib(r.obsEnd.rss), mib(r.obsEnd.heap), r.obsForeign, r.shared/(1<<20), mib(r.controller), mib(r.scheduler), mib(r.apiserver),
		r.steady.lvmnodeWrites, r.writingWrites, r.burstWrites, r.burstMinutes*60)
}

type bench struct {
	b     *testing.B
	ctx   context.Context
	k     *cluster.Cluster
	cs    *kubernetes.Clientset
	dir   string
	bin   string
	nodes []string // every hollow node, observed first
	procs []*hollowProc
	batch int
}

type hollowProc struct {
	cmd     *exec.Cmd
	metrics string // http://addr/metrics
	agents  int
}

// build builds the hollow-node binary.
func (h *bench) build() {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		h.b.Fatal(err)
	}
	h.bin = filepath.Join(h.dir, "hollownode")
	cmd := exec.Command("go", "build", "-o", h.bin, "./e2e/bench/hollow/hollownode")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	if o, err := cmd.CombinedOutput(); err != nil {
		h.b.Fatalf("build hollownode: %v\n%s", err, o)
	}
}

func (h *bench) stopAll() {
	for _, p := range h.procs {
		_ = p.cmd.Process.Signal(os.Interrupt)
	}
	for _, p := range h.procs {
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
		}
	}
}

// grow adds hollow nodes up to size: their Nodes and CSINodes, then, once
// the node DaemonSet made each one's pod, the agents in new processes with
// tokens bound to those pods; it waits until every LVMNode is published.
func (h *bench) grow(size int) {
	start := len(h.nodes)
	var added []string
	for i := start; i < size; i++ {
		name := fmt.Sprintf("hollow-%05d", i)
		if i == 0 {
			name = observed
		}
		added = append(added, name)
	}
	t0 := time.Now()
	parallel(h.b, len(added), func(i int) error {
		n := added[i]
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{thinlvmv1.TopologyKey: n, "kubernetes.io/hostname": n, "type": "kwok", "kubernetes.io/os": "linux", "hollow": role(n)}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "kwok.x-k8s.io/node", Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"),
				corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110")}}}
		if err := cluster.IgnoreAlreadyExists(h.k.Client.Create(h.ctx, node)); err != nil {
			return err
		}
		return cluster.IgnoreAlreadyExists(h.k.Client.Create(h.ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: n},
			Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: thinlvmv1.DriverName, NodeID: n, TopologyKeys: []string{thinlvmv1.TopologyKey}}}}}))
	})
	h.logf("%d nodes: Nodes and CSINodes made in %.0fs", size, time.Since(t0).Seconds())
	// The DaemonSet's pods, by node.
	pods := map[string]corev1.Pod{}
	want := map[string]bool{}
	for _, n := range added {
		want[n] = true
	}
	h.waitFor(fmt.Sprintf("the node DaemonSet's pods on %d new nodes", len(added)), 30*time.Minute, func() (bool, error) {
		err := listPages(h, func(list *corev1.PodList) {
			for _, p := range list.Items {
				if want[p.Spec.NodeName] && p.DeletionTimestamp == nil {
					pods[p.Spec.NodeName] = p
				}
			}
		}, client.InNamespace(cluster.Namespace), client.MatchingLabels{"app.kubernetes.io/name": "thinlvm", "app.kubernetes.io/component": "node"})
		return len(pods) == len(added), err
	})
	h.logf("%d nodes: DaemonSet pods after %.0fs", size, time.Since(t0).Seconds())
	// Tokens bound to the pods: each agent is its node's, to the API
	// server's node restriction (deploy/node/admission-policy.yaml).
	nodes := make([]hollowNode, len(added))
	parallel(h.b, len(added), func(i int) error {
		p := pods[added[i]]
		tr, err := h.cs.CoreV1().ServiceAccounts(p.Namespace).CreateToken(h.ctx, p.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600),
				BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		nodes[i] = hollowNode{Name: added[i], Token: tr.Status.Token}
		return nil
	})
	for len(nodes) > 0 {
		n := *perProcFlag
		if len(h.nodes) == 0 {
			n = 1 // the observed agent runs alone
		}
		n = min(n, len(nodes))
		h.start(nodes[:n])
		h.nodes = append(h.nodes, names(nodes[:n])...)
		nodes = nodes[n:]
	}
	h.waitFor(fmt.Sprintf("%d LVMNodes published", size), 30*time.Minute, func() (bool, error) {
		n := 0
		err := listPages(h, func(list *thinlvmv1.LVMNodeList) {
			for _, ln := range list.Items {
				if len(ln.Status.DeviceClasses) > 0 {
					n++
				}
			}
		})
		return err == nil && n >= size, err
	})
	h.logf("%d nodes: every LVMNode published after %.0fs", size, time.Since(t0).Seconds())
}

type hollowNode struct {
	Name  string `json:"name"`
	Token string `json:"token"`
}

func names(nodes []hollowNode) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

// start runs a hollow-node process for nodes.
func (h *bench) start(nodes []hollowNode) {
	i := len(h.procs)
	file := filepath.Join(h.dir, fmt.Sprintf("nodes-%d.json", i))
	data, err := json.Marshal(nodes)
	if err != nil {
		h.b.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o600); err != nil {
		h.b.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(h.dir, fmt.Sprintf("hollow-%d.log", i)))
	if err != nil {
		h.b.Fatal(err)
	}
	cmd := exec.Command(h.bin, "--nodes="+file, "--server="+h.k.Config.Host, "--ca-file="+filepath.Join(h.k.Dir, "pki", "ca.crt"))
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		h.b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		h.b.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "metrics ")
	if err != nil || !ok {
		h.b.Fatalf("hollow-node process %d: %q %v", i, line, err)
	}
	h.procs = append(h.procs, &hollowProc{cmd: cmd, metrics: "http://" + addr + "/metrics", agents: len(nodes)})
}

// volumes makes n LogicalVolumes on every hollow node but the observed
// one, as the controller would for claims, and waits until all are Ready.
func (h *bench) volumes(n int) {
	t0 := time.Now()
	made := map[string]bool{} // at a smaller size
	h.waitFor("the LogicalVolumes made before", time.Minute, func() (bool, error) {
		return true, listPages(h, func(list *thinlvmv1.LogicalVolumeList) {
			for _, lv := range list.Items {
				made[lv.Name] = true
			}
		})
	})
	var todo []string
	for _, node := range h.nodes[1:] {
		for j := range n {
			if name := fmt.Sprintf("vol-%s-%d", node, j); !made[name] {
				todo = append(todo, node+"/"+name)
			}
		}
	}
	parallel(h.b, len(todo), func(i int) error {
		node, name, _ := strings.Cut(todo[i], "/")
		return h.k.Client.Create(h.ctx, &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: thinlvmv1.LogicalVolumeSpec{Name: name, NodeName: node, Size: resource.MustParse("1Gi")}})
	})
	want := (len(h.nodes) - 1) * n
	h.waitFor(fmt.Sprintf("%d LogicalVolumes Ready", want), 30*time.Minute, func() (bool, error) {
		ready := 0
		err := listPages(h, func(list *thinlvmv1.LogicalVolumeList) {
			for _, lv := range list.Items {
				if strings.HasPrefix(lv.Name, "vol-") && meta.IsStatusConditionTrue(lv.Status.Conditions, thinlvmv1.ConditionReady) {
					ready++
				}
			}
		})
		return err == nil && ready >= want, err
	})
	h.logf("%d nodes: %d LogicalVolumes made and Ready in %.0fs", len(h.nodes), len(todo), time.Since(t0).Seconds())
}

// claims provisions n claims, each with a pod that thinlvm's scheduler
// places on a hollow node, and returns claim-to-Bound p50 and p99 and the
// batch's total time.
func (h *bench) claims(size, n int) (p50, p99, total time.Duration) {
	h.batch++
	ns := fmt.Sprintf("batch-%d", h.batch)
	if err := h.k.Client.Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		h.b.Fatal(err)
	}
	created := make([]time.Time, n)
	start := time.Now()
	parallel(h.b, n, func(i int) error {
		name := fmt.Sprintf("c%05d", i)
		created[i] = time.Now()
		if err := h.k.Client.Create(h.ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To(storageClass),
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}); err != nil {
			return err
		}
		return h.k.Client.Create(h.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{
			SchedulerName: "thinlvm-scheduler",
			Containers:    []corev1.Container{{Name: "c", Image: "pause"}},
			NodeSelector:  map[string]string{"hollow": "true"},
			Tolerations:   []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Volumes:       []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}}}})
	})
	bound := make([]time.Duration, n)
	done := 0
	deadline := time.Now().Add(45 * time.Minute)
	for done < n {
		if time.Now().After(deadline) {
			h.b.Fatalf("%d nodes: %d of %d claims Bound after 45m", size, done, n)
		}
		now := time.Now()
		err := listPages(h, func(list *corev1.PersistentVolumeClaimList) {
			for _, c := range list.Items {
				i, err := strconv.Atoi(strings.TrimPrefix(c.Name, "c"))
				if err != nil || c.Status.Phase != corev1.ClaimBound || bound[i] != 0 {
					continue
				}
				bound[i] = now.Sub(created[i])
				done++
			}
		}, client.InNamespace(ns))
		if err != nil {
			h.logf("%d nodes: listing the claims: %v (trying again)", size, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	total = time.Since(start)
	slices.Sort(bound)
	h.logf("%d nodes: %d claims Bound in %.0fs", size, n, total.Seconds())
	return bound[n/2], bound[(n*99)/100], total
}

// steady measures a window in which nothing is asked of thinlvm: what the
// agents ask of the API server, what it serves for thinlvm.io resources
// and the watch events it sends of them, per node per minute.
func (h *bench) steady(size int, window time.Duration) steadyState {
	time.Sleep(30 * time.Second) // the batch's last writes settle
	agents0, api0 := h.agentMetrics(), h.apiMetrics()
	t0 := time.Now()
	time.Sleep(window)
	agents1, api1 := h.agentMetrics(), h.apiMetrics()
	minutes := time.Since(t0).Minutes()
	per := func(v float64) float64 { return v / float64(size) / minutes }
	var s steadyState
	s.minutes = minutes
	var agentParts, apiParts []string
	for _, key := range slices.Sorted(maps.Keys(agents1)) {
		if !strings.HasPrefix(key, "hollow_api_requests_total") {
			continue
		}
		if d := agents1[key] - agents0[key]; d > 0 {
			s.agentRequests += per(d)
			agentParts = append(agentParts, fmt.Sprintf("%s %.3f", strings.TrimPrefix(key, "hollow_api_requests_total"), per(d)))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(api1)) {
		d := api1[key] - api0[key]
		if d <= 0 || !strings.Contains(key, `group="thinlvm.io"`) {
			continue
		}
		switch {
		case strings.HasPrefix(key, "apiserver_request_total"):
			if strings.Contains(key, `verb="WATCH"`) {
				continue // long-running: counted when they end
			}
			s.apiThinlvm += per(d)
			apiParts = append(apiParts, fmt.Sprintf("%s %.3f", strings.TrimPrefix(key, "apiserver_request_total"), per(d)))
			if strings.Contains(key, `resource="lvmnodes"`) && strings.Contains(key, `subresource="status"`) {
				s.lvmnodeWrites += per(d)
			}
		case strings.HasPrefix(key, "apiserver_watch_events_total"):
			s.apiWatchEvents += per(d)
		}
	}
	s.agentDetail, s.apiDetail = strings.Join(agentParts, ", "), strings.Join(apiParts, ", ")
	return s
}

// writing has every hollow node's pool use grow for window, as volumes
// being written make it, and returns the LVMNode status writes per node per
// minute.
func (h *bench) writing(size int, window time.Duration) float64 {
	signal := func() {
		for _, p := range h.procs {
			if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
				h.b.Fatal(err)
			}
		}
	}
	key := `apiserver_request_total{verb="PATCH",group="thinlvm.io",resource="lvmnodes",subresource="status"}`
	before := h.apiMetrics()[key]
	t0 := time.Now()
	signal()
	time.Sleep(window)
	signal()
	return (h.apiMetrics()[key] - before) / float64(size) / time.Since(t0).Minutes()
}

// agentMetrics sums the hollow-node processes' metrics.
func (h *bench) agentMetrics() map[string]float64 {
	out := map[string]float64{}
	for _, p := range h.procs {
		for k, v := range h.scrape(p.metrics) {
			out[k] += v
		}
	}
	return out
}

// apiMetrics is the API server's request and watch event counts, by verb,
// group, resource and subresource.
func (h *bench) apiMetrics() map[string]float64 {
	raw, err := h.cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(h.ctx)
	if err != nil {
		h.b.Fatalf("API server metrics: %v", err)
	}
	return flatten(h.b, raw, map[string][]string{
		"apiserver_request_total":      {"verb", "group", "resource", "subresource"},
		"apiserver_watch_events_total": {"group", "resource"},
	})
}

func (h *bench) scrape(url string) map[string]float64 {
	resp, err := http.Get(url) //nolint:noctx // loopback, the benchmark's own process
	if err != nil {
		h.b.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		h.b.Fatal(err)
	}
	return flatten(h.b, raw, map[string][]string{
		"hollow_api_requests_total": {"verb", "resource"}, "hollow_watch_events_total": {"kind", "whose"},
		"process_resident_memory_bytes": nil, "go_memstats_heap_inuse_bytes": nil, "hollow_agents_synced": nil,
	})
}

// flatten keeps the families named in keep, summed by the labels listed,
// keyed name{label="value",...}.
func flatten(b *testing.B, raw []byte, keep map[string][]string) map[string]float64 {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		b.Fatalf("parse metrics: %v", err)
	}
	out := map[string]float64{}
	for name, labels := range keep {
		mf, ok := families[name]
		if !ok {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			var parts []string
			for _, k := range labels {
				parts = append(parts, fmt.Sprintf("%s=%q", k, l[k]))
			}
			key := name
			if len(parts) > 0 {
				key += "{" + strings.Join(parts, ",") + "}"
			}
			out[key] += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return out
}

// observedMemory is the observed agent's process: its RSS and Go heap in
// use, after a garbage collection has had its chance.
func (h *bench) observedMemory() memory {
	time.Sleep(5 * time.Second)
	m := h.scrape(h.procs[0].metrics + "?gc=1")
	return memory{rss: m["process_resident_memory_bytes"], heap: m["go_memstats_heap_inuse_bytes"]}
}

// sharedMemory is the RSS per agent of the processes that run many.
func (h *bench) sharedMemory() float64 {
	var rss float64
	agents := 0
	for _, p := range h.procs[1:] {
		rss += h.scrape(p.metrics)["process_resident_memory_bytes"]
		agents += p.agents
	}
	return rss / float64(max(agents, 1))
}

// observedForeign is the watch events of other nodes' objects the observed
// agent received.
func (h *bench) observedForeign() float64 {
	m := h.scrape(h.procs[0].metrics)
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, "hollow_watch_events_total") && strings.Contains(k, `whose="other"`) {
			n += v
		}
	}
	return n
}

// burst makes n volumes on the observed node at once and counts its
// agent's LVMNode status writes until all are Ready and the LVMNode shows
// them, returning the writes and the minutes it took.
func (h *bench) burst(n int) (writes, minutes float64) {
	h.batch++
	key := `hollow_api_requests_total{verb="PATCH",resource="lvmnodes/status"}`
	before := h.scrape(h.procs[0].metrics)[key]
	ln := &thinlvmv1.LVMNode{}
	if err := h.k.Client.Get(h.ctx, client.ObjectKey{Name: observed}, ln); err != nil {
		h.b.Fatal(err)
	}
	count := ln.Status.DeviceClasses[0].LVCount
	t0 := time.Now()
	parallel(h.b, n, func(i int) error {
		name := fmt.Sprintf("burst-%d-%d", h.batch, i)
		return h.k.Client.Create(h.ctx, &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: thinlvmv1.LogicalVolumeSpec{Name: name, NodeName: observed, Size: resource.MustParse("1Gi")}})
	})
	h.waitFor("the burst's volumes in the observed node's LVMNode", 5*time.Minute, func() (bool, error) {
		if err := h.k.Client.Get(h.ctx, client.ObjectKey{Name: observed}, ln); err != nil {
			return false, err
		}
		return ln.Status.DeviceClasses[0].LVCount >= count+int32(n), nil
	})
	minutes = time.Since(t0).Minutes()
	return h.scrape(h.procs[0].metrics)[key] - before, minutes
}

// rss is the resident memory of the cluster's process named name (its
// argv[0]'s last element), one of this benchmark's descendants.
func (h *bench) rss(name string) float64 {
	parent := map[int]int{}
	argv0 := map[int]string{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		h.b.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 {
			parent[pid], _ = strconv.Atoi(fields[1])
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		argv0[pid] = filepath.Base(string(bytes.SplitN(cmdline, []byte{0}, 2)[0]))
	}
	self := os.Getpid()
	var total float64
	for pid, a := range argv0 {
		if a != name {
			continue
		}
		descendant := false
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == self {
				descendant = true
				break
			}
		}
		if !descendant {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				total += kb * 1024
			}
		}
	}
	if total == 0 {
		h.b.Fatalf("no process %s under this benchmark", name)
	}
	return total
}

// waitFor polls cond every second until it holds. An error is tried again:
// the API server under thousands of agents starting may cut a request
// short (an HTTP/2 stream reset); the last one is reported at the deadline.
func (h *bench) waitFor(what string, timeout time.Duration, cond func() (bool, error)) {
	deadline := time.Now().Add(timeout)
	var errs int
	for {
		ok, err := cond()
		if err == nil && ok {
			break
		}
		if err != nil {
			if errs++; errs == 1 {
				h.logf("waiting for %s: %v (trying again)", what, err)
			}
		}
		if time.Now().After(deadline) {
			h.b.Fatalf("timed out after %s waiting for %s (%d errors, the last: %v)", timeout, what, errs, err)
		}
		time.Sleep(time.Second)
	}
}

// listPages lists page by page, 500 objects a request, and gives f each
// page: one response of thousands of objects can outlast the API server's
// request timeout under this load.
func listPages[T any, L interface {
	*T
	client.ObjectList
}](h *bench, f func(L), opts ...client.ListOption) error {
	cont := ""
	for {
		list := L(new(T))
		if err := h.k.Client.List(h.ctx, list, append(opts, client.Limit(500), client.Continue(cont))...); err != nil {
			return err
		}
		f(list)
		if cont = list.GetContinue(); cont == "" {
			return nil
		}
	}
}

func (h *bench) logf(format string, args ...any) {
	fmt.Printf("hollow: "+format+"\n", args...)
}

// parallel runs f for 0..n-1, 32 at a time, and fails b with the first
// error.
func parallel(b *testing.B, n int, f func(int) error) {
	b.Helper()
	var g errgroup.Group
	g.SetLimit(32)
	for i := range n {
		g.Go(func() error { return f(i) })
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}

// role is a hollow node's "hollow" label: claims go to "true" nodes, never
// to the observed one.
func role(node string) string {
	if node == observed {
		return "observed"
	}
	return "true"
}

package schedbench

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/envtest"
)

// pods is how many pods each round schedules, at every cluster size.
const pods = 1000

// clusterSizes are the node counts measured, smallest first: the next size
// adds nodes to the same API server.
var clusterSizes = []int{1000, 5000}

// order is one size's rounds, interleaved so that neither profile always
// runs on the warmer API server: three of each.
var order = []string{"default", "thinlvm", "thinlvm", "default", "default", "thinlvm"}

var profileDir = flag.String("schedbench.profiles", "", "directory for the scheduler's CPU profiles, one per round (default: a temporary one, removed)")

const header = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: %q, qps: 1000, burst: 2000}
leaderElection: {leaderElect: false}
`

var profiles = map[string]string{
	"default": "",
	"thinlvm": `profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: ThinLVM
        weight: 3
`,
}

// BenchmarkSchedulingThroughput schedules 1,000 pods, each with one thinlvm
// WaitForFirstConsumer claim, onto 1,000 and then 5,000 nodes, three rounds
// with kube-scheduler's default profile and three with the ThinLVM plugin,
// interleaved, and prints each round's pods/s, each profile's median and
// the ratio of the medians (goal >= 0.9). A pod counts as scheduled when
// the scheduler wrote its claim's selected-node annotation (there is no
// provisioner to finish the binding); the rate runs from the first
// decision to the last, leaving the scheduler's start-up out. The rates
// move with the machine's other load; the scheduler's CPU time per pod
// over the same span, also reported with the ratio of its medians, moves
// less. Each round also prints where the scheduler spent its time by
// extension point (its framework metrics), and takes a CPU profile
// (-schedbench.profiles keeps them).
func BenchmarkSchedulingThroughput(b *testing.B) {
	ctx := context.Background()
	env, err := envtest.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer env.Stop()
	dir := b.TempDir()
	profiles := *profileDir
	if profiles == "" {
		profiles = dir
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		b.Fatal(err)
	}
	out, _ := exec.Command("go", "env", "GOMOD").Output()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "thinlvm-scheduler"), "./cmd/thinlvm-scheduler")
	build.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	if o, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, o)
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	c := env.Client
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "thin"}, Provisioner: thinlvmv1.DriverName,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}
	if err := c.Create(ctx, sc); err != nil {
		b.Fatal(err)
	}
	h := &harness{c: c, cs: cs, dir: dir, profiles: profiles, kubeconfig: kubeconfig}
	var summary []string
	for _, size := range clusterSizes {
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			start := time.Now()
			h.growTo(b, size)
			rates, cpus := map[string][]float64{}, map[string][]float64{}
			took := 10 * time.Second
			for round, profile := range order {
				r := h.round(b, size, round, profile, took)
				took = r.took
				rates[profile] = append(rates[profile], r.rate)
				cpus[profile] = append(cpus[profile], r.cpu)
				fmt.Printf("nodes=%d round %d %-7s %6.1f pods/s (%.1fs), scheduler CPU %.2f ms/pod\n%s", size, round+1, profile, r.rate, r.took.Seconds(), r.cpu, r.breakdown)
			}
			def, thin := median(rates["default"]), median(rates["thinlvm"])
			defCPU, thinCPU := median(cpus["default"]), median(cpus["thinlvm"])
			b.ReportMetric(def, "default-pods/s")
			b.ReportMetric(thin, "thinlvm-pods/s")
			b.ReportMetric(thin/def, "ratio")
			b.ReportMetric(defCPU/thinCPU, "cpu-ratio")
			line := fmt.Sprintf("| %d pods with a WFC thinlvm claim on %d nodes | default %s, median %.1f pods/s | thinlvm %s, median %.1f pods/s | ratio of medians %.2f (goal >= 0.9) | scheduler CPU per pod, medians: default %.2f ms, thinlvm %.2f ms, ratio %.2f | %s |",
				pods, size, rounds(rates["default"]), def, rounds(rates["thinlvm"]), thin, thin/def, defCPU, thinCPU, defCPU/thinCPU, time.Since(start).Round(time.Second))
			fmt.Printf("\n%s\n\n", line)
			summary = append(summary, line)
		})
	}
	fmt.Printf("\n%s\n", strings.Join(summary, "\n"))
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func rounds(v []float64) string {
	var s []string
	for _, r := range v {
		s = append(s, fmt.Sprintf("%.1f", r))
	}
	return strings.Join(s, " / ")
}

type harness struct {
	c          client.Client
	cs         kubernetes.Interface
	dir        string
	profiles   string
	kubeconfig string
	nodes      int
}

// growTo makes nodes (and their LVMNodes, one 1 TiB default device class
// each) until there are size.
func (h *harness) growTo(b *testing.B, size int) {
	ctx := context.Background()
	status := corev1.NodeStatus{
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110")},
		Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110")},
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
	parallel(b, size-h.nodes, func(i int) error {
		name := fmt.Sprintf("n%05d", h.nodes+i)
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{thinlvmv1.TopologyKey: name}}}
		if err := h.c.Create(ctx, n); err != nil {
			return err
		}
		n.Status = *status.DeepCopy()
		if err := h.c.Status().Update(ctx, n); err != nil {
			return err
		}
		ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := h.c.Create(ctx, ln); err != nil {
			return err
		}
		ln.Status.DeviceClasses = []thinlvmv1.DeviceClassStatus{{Name: "ssd", Default: true, Available: resource.MustParse("1Ti"),
			PoolSize: resource.MustParse("1Ti"), OverprovisionRatio: "1"}}
		return h.c.Status().Update(ctx, ln)
	})
	h.nodes = size
}

type result struct {
	rate      float64
	cpu       float64 // the scheduler's CPU time per pod, ms
	took      time.Duration
	breakdown string
}

// round makes pods pods with a claim each in a namespace of their own, runs
// a scheduler with profile until every claim has its selected node, and
// removes the pods. A round takes a CPU profile of the scheduler from its
// first decision for about the length of the previous round (took).
func (h *harness) round(b *testing.B, size, round int, profile string, took time.Duration) result {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := fmt.Sprintf("bench-%d-%d", size, round)
	if err := h.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	parallel(b, pods, func(i int) error {
		name := fmt.Sprintf("p%04d", i)
		if err := h.c.Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To("thin"),
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}); err != nil {
			return err
		}
		return h.c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{
			Containers:  []corev1.Container{{Name: "c", Image: "pause"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Volumes:     []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}}}})
	})
	cfg := filepath.Join(h.dir, ns+".yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, header+profiles[profile], h.kubeconfig), 0o644); err != nil {
		b.Fatal(err)
	}
	port := freePort(b)
	logf, err := os.Create(filepath.Join(h.dir, ns+".log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	// The secure port serves /metrics and pprof to anyone on loopback:
	// no authentication or authorization kubeconfig, those paths allowed.
	sched := exec.Command(filepath.Join(h.dir, "thinlvm-scheduler"), "--config="+cfg,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics,/debug/pprof/*")
	sched.Stdout, sched.Stderr = logf, logf
	// Watching from before the scheduler starts: the first ADDED events
	// are the claims as they are.
	w, err := h.cs.CoreV1().PersistentVolumeClaims(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	if err := sched.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = sched.Process.Kill()
		_ = sched.Wait()
	}()
	var first, last time.Time
	var cpu0, cpu1 time.Duration
	var cpu sync.WaitGroup
	selected := map[string]bool{}
	deadline := time.After(10 * time.Minute)
	for len(selected) < pods {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				b.Fatalf("%s: the watch of claims ended after %d of %d", ns, len(selected), pods)
			}
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			pvc, ok := ev.Object.(*corev1.PersistentVolumeClaim)
			if !ok || pvc.Annotations["volume.kubernetes.io/selected-node"] == "" || selected[pvc.Name] {
				continue
			}
			selected[pvc.Name] = true
			if len(selected) == 1 {
				first = time.Now()
				cpu0 = cpuTime(b, sched.Process.Pid)
				cpu.Go(func() { h.cpuProfile(b, port, ns+"-"+profile, took+time.Second) })
			}
		case <-deadline:
			b.Fatalf("%s: %d of %d pods scheduled after 10m", ns, len(selected), pods)
		}
	}
	last = time.Now()
	cpu1 = cpuTime(b, sched.Process.Pid)
	breakdown := h.breakdown(b, port)
	cpu.Wait()
	// The next scheduler would see this round's pods (unbound, still
	// nominated) and schedule them too: remove them first.
	if err := h.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
		b.Fatal(err)
	}
	for {
		list := &corev1.PodList{}
		if err := h.c.List(ctx, list, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		if len(list.Items) == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// From the first decision to the last: the scheduler's start-up
	// (informer sync) is not scheduling.
	return result{rate: float64(pods-1) / last.Sub(first).Seconds(), took: last.Sub(first), breakdown: breakdown,
		cpu: float64((cpu1 - cpu0).Microseconds()) / 1000 / float64(pods-1)}
}

// cpuTime is the user and system CPU time a process has used so far
// (/proc/PID/stat, in clock ticks of 10 ms). It moves with the machine's
// other load less than the rates do.
func cpuTime(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command (in parentheses, which may hold
	// spaces): utime and stime are the 14th and 15th of the line.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func freePort(b *testing.B) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// get reads a path of the scheduler's secure port (its certificate is
// self-signed).
func get(port int, path string) ([]byte, error) {
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback, the scheduler's own certificate
	resp, err := c.Get(fmt.Sprintf("https://127.0.0.1:%d%s", port, path))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return body, nil
}

func (h *harness) cpuProfile(b *testing.B, port int, name string, d time.Duration) {
	data, err := get(port, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds()+0.5)))
	if err != nil {
		b.Errorf("cpu profile: %v", err)
		return
	}
	path := filepath.Join(h.profiles, name+".pprof")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Errorf("cpu profile: %v", err)
		return
	}
	fmt.Printf("%s: CPU profile %s\n", name, path)
}

// breakdown is the scheduler's time by extension point, from its metrics:
// the framework's total of each (every cycle), and the ThinLVM plugin's
// share of the plugins' time there (plugin metrics are sampled, 10% of
// cycles).
func (h *harness) breakdown(b *testing.B, port int) string {
	data, err := get(port, "/metrics")
	if err != nil {
		b.Errorf("metrics: %v", err)
		return ""
	}
	framework, plugins, thinlvm, events := map[string]float64{}, map[string]float64{}, map[string]float64{}, map[string]float64{}
	var algorithm float64
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, labels, value, ok := sample(sc.Text())
		if !ok {
			continue
		}
		switch name {
		case "scheduler_framework_extension_point_duration_seconds_sum":
			framework[labels["extension_point"]] += value
		case "scheduler_plugin_execution_duration_seconds_sum":
			plugins[labels["extension_point"]] += value
			if labels["plugin"] == "ThinLVM" {
				thinlvm[labels["extension_point"]] += value
			}
		case "scheduler_scheduling_algorithm_duration_seconds_sum":
			algorithm += value
		case "scheduler_event_handling_duration_seconds_sum":
			events[labels["event"]] += value
		}
	}
	var s strings.Builder
	var handling float64
	var busiest []string
	for _, e := range slices.SortedFunc(maps.Keys(events), func(a, b string) int { return cmp.Compare(events[b], events[a]) }) {
		handling += events[e]
		if len(busiest) < 3 {
			busiest = append(busiest, fmt.Sprintf("%s %.3fs", e, events[e]))
		}
	}
	fmt.Fprintf(&s, "  scheduling algorithm %.2fs; event handlers %.3fs (%s)\n", algorithm, handling, strings.Join(busiest, ", "))
	fmt.Fprintf(&s, "  by extension point: all plugins (summed over nodes and workers), ThinLVM's share of the sampled plugin time there\n")
	for _, ep := range slices.Sorted(maps.Keys(framework)) {
		if framework[ep] < 0.0005 {
			continue
		}
		share := ""
		if plugins[ep] > 0 && thinlvm[ep] > 0 {
			share = fmt.Sprintf(", ThinLVM %.0f%%", 100*thinlvm[ep]/plugins[ep])
		}
		fmt.Fprintf(&s, "    %-10s %.3fs%s\n", ep, framework[ep], share)
	}
	return s.String()
}

// sample parses one line of the Prometheus text format.
func sample(line string) (name string, labels map[string]string, value float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", nil, 0, false
	}
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(line[i+1:], 64)
	if err != nil {
		return "", nil, 0, false
	}
	head := line[:i]
	labels = map[string]string{}
	if j := strings.IndexByte(head, '{'); j >= 0 {
		for kv := range strings.SplitSeq(strings.TrimSuffix(head[j+1:], "}"), ",") {
			k, val, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(val, `"`)
		}
		head = head[:j]
	}
	return head, labels, v, true
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

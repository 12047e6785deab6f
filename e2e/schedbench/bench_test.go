package schedbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/envtest"
)

const (
	nodes = 1000
	pods  = 1000
)

const header = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: %q, qps: 1000, burst: 2000}
leaderElection: {leaderElect: false}
`

const thinlvmProfile = `profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: ThinLVM
        weight: 3
`

// BenchmarkSchedulingThroughput schedules 1,000 pods, each with one thinlvm
// WaitForFirstConsumer claim, onto 1,000 nodes, once with kube-scheduler's
// default profile and once with the ThinLVM plugin, and prints pods/s of
// each and their ratio (goal >= 0.9). A pod counts as scheduled when the
// scheduler wrote its claim's selected-node annotation (there is no
// provisioner to finish the binding); the rate runs from the first decision
// to the last, leaving the scheduler's start-up out.
func BenchmarkSchedulingThroughput(b *testing.B) {
	ctx := context.Background()
	env, err := envtest.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer env.Stop()
	dir := b.TempDir()
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
	c := env.Client
	parallel(b, nodes, func(i int) error {
		name := fmt.Sprintf("n%04d", i)
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{thinlvmv1.TopologyKey: name}},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110")},
				Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110")},
				Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		if err := c.Create(ctx, n); err != nil {
			return err
		}
		n.Status = corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
		if err := c.Status().Update(ctx, n); err != nil {
			return err
		}
		ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Create(ctx, ln); err != nil {
			return err
		}
		ln.Status.DeviceClasses = []thinlvmv1.DeviceClassStatus{{Name: "ssd", Default: true, Available: resource.MustParse("1Ti"),
			PoolSize: resource.MustParse("1Ti"), OverprovisionRatio: "1"}}
		return c.Status().Update(ctx, ln)
	})
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "thin"}, Provisioner: thinlvmv1.DriverName,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}
	if err := c.Create(ctx, sc); err != nil {
		b.Fatal(err)
	}
	// Two rounds of each, interleaved, so that neither profile always runs
	// on the warmer API server; each profile's rate is the mean of its two.
	rate := map[string]float64{}
	for round, profile := range []struct{ name, yaml string }{
		{"default", ""}, {"thinlvm", thinlvmProfile}, {"thinlvm", thinlvmProfile}, {"default", ""},
	} {
		ns := fmt.Sprintf("bench-%d", round)
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			b.Fatal(err)
		}
		parallel(b, pods, func(i int) error {
			name := fmt.Sprintf("p%04d", i)
			if err := c.Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To("thin"),
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}); err != nil {
				return err
			}
			return c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{
				Containers:  []corev1.Container{{Name: "c", Image: "pause"}},
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				Volumes:     []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}}}})
		})
		cfg := filepath.Join(dir, fmt.Sprintf("%s-%d.yaml", profile.name, round))
		if err := os.WriteFile(cfg, fmt.Appendf(nil, header+profile.yaml, kubeconfig), 0o644); err != nil {
			b.Fatal(err)
		}
		logf, _ := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.log", profile.name, round)))
		sched := exec.Command(filepath.Join(dir, "thinlvm-scheduler"), "--config="+cfg, "--secure-port=0")
		sched.Stdout, sched.Stderr = logf, logf
		start := time.Now()
		if err := sched.Start(); err != nil {
			b.Fatal(err)
		}
		var first, last time.Time
		for {
			list := &corev1.PersistentVolumeClaimList{}
			if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
				b.Fatal(err)
			}
			done := 0
			for _, p := range list.Items {
				if p.Annotations["volume.kubernetes.io/selected-node"] != "" {
					done++
				}
			}
			if done > 0 && first.IsZero() {
				first = time.Now()
			}
			if done == pods {
				last = time.Now()
				break
			}
			if time.Since(start) > 10*time.Minute {
				_ = sched.Process.Kill()
				b.Fatalf("%s: %d of %d pods scheduled after 10m", profile.name, done, pods)
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = sched.Process.Kill()
		_ = sched.Wait()
		logf.Close()
		// From the first decision to the last: the scheduler's start-up
		// (informer sync) is not scheduling.
		rate[profile.name] += float64(pods-1) / last.Sub(first).Seconds() / 2
		// The next scheduler would see this round's pods (unbound, still
		// nominated) and schedule them too: remove them first.
		if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
			b.Fatal(err)
		}
		for {
			list := &corev1.PodList{}
			if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
				b.Fatal(err)
			}
			if len(list.Items) == 0 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	ratio := rate["thinlvm"] / rate["default"]
	b.ReportMetric(rate["default"], "default-pods/s")
	b.ReportMetric(rate["thinlvm"], "thinlvm-pods/s")
	b.ReportMetric(ratio, "ratio")
	fmt.Printf("\n| 1,000 pods with a WFC thinlvm claim on 1,000 nodes | default %.1f pods/s | thinlvm %.1f pods/s | ratio %.2f (goal >= 0.9) |\n",
		rate["default"], rate["thinlvm"], ratio)
}

// parallel runs f for 0..n-1 on 32 workers.
func parallel(b *testing.B, n int, f func(int) error) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

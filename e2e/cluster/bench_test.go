package cluster_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/thinlvm/thinlvm/e2e/cluster"
)

// BenchmarkProvision100 provisions 100 WaitForFirstConsumer claims, each with
// a pod, spread over 20 kwok nodes (the real lvmd on the simulated lvm),
// and prints the time from creation to Bound (p50, p95, total) and the API
// writes per volume. Run with -benchtime 1x.
func BenchmarkProvision100(b *testing.B) {
	const nodes, claims = 20, 100
	for i := range nodes {
		if err := k.AddNode(ctx, cluster.Node{Name: fmt.Sprintf("bench-%02d", i), Labels: map[string]string{"bench": "true"}}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range nodes {
		if err := k.WaitLVMNode(ctx, fmt.Sprintf("bench-%02d", i)); err != nil {
			b.Fatal(err)
		}
		if err := k.WaitCapacity(ctx, fmt.Sprintf("bench-%02d", i)); err != nil {
			b.Fatal(err)
		}
	}
	affinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "bench", Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}}}}}}}
	for range b.N {
		writes := apiWrites(b)
		start := time.Now()
		created := map[string]time.Time{}
		for i := range claims {
			name := fmt.Sprintf("bench-%03d", i)
			created[name] = time.Now()
			if err := k.Client.Create(ctx, pvc(name, storageClass, "1Gi", false)); err != nil {
				b.Fatal(err)
			}
			if err := k.Client.Create(ctx, pod(name, false, affinity, name)); err != nil {
				b.Fatal(err)
			}
		}
		boundAt := map[string]time.Duration{}
		deadline := time.Now().Add(10 * time.Minute)
		for len(boundAt) < claims {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d claims bound after 10m", len(boundAt), claims)
			}
			list := &corev1.PersistentVolumeClaimList{}
			if err := k.Client.List(ctx, list, client.InNamespace("default")); err != nil {
				b.Fatal(err)
			}
			for _, c := range list.Items {
				if t0, ok := created[c.Name]; ok && c.Status.Phase == corev1.ClaimBound {
					if _, seen := boundAt[c.Name]; !seen {
						boundAt[c.Name] = time.Since(t0)
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		total := time.Since(start)
		perVolume, lvWrites, detail := writesPerVolume(writes, apiWrites(b), claims)
		var d []time.Duration
		for _, v := range boundAt {
			d = append(d, v)
		}
		slices.Sort(d)
		p50, p95 := d[len(d)/2], d[len(d)*95/100]
		b.ReportMetric(p50.Seconds(), "p50-s")
		b.ReportMetric(p95.Seconds(), "p95-s")
		b.ReportMetric(total.Seconds(), "total-s")
		b.ReportMetric(perVolume, "writes/volume")
		fmt.Printf("\n| 100 PVCs to Bound, 20 kwok nodes (lvmd on simulated lvm) | p50 %s | p95 %s | total %s |\n",
			p50.Round(time.Millisecond), p95.Round(time.Millisecond), total.Round(time.Millisecond))
		fmt.Printf("| API writes per volume, creation to Bound | %.1f | of them LogicalVolume %.1f | %s |\n", perVolume, lvWrites, detail)
		for i := range claims {
			name := fmt.Sprintf("bench-%03d", i)
			_ = k.Client.Delete(ctx, pod(name, false, nil))
			_ = k.Client.Delete(ctx, pvc(name, "", "1Gi", false))
		}
	}
}

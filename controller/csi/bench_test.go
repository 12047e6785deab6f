package csi_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	csispec "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/sizes"
)

// benchNodes is how many LVMNodes the GetCapacity benchmark puts in the
// cache beside the tests' three.
const benchNodes = 2000

const benchLabel = "thinlvm.io/bench"

// makeBenchNodes creates benchNodes LVMNodes with one device class each
// (not the tests' ssd) and waits until the server's cache holds them; the
// returned function deletes them.
func makeBenchNodes(b *testing.B) func() {
	b.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, benchNodes)
	names := make(chan string)
	for range 8 {
		wg.Go(func() {
			for name := range names {
				ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{benchLabel: "true"}}}
				if err := k8s.Create(ctx, ln); err != nil {
					errs <- err
					continue
				}
				ln.Status.DeviceClasses = []thinlvmv1.DeviceClassStatus{{Name: "bench", Available: resource.MustParse("50Gi")},
					{Name: "bench-hdd", Available: resource.MustParse("500Gi")}}
				if err := k8s.Status().Update(ctx, ln); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range benchNodes {
		names <- fmt.Sprintf("bench-%04d", i)
	}
	close(names)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		list := &thinlvmv1.LVMNodeList{}
		if err := srv.Client.List(ctx, list, client.MatchingLabels{benchLabel: "true"}); err != nil {
			b.Fatal(err)
		}
		ready := 0
		for i := range list.Items {
			if len(list.Items[i].Status.DeviceClasses) > 0 {
				ready++
			}
		}
		if ready == benchNodes {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the cache holds %d of %d bench LVMNodes with a status", ready, benchNodes)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return func() {
		if err := k8s.DeleteAllOf(ctx, &thinlvmv1.LVMNode{}, client.MatchingLabels{benchLabel: "true"}); err != nil {
			b.Error(err)
		}
	}
}

// listCapacity is what GetCapacity did per segment before it read the
// node by name: list every LVMNode from the cache (copying each) and keep
// the segment's.
func listCapacity(ctx context.Context, c client.Reader, node, class string) (int64, error) {
	nodes := &thinlvmv1.LVMNodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return 0, err
	}
	var total int64
	for i := range nodes.Items {
		if nodes.Items[i].Name != node {
			continue
		}
		if dc := nodes.Items[i].Status.DeviceClass(class); dc != nil {
			total = sizes.Add(total, dc.Available.Value())
		}
	}
	return total, nil
}

// BenchmarkGetCapacity measures, in one run against a cache of
// benchNodes+3 LVMNodes, GetCapacity for one topology segment (what the
// provisioner's capacity tracking asks, once per node and class) beside
// the list-and-filter it replaced, and GetCapacity without a segment
// (every node, not copied) beside a list that copies them. The ratios are
// the metrics: list/get and copy/nocopy.
func BenchmarkGetCapacity(b *testing.B) {
	ctx := context.Background()
	defer makeBenchNodes(b)()
	class := map[string]string{thinlvmv1.DeviceClassParameter: "bench"}
	var get, list, all, copied time.Duration
	b.ResetTimer()
	for i := range b.N {
		node := fmt.Sprintf("bench-%04d", i%benchNodes)
		req := &csispec.GetCapacityRequest{Parameters: class, AccessibleTopology: &csispec.Topology{Segments: map[string]string{thinlvmv1.TopologyKey: node}}}
		start := time.Now()
		resp, err := srv.GetCapacity(ctx, req)
		get += time.Since(start)
		if err != nil || resp.GetAvailableCapacity() != 50<<30 {
			b.Fatalf("GetCapacity of %s: %v %v", node, resp, err)
		}
		start = time.Now()
		n, err := listCapacity(ctx, srv.Client, node, "bench")
		list += time.Since(start)
		if err != nil || n != 50<<30 {
			b.Fatalf("list capacity of %s: %d %v", node, n, err)
		}
		if i%20 != 0 {
			continue // the walks of every node: one turn in 20
		}
		start = time.Now()
		resp, err = srv.GetCapacity(ctx, &csispec.GetCapacityRequest{Parameters: class})
		all += time.Since(start)
		if err != nil || resp.GetAvailableCapacity() != benchNodes*50<<30 {
			b.Fatalf("GetCapacity of all nodes: %v %v", resp, err)
		}
		start = time.Now()
		full := &thinlvmv1.LVMNodeList{}
		if err := srv.Client.List(ctx, full); err != nil {
			b.Fatal(err)
		}
		var sum int64
		for j := range full.Items {
			if dc := full.Items[j].Status.DeviceClass("bench"); dc != nil {
				sum = sizes.Add(sum, dc.Available.Value())
			}
		}
		copied += time.Since(start)
		if sum != benchNodes*50<<30 {
			b.Fatalf("copied sum %d", sum)
		}
	}
	b.StopTimer()
	walks := float64(b.N+19) / 20
	b.ReportMetric(float64(get.Nanoseconds())/float64(b.N), "ns/segment-get")
	b.ReportMetric(float64(list.Nanoseconds())/float64(b.N), "ns/segment-list")
	b.ReportMetric(float64(list)/float64(get), "list/get")
	b.ReportMetric(float64(all.Nanoseconds())/walks, "ns/all-nocopy")
	b.ReportMetric(float64(copied.Nanoseconds())/walks, "ns/all-copy")
	b.ReportMetric(float64(copied)/float64(all), "copy/nocopy")
}

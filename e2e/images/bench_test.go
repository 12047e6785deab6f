package images_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/imageserver"
)

// restartAgents restarts every VM node's agent with extra args and waits
// until each has published its new transfer certificate (an agent makes a
// new one each time it starts).
func restartAgents(b *testing.B, nodes []string, extra ...string) {
	b.Helper()
	for _, node := range nodes {
		ln := &thinlvmv1.LVMNode{}
		if err := tb.Client.Get(ctx, types.NamespacedName{Name: node}, ln); err != nil {
			b.Fatal(err)
		}
		var before string
		if ln.Status.Transfer != nil {
			before = ln.Status.Transfer.CertificateSHA256
		}
		if err := tb.RestartVMAgent(ctx, node, extra...); err != nil {
			b.Fatal(err)
		}
		waitFor(b, "the restarted agent of "+node, 3*time.Minute, func() (bool, error) {
			err := tb.Client.Get(ctx, types.NamespacedName{Name: node}, ln)
			return err == nil && ln.Status.Transfer != nil && ln.Status.Transfer.CertificateSHA256 != before, err
		})
	}
}

// BenchmarkPrewarm prewarms a GoldenImage of 256 MiB (64 MiB of random
// data, the rest zeros), served raw over HTTP from this machine, on every
// real-LVM node (-images.nodes, default 2): with peers (one node downloads
// it, the others copy a peer's base) and without them (the agents run with
// --golden-peers=false, so every node downloads it). It reports the bytes
// the origin served and the time from the GoldenImage's creation until
// every base is Ready, each way, and their ratios. Run with -benchtime 1x.
func BenchmarkPrewarm(b *testing.B) {
	const size, data = 256 * mib, 64 * mib
	o := imageserver.Start(b)
	raw := diskImage(51, size, data)
	nodes := slices.Sorted(maps.Keys(tb.VMs))
	type result struct {
		mode      string
		downloads int
		served    int64
		seconds   float64
	}
	var results []result
	for i := range b.N {
		results = results[:0]
		for _, peers := range []bool{true, false} {
			mode, extra := "peers", []string(nil)
			if !peers {
				mode, extra = "none", []string{"--golden-peers=false"}
			}
			restartAgents(b, nodes, extra...)
			name := fmt.Sprintf("bench-%s-%d", mode, i)
			path := "/" + name + ".raw"
			gi := httpImage(name, o.Add(path, raw), raw, onNodes(nodes...))
			start := time.Now()
			create(b, gi)
			waitFor(b, fmt.Sprintf("%s Ready on %d nodes", name, len(nodes)), 30*time.Minute, func() (bool, error) {
				got := getImage(b, name)
				if got.Status.FailedNodes > 0 {
					return false, fmt.Errorf("a base of %s failed: %s", name, got.Status.LastError)
				}
				return got.Status.ReadyNodes == int32(len(nodes)), nil
			})
			secs := time.Since(start).Seconds()
			downloads, served := o.Downloads(path)
			fromOrigin := 0
			for _, node := range nodes {
				if base, err := baseOn(node, name); err != nil || base == nil {
					b.Fatalf("the base of %s on %s: %+v (%v)", name, node, base, err)
				} else if base.From == thinlvmv1.BaseFromOrigin {
					fromOrigin++
				}
			}
			want := 1
			if !peers {
				want = len(nodes)
			}
			if downloads != want || fromOrigin != want {
				b.Errorf("%s: %d downloads and %d bases from the origin, want %d of each", mode, downloads, fromOrigin, want)
			}
			results = append(results, result{mode: mode, downloads: downloads, served: served, seconds: secs})
			deleteAndWait(b, gi)
			basesGone(b, gi)
		}
	}
	restartAgents(b, nodes) // peers on again
	for _, r := range results {
		b.Logf("%d nodes, %s: %d downloads, %d MiB served by the origin, %.1f s until every base was Ready",
			len(nodes), r.mode, r.downloads, r.served/mib, r.seconds)
		b.ReportMetric(float64(r.served), "origin_bytes-"+r.mode)
		b.ReportMetric(r.seconds, "seconds-"+r.mode)
	}
	if len(results) == 2 && results[1].served > 0 {
		p, n := results[0], results[1]
		b.ReportMetric(float64(p.served)/float64(n.served), "origin_bytes-peers/none")
		b.ReportMetric(p.seconds/n.seconds, "seconds-peers/none")
	}
}

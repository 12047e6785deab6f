package cluster_test

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// apiWrites reads the API server's count of write requests so far (create,
// update, patch, delete; every client's), by resource[/subresource].
func apiWrites(t testing.TB) map[string]float64 {
	t.Helper()
	cs, err := kubernetes.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("API server metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parse API server metrics: %v", err)
	}
	mf, ok := families["apiserver_request_total"]
	if !ok {
		t.Fatal("the API server reports no apiserver_request_total")
	}
	out := map[string]float64{}
	for _, m := range mf.GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION":
		default:
			continue
		}
		key := l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out
}

// writesPerVolume is the API writes between two apiWrites readings per
// volume made: the total and the LogicalVolume objects' share, and a line
// naming the resources written most.
func writesPerVolume(before, after map[string]float64, volumes int) (total, logicalVolumes float64, detail string) {
	diff := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			diff[k] = d
			total += d
			if k == "logicalvolumes" || strings.HasPrefix(k, "logicalvolumes/") {
				logicalVolumes += d
			}
		}
	}
	keys := slices.SortedFunc(maps.Keys(diff), func(a, b string) int { // most written first
		return cmp.Or(cmp.Compare(diff[b], diff[a]), strings.Compare(a, b))
	})
	var parts []string
	for _, k := range keys[:min(len(keys), 8)] {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, diff[k]/float64(volumes)))
	}
	return total / float64(volumes), logicalVolumes / float64(volumes), strings.Join(parts, ", ")
}

package cluster_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thinlvm/thinlvm/e2e/cluster"
)

var (
	storageSuiteAll = flag.Bool("storagesuite.all", false,
		"run every spec of Kubernetes' storage suite for thinlvm but e2e/conformance/excluded.txt's (make conformance), not ci-specs.txt's")
	storageSuiteFocus = flag.String("storagesuite.focus", "",
		"with -storagesuite.all, only the specs this regular expression matches (make conformance FOCUS=...)")
)

// TestKubernetesStorageSuite runs Kubernetes' own storage end-to-end suite
// (e2e.test, External Storage with e2e/conformance/driver.yaml) on this
// suite's cluster and real node: the specs of e2e/conformance/ci-specs.txt,
// each of which must pass (a spec skipped, missing or failed fails the
// test), or with -storagesuite.all every spec of the driver but
// excluded.txt's, none of which may fail.
func TestKubernetesStorageSuite(t *testing.T) {
	dir := filepath.Join("..", "conformance")
	o := cluster.StorageSuiteOptions{Dir: filepath.Join(k.Dir, "storage-suite"), Log: os.Stderr}
	var err error
	if *storageSuiteAll {
		o.Focus = *storageSuiteFocus
		o.Skip, err = cluster.ReadSpecList(filepath.Join(dir, "excluded.txt"))
	} else {
		o.Specs, err = cluster.ReadSpecList(filepath.Join(dir, "ci-specs.txt"))
	}
	if err != nil {
		t.Fatal(err)
	}
	results, err := k.RunStorageSuite(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, name := range o.Specs {
		listed[name] = true
	}
	counts := map[string]int{}
	byName := map[string]cluster.SpecResult{}
	var summary strings.Builder
	for _, r := range results {
		if len(o.Specs) > 0 && !listed[r.Name] {
			continue // not focused
		}
		counts[r.State]++
		byName[r.Name] = r
		fmt.Fprintf(&summary, "%-8s %6.1fs  %s\n", r.State, r.Seconds, r.Name)
		if r.State != "passed" && r.State != "skipped" {
			t.Errorf("%s: %s: %s", r.State, r.Name, r.Message)
		}
	}
	t.Logf("Kubernetes storage suite: %v\n%s", counts, summary.String())
	if err := os.WriteFile(filepath.Join(o.Dir, "summary.txt"), []byte(summary.String()), 0o644); err != nil {
		t.Error(err)
	}
	if *storageSuiteAll {
		if counts["passed"] == 0 {
			t.Error("no spec passed")
		}
		return
	}
	for _, name := range o.Specs {
		switch r, ok := byName[name]; {
		case !ok:
			t.Errorf("spec not run (renamed in this Kubernetes version?): %s", name)
		case r.State == "skipped":
			t.Errorf("spec skipped: %s: %s", name, r.Message)
		}
	}
}

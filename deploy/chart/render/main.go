// Command render writes deploy/'s kustomize tree from the chart (make
// generate): each template's objects, rendered with the chart's defaults
// and every optional part on (chart.KustomizeValues), go to the file of
// the same path under deploy/, and the chart's CRDs to deploy/crds. The
// kustomization.yaml files are written by hand and name those files.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/thinlvm/thinlvm/deploy/chart"
)

func main() {
	dir := flag.String("chart", ".", "the chart's directory (deploy/chart)")
	out := flag.String("out", "..", "the kustomize tree to write (deploy/)")
	kube := flag.String("kube-version", "", "the Kubernetes version deploy/ installs on, e.g. v1.37.0 (its scheduler image)")
	flag.Parse()
	if err := render(context.Background(), *dir, *out, *kube); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func render(ctx context.Context, dir, out, kube string) error {
	c, err := chart.Load(dir)
	if err != nil {
		return err
	}
	files, err := chart.Render(ctx, c, chart.Options{
		Namespace:   "thinlvm-system",
		KubeVersion: kube,
		// deploy/scheduler-name is for clusters that serve it.
		APIVersions: []string{"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"},
		Values:      chart.KustomizeValues(),
	})
	if err != nil {
		return err
	}
	for file, objs := range files {
		header := "# Rendered from deploy/chart/templates/" + file + " by make generate:\n# change the chart, not this file.\n"
		if err := write(filepath.Join(out, filepath.FromSlash(file)), header+objs); err != nil {
			return err
		}
	}
	crds, err := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range crds {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := write(filepath.Join(out, "crds", filepath.Base(f)), string(data)); err != nil {
			return err
		}
	}
	return nil
}

func write(file, data string) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	if !strings.HasSuffix(data, "\n") {
		data += "\n"
	}
	return os.WriteFile(file, []byte(data), 0o644)
}

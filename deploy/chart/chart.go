// Package chart renders thinlvm's Helm chart (this directory) with the Helm
// SDK, as `helm template` does: for deploy/'s kustomize tree (make
// generate, command render) and for the chart's tests. It is a module of
// its own (go.mod), so that the product's module does not require Helm.
package chart

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	helmchart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
)

// Load loads the chart from its directory.
func Load(dir string) (*helmchart.Chart, error) {
	c, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load the chart from %s: %w", dir, err)
	}
	return c, nil
}

// Options are a client-side render's: the release's namespace, the
// cluster's version and APIs it assumes, and values over the chart's.
type Options struct {
	Namespace   string
	KubeVersion string   // e.g. v1.37.0; empty for the SDK's own
	APIVersions []string // added to the SDK's, e.g. admissionregistration.k8s.io/v1/MutatingAdmissionPolicy
	Values      map[string]any
}

// Render renders the chart without a cluster and returns each template's
// objects (its path under templates/, e.g. node/daemonset.yaml, to its
// documents joined by "---") in the order Helm installs them.
func Render(ctx context.Context, c *helmchart.Chart, o Options) (map[string]string, error) {
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName = "thinlvm"
	install.Namespace = o.Namespace
	install.Replace = true
	install.APIVersions = common.VersionSet(o.APIVersions)
	if o.KubeVersion != "" {
		kv, err := common.ParseKubeVersion(o.KubeVersion)
		if err != nil {
			return nil, err
		}
		install.KubeVersion = kv
	}
	r, err := install.RunWithContext(ctx, c, o.Values)
	if err != nil {
		return nil, fmt.Errorf("render the chart: %w", err)
	}
	rel, ok := r.(*release.Release)
	if !ok {
		return nil, fmt.Errorf("render the chart: a %T, not a release", r)
	}
	return Split(rel.Manifest), nil
}

var source = regexp.MustCompile(`(?m)^# Source: [^/]+/templates/(.+)\n`)

// Split splits a release manifest into its templates' documents, by the
// "# Source:" line Helm puts before each.
func Split(manifest string) map[string]string {
	out := map[string]string{}
	for _, doc := range strings.Split(manifest, "\n---\n") {
		doc = strings.TrimPrefix(strings.TrimSpace(doc), "---\n")
		m := source.FindStringSubmatchIndex(doc)
		if m == nil {
			continue
		}
		file := doc[m[2]:m[3]]
		body := strings.TrimSpace(doc[m[1]:])
		if body == "" {
			continue
		}
		if prev, ok := out[file]; ok {
			body = prev + "---\n" + body
		}
		out[file] = body + "\n"
	}
	return out
}

// KustomizeValues are the values deploy/'s tree is rendered with: the
// chart's defaults, with every optional part on (deploy/'s optional parts
// are kustomizations of their own: monitoring, populator, scheduler-name,
// examples/storageclasses) and the namespace an object of the install.
func KustomizeValues() map[string]any {
	return map[string]any{
		"namespace":        map[string]any{"create": true},
		"monitoring":       map[string]any{"enabled": true},
		"volumePopulators": map[string]any{"enabled": true},
		"scheduler":        map[string]any{"namePolicy": map[string]any{"enabled": true}},
	}
}

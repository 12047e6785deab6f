// Command package packages the chart for a release (make release): its
// version and appVersion the release's tag, and its values.yaml naming
// the registry the images were pushed to and pinning each image by the
// digest it was pushed with. The digests come from the file `go run
// ./hack/images -release-file` writes; values.yaml keeps its comments.
//
//	go run ./package -release ../../bin/images/release.json -out ../../bin
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v4/pkg/chart/common"
	helmchart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"

	"github.com/thinlvm/thinlvm/deploy/chart"
)

// Release is what hack/images writes of a build: the registry and
// repository prefix it pushed to, the tag, and each image's digest by
// name (the schedulers' as thinlvm-scheduler-k8s<minor>).
type Release struct {
	Registry string            `json:"registry"`
	Tag      string            `json:"tag"`
	Digests  map[string]string `json:"digests"`
}

func main() {
	dir := flag.String("chart", ".", "the chart's directory")
	rel := flag.String("release", "", "the build's release file (hack/images -release-file)")
	out := flag.String("out", ".", "where to write thinlvm-<version>.tgz")
	flag.Parse()
	path, err := pack(*dir, *rel, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "package:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

func pack(dir, relFile, out string) (string, error) {
	data, err := os.ReadFile(relFile)
	if err != nil {
		return "", err
	}
	var r Release
	if err := json.Unmarshal(data, &r); err != nil {
		return "", fmt.Errorf("%s: %w", relFile, err)
	}
	if r.Registry == "" || r.Tag == "" {
		return "", fmt.Errorf("%s: no registry or tag: package a build that was pushed", relFile)
	}
	c, err := chart.Load(dir)
	if err != nil {
		return "", err
	}
	if err := pin(c, r); err != nil {
		return "", err
	}
	return chartutil.Save(c, out)
}

// pin sets the chart's version and its values.yaml (the file, so that its
// comments stay) to the release's.
func pin(c *helmchart.Chart, r Release) error {
	c.Metadata.Version = strings.TrimPrefix(r.Tag, "v")
	c.Metadata.AppVersion = r.Tag
	var raw *common.File
	for _, f := range c.Raw {
		if f.Name == chartutil.ValuesfileName {
			raw = f
		}
	}
	if raw == nil {
		return fmt.Errorf("the chart has no %s", chartutil.ValuesfileName)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw.Data, &doc); err != nil {
		return err
	}
	digest := func(name string) (string, error) {
		d, ok := r.Digests[name]
		if !ok {
			return "", fmt.Errorf("the release has no image %s (it has %v)", name, r.Digests)
		}
		return d, nil
	}
	set := map[string]string{"image.registry": strings.TrimSuffix(r.Registry, "/"), "image.tag": r.Tag}
	for path, repo := range map[string]string{"controller.digest": "controller.repository", "node.digest": "node.repository", "node.lvmd.digest": "node.lvmd.repository"} {
		name, err := scalar(&doc, repo)
		if err != nil {
			return err
		}
		if set[path], err = digest(name); err != nil {
			return err
		}
	}
	for k, v := range set {
		if err := setScalar(&doc, k, v); err != nil {
			return err
		}
	}
	sched, err := scalar(&doc, "scheduler.repository")
	if err != nil {
		return err
	}
	digests := &yaml.Node{Kind: yaml.MappingNode}
	for _, minor := range []string{"1.34", "1.35", "1.36", "1.37"} {
		d, err := digest(sched + "-k8s" + minor)
		if err != nil {
			return err
		}
		digests.Content = append(digests.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: minor, Style: yaml.DoubleQuotedStyle}, &yaml.Node{Kind: yaml.ScalarNode, Value: d})
	}
	m, err := lookup(&doc, "scheduler.digests")
	if err != nil {
		return err
	}
	*m = *digests
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	raw.Data = buf.Bytes()
	// What the chart renders with: the file's values.
	var values map[string]any
	if err := yaml.Unmarshal(raw.Data, &values); err != nil {
		return err
	}
	c.Values = values
	return nil
}

// lookup finds the node of a dotted path of keys in a YAML document.
func lookup(doc *yaml.Node, path string) (*yaml.Node, error) {
	n := doc
	if n.Kind == yaml.DocumentNode {
		n = n.Content[0]
	}
	for _, key := range strings.Split(path, ".") {
		if n.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("values.yaml: %s: not a map at %s", path, key)
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil, fmt.Errorf("values.yaml has no %s", path)
		}
		n = next
	}
	return n, nil
}

func scalar(doc *yaml.Node, path string) (string, error) {
	n, err := lookup(doc, path)
	if err != nil {
		return "", err
	}
	if n.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("values.yaml: %s is not a scalar", path)
	}
	return n.Value, nil
}

func setScalar(doc *yaml.Node, path, value string) error {
	n, err := lookup(doc, path)
	if err != nil {
		return err
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("values.yaml: %s is not a scalar", path)
	}
	n.Value, n.Tag, n.Style = value, "!!str", 0
	return nil
}

package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Apply server-side applies every object of the YAML files at path (a file
// or a directory of them).
func (cp *ControlPlane) Apply(ctx context.Context, path string) error {
	files := []string{path}
	if st, err := os.Stat(path); err != nil {
		return err
	} else if st.IsDir() {
		if files, err = filepath.Glob(filepath.Join(path, "*.yaml")); err != nil {
			return err
		}
	}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue // kustomize's, not the API server's
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := cp.ApplyYAML(ctx, data); err != nil {
			return fmt.Errorf("apply %s: %w", f, err)
		}
	}
	return nil
}

// ApplyKustomization runs `kubectl apply -k dir` with the control plane's
// kubectl, as a user applies an optional part of the install; the error
// carries kubectl's output.
func (cp *ControlPlane) ApplyKustomization(ctx context.Context, dir string) error {
	_, err := cp.kubectl(ctx, "apply", "-k", dir)
	return err
}

// ApplyYAML server-side applies the objects of a YAML stream.
func (cp *ControlPlane) ApplyYAML(ctx context.Context, data []byte) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if len(u.Object) == 0 {
			continue
		}
		u.SetManagedFields(nil)
		//nolint:staticcheck // SA1019: a manifest's unstructured objects, applied as kubectl apply --server-side does; every suite installs through this line, so its move to Client.Apply waits for a run of them.
		if err := cp.Client.Patch(ctx, u, client.Apply, client.FieldOwner("thinlvm-e2e"), client.ForceOwnership); err != nil {
			return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
}

// moduleDir is the directory of a module in the build graph of the module
// at dir.
func moduleDir(dir, module string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locate module %s: %w", module, err)
	}
	return strings.TrimSpace(string(out)), nil
}

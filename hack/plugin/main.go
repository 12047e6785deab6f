// Command plugin builds the kubectl plugin's release archives, one per
// platform (kubectl-thinlvm_<os>_<arch>.tar.gz: the binary and the
// LICENSE), and krew's plugin manifest for them (thinlvm.yaml, installed
// with `kubectl krew install --manifest`). The archives are reproducible:
// the same tree and version give the same bytes, and so the same sha256
// in the manifest.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

func main() {
	version := flag.String("version", "v0.1.0", "the release's version: the manifest's spec.version and the archives' URLs")
	out := flag.String("out", "bin/plugin", "where the archives and thinlvm.yaml go")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64,windows/amd64", "GOOS/GOARCH pairs, comma-separated")
	url := flag.String("url", "https://github.com/thinlvm/thinlvm/releases/download", "where the release's archives are published: URL/VERSION/ARCHIVE")
	flag.Parse()
	if err := release(*version, *out, *url, strings.Split(*platforms, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "plugin:", err)
		os.Exit(1)
	}
}

// release builds each platform's archive into out and writes the manifest.
func release(version, out, url string, platforms []string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	license, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	m := manifest{APIVersion: "krew.googlecontainertools.github.com/v1alpha2", Kind: "Plugin"}
	m.Metadata.Name = "thinlvm"
	m.Spec = spec{
		Version:          version,
		Homepage:         "https://github.com/thinlvm/thinlvm",
		ShortDescription: "Move and inspect thinlvm's node-local LVM volumes",
		Description: "Shows thinlvm's capacity per node, each claim's volume and where it came from, and the\n" +
			"golden images' spread; moves a claim's volume to another node keeping its name\n" +
			"(move), and empties a node before maintenance (evacuate).\n",
	}
	for _, p := range platforms {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok {
			return fmt.Errorf("platform %q: want GOOS/GOARCH", p)
		}
		bin := "kubectl-thinlvm"
		if goos == "windows" {
			bin += ".exe"
		}
		exe, err := build(root, goos, goarch)
		if err != nil {
			return err
		}
		archive, err := pack(map[string][]byte{bin: exe, "LICENSE": license}, []string{bin, "LICENSE"})
		if err != nil {
			return err
		}
		name := fmt.Sprintf("kubectl-thinlvm_%s_%s.tar.gz", goos, goarch)
		if err := os.WriteFile(filepath.Join(out, name), archive, 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256(archive)
		m.Spec.Platforms = append(m.Spec.Platforms, platform{
			URI:      fmt.Sprintf("%s/%s/%s", strings.TrimSuffix(url, "/"), version, name),
			SHA256:   hex.EncodeToString(sum[:]),
			Selector: selector{MatchLabels: map[string]string{"os": goos, "arch": goarch}},
			Files:    []file{{From: bin, To: "."}, {From: "LICENSE", To: "."}},
			Bin:      bin,
		})
		fmt.Printf("%s %s\n", hex.EncodeToString(sum[:]), name)
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "thinlvm.yaml"), b, 0o644)
}

// The krew manifest's fields (sigs.k8s.io/krew's pkg/index, v1alpha2),
// written out so that this module does not depend on krew's.
type manifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec spec `json:"spec"`
}

type spec struct {
	Version          string     `json:"version"`
	Homepage         string     `json:"homepage"`
	ShortDescription string     `json:"shortDescription"`
	Description      string     `json:"description"`
	Platforms        []platform `json:"platforms"`
}

type platform struct {
	URI      string   `json:"uri"`
	SHA256   string   `json:"sha256"`
	Selector selector `json:"selector"`
	Files    []file   `json:"files"`
	Bin      string   `json:"bin"`
}

type selector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type file struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// moduleRoot is the main module's directory.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// build compiles the plugin for a platform, without cgo, paths or build
// IDs that differ between machines, and returns the executable.
func build(root, goos, goarch string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "kubectl-thinlvm")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	exe := filepath.Join(dir, "kubectl-thinlvm")
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", exe, "./cmd/kubectl-thinlvm")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building for %s/%s: %w\n%s", goos, goarch, err, out)
	}
	return os.ReadFile(exe)
}

// pack makes a gzipped tar of the files, in order, with nothing of the
// machine or the time in it: fixed owner, mode and modification time.
func pack(files map[string][]byte, order []string) ([]byte, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	epoch := time.Unix(0, 0).UTC()
	for _, name := range order {
		mode := int64(0o644)
		if strings.HasPrefix(name, "kubectl-thinlvm") {
			mode = 0o755
		}
		hdr := &tar.Header{Name: name, Mode: mode, Size: int64(len(files[name])), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[name]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

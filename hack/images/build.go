package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// defaultTag is the chart's appVersion (deploy/chart/Chart.yaml): the tag
// deploy/, rendered from the chart, installs.
const defaultTag = "v0.1.0"

// nonRoot is the user of the images whose component needs no privilege
// (distroless's "nonroot").
const nonRoot = "65532:65532"

// spec is one image.
type spec struct {
	// name is the image's and its binary's name (cmd/<name>).
	name string
	// packages names the list of Debian packages it carries
	// (<packages>.packages), "" for none; roots are what the list is
	// resolved from (-pin), with their dependencies.
	packages string
	roots    []string
	// user runs the entrypoint; "" for root.
	user string
	// minor is the Kubernetes minor of a build made per minor (the
	// scheduler's), "" for the others: its tag is <tag>-k8s<minor>.
	minor string
	// module is the directory of the go.mod the binary is built in ("" for
	// the product's), pkg the package built there (./cmd/<name> when
	// empty), buildTags its build tags.
	module, pkg, buildTags string
}

// ref is the image's name and tag in the layout, for the build tag.
func (s spec) ref(tag string) string { return s.name + ":" + s.tag(tag) }

// releaseName names the image in a release file (make release): its
// name, a scheduler's with its minor (thinlvm-scheduler-k8s1.37).
func (s spec) releaseName() string {
	if s.minor == "" {
		return s.name
	}
	return s.name + "-k8s" + s.minor
}

// tag is the image's tag for the build tag: the scheduler's carry the
// Kubernetes minor they are built for.
func (s spec) tag(tag string) string {
	if s.minor == "" {
		return tag
	}
	return tag + "-k8s" + s.minor
}

// specs are thinlvm's images. lvmd runs lvm2 and the node agent mkfs,
// mount, xfs_growfs and qemu-img, as root: they need the host's devices.
// The scheduler is kube-scheduler with ThinLVM, built once per supported
// Kubernetes minor (docs/scheduler.md): the newest from the product's
// module, the others from scheduler/k8s<minor>, 1.34 as scheduler-plugins'
// scheduler.
var specs = []spec{
	{name: "thinlvm-controller", user: nonRoot},
	{name: "thinlvm-scheduler", user: nonRoot, minor: "1.37"},
	{name: "thinlvm-scheduler", user: nonRoot, minor: "1.36", module: "scheduler/k8s1.36", pkg: "github.com/thinlvm/thinlvm/cmd/thinlvm-scheduler", buildTags: "k8s1.36"},
	{name: "thinlvm-scheduler", user: nonRoot, minor: "1.35", module: "scheduler/k8s1.35", pkg: "github.com/thinlvm/thinlvm/cmd/thinlvm-scheduler", buildTags: "k8s1.35"},
	{name: "thinlvm-scheduler", user: nonRoot, minor: "1.34", module: "scheduler/k8s1.34", pkg: ".", buildTags: "k8s1.34"},
	{name: "thinlvm-lvmd", packages: "lvmd", roots: []string{"lvm2", "thin-provisioning-tools"}},
	{name: "thinlvm-node", packages: "node", roots: []string{"e2fsprogs", "xfsprogs", "util-linux", "mount", "qemu-utils", "ca-certificates"}},
}

// arches are the architectures the images can be built for (Debian's and
// Go's names agree on both), in the order an image's index lists them.
var arches = []string{"amd64", "arm64"}

// built is one image: an index of one image per arch.
type built struct {
	spec spec
	tag  string
	// index lists images by platform (linux/<arch>), in the order of
	// arches.
	index  v1.ImageIndex
	images map[string]v1.Image
}

// buildAll builds each of specs' images for each of archs (a subset of
// arches, in their order): the binaries, then their layers, then the
// index.
func buildAll(ctx context.Context, specs []spec, packagesDir, debDir, tag string, archs []string) ([]built, error) {
	tmp, err := os.MkdirTemp("", "thinlvm-images")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var out []built
	for _, s := range specs {
		var pkgs []pkg
		if s.packages != "" {
			if pkgs, err = readPackages(filepath.Join(packagesDir, s.packages+".packages")); err != nil {
				return nil, err
			}
		}
		b := built{spec: s, tag: tag, images: map[string]v1.Image{}}
		var adds []mutate.IndexAddendum
		for _, arch := range archs {
			bin := filepath.Join(tmp, arch, s.tag(tag), s.name)
			if err := goBuild(ctx, s, bin, arch, tag); err != nil {
				return nil, err
			}
			var debs []string
			if len(pkgs) > 0 {
				if debs, err = download(ctx, debDir, pkgs, arch); err != nil {
					return nil, fmt.Errorf("image %s: %w", s.name, err)
				}
			}
			img, err := image(s, arch, bin, debs, tag)
			if err != nil {
				return nil, fmt.Errorf("image %s (%s): %w", s.name, arch, err)
			}
			b.images[arch] = img
			adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
				Platform: &v1.Platform{OS: "linux", Architecture: arch},
			}})
		}
		b.index = mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
		out = append(out, b)
	}
	return out, nil
}

// goBuild builds s's static linux binary for arch; -trimpath and the
// module's own version stamps keep it the same from build to build. The
// flags are those of the per-minor unit tests and e2e/cluster/build.sh, so
// that a minor's k8s.io packages compile once for all three; the
// programs' main.version is the build's tag (the CSI plugin's
// vendor_version, the start-up log line), set at link time only.
func goBuild(ctx context.Context, s spec, out, arch, tag string) error {
	pkg := s.pkg
	if pkg == "" {
		pkg = "./cmd/" + s.name
	}
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", s.buildTags, "-ldflags", "-X main.version="+tag, "-o", out, pkg)
	cmd.Dir = s.module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s (%s): %w", pkg, s.ref("<tag>"), arch, err)
	}
	return nil
}

// image assembles one image of arch: the packages' files (one layer),
// then the binary at /usr/local/bin/<name> (one layer), run as the
// entrypoint.
func image(s spec, arch, bin string, debs []string, tag string) (v1.Image, error) {
	var layers []v1.Layer
	if len(debs) > 0 {
		var files []file
		for _, d := range debs {
			f, err := debFiles(d)
			if err != nil {
				return nil, err
			}
			files = append(files, f...)
		}
		l, err := layer(files)
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	l, err := layer([]file{
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "usr/local/bin/", Mode: 0o755}},
		{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "usr/local/bin/" + s.name, Mode: 0o755}, data: exe},
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}},
	})
	if err != nil {
		return nil, err
	}
	layers = append(layers, l)
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layers...)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = arch, "linux"
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint = []string{"/usr/local/bin/" + s.name}
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cf.Config.User = s.user
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    s.name,
		"org.opencontainers.image.version":  s.tag(tag),
		"org.opencontainers.image.source":   "https://github.com/thinlvm/thinlvm",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	return mutate.ConfigFile(img, cf)
}

// file is one entry of a layer.
type file struct {
	hdr  tar.Header
	data []byte
}

// layer makes a reproducible layer of files: sorted by name, the last of
// a name winning (as a later package's file overwrites an earlier one's),
// owned by root, every time the epoch.
func layer(files []file) (v1.Layer, error) {
	byName := map[string]file{}
	for _, f := range files {
		f.hdr.Name = path.Clean(f.hdr.Name)
		if f.hdr.Typeflag == tar.TypeDir {
			f.hdr.Name += "/"
		}
		if prev, ok := byName[f.hdr.Name]; ok && prev.hdr.Typeflag == tar.TypeDir && f.hdr.Typeflag == tar.TypeDir {
			continue // the first package's directory mode stands
		}
		byName[f.hdr.Name] = f
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		f := byName[n]
		h := f.hdr
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		h.ModTime, h.AccessTime, h.ChangeTime = time.Unix(0, 0), time.Time{}, time.Time{}
		h.Format = tar.FormatPAX
		h.PAXRecords = nil
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(&h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", n, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

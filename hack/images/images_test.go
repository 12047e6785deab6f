package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"debug/elf"
	"errors"
	"flag"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"

	"github.com/thinlvm/thinlvm/internal/imageroot"
)

// These tests build the images from this checkout, for this machine's
// arch unless -images.arches names more: run them from the module root's
// `make test-images` (this arch) or `make release` (every arch), after
// the images' build filled the .deb cache (they download nothing
// themselves when it is full). Without apt or the mirror they fail: what
// they check is the build.

// archFlag is the architectures the tests build for. A cross-compile of
// every program is most of a cold build's time, so everyday tests build
// this machine's only; the release builds and checks them all.
var archFlag = flag.String("images.arches", runtime.GOARCH, "comma-separated architectures the tests build the images for, some of "+strings.Join(arches, ","))

// testArches is -images.arches, checked.
func testArches(t *testing.T) []string {
	t.Helper()
	as, err := parseArches(*archFlag)
	if err != nil {
		t.Fatalf("-images.arches: %v", err)
	}
	return as
}

var (
	once     sync.Once
	images   []built
	buildErr error
)

func buildOnce(t *testing.T) []built {
	t.Helper()
	once.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			buildErr = err
			return
		}
		if err := os.Chdir(root); err != nil { // go build ./cmd/...
			buildErr = err
			return
		}
		images, buildErr = buildAll(context.Background(), specs, "hack/images", debCache(t), defaultTag, testArches(t))
	})
	if buildErr != nil {
		t.Fatalf("build the images: %v", buildErr)
	}
	return images
}

func debCache(t *testing.T) string {
	dir, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "thinlvm", "debs")
}

func digests(t *testing.T, bs []built) map[string]v1.Hash {
	t.Helper()
	out := map[string]v1.Hash{}
	for _, b := range bs {
		d, err := b.index.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out[b.spec.ref(b.tag)] = d
	}
	return out
}

// layoutFlag names the layout another process built from this checkout
// for the same arches (make's host-images, which the VM suites run):
// TestReproducible compares this process's build with it rather than
// building a second time.
var layoutFlag = flag.String("images.layout", "", "an OCI layout `go run ./hack/images` built from this checkout for the same arches: TestReproducible compares with it instead of building twice")

// Two builds from the same tree give the same digests, those of the
// indexes and so of every arch's image.
func TestReproducible(t *testing.T) {
	first := digests(t, buildOnce(t))
	var second map[string]v1.Hash
	if *layoutFlag != "" {
		second = layoutDigests(t, *layoutFlag)
	} else {
		again, err := buildAll(context.Background(), specs, "hack/images", debCache(t), defaultTag, testArches(t))
		if err != nil {
			t.Fatal(err)
		}
		second = digests(t, again)
	}
	if len(first) != len(specs) {
		t.Fatalf("%d images, want %d", len(first), len(specs))
	}
	for n, d := range first {
		if second[n] != d {
			t.Errorf("%s: digest %s, then %s", n, d, second[n])
		}
	}
}

// layoutDigests is the digest of each image index an OCI layout names,
// by its name and tag.
func layoutDigests(t *testing.T, dir string) map[string]v1.Hash {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("-images.layout: %v", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatalf("-images.layout: %v", err)
	}
	out := map[string]v1.Hash{}
	for _, d := range m.Manifests {
		out[d.Annotations["org.opencontainers.image.ref.name"]] = d.Digest
	}
	return out
}

// The images push to a registry (go-containerregistry's, in this process,
// on loopback) and pull back the same; the layout names them with the tag
// deploy/ installs (the chart's appVersion).
func TestPushAndLayout(t *testing.T) {
	bs := buildOnce(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	prefix := strings.TrimPrefix(srv.URL, "http://") + "/thinlvm"
	var wantPlatforms []string
	for _, a := range testArches(t) {
		wantPlatforms = append(wantPlatforms, "linux/"+a)
	}
	for _, b := range bs {
		ref := prefix + "/" + b.spec.ref(defaultTag)
		if err := push(context.Background(), ref, b.index, true); err != nil {
			t.Fatal(err)
		}
		r, err := name.ParseReference(ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		got, err := remote.Index(r)
		if err != nil {
			t.Fatalf("pull %s: %v", ref, err)
		}
		want, _ := b.index.Digest()
		if d, _ := got.Digest(); d != want {
			t.Errorf("%s: pulled %s, pushed %s", ref, d, want)
		}
		m, err := got.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var platforms []string
		for _, d := range m.Manifests {
			if d.Platform == nil {
				t.Errorf("%s: manifest %s has no platform", ref, d.Digest)
				continue
			}
			platforms = append(platforms, d.Platform.String())
			img, err := got.Image(d.Digest)
			if err != nil {
				t.Fatalf("pull %s@%s: %v", ref, d.Digest, err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatalf("pull %s@%s: %v", ref, d.Digest, err)
			}
			if p := cf.Platform(); p == nil || p.String() != d.Platform.String() {
				t.Errorf("%s: the index lists %s for an image whose config says %v", ref, d.Platform, p)
			}
		}
		if !slices.Equal(platforms, wantPlatforms) {
			t.Errorf("%s: platforms %v, want %v", ref, platforms, wantPlatforms)
		}
	}
	testRelease(t, bs, prefix)
	// deploy/ (rendered from the chart's defaults) installs the newest
	// minor's scheduler, deploy/k8s<minor> each older one's.
	installed := map[string]bool{}
	for _, f := range []string{"deploy/controller/deployment.yaml", "deploy/scheduler/deployment.yaml", "deploy/node/daemonset.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`image: ghcr\.io/thinlvm/(\S+)`).FindAllStringSubmatch(string(data), -1) {
			installed[m[1]] = true
		}
	}
	for _, s := range specs {
		if s.minor != "" && s.module != "" {
			overlay, err := os.ReadFile("deploy/k8s" + s.minor + "/kustomization.yaml")
			if err != nil {
				t.Errorf("no install for the %s build: %v", s.ref(defaultTag), err)
				continue
			}
			var o struct {
				Images []struct{ Name, NewTag string }
			}
			if err := yaml.Unmarshal(overlay, &o); err != nil {
				t.Fatal(err)
			}
			if len(o.Images) != 1 || !strings.HasSuffix(o.Images[0].Name, "/"+s.name) || o.Images[0].NewTag != s.tag(defaultTag) {
				t.Errorf("deploy/k8s%s installs %+v, the build makes %s", s.minor, o.Images, s.ref(defaultTag))
			}
			continue
		}
		if !installed[s.ref(defaultTag)] {
			t.Errorf("deploy/ does not install %s (it installs %v)", s.ref(defaultTag), installed)
		}
		delete(installed, s.ref(defaultTag))
	}
	for ref := range installed {
		t.Errorf("deploy/ installs ghcr.io/thinlvm/%s, which the build does not make", ref)
	}
	dir := t.TempDir()
	if err := writeLayout(dir, bs); err != nil {
		t.Fatal(err)
	}
	idx, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if !strings.Contains(string(idx), `"`+s.ref(defaultTag)+`"`) {
			t.Errorf("the layout's index does not name %s", s.ref(defaultTag))
		}
	}
	// The harness runs what imageroot finds in the layout: this machine's
	// image of each index.
	for _, b := range bs {
		img, err := imageroot.Find(dir, b.spec.ref(defaultTag))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := img.Digest()
		if want, _ := b.images[runtime.GOARCH].Digest(); got != want {
			t.Errorf("imageroot finds %s in the layout for %s, want %s, the linux/%s image", got, b.spec.name, want, runtime.GOARCH)
		}
	}
}

// testRelease is make release's last step on the images pushed to the
// registry at prefix: the release file, the chart packaged from it, and
// every image the packaged chart pins pulls from the registry by digest.
func testRelease(t *testing.T, bs []built, prefix string) {
	const tag = "v0.1.0"
	data, err := releaseFile(bs, prefix, tag)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "release.json")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "-trimpath", "./package", "-release", file, "-out", dir)
	cmd.Dir = "deploy/chart"
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // the chart module's build flags (Makefile)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("package the chart: %v\n%s", err, out)
	}
	tgz := strings.TrimSpace(string(out))
	if filepath.Base(tgz) != "thinlvm-0.1.0.tgz" {
		t.Errorf("packaged %s, want thinlvm-0.1.0.tgz", tgz)
	}
	files := untarGz(t, tgz)
	var meta struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(files["thinlvm/Chart.yaml"], &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Version != "0.1.0" || meta.AppVersion != tag {
		t.Errorf("Chart.yaml: version %q, appVersion %q", meta.Version, meta.AppVersion)
	}
	for f := range files {
		if strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "go.mod") {
			t.Errorf("the packaged chart holds %s", f)
		}
	}
	var values struct {
		Image      struct{ Registry, Tag string }
		Controller struct{ Repository, Digest string }
		Node       struct {
			Repository, Digest string
			Lvmd               struct{ Repository, Digest string }
		}
		Scheduler struct {
			Repository string
			Digests    map[string]string
		}
	}
	if err := yaml.Unmarshal(files["thinlvm/values.yaml"], &values); err != nil {
		t.Fatal(err)
	}
	if values.Image.Registry != prefix || values.Image.Tag != tag {
		t.Errorf("values.yaml: image %+v, want registry %s, tag %s", values.Image, prefix, tag)
	}
	if !strings.Contains(string(files["thinlvm/values.yaml"]), "# thinlvm's values.") {
		t.Errorf("values.yaml lost its comments:\n%.300s", files["thinlvm/values.yaml"])
	}
	pinned := map[string]string{
		values.Controller.Repository: values.Controller.Digest,
		values.Node.Repository:       values.Node.Digest,
		values.Node.Lvmd.Repository:  values.Node.Lvmd.Digest,
	}
	for minor, d := range values.Scheduler.Digests {
		pinned[values.Scheduler.Repository+"-k8s"+minor] = d
	}
	want := map[string]string{}
	for _, b := range bs {
		d, _ := b.index.Digest()
		want[b.spec.releaseName()] = d.String()
	}
	if len(pinned) != len(want) {
		t.Errorf("the chart pins %v, the build made %v", pinned, want)
	}
	for img, d := range pinned {
		if d != want[img] {
			t.Errorf("the chart pins %s at %q, the build made %s", img, d, want[img])
			continue
		}
		repo := img
		if strings.HasPrefix(img, "thinlvm-scheduler-k8s") {
			repo = "thinlvm-scheduler"
		}
		r, err := name.ParseReference(prefix+"/"+repo+"@"+d, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := remote.Index(r); err != nil {
			t.Errorf("pull %s as the chart names it: %v", r, err)
		}
	}
}

// untarGz reads a .tgz's regular files.
func untarGz(t *testing.T, file string) map[string][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if out[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// What each image's container runs starts from the image's own files: the
// binaries find their shared libraries (run in a chroot of the unpacked
// image of this machine's arch, as a container runtime would), the
// entrypoint is the component.
func TestImagesRun(t *testing.T) {
	bs := buildOnce(t)
	checks := map[string][][]string{
		"thinlvm-controller": {{"/usr/local/bin/thinlvm-controller", "--help"}, {"/usr/local/bin/thinlvm-controller", "--version"}},
		"thinlvm-scheduler":  {{"/usr/local/bin/thinlvm-scheduler", "--help"}},
		"thinlvm-lvmd": {{"/usr/local/bin/thinlvm-lvmd", "--help"}, {"/sbin/lvm", "version"}, {"/usr/sbin/thin_check", "-V"},
			{"/sbin/dmsetup", "--version"},
			// lvmd's --dmsetup-path and --thin-delta-path defaults, found in
			// the image's PATH.
			{"dmsetup", "--version"}, {"thin_delta", "-V"}},
		"thinlvm-node": {{"/usr/local/bin/thinlvm-node", "--help"}, {"/usr/local/bin/thinlvm-node", "--version"}, {"/sbin/mkfs.ext4", "-V"}, {"/sbin/resize2fs", "-h"},
			{"/sbin/mkfs.xfs", "-V"}, {"/usr/sbin/xfs_growfs", "-V"}, {"/usr/bin/qemu-img", "--version"},
			{"/bin/mount", "--version"}, {"/usr/bin/prlimit", "--version"}, {"/sbin/blkid", "-V"}},
	}
	for _, b := range bs {
		t.Run(b.spec.ref(b.tag), func(t *testing.T) {
			img := b.images[runtime.GOARCH]
			if img == nil {
				t.Fatalf("no linux/%s image", runtime.GOARCH)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if ep := cf.Config.Entrypoint; len(ep) != 1 || ep[0] != "/usr/local/bin/"+b.spec.name {
				t.Errorf("entrypoint %v", ep)
			}
			if cf.Config.User != b.spec.user {
				t.Errorf("user %q, want %q", cf.Config.User, b.spec.user)
			}
			root := unpack(t, img)
			for _, argv := range checks[b.spec.name] {
				cmd := exec.Command("chroot", append([]string{root}, argv...)...)
				cmd.Env = cf.Config.Env
				out, err := cmd.CombinedOutput()
				var exit *exec.ExitError
				// Go's flag packages exit 0 or 2 on --help, resize2fs -h
				// exits 1: what fails here is a program that did not start.
				if err != nil && (!errors.As(err, &exit) || len(out) == 0 || strings.Contains(string(out), "error while loading shared libraries")) {
					t.Errorf("%v in the image: %v\n%s", argv, err, out)
				}
				// thinlvm's programs report the tag they were built for.
				if argv[len(argv)-1] == "--version" && strings.HasPrefix(argv[0], "/usr/local/bin/thinlvm-") && (err != nil || strings.TrimSpace(string(out)) != b.tag) {
					t.Errorf("%v in the image: %q (%v), want %s", argv, out, err, b.tag)
				}
			}
		})
	}
}

// Each arch's image holds that arch's programs: the entrypoint and the
// Debian programs the component runs first (lvm, mkfs.xfs). They are
// checked by their ELF header, since this machine runs only its own.
func TestImagesArch(t *testing.T) {
	bs := buildOnce(t)
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	debian := map[string][]string{"thinlvm-lvmd": {"/sbin/lvm"}, "thinlvm-node": {"/sbin/mkfs.xfs"}}
	for _, b := range bs {
		for _, arch := range testArches(t) {
			t.Run(b.spec.ref(b.tag)+"/"+arch, func(t *testing.T) {
				img := b.images[arch]
				if img == nil {
					t.Fatalf("no linux/%s image", arch)
				}
				cf, err := img.ConfigFile()
				if err != nil {
					t.Fatal(err)
				}
				if cf.OS != "linux" || cf.Architecture != arch {
					t.Errorf("config says %s/%s", cf.OS, cf.Architecture)
				}
				root := unpack(t, img)
				for _, p := range append([]string{"/usr/local/bin/" + b.spec.name}, debian[b.spec.name]...) {
					file, err := imageroot.InRoot(root, p)
					if err != nil {
						t.Fatal(err)
					}
					f, err := elf.Open(file)
					if err != nil {
						t.Errorf("%s: %v", p, err)
						continue
					}
					if f.Machine != machines[arch] {
						t.Errorf("%s: a program for %v in the %s image", p, f.Machine, arch)
					}
					f.Close()
				}
			})
		}
	}
}

// unpack writes img's file system to a fresh directory.
func unpack(t *testing.T, img v1.Image) string {
	t.Helper()
	root := t.TempDir()
	flat := imageroot.Flatten(img)
	defer flat.Close()
	if err := imageroot.Unpack(flat, root); err != nil {
		t.Fatal(err)
	}
	return root
}

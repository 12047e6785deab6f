package imageroot

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

// A link in the image never sends a file outside the root: /var/run ->
// /run resolves to root/run, ../../ stops at the root.
func TestUnpackStaysInRoot(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, data string) {
		h.Size = int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	add(&tar.Header{Name: "var/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "var/run", Typeflag: tar.TypeSymlink, Linkname: "/run"}, "")
	add(&tar.Header{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "../../.."}, "")
	add(&tar.Header{Name: "var/run/lvm/x", Typeflag: tar.TypeReg, Mode: 0o4755}, "abs")
	add(&tar.Header{Name: "up/escaped", Typeflag: tar.TypeReg, Mode: 0o644}, "rel")
	add(&tar.Header{Name: "hard", Typeflag: tar.TypeLink, Linkname: "var/run/lvm/x"}, "")
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	if err := Unpack(&buf, root); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"run/lvm/x": "abs", "escaped": "rel", "hard": "abs"} {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", path, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(parent, "escaped")); !os.IsNotExist(err) {
		t.Errorf("a file was written outside the root: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(root, "run/lvm/x")); err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Errorf("setuid bit lost: %v %v", fi.Mode(), err)
	}
}

// Find gives a layout's plain image as it is and, from an image index,
// the image of this machine's arch; an index without one is an error that
// names the arches it has.
func TestFind(t *testing.T) {
	img := func() v1.Image {
		i, err := random.Image(64, 1)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	platform := func(arch string) *v1.Platform { return &v1.Platform{OS: "linux", Architecture: arch} }
	named := func(ref string) map[string]string { return map[string]string{refAnnotation: ref} }
	plain, native, other := img(), img(), img()
	multi := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: platform("s390x")}},
		mutate.IndexAddendum{Add: native, Descriptor: v1.Descriptor{Platform: platform(runtime.GOARCH)}})
	foreign := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: platform("s390x")}})
	top := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: plain, Descriptor: v1.Descriptor{Annotations: named("plain:v1")}},
		mutate.IndexAddendum{Add: multi, Descriptor: v1.Descriptor{Annotations: named("multi:v1")}},
		mutate.IndexAddendum{Add: foreign, Descriptor: v1.Descriptor{Annotations: named("foreign:v1")}})
	dir := t.TempDir()
	if _, err := layout.Write(dir, top); err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]v1.Image{"plain:v1": plain, "plain": plain, "multi:v1": native, "multi": native} {
		got, err := Find(dir, ref)
		if err != nil {
			t.Errorf("Find %s: %v", ref, err)
			continue
		}
		gd, _ := got.Digest()
		wd, _ := want.Digest()
		if gd != wd {
			t.Errorf("Find %s: image %s, want %s", ref, gd, wd)
		}
	}
	if _, err := Find(dir, "foreign:v1"); err == nil || !strings.Contains(err.Error(), "linux/s390x") {
		t.Errorf("Find of an index without linux/%s: %v, want an error naming linux/s390x", runtime.GOARCH, err)
	}
}

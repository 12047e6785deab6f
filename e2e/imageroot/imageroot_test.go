package imageroot

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"
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

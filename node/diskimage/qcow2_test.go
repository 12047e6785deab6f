package diskimage

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

func qemuImg(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Fatalf("qemu-img is required (Debian package qemu-utils): %v", err)
	}
	return p
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// marker writes 64 KiB of random bytes to path, which stands for a host
// file or device: they must never reach a base.
func marker(t *testing.T, path string) []byte {
	t.Helper()
	b := make([]byte, 64<<10)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPopulateQCOW2RefusesOtherFiles serves qcow2 images that name a file
// or device of the host as their backing or data file: each is refused
// before conversion, and none of the host's bytes reaches the base.
func TestPopulateQCOW2RefusesOtherFiles(t *testing.T) {
	qemu := qemuImg(t)
	tests := []struct {
		name string
		// make writes the image at img, naming files under host, and
		// returns the bytes those hold.
		make func(t *testing.T, img, host string) []byte
		msg  string
	}{{
		name: "backing file on a host file",
		make: func(t *testing.T, img, host string) []byte {
			m := marker(t, filepath.Join(host, "etc", "secret"))
			run(t, qemu, "create", "-q", "-f", "qcow2", "-b", filepath.Join(host, "etc", "secret"), "-F", "raw", img, "1M")
			return m
		},
		msg: "image refused: qcow2 has a backing file",
	}, {
		// A file stands for the device, as device() stands for an LV.
		name: "backing file on a host device",
		make: func(t *testing.T, img, host string) []byte {
			m := marker(t, filepath.Join(host, "dev", "sda"))
			run(t, qemu, "create", "-q", "-f", "qcow2", "-b", filepath.Join(host, "dev", "sda"), "-F", "raw", img, "1M")
			return m
		},
		msg: "image refused: qcow2 has a backing file",
	}, {
		// Resolved against the scratch directory, where the image lands.
		name: "relative backing file",
		make: func(t *testing.T, img, host string) []byte {
			m := marker(t, filepath.Join(host, "scratch", "..", "etc", "shadow"))
			run(t, qemu, "create", "-q", "-f", "qcow2", "-u", "-b", "../etc/shadow", "-F", "raw", img, "1M")
			return m
		},
		msg: "image refused: qcow2 has a backing file",
	}, {
		name: "backing file in json syntax",
		make: func(t *testing.T, img, host string) []byte {
			m := marker(t, filepath.Join(host, "etc", "secret"))
			run(t, qemu, "create", "-q", "-f", "qcow2", "-u", "-b",
				`json:{"driver":"raw","file":{"driver":"file","filename":"`+filepath.Join(host, "etc", "secret")+`"}}`, "-F", "raw", img, "1M")
			return m
		},
		msg: "image refused: qcow2 has a backing file",
	}, {
		name: "external data file on a host file",
		make: func(t *testing.T, img, host string) []byte {
			data := filepath.Join(host, "etc", "secret")
			if err := os.MkdirAll(filepath.Dir(data), 0o700); err != nil {
				t.Fatal(err)
			}
			// qemu-img create makes the data file anew: the host's bytes
			// go in after.
			run(t, qemu, "create", "-q", "-f", "qcow2", "-o", "data_file="+data+",data_file_raw=on", img, "1M")
			return marker(t, data)
		},
		msg: "image refused: qcow2 has an external data file",
	}, {
		name: "raw image said to be qcow2",
		make: func(t *testing.T, img, host string) []byte {
			return marker(t, img)
		},
		msg: "image refused: qemu-img info cannot read it as qcow2",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := t.TempDir()
			img := filepath.Join(t.TempDir(), "image.qcow2")
			secret := tt.make(t, img, host)
			body, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, body)
			scratch := filepath.Join(host, "scratch")
			if err := os.MkdirAll(scratch, 0o700); err != nil {
				t.Fatal(err)
			}
			dev := device(t, 8<<20)
			w := &Writer{QemuImg: qemu, ScratchDir: scratch, Attempts: 1}
			_, err = w.Populate(t.Context(), spec(srv.URL, sha(body), thinlvmv1.FormatQCOW2), dev, 8<<20, &Progress{})
			if err == nil || !strings.Contains(err.Error(), tt.msg) || !errors.Is(err, ErrPermanent) {
				t.Errorf("error %v, want a permanent one with %q", err, tt.msg)
			}
			got, err := os.ReadFile(dev)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(got, secret) {
				t.Error("the host's bytes reached the base")
			}
			if !bytes.Equal(got, make([]byte, len(got))) {
				t.Error("the base was written")
			}
			if left, _ := filepath.Glob(filepath.Join(scratch, "golden-*")); len(left) != 0 {
				t.Errorf("scratch files left: %v", left)
			}
		})
	}
}

// bomb is n zero bytes compressed by kind: a few KiB that expand to n.
func bomb(t *testing.T, kind string, n int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch kind {
	case "gzip":
		w, _ = gzip.NewWriterLevel(&buf, gzip.BestCompression)
	case "zstd":
		var err error
		if w, err = zstd.NewWriter(&buf); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := io.CopyN(w, zeroReader{}, n); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestPopulateQCOW2ScratchBound serves compression bombs as qcow2 images:
// the scratch copy stops at the bound, checksum or not.
func TestPopulateQCOW2ScratchBound(t *testing.T) {
	const base, slack = 1 << 20, 1 << 20
	bound := scratchBound(base, slack)
	for _, kind := range []string{"gzip", "zstd"} {
		t.Run(kind, func(t *testing.T) {
			body := bomb(t, kind, 32<<20)
			srv := serve(t, body)
			scratch := t.TempDir()
			w := &Writer{QemuImg: qemuImg(t), ScratchDir: scratch, Attempts: 1, scratchSlack: slack}
			_, err := w.Populate(t.Context(), spec(srv.URL, sha(body), thinlvmv1.FormatQCOW2), device(t, base), base, &Progress{})
			msg := "image refused: the qcow2 file expands past 2228224 bytes"
			if bound != 2228224 || err == nil || !strings.Contains(err.Error(), msg) || !errors.Is(err, ErrPermanent) {
				t.Errorf("error %v, want a permanent one with %q (bound %d)", err, msg, bound)
			}
			if left, _ := filepath.Glob(filepath.Join(scratch, "golden-*")); len(left) != 0 {
				t.Errorf("scratch files left: %v", left)
			}
		})
	}
}

// TestBoundedWriter: the scratch file never grows past the bound.
func TestBoundedWriter(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "scratch"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := &boundedWriter{w: f, left: 1 << 20}
	_, err = io.Copy(w, io.LimitReader(zeroReader{}, 3<<20))
	st, _ := f.Stat()
	if err == nil || !w.full || st.Size() > 1<<20 {
		t.Errorf("error %v, full %t, %d bytes written; want to stop at %d", err, w.full, st.Size(), 1<<20)
	}
}

// TestScratchBoundFitsQCOW2: qcow2 files that qemu-img makes, with the
// most metadata per byte of data and with the largest clusters, fit the
// bound of their virtual size.
func TestScratchBoundFitsQCOW2(t *testing.T) {
	qemu := qemuImg(t)
	dir := t.TempDir()
	rawPath := filepath.Join(dir, "img.raw")
	data := make([]byte, 4<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rawPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		args  []string
		slack int64
	}{
		{name: "all allocated, 512-byte clusters, 64-bit refcounts", slack: 0,
			args: []string{"convert", "-q", "-f", "raw", "-O", "qcow2", "-o", "cluster_size=512,refcount_bits=64", rawPath}},
		{name: "preallocated, 2 MiB clusters", slack: qcow2ScratchSlack,
			args: []string{"create", "-q", "-f", "qcow2", "-o", "cluster_size=2M,preallocation=full"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".qcow2")
			args := append(tt.args, img)
			if tt.args[0] == "create" {
				args = append(args, "4M")
			}
			run(t, qemu, args...)
			st, err := os.Stat(img)
			if err != nil {
				t.Fatal(err)
			}
			if b := scratchBound(4<<20, tt.slack); st.Size() > b {
				t.Errorf("%d bytes, more than the bound %d", st.Size(), b)
			}
		})
	}
}

// TestConvertOpensNoBackingFile runs the conversion alone, without the
// info check in front of it, on an image with a backing file, from a
// directory whose name has a comma (qemu's option separator).
func TestConvertOpensNoBackingFile(t *testing.T) {
	qemu := qemuImg(t)
	dir := filepath.Join(t.TempDir(), "a,driver=raw")
	secret := marker(t, filepath.Join(dir, "secret"))
	img := filepath.Join(dir, "image.qcow2")
	run(t, qemu, "create", "-q", "-f", "qcow2", "-b", filepath.Join(dir, "secret"), "-F", "raw", img, "1M")
	dev := device(t, 1<<20)
	run(t, qemu, convertArgs(img, dev)...)
	got, err := os.ReadFile(dev)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(got, secret) || !bytes.Equal(got, make([]byte, len(got))) {
		t.Error("the conversion read the backing file")
	}
}

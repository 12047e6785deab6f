package diskimage

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
	"k8s.io/apimachinery/pkg/api/resource"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// testImage is 3 MiB: data, a 2 MiB hole of zeros, data.
func testImage() []byte {
	img := make([]byte, 3<<20)
	for i := range 1 << 20 {
		img[i] = byte(i*7 + 1)
	}
	copy(img[len(img)-4096:], bytes.Repeat([]byte("tail"), 1024))
	return img
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func compress(t *testing.T, kind string, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	var err error
	switch kind {
	case "":
		return raw
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "xz":
		w, err = xz.NewWriter(&buf)
	case "zstd":
		w, err = zstd.NewWriter(&buf)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// device is an empty file standing for a new thin LV of size bytes.
func device(t *testing.T, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dev")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkDevice fails unless dev holds raw followed by zeros.
func checkDevice(t *testing.T, dev string, raw []byte) {
	t.Helper()
	got, err := os.ReadFile(dev)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < len(raw) || !bytes.Equal(got[:len(raw)], raw) || !bytes.Equal(got[len(raw):], make([]byte, len(got)-len(raw))) {
		t.Error("the device does not hold the image followed by zeros")
	}
}

func serve(t *testing.T, body []byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "image", time.Unix(1e9, 0), bytes.NewReader(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func spec(url, sum string, format thinlvmv1.ImageFormat) *thinlvmv1.GoldenImageSpec {
	return &thinlvmv1.GoldenImageSpec{Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: url, SHA256: sum}},
		Format: format, Size: resource.MustParse("8Mi")}
}

func TestPopulateRaw(t *testing.T) {
	raw := testImage()
	for _, kind := range []string{"", "gzip", "xz", "zstd"} {
		t.Run("compression "+kind, func(t *testing.T) {
			body := compress(t, kind, raw)
			srv := serve(t, body)
			dev := device(t, 8<<20)
			var prog Progress
			n, err := (&Writer{}).Populate(t.Context(), spec(srv.URL, sha(body), thinlvmv1.FormatRaw), dev, 8<<20, &prog)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(len(raw)) {
				t.Errorf("populated %d bytes, want %d", n, len(raw))
			}
			got, err := os.ReadFile(dev)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:len(raw)], raw) || !bytes.Equal(got[len(raw):], make([]byte, len(got)-len(raw))) {
				t.Error("the device does not hold the image followed by zeros")
			}
			if prog.Done.Load() != int64(len(body)) || prog.Total.Load() != int64(len(body)) {
				t.Errorf("progress %d of %d, want %d of %d", prog.Done.Load(), prog.Total.Load(), len(body), len(body))
			}
		})
	}
}

// zeroCounter is a device that records where it was written.
type zeroCounter struct{ written int64 }

func (z *zeroCounter) WriteAt(p []byte, _ int64) (int, error) {
	z.written += int64(len(p))
	return len(p), nil
}

func TestWriteSparseSkipsZeroBlocks(t *testing.T) {
	raw := testImage()
	var dev zeroCounter
	n, err := writeSparse(&dev, bytes.NewReader(raw), 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	// 1 MiB of data and the 64 KiB block holding the tail: the 2 MiB of
	// zeros between them cost no pool space.
	if n != int64(len(raw)) || dev.written != 1<<20+block {
		t.Errorf("read %d, wrote %d bytes; want %d and %d", n, dev.written, len(raw), 1<<20+block)
	}
}

func TestPopulateRefuses(t *testing.T) {
	raw := testImage()
	srv := serve(t, raw)
	missing := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(missing.Close)
	// Raw images are written straight to the base, never to scratch: a
	// bomb stops where it expands past the base.
	gzipBomb, zstdBomb := bomb(t, "gzip", 32<<20), bomb(t, "zstd", 32<<20)
	gzipSrv, zstdSrv := serve(t, gzipBomb), serve(t, zstdBomb)
	tests := []struct {
		name string
		w    *Writer
		spec *thinlvmv1.GoldenImageSpec
		size int64
		msg  string
	}{
		{name: "checksum mismatch", spec: spec(srv.URL, strings.Repeat("0", 64), thinlvmv1.FormatRaw), size: 8 << 20, msg: "sha256 mismatch"},
		{name: "image larger than the base", spec: spec(srv.URL, sha(raw), thinlvmv1.FormatRaw), size: 2 << 20, msg: "larger than the base"},
		{name: "gzip bomb", spec: spec(gzipSrv.URL, sha(gzipBomb), thinlvmv1.FormatRaw), size: 1 << 20, msg: "larger than the base"},
		{name: "zstd bomb", spec: spec(zstdSrv.URL, sha(zstdBomb), thinlvmv1.FormatRaw), size: 1 << 20, msg: "larger than the base"},
		{name: "not found", spec: spec(missing.URL, sha(raw), thinlvmv1.FormatRaw), size: 8 << 20, msg: "404"},
		{name: "qcow2 without qemu-img", spec: spec(srv.URL, sha(raw), thinlvmv1.FormatQCOW2), size: 8 << 20, msg: "need qemu-img"},
		{name: "qcow2 without prlimit", w: &Writer{QemuImg: "qemu-img", Prlimit: filepath.Join(t.TempDir(), "prlimit")},
			spec: spec(srv.URL, sha(raw), thinlvmv1.FormatQCOW2), size: 8 << 20, msg: "need prlimit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.w
			if w == nil {
				w = &Writer{}
			}
			w.Backoff = time.Millisecond
			_, err := w.Populate(t.Context(), tt.spec, device(t, tt.size), tt.size, &Progress{})
			if err == nil || !strings.Contains(err.Error(), tt.msg) || !errors.Is(err, ErrPermanent) {
				t.Errorf("error %v, want a permanent one with %q", err, tt.msg)
			}
		})
	}
}

// TestPopulateResumes cuts the first response in the middle: the second
// request asks for the rest with Range and If-Range.
func TestPopulateResumes(t *testing.T) {
	raw := testImage()
	var requests atomic.Int32
	var ranges []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			w.Header().Set("Content-Length", strconv.Itoa(len(raw)))
			w.Header().Set("ETag", `"v1"`)
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(raw[:len(raw)/2])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection breaks
		}
		ranges = append(ranges, r.Header.Get("Range")+" "+r.Header.Get("If-Range"))
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "image", time.Unix(1e9, 0), bytes.NewReader(raw))
	}))
	t.Cleanup(srv.Close)
	dev := device(t, 8<<20)
	if _, err := (&Writer{Backoff: time.Millisecond}).Populate(t.Context(), spec(srv.URL, sha(raw), thinlvmv1.FormatRaw), dev, 8<<20, &Progress{}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dev)
	if !bytes.Equal(got[:len(raw)], raw) {
		t.Error("the device does not hold the image")
	}
	if len(ranges) != 1 || !strings.HasPrefix(ranges[0], "bytes=") || !strings.HasSuffix(ranges[0], `"v1"`) {
		t.Errorf("resumed with %q, want one Range request guarded by the ETag", ranges)
	}
}

// TestPopulateGivesUp retries a failing server a bounded number of times.
func TestPopulateGivesUp(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	_, err := (&Writer{Attempts: 3, Backoff: time.Millisecond}).Populate(t.Context(), spec(srv.URL, sha(nil), thinlvmv1.FormatRaw), device(t, 1<<20), 1<<20, &Progress{})
	if err == nil || !strings.Contains(err.Error(), "3 attempts failed") || requests.Load() != 3 {
		t.Errorf("error %v after %d requests, want to give up after 3", err, requests.Load())
	}
}

// TestPopulateQCOW2 converts a qcow2 image (xz-compressed on the wire) with
// the real qemu-img.
func TestPopulateQCOW2(t *testing.T) {
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Fatalf("qemu-img is required (Debian package qemu-utils): %v", err)
	}
	raw := testImage()
	dir := t.TempDir()
	rawPath, qcowPath := filepath.Join(dir, "img.raw"), filepath.Join(dir, "img.qcow2")
	if err := os.WriteFile(rawPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(qemuImg, "convert", "-f", "raw", "-O", "qcow2", rawPath, qcowPath).CombinedOutput(); err != nil {
		t.Fatalf("make the qcow2 image: %v: %s", err, out)
	}
	qcow, err := os.ReadFile(qcowPath)
	if err != nil {
		t.Fatal(err)
	}
	body := compress(t, "xz", qcow)
	srv := serve(t, body)
	w := &Writer{QemuImg: qemuImg, ScratchDir: dir}
	dev := device(t, 8<<20)
	n, err := w.Populate(t.Context(), spec(srv.URL, sha(body), thinlvmv1.FormatQCOW2), dev, 8<<20, &Progress{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dev)
	if n != int64(len(raw)) || !bytes.Equal(got[:len(raw)], raw) {
		t.Errorf("populated %d bytes; the device holds the image: %t", n, bytes.Equal(got[:len(raw)], raw))
	}
	// An image whose virtual size exceeds the base is refused before
	// anything is written.
	_, err = w.Populate(t.Context(), spec(srv.URL, sha(body), thinlvmv1.FormatQCOW2), device(t, 2<<20), 2<<20, &Progress{})
	if err == nil || !strings.Contains(err.Error(), "virtual size") {
		t.Errorf("error %v, want the virtual size refused", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "golden-*")); len(left) != 0 {
		t.Errorf("scratch files left: %v", left)
	}
}

// TestPopulateRawRefusesQCOW2: a qcow2 image declared raw (compressed on
// the wire or not) would be written as it is, and be no disk.
func TestPopulateRawRefusesQCOW2(t *testing.T) {
	img := append([]byte("QFI\xfb\x00\x00\x00\x03"), make([]byte, 64<<10)...)
	for _, kind := range []string{"", "xz"} {
		body := compress(t, kind, img)
		srv := serve(t, body)
		_, err := (&Writer{}).Populate(t.Context(), spec(srv.URL, sha(body), thinlvmv1.FormatRaw), device(t, 1<<20), 1<<20, &Progress{})
		if msg := "set spec.format to qcow2"; err == nil || !strings.Contains(err.Error(), msg) || !errors.Is(err, ErrPermanent) {
			t.Errorf("compression %q: error %v, want a permanent one with %q", kind, err, msg)
		}
	}
}

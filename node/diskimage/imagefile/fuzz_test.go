package imagefile

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// The magics Decompress goes by, as the formats define them (RFC 1952; the
// xz file format, 2.1.1.1; RFC 8878, 3.1.1).
var (
	gzipMagic = []byte{0x1f, 0x8b}
	xzMagic   = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// maxFuzzRead bounds what one run reads of a decompressed stream: a few
// bytes of compression bomb must not hang the fuzzer.
const maxFuzzRead = 1 << 20

// maxHeaderAlloc bounds what opening a compressed image and reading its
// first MiB may allocate: the image is untrusted, and a header must not make
// the node agent take gigabytes (xz -9 needs a 64 MiB dictionary, zstd -19
// an 8 MiB window).
const maxHeaderAlloc = 256 << 20

func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// compressedSeeds are small, whole gzip, xz and zstd streams.
func compressedSeeds(f *testing.F) [][]byte {
	f.Helper()
	payload := []byte("QFI\xfb golden image header\n")
	var gz, x bytes.Buffer
	gw := gzip.NewWriter(&gz)
	xw, err := xz.NewWriter(&x)
	if err != nil {
		f.Fatal(err)
	}
	for _, w := range []io.WriteCloser{gw, xw} {
		if _, err := w.Write(payload); err != nil {
			f.Fatal(err)
		}
		if err := w.Close(); err != nil {
			f.Fatal(err)
		}
	}
	zw, err := zstd.NewWriter(nil)
	if err != nil {
		f.Fatal(err)
	}
	defer zw.Close()
	return [][]byte{gz.Bytes(), x.Bytes(), zw.EncodeAll(payload, nil)}
}

// FuzzImageHeader feeds the same bytes to the two checks an image's first
// bytes meet: Decompress's magic detection (as an image) and ParseInfo with
// Check (as qemu-img info's JSON).
func FuzzImageHeader(f *testing.F) {
	infos, err := filepath.Glob(filepath.Join("testdata", "info-*.json"))
	if err != nil || len(infos) == 0 {
		f.Fatalf("no qemu-img info captures in testdata: %v", err)
	}
	for _, p := range infos {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range compressedSeeds(f) {
		f.Add(s)
		f.Add(s[:len(s)/2])
	}
	for _, s := range [][]byte{nil, gzipMagic, xzMagic, zstdMagic, xzMagic[:5], []byte("QFI\xfb\x00\x00\x00\x03"),
		[]byte(`{"format":"qcow2","format-specific":{"data":{"data-file-raw":false}}}`),
		[]byte(`{"format":"raw","backing-filename":"","full-backing-filename":"/dev/sda"}`)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecompress(t, data)
		fuzzInfoCheck(t, data)
	})
}

func fuzzDecompress(t *testing.T, data []byte) {
	before := totalAlloc()
	r, kind, err := Decompress(bytes.NewReader(data))
	if err != nil {
		// Only a stream that claims to be compressed can fail its header.
		if !bytes.HasPrefix(data, gzipMagic) && !bytes.HasPrefix(data, xzMagic) && !bytes.HasPrefix(data, zstdMagic) {
			t.Errorf("Decompress of %d bytes without a compression magic: %v", len(data), err)
		}
		return
	}
	if c, ok := r.(io.Closer); ok {
		defer c.Close()
	}
	want := ""
	switch {
	case bytes.HasPrefix(data, gzipMagic):
		want = "gzip"
	case bytes.HasPrefix(data, xzMagic):
		want = "xz"
	case bytes.HasPrefix(data, zstdMagic):
		want = "zstd"
	}
	if kind != want {
		t.Fatalf("Decompress took %q for %q, want %q", kind, data[:min(len(data), 8)], want)
	}
	if kind != "" {
		// Any outcome but a panic, a hang or a huge allocation will do:
		// the bound ends bombs.
		_, _ = io.CopyN(io.Discard, r, maxFuzzRead)
		if n := totalAlloc() - before; n > maxHeaderAlloc {
			t.Errorf("%s image of %d bytes: reading its first MiB allocated %d MiB", kind, len(data), n>>20)
		}
		return
	}
	// Not compressed: the reader gives back exactly the bytes, a file
	// shorter than a magic included.
	var got bytes.Buffer
	if _, err := io.CopyN(&got, r, maxFuzzRead); err != nil && err != io.EOF {
		t.Fatalf("read uncompressed image: %v", err)
	}
	if !bytes.Equal(got.Bytes(), data[:min(len(data), maxFuzzRead)]) {
		t.Errorf("Decompress changed an uncompressed image of %d bytes into %d bytes", len(data), got.Len())
	}
}

func fuzzInfoCheck(t *testing.T, data []byte) {
	info, err := ParseInfo(data)
	if err != nil {
		if info != nil {
			t.Errorf("ParseInfo returned info with error %v", err)
		}
		return
	}
	d := info.FormatSpecific.Data
	external := info.BackingFilename != "" || info.FullBackingFilename != "" || d.DataFile != "" || d.DataFileRaw != nil
	for _, format := range []string{"raw", "qcow2"} {
		err := info.Check(format)
		switch {
		case err == nil && info.Format != format:
			t.Errorf("Check(%s) accepted an image qemu-img reads as %q", format, info.Format)
		case err == nil && external:
			t.Errorf("Check(%s) accepted an image that names another file: %+v", format, *info)
		case err != nil && info.Format == format && !external:
			t.Errorf("Check(%s) refused a %s image that names no other file: %v", format, format, err)
		case err != nil && !errors.Is(err, ErrRefused):
			t.Errorf("Check(%s): %v is not a refusal: the image would be fetched again", format, err)
		}
	}
}

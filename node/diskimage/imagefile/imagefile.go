// Package imagefile reads what an image's first bytes and qemu-img's report
// say of it: which compression wraps it (gzip, xz or zstd, each bounded in
// what its header may make the reader allocate), and whether it is the
// format its GoldenImage names and reads no other file. Both read untrusted
// bytes; the package imports no Kubernetes code so that its fuzz target
// builds in seconds.
package imagefile

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/xi2/xz"
)

// ErrRefused marks an image refused for what it is: retrying cannot fix it.
var ErrRefused = errors.New("image refused")

// zstdMaxWindow is the largest zstd window an image may use.
const zstdMaxWindow = 256 << 20

// xzMaxDict is the largest xz (LZMA2) dictionary an image may use: xz -9's,
// the largest of xz's presets (the default, -6, uses 8 MiB). Each block
// header chooses its dictionary, up to 4 GiB, and the decoder allocates it
// whole: without the cap, a 60-byte image would make the agent allocate
// 4 GiB.
const xzMaxDict = 64 << 20

// Decompress returns a reader of r's bytes, decompressed when they start
// with the magic of gzip, xz or zstd, and the compression's name ("" for
// none). A zstd reader must be closed (it is an io.Closer).
func Decompress(r io.Reader) (io.Reader, string, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	magic, err := br.Peek(6)
	if err != nil && err != io.EOF {
		return nil, "", err
	}
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		return zr, "gzip", err
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}):
		// xz.ErrMemlimit refuses a dictionary past xzMaxDict before it is
		// allocated: here when the first block header is already
		// buffered, else in a Read.
		zr, err := xz.NewReader(br, xzMaxDict)
		if err != nil {
			return nil, "", xzError(err)
		}
		return xzReader{zr}, "xz", nil
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		// A window past zstdMaxWindow is refused: the stream chooses it, and
		// the decoder would allocate it (zstd's --long=27 is 128 MiB).
		zr, err := zstd.NewReader(br, zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, "", err
		}
		return zr.IOReadCloser(), "zstd", nil
	}
	return br, "", nil
}

// xzError says what xz.ErrMemlimit means for an image: the operator must
// recompress it. Other errors are returned as they are.
func xzError(err error) error {
	if errors.Is(err, xz.ErrMemlimit) {
		return fmt.Errorf("%w: its xz dictionary is larger than %d MiB, this node agent's cap (xz -9's): recompress it with a smaller one, such as xz -6's 8 MiB: %w", ErrRefused, xzMaxDict>>20, err)
	}
	return err
}

// xzReader makes xz.ErrMemlimit in a Read, from a block header that comes
// after Decompress returned, a refusal: Decompress's callers take its own
// errors for the image's, not those of its reader's Reads.
type xzReader struct{ r *xz.Reader }

func (x xzReader) Read(p []byte) (int, error) {
	n, err := x.r.Read(p)
	return n, xzError(err)
}

// Info is what the checks read of qemu-img info --output=json.
type Info struct {
	Format              string `json:"format"`
	VirtualSize         int64  `json:"virtual-size"`
	BackingFilename     string `json:"backing-filename"`
	FullBackingFilename string `json:"full-backing-filename"`
	FormatSpecific      struct {
		Data struct {
			DataFile string `json:"data-file"`
			// DataFileRaw is there whenever the image has an external
			// data file, named in the image or not.
			DataFileRaw *bool `json:"data-file-raw"`
		} `json:"data"`
	} `json:"format-specific"`
}

// ParseInfo reads qemu-img info --output=json.
func ParseInfo(out []byte) (*Info, error) {
	info := &Info{}
	if err := json.Unmarshal(out, info); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	return info, nil
}

// Check refuses (ErrRefused) an image that is not of format, or that would
// make qemu-img read other files than itself: a backing file or an external
// data file, which a crafted image points at the host's devices or files,
// whose bytes would then land in the base.
func (i *Info) Check(format string) error {
	switch data := i.FormatSpecific.Data; {
	case i.Format != format:
		return fmt.Errorf("%w: it is %q, not %s as the GoldenImage says", ErrRefused, i.Format, format)
	case i.BackingFilename != "" || i.FullBackingFilename != "":
		return fmt.Errorf("%w: %s has a backing file %q", ErrRefused, format, cmp.Or(i.FullBackingFilename, i.BackingFilename))
	case data.DataFile != "" || data.DataFileRaw != nil:
		return fmt.Errorf("%w: %s has an external data file %q", ErrRefused, format, data.DataFile)
	}
	return nil
}

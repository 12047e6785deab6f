package golden

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// errPermanent marks a failure that retrying the same download cannot fix
// (a 4xx answer, a checksum mismatch, an image larger than its base).
var errPermanent = errors.New("permanent")

// progress counts a population's bytes; read while it runs.
type progress struct {
	done, total atomic.Int64
}

// download is an HTTP GET that survives broken connections: after an error
// it asks again from the offset reached (Range, guarded by If-Range on the
// ETag or Last-Modified), or skips what it already read when the server
// ignores ranges.
type download struct {
	ctx      context.Context
	client   *http.Client
	url      string
	attempts int
	backoff  time.Duration
	prog     *progress

	body      io.ReadCloser
	off       int64
	validator string
	failures  int
}

func (d *download) open() error {
	req, err := http.NewRequestWithContext(d.ctx, http.MethodGet, d.url, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", errPermanent, err)
	}
	if d.off > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(d.off, 10)+"-")
		if d.validator != "" {
			req.Header.Set("If-Range", d.validator)
		}
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode == http.StatusPartialContent && d.off > 0:
	case resp.StatusCode == http.StatusOK:
		if d.off > 0 { // no resume: skip what was read
			if _, err := io.CopyN(io.Discard, resp.Body, d.off); err != nil {
				resp.Body.Close()
				return fmt.Errorf("skip %d bytes already read: %w", d.off, err)
			}
		} else {
			d.prog.total.Store(max(resp.ContentLength, 0))
			if v := resp.Header.Get("ETag"); v != "" && v[0] != 'W' {
				d.validator = v
			} else {
				d.validator = resp.Header.Get("Last-Modified")
			}
		}
	default:
		resp.Body.Close()
		err := fmt.Errorf("GET %s: %s", d.url, resp.Status)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return fmt.Errorf("%w: %w", errPermanent, err)
		}
		return err
	}
	d.body = resp.Body
	return nil
}

func (d *download) Read(p []byte) (int, error) {
	for {
		var err error
		if d.body == nil {
			err = d.open()
		}
		if err == nil {
			var n int
			n, err = d.body.Read(p)
			d.off += int64(n)
			d.prog.done.Store(d.off)
			if err == nil || err == io.EOF {
				return n, err
			}
			d.body.Close()
			d.body = nil
			if n > 0 {
				return n, nil // the error comes back on the next Read
			}
		}
		if errors.Is(err, errPermanent) || d.ctx.Err() != nil {
			return 0, err
		}
		if d.failures++; d.failures >= d.attempts {
			return 0, fmt.Errorf("download %s: %d attempts failed, last: %w", d.url, d.failures, err)
		}
		select {
		case <-d.ctx.Done():
			return 0, d.ctx.Err()
		case <-time.After(d.backoff << (d.failures - 1)):
		}
	}
}

func (d *download) Close() error {
	if d.body != nil {
		return d.body.Close()
	}
	return nil
}

// decompress returns a reader of r's bytes, decompressed when they start
// with the magic of gzip, xz or zstd.
func decompress(r io.Reader) (io.Reader, string, error) {
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
		zr, err := xz.NewReader(br)
		return zr, "xz", err
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br)
		if err != nil {
			return nil, "", err
		}
		return zr.IOReadCloser(), "zstd", nil
	}
	return br, "", nil
}

// block is the unit of sparse writing: an all-zero block is skipped, since
// a new thin LV reads zeros where nothing was written, and writing zeros
// would allocate pool space for nothing.
const block = 64 << 10

// writeSparse copies src to dst from offset 0, skipping all-zero blocks. It
// fails when src holds more than limit bytes.
func writeSparse(dst io.WriterAt, src io.Reader, limit int64) (int64, error) {
	buf := make([]byte, 1<<20)
	zero := make([]byte, block)
	var off int64
	for {
		n, err := io.ReadFull(src, buf)
		if int64(n) > limit-off {
			return off, fmt.Errorf("%w: the image is larger than the base (%d bytes)", errPermanent, limit)
		}
		for i := 0; i < n; i += block {
			b := buf[i:min(i+block, n)]
			if bytes.Equal(b, zero[:len(b)]) {
				continue
			}
			if _, werr := dst.WriteAt(b, off+int64(i)); werr != nil {
				return off, fmt.Errorf("write at %d: %w", off+int64(i), werr)
			}
		}
		off += int64(n)
		switch err {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			return off, nil
		default:
			return off, err
		}
	}
}

// Writer streams an image into a base's device.
type Writer struct {
	// HTTP is the client for downloads; default http.DefaultClient.
	HTTP *http.Client
	// QemuImg is the qemu-img binary that converts qcow2 images.
	QemuImg string
	// ScratchDir holds a qcow2 image between download and conversion.
	ScratchDir string
	// Attempts and Backoff bound a download's retries; defaults 5 and 1s.
	Attempts int
	Backoff  time.Duration
}

// Populate writes the image of spec into device, which is limit bytes
// large and reads zeros, and verifies the download's sha256. It returns how
// many raw bytes the image held.
func (w *Writer) Populate(ctx context.Context, spec *thinlvmv1.GoldenImageSpec, device string, limit int64, prog *progress) (int64, error) {
	src := spec.Source.HTTP
	if src == nil {
		return 0, fmt.Errorf("%w: the source has no http", errPermanent)
	}
	d := &download{ctx: ctx, client: w.HTTP, url: src.URL, attempts: w.Attempts, backoff: w.Backoff, prog: prog}
	if d.client == nil {
		d.client = http.DefaultClient
	}
	if d.attempts <= 0 {
		d.attempts = 5
	}
	if d.backoff <= 0 {
		d.backoff = time.Second
	}
	defer d.Close()
	sum := sha256.New()
	tee := io.TeeReader(d, sum)

	if spec.Format == thinlvmv1.FormatQCOW2 {
		return w.convert(ctx, tee, sum, src.SHA256, device, limit)
	}
	raw, _, err := decompress(tee)
	if err != nil {
		return 0, fmt.Errorf("%w: read the image's header: %w", errPermanent, err)
	}
	dev, err := os.OpenFile(device, os.O_WRONLY, 0)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", device, err)
	}
	defer dev.Close()
	n, err := writeSparse(dev, raw, limit)
	if err != nil {
		return n, err
	}
	// A compressed stream may end before the file does: the checksum is
	// of every byte served.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return n, err
	}
	if err := verify(sum, src.SHA256); err != nil {
		return n, err
	}
	if err := dev.Sync(); err != nil {
		return n, fmt.Errorf("sync %s: %w", device, err)
	}
	return n, dev.Close()
}

func verify(sum hash.Hash, want string) error {
	if got := hex.EncodeToString(sum.Sum(nil)); got != want {
		return fmt.Errorf("%w: sha256 mismatch: the image's is %s, the GoldenImage says %s", errPermanent, got, want)
	}
	return nil
}

// convert downloads a qcow2 image (decompressing it if need be) into the
// scratch directory, verifies it, and has qemu-img write it raw to device.
func (w *Writer) convert(ctx context.Context, src io.Reader, sum hash.Hash, want, device string, limit int64) (int64, error) {
	if w.QemuImg == "" {
		return 0, fmt.Errorf("%w: qcow2 images need qemu-img, and none is configured (--qemu-img)", errPermanent)
	}
	f, err := os.CreateTemp(w.ScratchDir, "golden-*.qcow2")
	if err != nil {
		return 0, fmt.Errorf("scratch file: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	raw, _, err := decompress(src)
	if err != nil {
		return 0, fmt.Errorf("%w: read the image's header: %w", errPermanent, err)
	}
	if _, err := io.Copy(f, raw); err != nil {
		return 0, fmt.Errorf("download to %s: %w", f.Name(), err)
	}
	if _, err := io.Copy(io.Discard, src); err != nil {
		return 0, err
	}
	if err := verify(sum, want); err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	out, err := exec.CommandContext(ctx, w.QemuImg, "info", "--output=json", "-f", "qcow2", f.Name()).Output()
	if err != nil {
		return 0, fmt.Errorf("%w: qemu-img info: %w", errPermanent, withStderr(err))
	}
	var info struct {
		VirtualSize int64 `json:"virtual-size"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return 0, fmt.Errorf("qemu-img info: %w", err)
	}
	if info.VirtualSize > limit {
		return 0, fmt.Errorf("%w: the image's virtual size %d is larger than the base (%d bytes)", errPermanent, info.VirtualSize, limit)
	}
	// The device reads zeros: qemu-img need not write them.
	cmd := exec.CommandContext(ctx, w.QemuImg, "convert", "-n", "--target-is-zero", "-f", "qcow2", "-O", "raw", f.Name(), device)
	if _, err := cmd.Output(); err != nil {
		return 0, fmt.Errorf("qemu-img convert: %w", withStderr(err))
	}
	return info.VirtualSize, nil
}

func withStderr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}

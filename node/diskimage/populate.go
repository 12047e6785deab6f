package diskimage

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/node/diskimage/imagefile"
)

// ErrPermanent marks a failure that retrying the same download cannot fix
// (a 4xx answer, a checksum mismatch, an image larger than its base).
var ErrPermanent = errors.New("permanent")

// permanent says whether retrying cannot fix err: ErrPermanent's failures
// and the images imagefile refuses.
func permanent(err error) bool {
	return errors.Is(err, ErrPermanent) || errors.Is(err, imagefile.ErrRefused)
}

// Progress counts a population's bytes: Done of Total (0 while unknown).
// Read while it runs.
type Progress struct {
	Done, Total atomic.Int64
}

// download is an HTTP GET that survives broken connections: after an error
// it asks again from the offset reached (Range, guarded by If-Range on the
// ETag or Last-Modified), or skips what it already read when the server
// ignores ranges. Its errors name the URL redacted.
type download struct {
	ctx      context.Context
	client   *http.Client
	url      string
	name     string // url, redacted
	attempts int
	backoff  time.Duration
	stall    time.Duration
	prog     *Progress

	body      io.ReadCloser
	off       int64
	validator string
	failures  int
}

func (d *download) open() error {
	// The request's own context lets the watchdog end a stalled read.
	ctx, cancel := context.WithCancel(d.ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url, nil)
	if err != nil {
		cancel()
		return fmt.Errorf("%w: get %s: %w", ErrPermanent, d.name, withoutURL(err))
	}
	if d.off > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(d.off, 10)+"-")
		if d.validator != "" {
			req.Header.Set("If-Range", d.validator)
		}
	}
	resp, err := d.client.Do(req)
	if err != nil {
		cancel()
		return fmt.Errorf("get %s: %w", d.name, withoutURL(err))
	}
	body := newWatchdog(resp.Body, cancel, d.stall)
	switch {
	case resp.StatusCode == http.StatusPartialContent && d.off > 0:
	case resp.StatusCode == http.StatusOK:
		if d.off > 0 { // no resume: skip what was read
			if _, err := io.CopyN(io.Discard, body, d.off); err != nil {
				body.Close()
				return fmt.Errorf("skip %d bytes already read: %w", d.off, err)
			}
		} else {
			d.prog.Total.Store(max(resp.ContentLength, 0))
			if v := resp.Header.Get("ETag"); v != "" && v[0] != 'W' {
				d.validator = v
			} else {
				d.validator = resp.Header.Get("Last-Modified")
			}
		}
	default:
		body.Close()
		err := fmt.Errorf("GET %s: %s", d.name, resp.Status)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return fmt.Errorf("%w: %w", ErrPermanent, err)
		}
		return err
	}
	d.body = body
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
			d.prog.Done.Store(d.off)
			if err == nil || err == io.EOF {
				return n, err
			}
			d.body.Close()
			d.body = nil
			if n > 0 {
				return n, nil // the error comes back on the next Read
			}
		}
		if permanent(err) || d.ctx.Err() != nil {
			return 0, err
		}
		if d.failures++; d.failures >= d.attempts {
			return 0, fmt.Errorf("download %s: %d attempts failed, last: %w", d.name, d.failures, err)
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
			return off, fmt.Errorf("%w: the image is larger than the base (%d bytes)", ErrPermanent, limit)
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

// Writer streams an image into a base's device. Its zero value downloads
// with the defaults below; qcow2 images need QemuImg, and sources that name
// a Secret or ConfigMap need Reader and Namespace.
type Writer struct {
	// QemuImg is the qemu-img binary that converts qcow2 images.
	QemuImg string
	// Prlimit is the prlimit binary (util-linux) that runs qemu-img with
	// resource limits; default "prlimit" from $PATH. qcow2 images fail
	// without it: qemu-img does not run unbounded on a crafted image.
	Prlimit string
	// ScratchDir holds a qcow2 image between download and conversion.
	ScratchDir string
	// Attempts and Backoff bound a download's retries; defaults 5 and 1s.
	Attempts int
	Backoff  time.Duration
	// StallTimeout fails a download's attempt when, while it waits for the
	// body, no byte arrives for this long, or under 64 KiB arrive in this
	// long; the attempt is then resumed like a broken one. Default 60s.
	StallTimeout time.Duration
	// RootCAs verify https servers; default the system's. A source's
	// caConfigMap replaces them for that source.
	RootCAs *x509.CertPool
	// Blocked are the addresses downloads never connect to, checked on
	// each resolved address before connecting; nil means
	// DefaultBlocked(), an empty slice blocks nothing.
	Blocked []netip.Prefix
	// CrossHostRedirects lets an HTTP download follow a redirect to another
	// host than its URL's (its authSecret's credentials never follow).
	// Registries always may: they send blobs to their storage's host.
	CrossHostRedirects bool
	// Credentials reads the Secrets and ConfigMaps sources name
	// (authSecret, pullSecret, caConfigMap); nil when the agent reads
	// none, and a source that names one then fails.
	Credentials Credentials

	// dialHook, when set, is called for every connection the address check
	// lets through, just before it connects: tests see there whether a
	// refused address was ever dialled.
	dialHook func(network, address string) error
	// scratchSlack replaces qcow2ScratchSlack when positive, so that tests
	// reach the scratch bound with small images.
	scratchSlack int64

	clientOnce sync.Once
	client     *http.Client
}

// Populate writes the image of spec into device, which is limit bytes
// large and reads zeros, and verifies it: the sha256 of an HTTP download,
// the digests of a registry image. It returns how many raw bytes the image
// held.
func (w *Writer) Populate(ctx context.Context, spec *thinlvmv1.GoldenImageSpec, device string, limit int64, prog *Progress) (int64, error) {
	switch src := spec.Source; {
	case src.HTTP != nil:
		return w.populateHTTP(ctx, src.HTTP, spec.Format, device, limit, prog)
	case src.Registry != nil:
		return w.populateRegistry(ctx, src.Registry, spec.Format, device, limit, prog)
	}
	return 0, fmt.Errorf("%w: the source has neither http nor registry", ErrPermanent)
}

func (w *Writer) attempts() int {
	if w.Attempts > 0 {
		return w.Attempts
	}
	return 5
}

func (w *Writer) backoff() time.Duration {
	if w.Backoff > 0 {
		return w.Backoff
	}
	return time.Second
}

// newDownload is a download of url with the Writer's retries.
func (w *Writer) newDownload(ctx context.Context, c *http.Client, url, name string, prog *Progress) *download {
	d := &download{ctx: ctx, client: c, url: url, name: name, attempts: w.attempts(), backoff: w.backoff(),
		stall: w.StallTimeout, prog: prog}
	if d.stall <= 0 {
		d.stall = defaultStallTimeout
	}
	return d
}

func (w *Writer) populateHTTP(ctx context.Context, src *thinlvmv1.HTTPSource, format thinlvmv1.ImageFormat, device string, limit int64, prog *Progress) (int64, error) {
	c, done, err := w.sourceClient(ctx, src)
	if err != nil {
		return 0, err
	}
	defer done()
	d := w.newDownload(ctx, c, src.URL, redactURL(src.URL), prog)
	defer d.Close()
	sum := sha256.New()
	tee := io.TeeReader(d, sum)
	// A compressed stream may end before the file does: the checksum is
	// of every byte served.
	verified := func() error {
		if _, err := io.Copy(io.Discard, tee); err != nil {
			return err
		}
		return verify(sum, src.SHA256)
	}

	if format == thinlvmv1.FormatQCOW2 {
		s, err := w.newQCOW2Scratch()
		if err != nil {
			return 0, err
		}
		defer s.remove()
		if err := s.fill(tee, limit); err != nil {
			return 0, err
		}
		if err := verified(); err != nil {
			return 0, err
		}
		return s.convert(ctx, device, limit)
	}
	n, err := writeRaw(tee, device, limit)
	if err != nil {
		return n, err
	}
	return n, verified()
}

// qcow2Magic starts every qcow2 file.
const qcow2Magic = "QFI\xfb"

// writeRaw writes the raw image src (gzip-, xz- or zstd-compressed or not)
// to device, skipping zero blocks, and syncs it. It refuses an image larger
// than limit, and a qcow2 image: written raw it would be no disk.
func writeRaw(src io.Reader, device string, limit int64) (int64, error) {
	dec, _, err := imagefile.Decompress(src)
	if err != nil {
		return 0, fmt.Errorf("%w: read the image's header: %w", ErrPermanent, err)
	}
	if c, ok := dec.(io.Closer); ok {
		defer c.Close() // a zstd decoder's goroutines end only with Close
	}
	raw := bufio.NewReaderSize(dec, 1<<20) // Decompress's own when not compressed
	magic, err := raw.Peek(len(qcow2Magic))
	if err != nil && err != io.EOF {
		return 0, fmt.Errorf("%w: read the image's header: %w", ErrPermanent, err)
	}
	if string(magic) == qcow2Magic {
		return 0, fmt.Errorf("%w: image refused: it is qcow2 (it starts with qcow2's magic) and the GoldenImage says raw: set spec.format to qcow2", ErrPermanent)
	}
	dev, err := os.OpenFile(device, os.O_WRONLY, 0)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", device, err)
	}
	defer dev.Close()
	// writeSparse stops at the base's size: a compression bomb fails as
	// soon as it expands past the base, having written only into it.
	n, err := writeSparse(dev, raw, limit)
	if err != nil {
		return n, err
	}
	if err := dev.Sync(); err != nil {
		return n, fmt.Errorf("sync %s: %w", device, err)
	}
	return n, dev.Close()
}

// SourceName names an image's source for logs and Events, without what
// may be secret.
func SourceName(src *thinlvmv1.ImageSource) string {
	switch {
	case src.HTTP != nil:
		return redactURL(src.HTTP.URL)
	case src.Registry != nil:
		return "registry " + src.Registry.Image
	case src.PVC != nil:
		return "claim " + src.PVC.Namespace + "/" + src.PVC.Name
	case src.VolumeSnapshot != nil:
		return "snapshot " + src.VolumeSnapshot.Namespace + "/" + src.VolumeSnapshot.Name
	}
	return "no source"
}

func verify(sum hash.Hash, want string) error {
	if got := hex.EncodeToString(sum.Sum(nil)); got != want {
		return fmt.Errorf("%w: sha256 mismatch: the image's is %s, the GoldenImage says %s", ErrPermanent, got, want)
	}
	return nil
}

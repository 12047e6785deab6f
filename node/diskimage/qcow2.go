package diskimage

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/node/diskimage/imagefile"
)

// Limits qemu-img runs under, as OpenStack runs it (prlimit, 1 GiB of
// address space; see CVE-2024-32498): a crafted image must not make it take
// the node's memory (info and convert) or CPU (info; convert's time grows
// with the image, and its context ends it with the population).
const (
	qemuImgAddressSpace   = 1 << 30
	qemuImgInfoCPUSeconds = 120
	// qemuImgInfoTimeout bounds info's wall time, which its CPU limit does
	// not: opening a file that never answers takes none.
	qemuImgInfoTimeout = 3 * time.Minute
)

// qcow2ScratchSlack is what a qcow2 file may take in scratch beyond what
// grows with its size: with the largest clusters (2 MiB) its header, L1
// table, refcount table, first refcount block and L2 tables take a few
// clusters each, whatever the image's size.
const qcow2ScratchSlack = 64 << 20

// scratchBound is the most the qcow2 file of an image for a base of limit
// bytes may take in scratch: its data (at most limit, or its virtual size
// is refused anyway), the metadata that grows with it, and slack. That
// metadata is at most limit/32: with the smallest clusters (512 bytes) L2
// tables take 8 bytes a cluster, and refcount blocks up to 8 (64-bit
// refcounts); extended L2 entries (16 bytes) need clusters of 16 KiB or
// more. limit/8 leaves room for the refcounts of the metadata itself.
func scratchBound(limit, slack int64) int64 {
	return limit + limit/8 + slack
}

// qcow2Scratch is a qcow2 image on its way from its source to a base: a
// file in the scratch directory, bounded, until the source is verified and
// qemu-img converts it.
type qcow2Scratch struct {
	w       *Writer
	prlimit string
	f       *os.File
	path    string // absolute: qemu-img reads a "name:" ahead of the first slash as a protocol
}

// newQCOW2Scratch checks that the Writer can convert qcow2 images and makes
// the scratch file. remove removes it.
func (w *Writer) newQCOW2Scratch() (*qcow2Scratch, error) {
	if w.QemuImg == "" {
		return nil, fmt.Errorf("%w: qcow2 images need qemu-img, and none is configured (--qemu-img)", ErrPermanent)
	}
	prlimit, err := exec.LookPath(cmp.Or(w.Prlimit, "prlimit"))
	if err != nil {
		return nil, fmt.Errorf("%w: qcow2 images need prlimit (util-linux) to run qemu-img with resource limits: %w", ErrPermanent, err)
	}
	f, err := os.CreateTemp(w.ScratchDir, "golden-*.qcow2")
	if err != nil {
		return nil, fmt.Errorf("scratch file: %w", err)
	}
	path, err := filepath.Abs(f.Name())
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("scratch file: %w", err)
	}
	return &qcow2Scratch{w: w, prlimit: prlimit, f: f, path: path}, nil
}

func (s *qcow2Scratch) remove() {
	s.f.Close()
	os.Remove(s.f.Name())
}

// fill copies the image src, decompressing it if need be, into the scratch
// file: at most what the qcow2 file of a base of limit bytes takes.
func (s *qcow2Scratch) fill(src io.Reader, limit int64) error {
	raw, _, err := imagefile.Decompress(src)
	if err != nil {
		return fmt.Errorf("%w: read the image's header: %w", ErrPermanent, err)
	}
	if c, ok := raw.(io.Closer); ok {
		defer c.Close() // a zstd decoder's goroutines end only with Close
	}
	// Bounded before the source can be verified: a few hundred KiB of
	// compressed zeros would otherwise fill the scratch volume.
	bound := scratchBound(limit, cmp.Or(s.w.scratchSlack, qcow2ScratchSlack))
	scratch := &boundedWriter{w: s.f, left: bound}
	if _, err := io.Copy(scratch, raw); err != nil {
		if scratch.full {
			return fmt.Errorf("%w: image refused: the qcow2 file expands past %d bytes, more than a %d-byte base needs", ErrPermanent, bound, limit)
		}
		return fmt.Errorf("download to %s: %w", s.f.Name(), err)
	}
	return nil
}

// convert checks the verified image in scratch, refuses it if it names any
// other file, and has qemu-img write it raw to device. It returns the
// image's virtual size.
func (s *qcow2Scratch) convert(ctx context.Context, device string, limit int64) (int64, error) {
	if err := s.f.Close(); err != nil {
		return 0, err
	}
	info, err := s.w.info(ctx, s.prlimit, s.path, thinlvmv1.FormatQCOW2)
	if err != nil {
		return 0, err
	}
	if err := info.Check(string(thinlvmv1.FormatQCOW2)); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrPermanent, err)
	}
	if info.VirtualSize > limit {
		return 0, fmt.Errorf("%w: the image's virtual size %d is larger than the base (%d bytes)", ErrPermanent, info.VirtualSize, limit)
	}
	if _, err := s.w.qemuImg(ctx, s.prlimit, []string{"--as=" + strconv.Itoa(qemuImgAddressSpace)}, convertArgs(s.path, device)...); err != nil {
		return 0, fmt.Errorf("qemu-img convert: %w", err)
	}
	return info.VirtualSize, nil
}

// convertArgs are qemu-img's arguments to write the qcow2 image at path
// raw to device. --image-opts pins the source to a qcow2 in a local file,
// and "backing=" opens no backing file whatever the image says, should the
// info check ever miss one. (It is how these options say none; qemu-img
// warns that it prefers JSON's null, which they cannot spell: "backing=null"
// names a node.) An external data file cannot be refused here, only by the
// info check. The device reads zeros: qemu-img need not write them.
func convertArgs(path, device string) []string {
	source := "driver=qcow2,file.driver=file,file.filename=" + strings.ReplaceAll(path, ",", ",,") + ",backing="
	return []string{"convert", "--image-opts", "-n", "--target-is-zero", "-O", "raw", source, device}
}

// info runs qemu-img info on the image at path, read as format.
func (w *Writer) info(ctx context.Context, prlimit, path string, format thinlvmv1.ImageFormat) (*imagefile.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, qemuImgInfoTimeout)
	defer cancel()
	out, err := w.qemuImg(ctx, prlimit, []string{"--as=" + strconv.Itoa(qemuImgAddressSpace), "--cpu=" + strconv.Itoa(qemuImgInfoCPUSeconds)},
		"info", "--output=json", "-f", string(format), path)
	if err != nil {
		return nil, fmt.Errorf("%w: image refused: qemu-img info cannot read it as %s: %w", ErrPermanent, format, err)
	}
	info, err := imagefile.ParseInfo(out)
	if err != nil {
		return nil, fmt.Errorf("qemu-img info: %w", err)
	}
	return info, nil
}

// qemuImg runs qemu-img with args under prlimit's limits, argv only: no
// shell ever sees a path.
func (w *Writer) qemuImg(ctx context.Context, prlimit string, limits []string, args ...string) ([]byte, error) {
	argv := append(append(limits, "--", w.QemuImg), args...)
	out, err := exec.CommandContext(ctx, prlimit, argv...).Output()
	if err != nil {
		return nil, withStderr(err)
	}
	return out, nil
}

// boundedWriter writes at most left bytes to w: a Write that would go past
// fails whole and writes nothing.
type boundedWriter struct {
	w    io.Writer
	left int64
	full bool
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		b.full = true
		return 0, errors.New("scratch bound reached")
	}
	n, err := b.w.Write(p)
	b.left -= int64(n)
	return n, err
}

func withStderr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}

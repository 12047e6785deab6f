// Package imageroot finds thinlvm's images in an OCI image layout and
// unpacks their file systems, as a container runtime does before it starts
// a container. The test harness's kubelet runs the components from what it
// unpacks; the image tests check the programs in it.
package imageroot

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// refAnnotation names an image in an OCI layout's index.
const refAnnotation = "org.opencontainers.image.ref.name"

// Find returns the image of the layout at dir whose index entry is named
// ref ("thinlvm-node:v0.1.0"), or, when ref has no tag, named ref with any
// tag. An entry that is an image index (one image per platform) gives its
// image for this machine, linux/<runtime.GOARCH>: the one whose programs
// the harness can run.
func Find(dir, ref string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("image layout %s: %w", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("image layout %s: %w", dir, err)
	}
	for _, d := range m.Manifests {
		name := d.Annotations[refAnnotation]
		if match := name == ref || !strings.Contains(ref, ":") && strings.HasPrefix(name, ref+":"); !match {
			continue
		}
		if !d.MediaType.IsIndex() {
			return idx.Image(d.Digest)
		}
		img, err := platformImage(idx, d.Digest)
		if err != nil {
			return nil, fmt.Errorf("image layout %s: %s: %w", dir, name, err)
		}
		return img, nil
	}
	return nil, fmt.Errorf("image layout %s has no image %s", dir, ref)
}

// platformImage is the linux/<runtime.GOARCH> image of the index digest
// in idx.
func platformImage(idx v1.ImageIndex, digest v1.Hash) (v1.Image, error) {
	sub, err := idx.ImageIndex(digest)
	if err != nil {
		return nil, err
	}
	m, err := sub.IndexManifest()
	if err != nil {
		return nil, err
	}
	var present []string
	for _, d := range m.Manifests {
		if d.Platform == nil {
			continue
		}
		if d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH {
			return sub.Image(d.Digest)
		}
		present = append(present, d.Platform.OS+"/"+d.Platform.Architecture)
	}
	return nil, fmt.Errorf("no linux/%s image in its index, which has %v", runtime.GOARCH, present)
}

// Flatten is the image's file system as one tar stream: its layers applied
// in order, whiteouts honoured. The caller closes it.
func Flatten(img v1.Image) io.ReadCloser { return mutate.Extract(img) }

// Unpack writes the file system of a tar stream (Flatten's) to dir: files
// with their modes and owners, directories, symbolic and hard links.
// Device nodes are skipped (a container gets its /dev from the runtime).
// No entry is written outside dir, whatever the links in it say.
func Unpack(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unpack into %s: %w", dir, err)
		}
		if err := unpackEntry(tr, h, dir); err != nil {
			return fmt.Errorf("unpack %s into %s: %w", h.Name, dir, err)
		}
	}
}

func unpackEntry(tr *tar.Reader, h *tar.Header, dir string) error {
	rel := filepath.Clean("/" + h.Name)
	if rel == "/" {
		return nil
	}
	// The parent is resolved inside dir (an absolute link such as
	// /var/run -> /run names dir/run); the entry itself is not followed.
	parent, err := InRoot(dir, filepath.Dir(rel))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	p := filepath.Join(parent, filepath.Base(rel))
	mode := os.FileMode(h.Mode) & os.ModePerm
	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(p, mode); err != nil && !os.IsExist(err) {
			return err
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
	case tar.TypeSymlink:
		_ = os.Remove(p)
		if err := os.Symlink(h.Linkname, p); err != nil {
			return err
		}
	case tar.TypeLink:
		target, err := InRoot(dir, filepath.Clean("/"+h.Linkname))
		if err != nil {
			return err
		}
		_ = os.Remove(p)
		return os.Link(target, p) // the target's inode: owner and mode are set
	case tar.TypeReg:
		_ = os.Remove(p)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	default:
		return nil
	}
	if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
		return err
	}
	if h.Typeflag != tar.TypeSymlink && h.Mode&0o7000 != 0 { // chown clears setuid
		return os.Chmod(p, mode|specialBits(h.Mode))
	}
	return nil
}

// specialBits are the setuid, setgid and sticky bits of a tar mode as an
// os.FileMode.
func specialBits(mode int64) os.FileMode {
	var m os.FileMode
	if mode&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}

// InRoot resolves the absolute path p as if root were "/": every symbolic
// link on the way is followed inside root, so the result never leaves it.
// Components that do not exist yet are kept as they are.
func InRoot(root, p string) (string, error) {
	parts := strings.Split(strings.TrimPrefix(filepath.Clean("/"+p), "/"), "/")
	cur := "/" // the resolved path inside root
	for links := 0; len(parts) > 0; {
		part := parts[0]
		parts = parts[1:]
		if part == "" || part == "." {
			continue
		}
		if part == ".." {
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			if err != nil && !os.IsNotExist(err) {
				return "", err
			}
			cur = next
			continue
		}
		if links++; links > 64 {
			return "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		parts = append(strings.Split(target, "/"), parts...)
	}
	return filepath.Join(root, cur), nil
}

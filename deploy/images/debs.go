package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// pkg is a Debian package at a pinned version.
type pkg struct{ name, version string }

var pkgLine = regexp.MustCompile(`^([a-z0-9][a-z0-9+.-]*)=([0-9A-Za-z.+~:-]+)$`)

// readPackages reads a .packages list: "name=version" lines, # comments.
func readPackages(file string) ([]pkg, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []pkg
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := pkgLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s:%d: %q is not name=version", file, n, line)
		}
		out = append(out, pkg{m[1], m[2]})
	}
	return out, sc.Err()
}

// debName is the file name apt gives a downloaded package.
func debName(p pkg) string {
	return p.name + "_" + strings.ReplaceAll(p.version, ":", "%3a") + "_"
}

// download fetches the packages that are not in dir yet with apt (from
// the machine's Debian sources) and returns their files, in list order.
func download(ctx context.Context, dir string, pkgs []pkg) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	find := func(p pkg) string {
		m, _ := filepath.Glob(filepath.Join(dir, debName(p)+"*.deb"))
		if len(m) == 1 {
			return m[0]
		}
		return ""
	}
	var missing []string
	for _, p := range pkgs {
		if find(p) == "" {
			missing = append(missing, p.name+"="+p.version)
		}
	}
	if len(missing) > 0 {
		cmd := exec.CommandContext(ctx, "apt-get", append([]string{"download", "-q"}, missing...)...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("apt-get download %v (a pinned version gone from the mirror? `make images-pin` re-pins): %w", missing, err)
		}
	}
	var files []string
	for _, p := range pkgs {
		f := find(p)
		if f == "" {
			return nil, fmt.Errorf("package %s=%s: no .deb in %s after download", p.name, p.version, dir)
		}
		files = append(files, f)
	}
	return files, nil
}

// skipped are paths of a package an image does not need.
var skipped = []string{"usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/lintian/"}

// debFiles reads the files a .deb installs (its data.tar), without running
// its maintainer scripts. Hard links become copies, so that the layer can
// list its entries in any order.
func debFiles(deb string) ([]file, error) {
	data, err := os.ReadFile(deb)
	if err != nil {
		return nil, err
	}
	member, payload, err := dataMember(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", deb, err)
	}
	var r io.Reader = bytes.NewReader(payload)
	switch {
	case strings.HasSuffix(member, ".xz"):
		if r, err = xz.NewReader(r); err != nil {
			return nil, fmt.Errorf("%s: %w", deb, err)
		}
	case strings.HasSuffix(member, ".zst"):
		zr, err := zstd.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", deb, err)
		}
		defer zr.Close()
		r = zr
	case strings.HasSuffix(member, ".gz"):
		if r, err = gzip.NewReader(r); err != nil {
			return nil, fmt.Errorf("%s: %w", deb, err)
		}
	case member == "data.tar":
	default:
		return nil, fmt.Errorf("%s: unknown data member %s", deb, member)
	}
	var files []file
	regular := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", deb, err)
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if name == "" || skip(name) {
			continue
		}
		f := file{hdr: tar.Header{Name: name, Mode: h.Mode, Typeflag: h.Typeflag, Linkname: h.Linkname}}
		switch h.Typeflag {
		case tar.TypeDir, tar.TypeSymlink:
		case tar.TypeReg:
			if f.data, err = io.ReadAll(tr); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", deb, name, err)
			}
			regular[name] = f.data
		case tar.TypeLink:
			target := strings.TrimPrefix(path.Clean("/"+h.Linkname), "/")
			d, ok := regular[target]
			if !ok {
				return nil, fmt.Errorf("%s: hard link %s to %s, which comes later or not at all", deb, name, target)
			}
			f.hdr.Typeflag, f.hdr.Linkname, f.data = tar.TypeReg, "", d
		default:
			continue // device nodes and the like: none in the packages used
		}
		files = append(files, f)
	}
	return files, nil
}

func skip(name string) bool {
	for _, s := range skipped {
		if strings.HasPrefix(name+"/", s) {
			return true
		}
	}
	return false
}

// dataMember finds the data.tar member of a .deb, an ar archive.
func dataMember(deb []byte) (string, []byte, error) {
	const magic = "!<arch>\n"
	if !bytes.HasPrefix(deb, []byte(magic)) {
		return "", nil, errors.New("not an ar archive")
	}
	rest := deb[len(magic):]
	for len(rest) >= 60 {
		hdr := rest[:60]
		name := strings.TrimSuffix(strings.TrimSpace(string(hdr[0:16])), "/")
		var size int
		if _, err := fmt.Sscanf(strings.TrimSpace(string(hdr[48:58])), "%d", &size); err != nil || size < 0 || size > len(rest)-60 {
			return "", nil, fmt.Errorf("ar member %q: bad size", name)
		}
		body := rest[60 : 60+size]
		if strings.HasPrefix(name, "data.tar") {
			return name, body, nil
		}
		rest = rest[60+size:]
		if size%2 == 1 && len(rest) > 0 {
			rest = rest[1:]
		}
	}
	return "", nil, errors.New("no data.tar member")
}

// pin writes each image's .packages list: its roots and their dependencies
// as apt resolves them for an empty system (no Recommends), at the
// versions the machine's Debian sources offer now.
func pin(ctx context.Context, dir string) error {
	status, err := os.CreateTemp("", "empty-dpkg-status")
	if err != nil {
		return err
	}
	status.Close()
	defer os.Remove(status.Name())
	inst := regexp.MustCompile(`^Inst (\S+) \((\S+) `)
	for _, s := range specs {
		if s.packages == "" {
			continue
		}
		args := append([]string{"-s", "-o", "Dir::State::status=" + status.Name(), "--no-install-recommends", "install"}, s.roots...)
		out, err := exec.CommandContext(ctx, "apt-get", args...).Output()
		if err != nil {
			return fmt.Errorf("resolve %v: %w", s.roots, err)
		}
		var lines []string
		for _, l := range strings.Split(string(out), "\n") {
			if m := inst.FindStringSubmatch(l); m != nil {
				lines = append(lines, m[1]+"="+m[2])
			}
		}
		sort.Strings(lines)
		body := fmt.Sprintf("# %s: %s and their dependencies (no Recommends), as apt resolved them\n# for an empty system. Regenerate with `make images-pin`.\n%s\n",
			s.name, strings.Join(s.roots, ", "), strings.Join(lines, "\n"))
		if err := os.WriteFile(filepath.Join(dir, s.packages+".packages"), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

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
	"slices"
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

// debName is the file name apt gives a downloaded package of arch
// (a Debian architecture, or "all" for a package every arch shares).
func debName(p pkg, arch string) string {
	return p.name + "_" + strings.ReplaceAll(p.version, ":", "%3a") + "_" + arch + ".deb"
}

// aptArches are the architectures apt is told to know, passed on every
// call as options rather than written to dpkg's configuration: the
// machine's own (dpkg's native and foreign ones, so that an update keeps
// their lists) and every arch the images are built for.
func aptArches(ctx context.Context) (native string, opts []string, err error) {
	out, err := exec.CommandContext(ctx, "dpkg", "--print-architecture").Output()
	if err != nil {
		return "", nil, fmt.Errorf("dpkg --print-architecture: %w", err)
	}
	native = strings.TrimSpace(string(out))
	out, err = exec.CommandContext(ctx, "dpkg", "--print-foreign-architectures").Output()
	if err != nil {
		return "", nil, fmt.Errorf("dpkg --print-foreign-architectures: %w", err)
	}
	seen := map[string]bool{}
	for _, a := range append(append([]string{native}, strings.Fields(string(out))...), arches...) {
		if !seen[a] {
			seen[a] = true
			opts = append(opts, "-o", "APT::Architectures::="+a)
		}
	}
	return native, opts, nil
}

// download fetches the packages of arch that are not in dir yet with apt
// (from the machine's Debian sources) and returns their files, in list
// order. The lists are pinned once, for the machine's arch: every other
// arch must offer the same names at the same versions, and a package it
// does not have is an error, never left out.
func download(ctx context.Context, dir string, pkgs []pkg, arch string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// dir holds every arch's packages: a package's file is its arch's or,
	// for an "Architecture: all" package, the one every arch shares.
	find := func(p pkg) string {
		for _, a := range []string{arch, "all"} {
			f := filepath.Join(dir, debName(p, a))
			if _, err := os.Stat(f); err == nil {
				return f
			}
		}
		return ""
	}
	var missing []pkg
	for _, p := range pkgs {
		if find(p) == "" {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		if err := aptDownload(ctx, dir, missing, arch); err != nil {
			return nil, err
		}
	}
	var files []string
	for _, p := range pkgs {
		f := find(p)
		if f == "" {
			return nil, fmt.Errorf("package %s=%s (%s): no .deb in %s after download", p.name, p.version, arch, dir)
		}
		files = append(files, f)
	}
	return files, nil
}

// aptDownload downloads pkgs for arch into dir. A foreign arch's package
// lists may be missing (apt-get update fetches only the arches apt knew
// then): when apt cannot locate a package of arch, the lists are updated
// with every arch of aptArches and the download tried once more.
func aptDownload(ctx context.Context, dir string, pkgs []pkg, arch string) error {
	native, opts, err := aptArches(ctx)
	if err != nil {
		return err
	}
	all, err := archAll(ctx, opts, pkgs)
	if err != nil {
		return err
	}
	// name:arch=version names arch's build; an "Architecture: all"
	// package has none (apt files it under the native arch only), so it is
	// named without one.
	var args []string
	for _, p := range pkgs {
		if all[p] {
			args = append(args, p.name+"="+p.version)
		} else {
			args = append(args, p.name+":"+arch+"="+p.version)
		}
	}
	for updated := false; ; updated = true {
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, "apt-get", append(append(append([]string{}, opts...), "download", "-q"), args...)...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = os.Stderr, io.MultiWriter(os.Stderr, &stderr)
		err := cmd.Run()
		if err == nil {
			return nil
		}
		if !updated && arch != native && strings.Contains(stderr.String(), "E: Unable to locate package ") {
			if err := aptUpdate(ctx, opts); err != nil {
				return err
			}
			continue
		}
		return fmt.Errorf("apt-get download for %s: %s (every arch takes the versions of the .packages lists: a version gone from the mirror needs `make images-pin`, a package or version %s lacks cannot be used): %w",
			arch, strings.Join(aptErrors(stderr.String()), "; "), arch, err)
	}
}

// aptUpdate fetches the package lists of every arch of opts.
func aptUpdate(ctx context.Context, opts []string) error {
	cmd := exec.CommandContext(ctx, "apt-get", append(append([]string{}, opts...), "update", "-q")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("apt-get update with %v: %w", opts, err)
	}
	return nil
}

// archAll tells which of pkgs are "Architecture: all", as apt's records of
// the machine's arch describe them (where apt files such packages).
func archAll(ctx context.Context, opts []string, pkgs []pkg) (map[pkg]bool, error) {
	args := append(append([]string{}, opts...), "show")
	for _, p := range pkgs {
		args = append(args, p.name+"="+p.version)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "apt-cache", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	// apt-cache skips the versions it does not have, and fails when it has
	// none of them: then none is "all", and the download says which are
	// missing.
	if err != nil && !slices.Equal(aptErrors(stderr.String()), []string{"No packages found"}) {
		return nil, fmt.Errorf("apt-cache show %v: %s: %w", args[len(opts)+1:], stderr.String(), err)
	}
	all := map[pkg]bool{}
	for _, rec := range strings.Split(string(out), "\n\n") {
		var p pkg
		var arch string
		for _, l := range strings.Split(rec, "\n") {
			k, v, _ := strings.Cut(l, ": ")
			switch k {
			case "Package":
				p.name = v
			case "Version":
				p.version = v
			case "Architecture":
				arch = v
			}
		}
		if arch == "all" {
			all[p] = true
		}
	}
	return all, nil
}

// aptErrors are the E: lines of apt's output.
func aptErrors(out string) []string {
	var errs []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "E: ") {
			errs = append(errs, strings.TrimPrefix(l, "E: "))
		}
	}
	return errs
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

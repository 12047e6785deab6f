// Command images builds thinlvm's container images without a container
// engine: each is the component's static binary on an empty base, and for
// the node's containers the Debian packages they run (lvm2, mkfs, mount,
// qemu-img), unpacked from Debian's own .deb files at the versions pinned
// in <image>.packages. Each image is an OCI image index of one image per
// platform, linux/amd64 and linux/arm64 (-arch picks fewer): the binaries
// are cross-compiled, and every arch takes the same package versions, as
// Debian builds them for it (apt downloads a foreign arch's .deb files
// without dpkg's configuration changing; its package lists are fetched
// the first time they are missing). It writes an OCI image layout and,
// with -push, pushes the indexes to a registry. Two builds from the same
// commit give the same digests: every file's time is the epoch and every
// list is sorted.
//
//	go run ./deploy/images -out bin/images [-arch amd64,arm64] [-push registry/repo] [-tag v0.1.0]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	var o options
	flag.StringVar(&o.out, "out", "bin/images", "directory of the OCI image layout to write")
	flag.StringVar(&o.push, "push", "", "registry and repository prefix to push to, e.g. ghcr.io/thinlvm (the images are <prefix>/<name>:<tag>)")
	flag.StringVar(&o.tag, "tag", defaultTag, "the images' tag")
	flag.StringVar(&o.debs, "debs", "", "cache directory of the downloaded .deb files (default: the user cache directory)")
	flag.StringVar(&o.packages, "packages", "deploy/images", "directory of the <image>.packages lists")
	flag.BoolVar(&o.insecure, "insecure", false, "push over plain HTTP (a registry on this machine)")
	archList := flag.String("arch", strings.Join(arches, ","), "comma-separated architectures to build the images for")
	pinOnly := flag.Bool("pin", false, "only rewrite the .packages lists from the machine's Debian sources")
	flag.Parse()
	if o.debs == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			fmt.Fprintln(os.Stderr, "images:", err)
			os.Exit(1)
		}
		o.debs = filepath.Join(dir, "thinlvm", "debs")
	}
	var err error
	if o.arches, err = parseArches(*archList); err != nil {
		fmt.Fprintln(os.Stderr, "images: -arch:", err)
		os.Exit(2)
	}
	if *pinOnly {
		if err := pin(context.Background(), o.packages); err != nil {
			fmt.Fprintln(os.Stderr, "images:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

type options struct {
	out, push, tag, debs, packages string
	insecure                       bool
	// arches are the architectures built, in the order of arches.
	arches []string
}

// parseArches reads -arch: some of arches, in any order, each once. The
// result is in the order of arches, so that the order on the command
// line does not change the indexes' digests.
func parseArches(list string) ([]string, error) {
	want := map[string]bool{}
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if !slices.Contains(arches, a) {
			return nil, fmt.Errorf("architecture %q: want some of %s", a, strings.Join(arches, ","))
		}
		want[a] = true
	}
	var out []string
	for _, a := range arches {
		if want[a] {
			out = append(out, a)
		}
	}
	return out, nil
}

func run(ctx context.Context, o options) error {
	built, err := buildAll(ctx, o.packages, o.debs, o.tag, o.arches)
	if err != nil {
		return err
	}
	if err := writeLayout(o.out, built); err != nil {
		return err
	}
	for _, b := range built {
		d, err := b.index.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("%s:%s %s\n", b.spec.name, o.tag, d)
	}
	if o.push != "" {
		for _, b := range built {
			ref := strings.TrimSuffix(o.push, "/") + "/" + b.spec.name + ":" + o.tag
			if err := push(ctx, ref, b.index, o.insecure); err != nil {
				return err
			}
			fmt.Println("pushed", ref)
		}
	}
	return nil
}

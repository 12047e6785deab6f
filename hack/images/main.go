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
// list is sorted. The scheduler's image is built once per supported
// Kubernetes minor, tagged <tag>-k8s<minor> (-k8s-minors picks fewer).
//
//	go run ./hack/images -out bin/images [-arch amd64,arm64] [-k8s-minors 1.37] [-push registry/repo [-release-file f]] [-tag v0.1.0]
package main

import (
	"context"
	"encoding/json"
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
	flag.StringVar(&o.packages, "packages", "hack/images", "directory of the <image>.packages lists")
	flag.BoolVar(&o.insecure, "insecure", false, "push over plain HTTP (a registry on this machine)")
	flag.StringVar(&o.releaseFile, "release-file", "", "with -push: write the pushed images' registry, tag and digests to this file (JSON), which deploy/chart's package command pins in the chart")
	archList := flag.String("arch", strings.Join(arches, ","), "comma-separated architectures to build the images for")
	flag.StringVar(&o.minors, "k8s-minors", "", "comma-separated Kubernetes minors to build the scheduler for (e.g. 1.34, or newest); empty: every supported one")
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
	releaseFile                    string
	// minors are the Kubernetes minors whose scheduler is built, "" for
	// all (a test bed needs one).
	minors   string
	insecure bool
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
	want, err := selectSpecs(o.minors)
	if err != nil {
		return err
	}
	built, err := buildAll(ctx, want, o.packages, o.debs, o.tag, o.arches)
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
		fmt.Printf("%s %s\n", b.spec.ref(o.tag), d)
	}
	if o.push != "" {
		for _, b := range built {
			ref := strings.TrimSuffix(o.push, "/") + "/" + b.spec.ref(o.tag)
			if err := push(ctx, ref, b.index, o.insecure); err != nil {
				return err
			}
			fmt.Println("pushed", ref)
		}
	}
	if o.releaseFile != "" {
		if o.push == "" {
			return fmt.Errorf("-release-file needs -push: a release's digests are those pushed")
		}
		data, err := releaseFile(built, o.push, o.tag)
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.releaseFile, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// releaseFile is what deploy/chart's package command reads of a pushed
// build: the registry prefix, the tag, and each image's digest by name
// (a scheduler's as thinlvm-scheduler-k8s<minor>).
func releaseFile(built []built, push, tag string) ([]byte, error) {
	r := struct {
		Registry string            `json:"registry"`
		Tag      string            `json:"tag"`
		Digests  map[string]string `json:"digests"`
	}{Registry: strings.TrimSuffix(push, "/"), Tag: tag, Digests: map[string]string{}}
	for _, b := range built {
		d, err := b.index.Digest()
		if err != nil {
			return nil, err
		}
		r.Digests[b.spec.releaseName()] = d.String()
	}
	return json.MarshalIndent(r, "", "  ")
}

// selectSpecs is specs with the scheduler of the listed Kubernetes minors
// only (comma-separated, "newest" for the product module's; "" for every
// one).
func selectSpecs(minors string) ([]spec, error) {
	if minors == "" {
		return specs, nil
	}
	list := strings.Split(minors, ",")
	var out []spec
	found := map[string]bool{}
	for _, s := range specs {
		newest := s.minor != "" && s.module == "" // built in the product's module
		if newest && slices.Contains(list, "newest") {
			found["newest"] = true
		}
		if s.minor == "" || slices.Contains(list, s.minor) || newest && slices.Contains(list, "newest") {
			out = append(out, s)
			found[s.minor] = true
		}
	}
	for _, m := range list {
		if !found[m] {
			return nil, fmt.Errorf("-k8s-minors: no scheduler build for Kubernetes %q", m)
		}
	}
	return out, nil
}

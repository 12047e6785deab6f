package main

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// writeLayout writes the images to a fresh OCI image layout at dir: its
// top index lists each image's index, named <name>:<tag> by the entry's
// org.opencontainers.image.ref.name.
func writeLayout(dir string, images []built) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range images {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: b.index, Descriptor: v1.Descriptor{
			Annotations: map[string]string{"org.opencontainers.image.ref.name": b.spec.ref(b.tag)},
		}})
	}
	if _, err := layout.Write(dir, idx); err != nil {
		return fmt.Errorf("write image layout %s: %w", dir, err)
	}
	return nil
}

// push writes the index idx, and its images, to ref; insecure allows
// plain HTTP, for a registry on this machine.
func push(ctx context.Context, ref string, idx v1.ImageIndex, insecure bool) error {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	ropts := []remote.Option{remote.WithContext(ctx)}
	if insecure {
		ropts = append(ropts, remote.WithTransport(http.DefaultTransport))
	} else {
		ropts = append(ropts, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	}
	if err := remote.WriteIndex(r, idx, ropts...); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

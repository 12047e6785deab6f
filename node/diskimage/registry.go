package diskimage

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	k8schain "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	corev1 "k8s.io/api/core/v1"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/node/diskimage/imagefile"
)

// A registry source is an OCI image in KubeVirt's container-disk layout:
// one regular file under /disk/, raw or qcow2, in the image's layers. The
// reference's digest is the integrity check: go-containerregistry verifies
// the manifest (and an index's child) against it, and each layer is
// verified here against the manifest's digest and size once read to its
// end; the disk's bytes are written while they stream, as an HTTP image's
// are before its sha256 is known, and a mismatch fails the population,
// which removes the base.

// layerSlack is what a layer's tar stream may hold besides its disk file:
// the directories, metadata and small files of a container disk.
const layerSlack = 64 << 20

// layerBound is the most a layer's decompressed tar stream may take for a
// base of limit bytes: the disk file (at most the qcow2 scratch bound, or
// the base's size for a raw one) and slack. Files of other directories are
// skipped, not stored, but a bomb of them must not take the node's CPU for
// hours.
func layerBound(limit int64) int64 {
	return scratchBound(limit, qcow2ScratchSlack) + layerSlack
}

// platform is the platform an image index resolves to: the node's. A
// container disk's bytes are a guest's, but a multi-platform image holds
// each architecture's guest.
func platform() v1.Platform {
	return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
}

// pull is a registry image resolved to its manifest's layers, with the
// client that fetches its blobs.
type pull struct {
	ref    name.Digest
	client *http.Client
	layers []v1.Descriptor
}

func (w *Writer) populateRegistry(ctx context.Context, src *thinlvmv1.RegistrySource, format thinlvmv1.ImageFormat, device string, limit int64, prog *Progress) (int64, error) {
	ref, err := parseImage(src.Image)
	if err != nil {
		return 0, err
	}
	roots, err := w.caPool(ctx, src.CAConfigMap)
	if err != nil {
		return 0, err
	}
	auth, err := w.pullAuth(ctx, src.PullSecret, ref.Context())
	if err != nil {
		return 0, err
	}
	base := w.httpClient().Transport
	if roots != nil {
		t := w.newTransport(roots)
		defer t.CloseIdleConnections()
		base = t
	}
	base = cleartextGuard{next: base}
	var scratch *qcow2Scratch
	if format == thinlvmv1.FormatQCOW2 {
		// Before the pull: without qemu-img there is no point.
		if scratch, err = w.newQCOW2Scratch(); err != nil {
			return 0, err
		}
		defer scratch.remove()
	}
	p, err := w.resolve(ctx, ref, auth, base)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, l := range p.layers {
		total += l.Size
	}
	prog.Total.Store(total)

	var n int64
	sink := func(disk io.Reader) error {
		if scratch != nil {
			return scratch.fill(disk, limit)
		}
		written, err := writeRaw(disk, device, limit)
		n = written
		return err
	}
	if err := w.scan(ctx, p, sink, limit, prog); err != nil {
		return n, err
	}
	if scratch != nil {
		return scratch.convert(ctx, device, limit)
	}
	return n, nil
}

// parseImage parses a registry source's image, which must be pinned by a
// sha256 digest.
func parseImage(image string) (name.Digest, error) {
	if !strings.Contains(image, "@") {
		return name.Digest{}, fmt.Errorf("%w: image %q is not pinned by digest: give it as registry/repository@sha256:<hex>, the digest is its integrity check", ErrPermanent, image)
	}
	ref, err := name.NewDigest(image)
	if err != nil {
		return name.Digest{}, fmt.Errorf("%w: image %q: %w", ErrPermanent, image, err)
	}
	if !strings.HasPrefix(ref.DigestStr(), "sha256:") {
		return name.Digest{}, fmt.Errorf("%w: image %q: the digest must be sha256", ErrPermanent, image)
	}
	return ref, nil
}

// resolve authenticates to the registry and reads the image's manifest (the
// node's platform's, for an index), retrying transient failures as a
// download does.
func (w *Writer) resolve(ctx context.Context, ref name.Digest, auth authn.Authenticator, base http.RoundTripper) (*pull, error) {
	for failures := 1; ; failures++ {
		p, err := w.resolveOnce(ctx, ref, auth, base)
		switch {
		case err == nil:
			return p, nil
		case !transient(err):
			if permanent(err) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %w", ErrPermanent, err)
		case ctx.Err() != nil:
			return nil, err
		case failures >= w.attempts():
			return nil, fmt.Errorf("image %s: %d attempts failed, last: %w", ref, failures, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(w.backoff() << (failures - 1)):
		}
	}
}

func (w *Writer) resolveOnce(ctx context.Context, ref name.Digest, auth authn.Authenticator, base http.RoundTripper) (*pull, error) {
	reg := ref.Context().Registry
	// The handshake (ping, token) once: remote and the blob downloads
	// share its transport, which sends the credentials to the registry's
	// host only, never to the storage its blobs redirect to.
	rt, err := transport.NewWithContext(ctx, reg, auth, base, []string{ref.Scope(transport.PullScope)})
	if err != nil {
		return nil, fmt.Errorf("image %s: authenticate to %s: %w", ref, reg, err)
	}
	desc, err := remote.Get(ref, remote.WithTransport(rt), remote.WithContext(ctx), remote.WithPlatform(platform()))
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	img, err := desc.Image()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	if len(m.Layers) == 0 {
		return nil, fmt.Errorf("%w: image %s refused: it has no layers, so no disk", ErrPermanent, ref)
	}
	for _, l := range m.Layers {
		switch {
		case !l.MediaType.IsLayer():
			return nil, fmt.Errorf("%w: image %s refused: layer %s is a %q, not an image layer", ErrPermanent, ref, l.Digest, l.MediaType)
		case !l.MediaType.IsDistributable() || len(l.URLs) > 0:
			return nil, fmt.Errorf("%w: image %s refused: layer %s is not distributable (it is fetched from elsewhere)", ErrPermanent, ref, l.Digest)
		case l.Digest.Algorithm != "sha256" || len(l.Digest.Hex) != sha256.Size*2:
			return nil, fmt.Errorf("%w: image %s refused: layer %s is not named by a sha256 digest", ErrPermanent, ref, l.Digest)
		case l.Size < 0:
			return nil, fmt.Errorf("%w: image %s refused: layer %s has a negative size", ErrPermanent, ref, l.Digest)
		}
	}
	return &pull{ref: ref, client: &http.Client{Transport: rt, CheckRedirect: checkRegistryRedirect}, layers: m.Layers}, nil
}

// transient tells whether a registry error may go away by itself: a
// registry's temporary status (5xx, 429), a connection that failed or
// broke, a timeout. Others (a refused address, 4xx, a certificate not
// trusted, a manifest that does not match its digest) fail the population
// at once.
func transient(err error) bool {
	if permanent(err) {
		return false
	}
	var te *transport.Error
	if errors.As(err, &te) {
		return te.Temporary()
	}
	var oe *net.OpError
	var de *net.DNSError
	var ne net.Error
	return errors.As(err, &oe) || errors.As(err, &de) || (errors.As(err, &ne) && ne.Timeout()) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// checkRegistryRedirect follows a registry's redirects, which send blobs to
// its storage's host (a CDN, a bucket): a few, never from https to http,
// and never from another host to a private or loopback address literal (as
// go-containerregistry's own check). The dialer refuses the blocked
// addresses, and the registry's credentials stay with its host.
func checkRegistryRedirect(req *http.Request, via []*http.Request) error {
	if err := checkHop(req, via); err != nil {
		return err
	}
	if ip, err := netip.ParseAddr(req.URL.Hostname()); err == nil && !strings.EqualFold(req.URL.Hostname(), via[0].URL.Hostname()) &&
		(ip.IsPrivate() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified()) {
		return fmt.Errorf("%w: redirect to %s refused: from %s to a private address", ErrPermanent, redactURL(req.URL.String()), via[0].URL.Hostname())
	}
	return nil
}

// scan reads the image's layers, top layer first, and hands the disk file's
// bytes to sink as they stream. It reads every layer to its end: to verify
// its digest, and to refuse a second disk file below.
func (w *Writer) scan(ctx context.Context, p *pull, sink func(io.Reader) error, limit int64, prog *Progress) error {
	tree := newDiskTree()
	var done int64
	for i := len(p.layers) - 1; i >= 0; i-- {
		if err := w.scanLayer(ctx, p, p.layers[i], tree, sink, limit, prog, done); err != nil {
			return err
		}
		done += p.layers[i].Size
		tree.endLayer()
	}
	if tree.disk == "" {
		return fmt.Errorf("%w: image %s refused: it holds no disk file under /disk/ (KubeVirt's container-disk layout)", ErrPermanent, p.ref)
	}
	return nil
}

func (w *Writer) scanLayer(ctx context.Context, p *pull, l v1.Descriptor, tree *diskTree, sink func(io.Reader) error, limit int64, prog *Progress, before int64) error {
	repo := p.ref.Context()
	// Built as https: the registry's transport sends it over http when the
	// registry speaks only that.
	u := "https://" + repo.RegistryStr() + "/v2/" + repo.RepositoryStr() + "/blobs/" + l.Digest.String()
	layerProg := &Progress{}
	d := w.newDownload(ctx, p.client, u, "layer "+l.Digest.String()+" of "+repo.Name(), layerProg)
	defer d.Close()
	body := &layerBody{r: io.LimitReader(d, l.Size+1), sum: sha256.New(), prog: prog, layer: layerProg, before: before}
	// verified reads the layer to its end and checks its size and digest.
	verified := func() error {
		if _, err := io.Copy(io.Discard, body); err != nil {
			return err
		}
		if body.n != l.Size {
			return fmt.Errorf("%w: layer %s of %s: the registry sent more or fewer bytes than the manifest's %d", ErrPermanent, l.Digest, p.ref, l.Size)
		}
		if got := hex.EncodeToString(body.sum.Sum(nil)); got != l.Digest.Hex {
			return fmt.Errorf("%w: layer %s of %s: digest mismatch: its bytes' sha256 is %s", ErrPermanent, l.Digest, p.ref, got)
		}
		return nil
	}
	// A layer whose bytes were changed reads as a broken archive or
	// compressed stream: its digest says why.
	broken := func(err error) error {
		if verr := verified(); verr != nil {
			return verr
		}
		return fmt.Errorf("%w: layer %s of %s: %w", ErrPermanent, l.Digest, p.ref, err)
	}

	dec, _, err := imagefile.Decompress(body)
	if err != nil {
		return broken(err)
	}
	if c, ok := dec.(io.Closer); ok {
		defer c.Close() // a zstd decoder's goroutines end only with Close
	}
	bound := layerBound(limit)
	archive := &boundedReader{r: dec, left: bound, err: fmt.Errorf("%w: layer %s of %s refused: it expands past %d bytes, more than a %d-byte base needs",
		ErrPermanent, l.Digest, p.ref, bound, limit)}
	// failed tells an error of the layer's contents (a broken archive or
	// compressed stream) from the download's, the bound's and the
	// device's.
	failed := func(err error) error {
		if body.err == nil && (archive.srcErr != nil || errors.Is(err, tar.ErrHeader) || errors.Is(err, io.ErrUnexpectedEOF)) {
			return broken(err)
		}
		return fmt.Errorf("image %s: layer %s: %w", p.ref, l.Digest, err)
	}
	tr := tar.NewReader(archive)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return failed(err)
		}
		if err := tree.entry(h, tr, sink); err != nil {
			return failed(err)
		}
	}
	return verified()
}

// layerBody is a layer's bytes as they arrive: hashed, counted and
// reported as progress.
type layerBody struct {
	r      io.Reader
	sum    hash.Hash
	n      int64
	prog   *Progress
	layer  *Progress // the download's own
	before int64     // the bytes of the layers read before this one
	err    error     // the download's, once it failed
}

func (b *layerBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	b.sum.Write(p[:n])
	b.n += int64(n)
	b.prog.Done.Store(b.before + b.layer.Done.Load())
	return n, err
}

// boundedReader reads at most left bytes of r, then fails with err.
type boundedReader struct {
	r      io.Reader
	left   int64
	err    error
	srcErr error // r's, once it failed
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, b.err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.srcErr = err
	}
	b.left -= int64(n)
	return n, err
}

// diskTree follows /disk/ through an image's layers, top layer first, as
// the container runtime would lay them: an upper layer's entry hides a
// lower layer's of the same path, and its whiteouts (.wh.<name>) and opaque
// markers (.wh..wh..opq) hide the lower layers' entries below them.
type diskTree struct {
	// Of the layers above: the paths they hold (true for a directory),
	// whiteouts, and opaque directories.
	upper    map[string]bool
	whiteout map[string]bool
	opaque   map[string]bool
	// Of the layer being read, merged into the above at its end.
	layer, layerWhiteout, layerOpaque map[string]bool
	// disk is the disk file's path, once found.
	disk string
}

func newDiskTree() *diskTree {
	return &diskTree{upper: map[string]bool{}, whiteout: map[string]bool{}, opaque: map[string]bool{},
		layer: map[string]bool{}, layerWhiteout: map[string]bool{}, layerOpaque: map[string]bool{}}
}

// Whiteout names, as the OCI image spec defines them.
const (
	whiteoutPrefix = ".wh."
	opaqueWhiteout = ".wh..wh..opq"
)

// inDisk tells whether p (clean, relative to the image's root) is /disk or
// below it.
func inDisk(p string) bool {
	return p == "disk" || strings.HasPrefix(p, "disk/")
}

// entry reads one tar entry of the current layer and hands a visible disk
// file's bytes to sink.
func (t *diskTree) entry(h *tar.Header, r io.Reader, sink func(io.Reader) error) error {
	if slices.Contains(strings.Split(h.Name, "/"), "..") {
		return fmt.Errorf("%w: image refused: entry %q has a .. element", ErrPermanent, h.Name)
	}
	p := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
	dir, base := path.Split(p)
	dir = strings.TrimSuffix(dir, "/")
	if base == opaqueWhiteout {
		if inDisk(dir) {
			t.layerOpaque[dir] = true
		}
		return nil
	}
	if target, ok := strings.CutPrefix(base, whiteoutPrefix); ok {
		if target = path.Join(dir, target); inDisk(target) {
			t.layerWhiteout[target] = true
		}
		return nil
	}
	if !inDisk(p) || t.hidden(p) {
		return nil
	}
	isDir := h.Typeflag == tar.TypeDir
	if wasDir, dup := t.layer[p]; dup && !(wasDir && isDir) {
		return fmt.Errorf("%w: image refused: /%s is twice in one layer", ErrPermanent, p)
	}
	t.layer[p] = isDir
	switch h.Typeflag {
	case tar.TypeDir:
		return nil
	case tar.TypeReg, tar.TypeGNUSparse:
		if p == "disk" {
			return nil // a file named /disk: no directory, so no disk below it
		}
		if t.disk != "" {
			return fmt.Errorf("%w: image refused: it holds several disk files, /%s and /%s; a container disk holds one", ErrPermanent, t.disk, p)
		}
		t.disk = p
		return sink(r)
	case tar.TypeSymlink:
		return fmt.Errorf("%w: image refused: /%s is a symbolic link (to %q); the disk must be a regular file", ErrPermanent, p, h.Linkname)
	case tar.TypeLink:
		return fmt.Errorf("%w: image refused: /%s is a hard link (to %q); the disk must be a regular file", ErrPermanent, p, h.Linkname)
	}
	return fmt.Errorf("%w: image refused: /%s is a device, fifo or other special file (tar type %q); the disk must be a regular file", ErrPermanent, p, h.Typeflag)
}

// hidden tells whether an upper layer hides the current layer's entry p.
func (t *diskTree) hidden(p string) bool {
	if _, ok := t.upper[p]; ok || t.whiteout[p] {
		return true
	}
	for a := path.Dir(p); a != "."; a = path.Dir(a) {
		if isDir, ok := t.upper[a]; t.whiteout[a] || t.opaque[a] || (ok && !isDir) {
			return true
		}
	}
	return false
}

func (t *diskTree) endLayer() {
	for p, isDir := range t.layer {
		if _, ok := t.upper[p]; !ok {
			t.upper[p] = isDir
		}
	}
	for p := range t.layerWhiteout {
		t.whiteout[p] = true
	}
	for p := range t.layerOpaque {
		t.opaque[p] = true
	}
	clear(t.layer)
	clear(t.layerWhiteout)
	clear(t.layerOpaque)
}

// pullAuth reads the pull Secret name (kubernetes.io/dockerconfigjson, or
// the older kubernetes.io/dockercfg) and returns its credentials for repo,
// chosen by the kubelet's rules (go-containerregistry's Kubernetes
// keychain): an entry's host, port and glob per name segment
// (*.example.com) must match, and of the entries that do, the one with the
// longest path that prefixes the repository's wins (registry.example.com/
// team-a over registry.example.com). None when name is empty.
func (w *Writer) pullAuth(ctx context.Context, secret string, repo name.Repository) (authn.Authenticator, error) {
	if secret == "" {
		return authn.Anonymous, nil
	}
	s, err := w.secret(ctx, secret)
	if err != nil {
		return nil, err
	}
	if s.Type != corev1.SecretTypeDockerConfigJson && s.Type != corev1.SecretTypeDockercfg {
		return nil, fmt.Errorf("%w: Secret %s/%s is of type %q, not %s", ErrPermanent, s.Namespace, s.Name, s.Type, corev1.SecretTypeDockerConfigJson)
	}
	keychain, err := k8schain.NewFromPullSecrets(ctx, []corev1.Secret{*s})
	if err != nil {
		return nil, fmt.Errorf("%w: Secret %s/%s: %w", ErrPermanent, s.Namespace, s.Name, err)
	}
	auth, err := keychain.Resolve(repo)
	if err != nil {
		return nil, fmt.Errorf("%w: Secret %s/%s: %w", ErrPermanent, s.Namespace, s.Name, err)
	}
	if auth == authn.Anonymous {
		return nil, fmt.Errorf("%w: Secret %s/%s has no credentials for %s", ErrPermanent, s.Namespace, s.Name, repo.Name())
	}
	return auth, nil
}

// cleartextGuard refuses to send credentials over plain http to anything
// but this node's loopback: go-containerregistry falls back to http for a
// registry on a private or loopback address whose https fails, and a pull
// secret would then cross the network in clear. Its transport package
// sends credentials in an Authorization header (basic, or the bearer token
// a token server returned), and in the form body of the OAuth2 token
// exchange (a POST: an identitytoken as refresh_token, or a username and
// password); a token server's realm may carry others in its query. An
// anonymous pull needs none of these, so a plain-http request to another
// host that has any of them is refused, before its next transport dials.
type cleartextGuard struct{ next http.RoundTripper }

func (g cleartextGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !loopbackHost(req.URL.Hostname()) {
		if what := credentialsOf(req); what != "" {
			// A RoundTripper closes the body, even on error.
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, fmt.Errorf("%w: the registry %s answers over plain http only: its credentials are not sent in clear (the %s request carries %s)",
				ErrPermanent, req.URL.Host, req.Method, what)
		}
	}
	return g.next.RoundTrip(req)
}

// credentialQuery are the query parameters that carry a credential in the
// token flows a registry client speaks (OAuth2's and Docker's token
// authentication), compared without case.
var credentialQuery = []string{"access_token", "refresh_token", "id_token", "token", "password", "client_secret"}

// credentialsOf says what of req may be a credential ("" for nothing): its
// Authorization header, a body (an anonymous pull only GETs and HEADs, so a
// body is the token exchange's form), or a credential in its query.
func credentialsOf(req *http.Request) string {
	if req.Header.Get("Authorization") != "" {
		return "an Authorization header"
	}
	if req.Body != nil && req.Body != http.NoBody {
		return "a body (an OAuth2 token exchange's refresh token or password)"
	}
	for k := range req.URL.Query() {
		if slices.ContainsFunc(credentialQuery, func(c string) bool { return strings.EqualFold(k, c) }) {
			return fmt.Sprintf("a credential in its query (%s)", k)
		}
	}
	return ""
}

func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

package diskimage

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"

	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// entry is a tar entry of a test layer; a regular file unless typeflag
// says otherwise.
type entry struct {
	name     string
	body     []byte
	typeflag byte
	linkname string
}

func dir(name string) entry { return entry{name: name, typeflag: tar.TypeDir} }

func layerTar(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typeflag, Linkname: e.linkname, Mode: 0o644, Size: int64(len(e.body)), ModTime: time.Unix(1e9, 0)}
		switch e.typeflag {
		case 0:
			h.Typeflag = tar.TypeReg
		case tar.TypeDir:
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// layer is a gzip-compressed layer of entries.
func layer(t *testing.T, entries ...entry) v1.Layer {
	t.Helper()
	return tarLayer(t, layerTar(t, entries...))
}

func tarLayer(t *testing.T, b []byte, opts ...tarball.LayerOption) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// image is an image of layers, the first one lowest.
func image(t *testing.T, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// diskLayer is the layer of a container disk as its documentation builds
// it: /disk/ holding one file.
func diskLayer(t *testing.T, file string, body []byte) v1.Layer {
	t.Helper()
	return layer(t, dir("disk/"), entry{name: "disk/" + file, body: body})
}

// startRegistry serves an in-process registry (TLS when tls is set),
// wrapped by wrap when it is not nil.
func startRegistry(t *testing.T, tls bool, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	var srv *httptest.Server
	if tls {
		srv = httptest.NewUnstartedServer(h)
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes the tests refuse
		srv.StartTLS()
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	return srv
}

func hostOf(srv *httptest.Server) string {
	return strings.TrimPrefix(strings.TrimPrefix(srv.URL, "http://"), "https://")
}

// push writes an image or index to the registry and returns its reference
// by digest.
func push(t *testing.T, srv *httptest.Server, repo string, art remote.Taggable, opts ...remote.Option) string {
	t.Helper()
	ref, err := name.ParseReference(hostOf(srv) + "/" + repo + ":latest")
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, remote.WithTransport(srv.Client().Transport), remote.WithContext(t.Context()))
	var digest v1.Hash
	switch a := art.(type) {
	case v1.Image:
		err = remote.Write(ref, a, opts...)
		if err == nil {
			digest, err = a.Digest()
		}
	case v1.ImageIndex:
		err = remote.WriteIndex(ref, a, opts...)
		if err == nil {
			digest, err = a.Digest()
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return hostOf(srv) + "/" + repo + "@" + digest.String()
}

func registrySpec(image string, format thinlvmv1.ImageFormat) *thinlvmv1.GoldenImageSpec {
	return &thinlvmv1.GoldenImageSpec{Source: thinlvmv1.ImageSource{Registry: &thinlvmv1.RegistrySource{Image: image}},
		Format: format, Size: resource.MustParse("8Mi")}
}

// registryWriter is a Writer for these tests: fast retries, loopback only.
func registryWriter(t *testing.T, objs ...client.Object) *Writer {
	return &Writer{Attempts: 3, Backoff: time.Millisecond, dialHook: (&dials{t: t}).hook, Credentials: objects(t, objs...)}
}

func layerSizes(t *testing.T, img v1.Image) int64 {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, l := range m.Layers {
		n += l.Size
	}
	return n
}

func TestPopulateRegistryRaw(t *testing.T) {
	raw := testImage()
	other := bytes.Repeat([]byte("old disk"), 1024)
	foreignArch := "arm64"
	if runtime.GOARCH == "arm64" {
		foreignArch = "amd64"
	}
	tests := []struct {
		name  string
		image func(t *testing.T) v1.Image
	}{
		{name: "raw in /disk/", image: func(t *testing.T) v1.Image {
			return image(t, diskLayer(t, "disk.img", raw))
		}},
		{name: "gzip-compressed raw", image: func(t *testing.T) v1.Image {
			return image(t, diskLayer(t, "disk.img.gz", compress(t, "gzip", raw)))
		}},
		{name: "absolute paths, uncompressed layer", image: func(t *testing.T) v1.Image {
			return image(t, static.NewLayer(layerTar(t, dir("/disk"), entry{name: "/disk/rhel.raw", body: raw}), types.DockerUncompressedLayer))
		}},
		{name: "zstd layer", image: func(t *testing.T) v1.Image {
			return image(t, tarLayer(t, layerTar(t, dir("./disk/"), entry{name: "./disk/disk.img", body: raw}), tarball.WithCompression(compression.ZStd)))
		}},
		{name: "files outside /disk/ and a base layer", image: func(t *testing.T) v1.Image {
			base := layer(t, dir("etc/"), entry{name: "etc/os-release", body: []byte("ID=test\n")},
				entry{name: "etc/sda", typeflag: tar.TypeSymlink, linkname: "/dev/sda"}, entry{name: "dev/null", typeflag: tar.TypeChar})
			return image(t, base, diskLayer(t, "disk.img", raw))
		}},
		{name: "a later layer's file of the same name wins", image: func(t *testing.T) v1.Image {
			return image(t, diskLayer(t, "disk.img", other), diskLayer(t, "disk.img", raw))
		}},
		{name: "a whiteout removes the lower disk", image: func(t *testing.T) v1.Image {
			return image(t, diskLayer(t, "old.img", other), layer(t, entry{name: "disk/.wh.old.img"}, entry{name: "disk/new.img", body: raw}))
		}},
		{name: "an opaque directory hides the lower disk", image: func(t *testing.T) v1.Image {
			return image(t, diskLayer(t, "old.img", other), layer(t, dir("disk/"), entry{name: "disk/.wh..wh..opq"}, entry{name: "disk/new.img", body: raw}))
		}},
		{name: "a whiteout of /disk removes the lower directory", image: func(t *testing.T) v1.Image {
			return image(t, diskLayer(t, "old.img", other), layer(t, entry{name: ".wh.disk"}), diskLayer(t, "new.img", raw))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startRegistry(t, false, nil)
			img := tt.image(t)
			ref := push(t, srv, "disks/test", img)
			dev := device(t, 8<<20)
			var prog Progress
			n, err := registryWriter(t).Populate(t.Context(), registrySpec(ref, thinlvmv1.FormatRaw), dev, 8<<20, &prog)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(len(raw)) {
				t.Errorf("populated %d bytes, want %d", n, len(raw))
			}
			checkDevice(t, dev, raw)
			if total := layerSizes(t, img); prog.Done.Load() != total || prog.Total.Load() != total {
				t.Errorf("progress %d of %d, want %d of %d", prog.Done.Load(), prog.Total.Load(), total, total)
			}
		})
	}

	// An index resolves to the node's platform's image.
	t.Run("index", func(t *testing.T) {
		srv := startRegistry(t, false, nil)
		idx := mutate.AppendManifests(empty.Index,
			mutate.IndexAddendum{Add: image(t, diskLayer(t, "disk.img", other)), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: foreignArch}}},
			mutate.IndexAddendum{Add: image(t, diskLayer(t, "disk.img", raw)), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}})
		ref := push(t, srv, "disks/multi", idx)
		dev := device(t, 8<<20)
		if _, err := registryWriter(t).Populate(t.Context(), registrySpec(ref, thinlvmv1.FormatRaw), dev, 8<<20, &Progress{}); err != nil {
			t.Fatal(err)
		}
		checkDevice(t, dev, raw)
	})
}

func TestPopulateRegistryRefuses(t *testing.T) {
	raw := testImage()
	qcowHeader := append([]byte("QFI\xfb\x00\x00\x00\x03"), make([]byte, 4096)...)
	tests := []struct {
		name  string
		image func(t *testing.T) v1.Image
		// ref makes the reference from the pushed one; nil keeps it.
		ref  func(pushed string) string
		size int64
		msg  string
	}{
		{name: "reference without a digest", image: func(t *testing.T) v1.Image { return image(t, diskLayer(t, "disk.img", raw)) },
			ref: func(p string) string { return strings.Split(p, "@")[0] + ":latest" }, msg: "is not pinned by digest"},
		{name: "digest the registry does not have", image: func(t *testing.T) v1.Image { return image(t, diskLayer(t, "disk.img", raw)) },
			ref: func(p string) string { return strings.Split(p, "@")[0] + "@sha256:" + strings.Repeat("0", 64) }, msg: "MANIFEST_UNKNOWN"},
		{name: "no disk", image: func(t *testing.T) v1.Image {
			return image(t, layer(t, dir("etc/"), entry{name: "etc/disk.img", body: raw}))
		},
			msg: "it holds no disk file under /disk/"},
		{name: "no disk left after a whiteout", image: func(t *testing.T) v1.Image {
			return image(t, diskLayer(t, "disk.img", raw), layer(t, entry{name: "disk/.wh.disk.img"}))
		}, msg: "it holds no disk file under /disk/"},
		{name: "two disks in a layer", image: func(t *testing.T) v1.Image {
			return image(t, layer(t, dir("disk/"), entry{name: "disk/a.img", body: raw}, entry{name: "disk/b.img", body: raw}))
		}, msg: "several disk files, /disk/a.img and /disk/b.img"},
		{name: "two disks in two layers", image: func(t *testing.T) v1.Image {
			return image(t, diskLayer(t, "a.img", raw), diskLayer(t, "b.img", raw))
		}, msg: "several disk files, /disk/b.img and /disk/a.img"},
		{name: "the same disk twice in a layer", image: func(t *testing.T) v1.Image {
			return image(t, layer(t, entry{name: "disk/a.img", body: raw}, entry{name: "./disk/a.img", body: raw}))
		}, msg: "/disk/a.img is twice in one layer"},
		{name: "symlink", image: func(t *testing.T) v1.Image {
			return image(t, layer(t, dir("disk/"), entry{name: "disk/disk.img", typeflag: tar.TypeSymlink, linkname: "/dev/sda"}))
		}, msg: `/disk/disk.img is a symbolic link (to "/dev/sda")`},
		{name: "symlinked /disk", image: func(t *testing.T) v1.Image {
			return image(t, layer(t, entry{name: "disk", typeflag: tar.TypeSymlink, linkname: "/var/lib"}))
		}, msg: "/disk is a symbolic link"},
		{name: "hard link", image: func(t *testing.T) v1.Image {
			return image(t, layer(t, entry{name: "etc/shadow", body: []byte("x")}, entry{name: "disk/disk.img", typeflag: tar.TypeLink, linkname: "etc/shadow"}))
		}, msg: "/disk/disk.img is a hard link"},
		{name: "device", image: func(t *testing.T) v1.Image {
			return image(t, layer(t, entry{name: "disk/disk.img", typeflag: tar.TypeBlock}))
		}, msg: "/disk/disk.img is a device, fifo or other special file"},
		{name: "path with ..", image: func(t *testing.T) v1.Image {
			return image(t, layer(t, entry{name: "disk/../disk/disk.img", body: raw}))
		}, msg: `"disk/../disk/disk.img" has a .. element`},
		{name: "qcow2 declared raw", image: func(t *testing.T) v1.Image { return image(t, diskLayer(t, "disk.qcow2", qcowHeader)) },
			msg: "it is qcow2 (it starts with qcow2's magic) and the GoldenImage says raw: set spec.format to qcow2"},
		{name: "disk larger than the base", image: func(t *testing.T) v1.Image { return image(t, diskLayer(t, "disk.img", raw)) },
			size: 2 << 20, msg: "larger than the base"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startRegistry(t, false, nil)
			ref := push(t, srv, "disks/test", tt.image(t))
			if tt.ref != nil {
				ref = tt.ref(ref)
			}
			size := tt.size
			if size == 0 {
				size = 8 << 20
			}
			_, err := registryWriter(t).Populate(t.Context(), registrySpec(ref, thinlvmv1.FormatRaw), device(t, size), size, &Progress{})
			if err == nil || !strings.Contains(err.Error(), tt.msg) || !errors.Is(err, ErrPermanent) {
				t.Errorf("error %v, want a permanent one with %q", err, tt.msg)
			}
		})
	}
}

// recorded is what the wrapped registry answers to r.
func recorded(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func isBlobGet(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/sha256:")
}

// TestPopulateRegistryVerifies: bytes that do not match their digest fail
// the population, whether in the manifest or in a layer; the layer's
// after its disk was written.
func TestPopulateRegistryVerifies(t *testing.T) {
	raw := testImage()
	t.Run("layer", func(t *testing.T) {
		for _, compressed := range []bool{true, false} {
			srv := startRegistry(t, false, func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if !isBlobGet(r) {
						h.ServeHTTP(w, r)
						return
					}
					rec := recorded(h, r)
					b := rec.Body.Bytes()
					b[len(b)/2] ^= 0xff // a byte changed on the way
					w.Header().Set("Content-Length", rec.Header().Get("Content-Length"))
					w.WriteHeader(rec.Code)
					_, _ = w.Write(b)
				})
			})
			l := diskLayer(t, "disk.img", raw)
			if !compressed {
				l = static.NewLayer(layerTar(t, entry{name: "disk/disk.img", body: raw}), types.DockerUncompressedLayer)
			}
			ref := push(t, srv, "disks/test", image(t, l))
			_, err := registryWriter(t).Populate(t.Context(), registrySpec(ref, thinlvmv1.FormatRaw), device(t, 8<<20), 8<<20, &Progress{})
			if msg := "digest mismatch"; err == nil || !strings.Contains(err.Error(), msg) || !errors.Is(err, ErrPermanent) {
				t.Errorf("compressed %t: error %v, want a permanent one with %q", compressed, err, msg)
			}
		}
	})
	t.Run("manifest", func(t *testing.T) {
		var served string // another image's reference by digest
		srv := startRegistry(t, false, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/manifests/sha256:") && served != "" {
					other := r.Clone(r.Context())
					other.URL.Path = "/v2/disks/other/manifests/" + strings.Split(served, "@")[1]
					rec := recorded(h, other)
					w.Header().Set("Content-Type", rec.Header().Get("Content-Type"))
					w.WriteHeader(rec.Code)
					_, _ = w.Write(rec.Body.Bytes())
					return
				}
				h.ServeHTTP(w, r)
			})
		})
		ref := push(t, srv, "disks/test", image(t, diskLayer(t, "disk.img", raw)))
		served = push(t, srv, "disks/other", image(t, diskLayer(t, "disk.img", []byte("another disk"))))
		_, err := registryWriter(t).Populate(t.Context(), registrySpec(ref, thinlvmv1.FormatRaw), device(t, 8<<20), 8<<20, &Progress{})
		if msg := "does not match requested digest"; err == nil || !strings.Contains(err.Error(), msg) || !errors.Is(err, ErrPermanent) {
			t.Errorf("error %v, want a permanent one with %q", err, msg)
		}
	})
}

// TestPopulateRegistryRetries: a manifest request that fails for a while
// is asked again, and a layer whose connection breaks is resumed where it
// broke (as a registry serves Range: bytes=N-).
func TestPopulateRegistryRetries(t *testing.T) {
	raw := testImage()
	var manifests, blobs atomic.Int32
	var mu sync.Mutex
	var ranges []string
	srv := startRegistry(t, false, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/manifests/sha256:"):
				if manifests.Add(1) == 1 {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
			case isBlobGet(r):
				get := r.Clone(r.Context())
				get.Header.Del("Range")
				b := recorded(h, get).Body.Bytes()
				if blobs.Add(1) == 1 {
					w.Header().Set("Content-Length", strconv.Itoa(len(b)))
					w.WriteHeader(http.StatusOK)
					_, _ = w.Write(b[:len(b)/2])
					w.(http.Flusher).Flush()
					panic(http.ErrAbortHandler) // the connection breaks
				}
				mu.Lock()
				ranges = append(ranges, r.Header.Get("Range"))
				mu.Unlock()
				http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	img := image(t, diskLayer(t, "disk.img", raw))
	ref := push(t, srv, "disks/test", img)
	manifests.Store(0)
	dev := device(t, 8<<20)
	var prog Progress
	if _, err := registryWriter(t).Populate(t.Context(), registrySpec(ref, thinlvmv1.FormatRaw), dev, 8<<20, &prog); err != nil {
		t.Fatal(err)
	}
	checkDevice(t, dev, raw)
	half := "bytes=" + strconv.FormatInt(layerSizes(t, img)/2, 10) + "-"
	if manifests.Load() != 2 || len(ranges) != 1 || ranges[0] != half {
		t.Errorf("%d manifest requests, blob resumed with %q; want 2 and [%q]", manifests.Load(), ranges, half)
	}
	if total := layerSizes(t, img); prog.Done.Load() != total {
		t.Errorf("progress %d of %d, want %d", prog.Done.Load(), prog.Total.Load(), total)
	}
}

// dockerConfig is a pull Secret for registry.
func dockerConfig(name, registry, user, pass string) *corev1.Secret {
	cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{registry: map[string]string{
		"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))}}})
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: cfg}}
}

// TestPopulateRegistryPullSecret pulls from a registry that wants basic
// credentials, and whose blobs redirect to another host (as registries send
// them to their storage): the pull Secret's credentials go to the registry
// only.
func TestPopulateRegistryPullSecret(t *testing.T) {
	raw := testImage()
	var mu sync.Mutex
	var storageAuth []string
	var inner http.Handler
	storage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		storageAuth = append(storageAuth, r.Header.Get("Authorization"))
		mu.Unlock()
		r.URL.Path = strings.TrimPrefix(r.URL.Path, "/storage")
		r.SetBasicAuth("alice", "s3cret") // the storage's own way in, for this test
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(storage.Close)
	_, storagePort, _ := net.SplitHostPort(storage.Listener.Addr().String())
	srv := startRegistry(t, false, func(h http.Handler) http.Handler {
		inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != "alice" || p != "s3cret" {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
			h.ServeHTTP(w, r)
		})
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if isBlobGet(r) && r.Header.Get("Authorization") != "" {
				http.Redirect(w, r, "http://localhost:"+storagePort+"/storage"+r.URL.Path, http.StatusTemporaryRedirect)
				return
			}
			inner.ServeHTTP(w, r)
		})
	})
	ref := push(t, srv, "private/disk", image(t, diskLayer(t, "disk.img", raw)), remote.WithAuth(&authn.Basic{Username: "alice", Password: "s3cret"}))
	host := hostOf(srv)

	t.Run("pulled with the Secret", func(t *testing.T) {
		w := registryWriter(t, dockerConfig("pull", host, "alice", "s3cret"))
		spec := registrySpec(ref, thinlvmv1.FormatRaw)
		spec.Source.Registry.PullSecret = "pull"
		dev := device(t, 8<<20)
		if _, err := w.Populate(t.Context(), spec, dev, 8<<20, &Progress{}); err != nil {
			t.Fatal(err)
		}
		checkDevice(t, dev, raw)
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]string{""}, storageAuth); diff != "" {
			t.Errorf("Authorization the blob's storage got (-want +got):\n%s", diff)
		}
	})
	secretOfType := dockerConfig("opaque", host, "alice", "s3cret")
	secretOfType.Type = corev1.SecretTypeOpaque
	tests := []struct {
		name, secret string
		objs         []client.Object
		msg          string
	}{
		{name: "no Secret", msg: "UNAUTHORIZED"},
		{name: "missing Secret", secret: "pull", msg: "Secret thinlvm-system/pull not found"},
		{name: "Secret for another registry", secret: "pull", objs: []client.Object{dockerConfig("pull", "registry.example.org", "alice", "s3cret")},
			msg: "Secret thinlvm-system/pull has no credentials for " + host + "/private/disk"},
		{name: "wrong credentials", secret: "pull", objs: []client.Object{dockerConfig("pull", "http://"+host+"/v2/", "alice", "guess")}, msg: "UNAUTHORIZED"},
		{name: "Secret of another type", secret: "opaque", objs: []client.Object{secretOfType}, msg: `is of type "Opaque", not kubernetes.io/dockerconfigjson`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := registrySpec(ref, thinlvmv1.FormatRaw)
			spec.Source.Registry.PullSecret = tt.secret
			_, err := registryWriter(t, tt.objs...).Populate(t.Context(), spec, device(t, 8<<20), 8<<20, &Progress{})
			if err == nil || !strings.Contains(err.Error(), tt.msg) || !errors.Is(err, ErrPermanent) {
				t.Errorf("error %v, want a permanent one with %q", err, tt.msg)
			}
		})
	}
}

// TestPopulateRegistryCA pulls over TLS from a registry whose certificate
// only the CA ConfigMap trusts.
func TestPopulateRegistryCA(t *testing.T) {
	raw := testImage()
	srv := startRegistry(t, true, nil)
	ref := push(t, srv, "disks/test", image(t, diskLayer(t, "disk.img", raw)))
	tests := []struct {
		name, configMap string
		objs            []client.Object
		msg             string // "" for success
	}{
		{name: "trusted by the ConfigMap", configMap: "ca", objs: []client.Object{caConfigMap("ca", srv)}},
		{name: "not trusted by the system", msg: "certificate"},
		{name: "missing ConfigMap", configMap: "ca", msg: "ConfigMap thinlvm-system/ca not found"},
		{name: "ConfigMap without ca.crt", configMap: "ca", objs: []client.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ca"}}},
			msg: "ConfigMap thinlvm-system/ca has no key ca.crt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := registrySpec(ref, thinlvmv1.FormatRaw)
			spec.Source.Registry.CAConfigMap = tt.configMap
			dev := device(t, 8<<20)
			_, err := registryWriter(t, tt.objs...).Populate(t.Context(), spec, dev, 8<<20, &Progress{})
			switch {
			case tt.msg == "" && err != nil:
				t.Fatal(err)
			case tt.msg == "":
				checkDevice(t, dev, raw)
			case err == nil || !strings.Contains(err.Error(), tt.msg) || !errors.Is(err, ErrPermanent):
				t.Errorf("error %v, want a permanent one with %q", err, tt.msg)
			}
		})
	}
}

// TestPopulateRegistryBlockedBeforeDial blocks the registry's address: the
// pull fails without a connection.
func TestPopulateRegistryBlockedBeforeDial(t *testing.T) {
	srv := startRegistry(t, false, nil)
	ref := push(t, srv, "disks/test", image(t, diskLayer(t, "disk.img", testImage())))
	blocked := httptest.NewUnstartedServer(srv.Config.Handler)
	l := &countingListener{Listener: blocked.Listener}
	blocked.Listener = l
	blocked.Start()
	t.Cleanup(blocked.Close)
	ref = hostOf(blocked) + strings.TrimPrefix(ref, hostOf(srv))
	d := &dials{t: t}
	w := &Writer{Attempts: 2, Backoff: time.Millisecond, Blocked: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, dialHook: d.hook}
	_, err := w.Populate(t.Context(), registrySpec(ref, thinlvmv1.FormatRaw), device(t, 8<<20), 8<<20, &Progress{})
	msg := "connect to 127.0.0.1 refused: the address is in the blocked range 127.0.0.1/32"
	if err == nil || !strings.Contains(err.Error(), msg) || !errors.Is(err, ErrPermanent) {
		t.Errorf("error %v, want a permanent one with %q", err, msg)
	}
	if d.count() != 0 || l.n.Load() != 0 {
		t.Errorf("%d connections let through, %d accepted; want none", d.count(), l.n.Load())
	}
}

// TestPopulateRegistryQCOW2 converts a qcow2 container disk with the real
// qemu-img.
func TestPopulateRegistryQCOW2(t *testing.T) {
	qemu := qemuImg(t)
	raw := testImage()
	dir := t.TempDir()
	rawPath, qcowPath := filepath.Join(dir, "img.raw"), filepath.Join(dir, "img.qcow2")
	if err := os.WriteFile(rawPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, qemu, "convert", "-f", "raw", "-O", "qcow2", rawPath, qcowPath)
	qcow, err := os.ReadFile(qcowPath)
	if err != nil {
		t.Fatal(err)
	}
	srv := startRegistry(t, false, nil)
	ref := push(t, srv, "disks/test", image(t, diskLayer(t, "disk.qcow2", qcow)))
	w := registryWriter(t)
	w.QemuImg, w.ScratchDir = qemu, dir
	dev := device(t, 8<<20)
	n, err := w.Populate(t.Context(), registrySpec(ref, thinlvmv1.FormatQCOW2), dev, 8<<20, &Progress{})
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(raw)) {
		t.Errorf("populated %d bytes, want %d", n, len(raw))
	}
	checkDevice(t, dev, raw)
	// A raw disk declared qcow2 is refused by qemu-img info's check.
	ref = push(t, srv, "disks/raw", image(t, diskLayer(t, "disk.img", raw)))
	_, err = w.Populate(t.Context(), registrySpec(ref, thinlvmv1.FormatQCOW2), device(t, 8<<20), 8<<20, &Progress{})
	if msg := "image refused: qemu-img info cannot read it as qcow2"; err == nil || !strings.Contains(err.Error(), msg) {
		t.Errorf("error %v, want one with %q", err, msg)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "golden-*")); len(left) != 0 {
		t.Errorf("scratch files left: %v", left)
	}
}

// TestPullSecretMatching: a pull Secret's entry is chosen for an image as
// the kubelet chooses it: host, port and globs per name segment, and the
// entry with the longest path that prefixes the repository.
func TestPullSecretMatching(t *testing.T) {
	auths := map[string]map[string]string{
		"https://index.docker.io/v1/":         {"username": "hub", "password": "x"},
		"registry.example.org:5000":           {"username": "port", "password": "x"},
		"*.example.com":                       {"username": "glob", "password": "x"},
		"http://quay.io/v2/":                  {"username": "quay", "password": "x"},
		"registry.example.net":                {"username": "host", "password": "x"},
		"registry.example.net/team-a":         {"username": "team-a", "password": "x"},
		"registry.example.net/team-a/private": {"username": "private", "password": "x"},
	}
	cfg, err := json.Marshal(map[string]any{"auths": auths})
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pull", Namespace: testNamespace}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: cfg}}
	w := registryWriter(t, secret)
	tests := []struct{ image, want string }{
		{image: "library/ubuntu", want: "hub"},
		{image: "registry.example.org:5000/disks/ubuntu", want: "port"},
		{image: "registry.example.org/disks/ubuntu"},
		{image: "images.example.com/disks/ubuntu", want: "glob"},
		{image: "a.images.example.com/disks/ubuntu"},
		{image: "quay.io/containerdisks/ubuntu", want: "quay"},
		{image: "registry.example.net/team-b/disk", want: "host"},
		{image: "registry.example.net/team-a/disk", want: "team-a"},
		{image: "registry.example.net/team-a/private/disk", want: "private"},
		// A string prefix, not a path segment, as the kubelet matches.
		{image: "registry.example.net/team-ab/disk", want: "team-a"},
	}
	for _, tt := range tests {
		repo, err := name.NewRepository(tt.image)
		if err != nil {
			t.Fatal(err)
		}
		auth, err := w.pullAuth(t.Context(), "pull", repo)
		if tt.want == "" {
			if err == nil || !errors.Is(err, ErrPermanent) || !strings.Contains(err.Error(), "has no credentials for "+repo.Name()) {
				t.Errorf("%s: %v, want a permanent error: no credentials", tt.image, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.image, err)
			continue
		}
		got, err := auth.Authorization()
		if err != nil || got.Username != tt.want {
			t.Errorf("%s: credentials of %q (%v), want %q's", tt.image, got.Username, err, tt.want)
		}
	}
}

// TestCheckRegistryRedirect: a registry's blobs may go to another host,
// not over http once https was used, nor to a private address literal.
func TestCheckRegistryRedirect(t *testing.T) {
	// hop is a request to from, as sent over sent's scheme, redirected to to.
	hop := func(from, sent, to string) (*http.Request, []*http.Request) {
		first := httptest.NewRequest(http.MethodGet, from, nil)
		asSent := first.Clone(t.Context())
		asSent.URL.Scheme = sent
		next := httptest.NewRequest(http.MethodGet, to, nil)
		next.Response = &http.Response{Request: asSent}
		return next, []*http.Request{first}
	}
	tests := []struct {
		name, from, sent, to string
		msg                  string // "" when followed
	}{
		{name: "to a CDN", from: "https://registry.example.org/v2/r/blobs/sha256:1", sent: "https", to: "https://cdn.example.net/blob?sig=x"},
		{name: "http registry to http storage", from: "https://10.0.0.5:5000/v2/r/blobs/sha256:1", sent: "http", to: "http://10.0.0.5:9000/blob"},
		{name: "https to http", from: "https://registry.example.org/v2/r/blobs/sha256:1", sent: "https", to: "http://cdn.example.net/blob?sig=x",
			msg: "redirect to http://cdn.example.net/blob?sig=REDACTED refused: from https to http"},
		{name: "to a private address", from: "https://registry.example.org/v2/r/blobs/sha256:1", sent: "https", to: "https://10.1.2.3/blob",
			msg: "from registry.example.org to a private address"},
		{name: "to loopback", from: "https://registry.example.org/v2/r/blobs/sha256:1", sent: "https", to: "https://[::1]/blob",
			msg: "from registry.example.org to a private address"},
		{name: "to another scheme", from: "https://registry.example.org/v2/r/blobs/sha256:1", sent: "https", to: "ftp://cdn.example.net/blob",
			msg: "not http or https"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, via := hop(tt.from, tt.sent, tt.to)
			err := checkRegistryRedirect(req, via)
			if tt.msg == "" && err != nil || tt.msg != "" && (err == nil || !strings.Contains(err.Error(), tt.msg) || !errors.Is(err, ErrPermanent)) {
				t.Errorf("error %v, want %q", err, tt.msg)
			}
		})
	}
}

// roundTrips counts the requests that reach it.
type roundTrips struct{ n int }

func (r *roundTrips) RoundTrip(*http.Request) (*http.Response, error) {
	r.n++
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}}, nil
}

// Credentials go over plain http to this node's loopback only: the guard
// refuses any other host before its transport is called (no packet sent),
// whether they are in the Authorization header, in a body (the OAuth2
// token exchange's form) or in the query.
func TestCleartextGuard(t *testing.T) {
	const form = "grant_type=refresh_token&refresh_token=hunter2&service=registry"
	for _, tt := range []struct {
		method, url, auth, body string
		sent                    bool
	}{
		{url: "http://10.0.0.7:5000/v2/", auth: "Basic YTpi"},
		{url: "http://registry.internal/v2/disk/blobs/sha256:00", auth: "Bearer t"},
		{method: http.MethodPost, url: "http://10.0.0.7:5000/token", body: form},
		{method: http.MethodPost, url: "http://registry.example.invalid/oauth/token", body: "username=a&password=b"},
		{url: "http://10.0.0.7:5000/token?service=registry&refresh_token=hunter2"},
		{url: "http://10.0.0.7:5000/token?Access_Token=hunter2"},
		{url: "http://10.0.0.7:5000/token?password=hunter2"},
		{url: "http://10.0.0.7:5000/token?token=hunter2"},
		{url: "http://10.0.0.7:5000/v2/", sent: true}, // anonymous: the digest is the check
		// An anonymous token exchange: scope and service are no secrets.
		{url: "http://10.0.0.7:5000/token?scope=repository%3Adisk%3Apull&service=registry", sent: true},
		{method: http.MethodPost, url: "http://10.0.0.7:5000/token", sent: true}, // no body
		{url: "https://10.0.0.7:5000/v2/", auth: "Basic YTpi", sent: true},
		{method: http.MethodPost, url: "https://10.0.0.7:5000/token", body: form, sent: true},
		{url: "http://127.0.0.1:5000/v2/", auth: "Basic YTpi", sent: true},
		{url: "http://localhost:5000/v2/", auth: "Basic YTpi", sent: true},
		{url: "http://[::1]:5000/v2/", auth: "Basic YTpi", sent: true},
		{method: http.MethodPost, url: "http://127.0.0.1:5000/token", body: form, sent: true},
		{url: "http://[::1]:5000/token?refresh_token=hunter2", sent: true},
	} {
		next := &roundTrips{}
		var body io.Reader
		closed := &closeRecorder{Reader: strings.NewReader(tt.body)}
		if tt.body != "" {
			body = closed
		}
		if tt.method == "" {
			tt.method = http.MethodGet
		}
		req, err := http.NewRequest(tt.method, tt.url, body)
		if err != nil {
			t.Fatal(err)
		}
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		resp, err := cleartextGuard{next: next}.RoundTrip(req)
		if resp != nil {
			resp.Body.Close()
		}
		if sent := next.n == 1; sent != tt.sent || (err == nil) != tt.sent {
			t.Errorf("%s %s (auth %q, body %q): sent %v, error %v; want sent %v", req.Method, tt.url, tt.auth, tt.body, sent, err, tt.sent)
		}
		if err != nil && !errors.Is(err, ErrPermanent) {
			t.Errorf("%s: error %v is not permanent", tt.url, err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error %v shows the credential", tt.url, err)
		}
		if err != nil && tt.body != "" && !closed.closed {
			t.Errorf("%s: the refused request's body was not closed", tt.url)
		}
	}
}

// closeRecorder is a request body that records its Close.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error {
	c.closed = true
	return nil
}

// fakeRegistry stands in for the network under the guard: it answers an
// in-process handler for plain http and fails https as a registry that
// speaks only http would, and nothing it gets is ever dialled. A request
// that carries a credential reaching it fails the test: the guard let it
// through to where it would have been sent.
type fakeRegistry struct {
	t       *testing.T
	handler http.Handler
}

func (f *fakeRegistry) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "https" {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
	}
	if req.Header.Get("Authorization") != "" || len(body) > 0 || strings.Contains(req.URL.RawQuery, "hunter2") {
		f.t.Errorf("credentials reached the network over plain http: %s %s, Authorization %q, body %q", req.Method, req.URL, req.Header.Get("Authorization"), body)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// TestPopulateRegistryIdentityTokenNotInClear pulls with a pull Secret
// holding an identitytoken (a refresh token) from a registry at a private
// address that answers plain http only and wants a bearer token: the
// token exchange would POST the identitytoken in its form body, and is
// refused before its request leaves. The registry's address is never
// dialled: the Writer's transport is an in-process fake.
func TestPopulateRegistryIdentityTokenNotInClear(t *testing.T) {
	const host = "10.255.255.1:5000" // RFC 1918: go-containerregistry falls back to http
	var tokenAsked atomic.Int32
	fake := &fakeRegistry{t: t, handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/token":
			tokenAsked.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"token":"registry-token","access_token":"registry-token"}`)
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="http://`+host+`/token",service="registry"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
		}
	})}
	cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{"identitytoken": "hunter2"}}})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pull"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: cfg}}
	d := &dials{t: t}
	w := registryWriter(t, secret)
	w.dialHook = d.hook
	w.clientOnce.Do(func() { w.client = &http.Client{Transport: fake} })
	spec := registrySpec(host+"/private/disk@sha256:"+strings.Repeat("a", 64), thinlvmv1.FormatRaw)
	spec.Source.Registry.PullSecret = "pull"
	_, err := w.Populate(t.Context(), spec, device(t, 8<<20), 8<<20, &Progress{})
	msg := "the registry " + host + " answers over plain http only: its credentials are not sent in clear (the POST request carries a body"
	if err == nil || !strings.Contains(err.Error(), msg) || !errors.Is(err, ErrPermanent) {
		t.Errorf("error %v, want a permanent one with %q", err, msg)
	}
	if err != nil && strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %v shows the identity token", err)
	}
	if n := tokenAsked.Load(); n != 0 {
		t.Errorf("the token server was asked %d times, want never", n)
	}
	if d.count() != 0 {
		t.Errorf("%d connections dialled, want none", d.count())
	}
}

package diskimage

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// testNamespace is the node agent's namespace in these tests.
const testNamespace = "thinlvm-system"

// objects are Credentials holding objs in the test namespace, as the node
// agent's (node/golden's) reads them; which Secrets may be sent is its
// business, tested there.
func objects(t *testing.T, objs ...client.Object) Credentials {
	t.Helper()
	c := fakeCredentials{}
	for _, o := range objs {
		o.SetNamespace(testNamespace)
		kind := "ConfigMap"
		if _, ok := o.(*corev1.Secret); ok {
			kind = "Secret"
		}
		c[kind+"/"+o.GetName()] = o
	}
	return c
}

type fakeCredentials map[string]client.Object

func (c fakeCredentials) get(kind, name string) (client.Object, error) {
	o, ok := c[kind+"/"+name]
	if !ok {
		return nil, fmt.Errorf("%w: %s %s/%s not found", ErrPermanent, kind, testNamespace, name)
	}
	return o, nil
}

func (c fakeCredentials) Secret(_ context.Context, name string) (*corev1.Secret, error) {
	o, err := c.get("Secret", name)
	if err != nil {
		return nil, err
	}
	return o.(*corev1.Secret), nil
}

func (c fakeCredentials) ConfigMap(_ context.Context, name string) (*corev1.ConfigMap, error) {
	o, err := c.get("ConfigMap", name)
	if err != nil {
		return nil, err
	}
	return o.(*corev1.ConfigMap), nil
}

// caConfigMap is a CA ConfigMap holding srv's certificate.
func caConfigMap(name string, srv *httptest.Server) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
		Data: map[string]string{CAKey: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))}}
}

// These tests send packets to 127.0.0.1 only. A refused address is refused
// before its socket connects; dials records every connection the check let
// through and refuses (failing the test) any that is not to loopback, so
// that a broken check still sends nothing out.
type dials struct {
	t     *testing.T
	mu    sync.Mutex
	addrs []string
}

func (d *dials) hook(_, address string) error {
	d.mu.Lock()
	d.addrs = append(d.addrs, address)
	d.mu.Unlock()
	if ap, err := netip.ParseAddrPort(address); err != nil || !ap.Addr().IsLoopback() {
		d.t.Errorf("dialled %s, which is not loopback", address)
		return errors.New("test: not loopback")
	}
	return nil
}

func (d *dials) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.addrs)
}

// countingListener counts the connections a server accepted.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func TestCheckAddress(t *testing.T) {
	tests := []struct {
		address string
		blocked bool
	}{
		{address: "169.254.169.254:80", blocked: true},
		{address: "169.254.10.20:8080", blocked: true},
		{address: "[fd00:ec2::254]:80", blocked: true},
		{address: "[fe80::1%eth0]:443", blocked: true},
		{address: "[::ffff:169.254.169.254]:80", blocked: true},
		{address: "127.0.0.1:80"},
		{address: "[::1]:443"},
		{address: "10.0.2.2:8080"},
		{address: "[fd00:ec2::253]:80"},
		{address: "images.example.org:80", blocked: true}, // a dialer only ever passes addresses
	}
	for _, tt := range tests {
		t.Run(tt.address, func(t *testing.T) {
			err := checkAddress(DefaultBlocked(), tt.address)
			if (err != nil) != tt.blocked || (err != nil && !errors.Is(err, ErrPermanent)) {
				t.Errorf("error %v, want blocked %t (permanently)", err, tt.blocked)
			}
		})
	}
}

// TestDownloadRefuses: redirects and addresses a download does not follow.
func TestDownloadRefuses(t *testing.T) {
	plain := serve(t, testImage())
	tlsSrv := httptest.NewTLSServer(http.RedirectHandler(plain.URL+"/image", http.StatusFound))
	t.Cleanup(tlsSrv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(tlsSrv.Certificate())
	redirect := func(to string) string {
		srv := httptest.NewServer(http.RedirectHandler(to, http.StatusFound))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	var loop *httptest.Server
	loop = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, loop.URL+r.URL.Path+"x", http.StatusFound)
	}))
	t.Cleanup(loop.Close)
	_, port, _ := net.SplitHostPort(plain.Listener.Addr().String())

	tests := []struct {
		name string
		url  string
		w    *Writer
		msg  string
	}{
		{name: "redirect to the cloud metadata address", url: redirect("http://169.254.169.254/latest/meta-data/iam/security-credentials/"),
			w: &Writer{CrossHostRedirects: true}, msg: "connect to 169.254.169.254 refused: the address is in the blocked range 169.254.0.0/16"},
		{name: "redirect to a link-local address", url: redirect("http://169.254.1.1:8080/"),
			w: &Writer{CrossHostRedirects: true}, msg: "connect to 169.254.1.1 refused"},
		{name: "redirect from https to http", url: tlsSrv.URL, w: &Writer{RootCAs: roots},
			msg: "redirect to " + plain.URL + "/image refused: from https to http"},
		{name: "redirect to another host", url: redirect("http://localhost:" + port + "/image"),
			w: &Writer{}, msg: "redirect to http://localhost:" + port + "/image refused: another host than 127.0.0.1"},
		{name: "endless redirects", url: loop.URL + "/", w: &Writer{}, msg: "more than 5 redirects"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &dials{t: t}
			w := tt.w
			w.Attempts, w.dialHook = 1, d.hook
			_, err := w.Populate(t.Context(), spec(tt.url, sha(testImage()), thinlvmv1.FormatRaw), device(t, 8<<20), 8<<20, &Progress{})
			if err == nil || !strings.Contains(err.Error(), tt.msg) || !errors.Is(err, ErrPermanent) {
				t.Errorf("error %v, want a permanent one with %q", err, tt.msg)
			}
		})
	}
}

// TestDownloadBlockedBeforeDial blocks the test server's own address: the
// download fails without a connection, so a blocked address is refused
// before its socket connects.
func TestDownloadBlockedBeforeDial(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the blocked server was asked")
	}))
	l := &countingListener{Listener: srv.Listener}
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	d := &dials{t: t}
	w := &Writer{Attempts: 1, Blocked: append(DefaultBlocked(), netip.MustParsePrefix("127.0.0.1/32")), dialHook: d.hook}
	_, err := w.Populate(t.Context(), spec(srv.URL, sha(nil), thinlvmv1.FormatRaw), device(t, 1<<20), 1<<20, &Progress{})
	msg := "connect to 127.0.0.1 refused: the address is in the blocked range 127.0.0.1/32"
	if err == nil || !strings.Contains(err.Error(), msg) || !errors.Is(err, ErrPermanent) {
		t.Errorf("error %v, want a permanent one with %q", err, msg)
	}
	if d.count() != 0 || l.n.Load() != 0 {
		t.Errorf("%d connections let through, %d accepted; want none", d.count(), l.n.Load())
	}
}

// TestDownloadStalls: a server that stops sending, or sends a byte now and
// then, fails the download within the stall timeout.
func TestDownloadStalls(t *testing.T) {
	raw := testImage()
	tests := []struct {
		name  string
		serve func(w http.ResponseWriter, r *http.Request)
		msg   string
	}{
		{name: "stalls mid-body", msg: "stalled: no byte for 1s", serve: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "3145728")
			_, _ = w.Write(raw[:64<<10])
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}},
		{name: "trickles", msg: "stalled: ", serve: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "3145728")
			for i := 0; ; i++ {
				_, _ = w.Write(raw[i : i+1])
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(tt.serve))
			t.Cleanup(srv.Close)
			begin := time.Now()
			w := &Writer{Attempts: 1, StallTimeout: time.Second}
			_, err := w.Populate(t.Context(), spec(srv.URL, sha(raw), thinlvmv1.FormatRaw), device(t, 8<<20), 8<<20, &Progress{})
			if took := time.Since(begin); err == nil || !errors.Is(err, errStalled) || !strings.Contains(err.Error(), tt.msg) || took > 5*time.Second {
				t.Errorf("error %v after %s, want %q within the stall timeout", err, took, tt.msg)
			}
		})
	}
}

// readyBody is a response body whose bytes have all arrived.
type readyBody struct{ io.Reader }

func (readyBody) Close() error { return nil }

// TestWatchdogIgnoresTheConsumer: time the reader spends elsewhere (writing
// the device) between reads is not a stall.
func TestWatchdogIgnoresTheConsumer(t *testing.T) {
	var cancelled atomic.Bool
	wd := newWatchdog(readyBody{bytes.NewReader(make([]byte, 4<<10))}, func() { cancelled.Store(true) }, 50*time.Millisecond)
	defer wd.Close()
	buf := make([]byte, 1<<10)
	for range 4 {
		if _, err := wd.Read(buf); err != nil {
			t.Fatal(err)
		}
		time.Sleep(80 * time.Millisecond)
	}
	if _, err := wd.Read(buf); err != io.EOF || cancelled.Load() {
		t.Errorf("error %v, cancelled %t; want EOF, not cancelled", err, cancelled.Load())
	}
}

// TestErrorsHideCredentials: whatever fails, the error (which goes to the
// LVMNode's status and to Events) names the URL without its user info or
// its query's values.
func TestErrorsHideCredentials(t *testing.T) {
	withSecrets := func(base string) string {
		return strings.Replace(base, "http://", "http://alice:s3cret@", 1) + "/image?token=hunter2"
	}
	missing := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(missing.Close)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(failing.Close)
	elsewhere := httptest.NewServer(http.RedirectHandler("http://localhost:1/image?sig=hunter2", http.StatusFound))
	t.Cleanup(elsewhere.Close)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + closed.Addr().String()
	closed.Close()
	tests := []struct {
		name string
		url  string
		w    *Writer
	}{
		{name: "not found", url: withSecrets(missing.URL), w: &Writer{}},
		{name: "server error", url: withSecrets(failing.URL), w: &Writer{}},
		{name: "redirect refused", url: withSecrets(elsewhere.URL), w: &Writer{}},
		{name: "connection refused", url: withSecrets(closedURL), w: &Writer{}},
		{name: "blocked address", url: withSecrets(missing.URL), w: &Writer{Blocked: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}},
		{name: "url that does not parse", url: "http://alice:s3cret@127.0.0.1:bad/image?token=hunter2", w: &Writer{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.w
			w.Attempts, w.Backoff, w.dialHook = 1, time.Millisecond, (&dials{t: t}).hook
			_, err := w.Populate(t.Context(), spec(tt.url, sha(nil), thinlvmv1.FormatRaw), device(t, 1<<20), 1<<20, &Progress{})
			if err == nil {
				t.Fatal("no error")
			}
			for _, secret := range []string{"alice", "s3cret", "hunter2"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q holds %q", err, secret)
				}
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ url, want string }{
		{"https://images.example.org/ubuntu.img", "https://images.example.org/ubuntu.img"},
		{"https://alice:s3cret@images.example.org/ubuntu.img", "https://images.example.org/ubuntu.img"},
		{"https://bucket.s3.amazonaws.com/u.img?X-Amz-Signature=abc&X-Amz-Expires=300#top",
			"https://bucket.s3.amazonaws.com/u.img?X-Amz-Expires=REDACTED&X-Amz-Signature=REDACTED"},
		{"http://alice:s3cret@[::1", "(a url that does not parse)"},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, redactURL(tt.url)); diff != "" {
			t.Errorf("redactURL(%q) (-want +got):\n%s", tt.url, diff)
		}
	}
}

// TestDownloadCredentials sends an authSecret's credentials to the URL's
// host and port, and not to another host or port a redirect leads to, even
// where CrossHostRedirects allows following it.
func TestDownloadCredentials(t *testing.T) {
	raw := testImage()
	type seen struct {
		mu   sync.Mutex
		auth []string
	}
	record := func(s *seen, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
	}
	var origin, elsewhere seen
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record(&elsewhere, r)
		http.ServeContent(w, r, "image", time.Unix(1e9, 0), bytes.NewReader(raw))
	}))
	t.Cleanup(other.Close)
	_, port, _ := net.SplitHostPort(other.Listener.Addr().String())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record(&origin, r)
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "http://localhost:"+port+"/image", http.StatusFound)
			return
		case "/port":
			http.Redirect(w, r, "http://127.0.0.1:"+port+"/image", http.StatusFound)
			return
		}
		http.ServeContent(w, r, "image", time.Unix(1e9, 0), bytes.NewReader(raw))
	}))
	t.Cleanup(srv.Close)
	basic := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "basic"}, Data: map[string][]byte{"username": []byte("alice"), "password": []byte("s3cret")}}
	bearer := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bearer"}, Data: map[string][]byte{"token": []byte("hunter2")}}
	both := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "both"}, Data: map[string][]byte{"username": []byte("alice"), "token": []byte("hunter2")}}
	tests := []struct {
		name, secret, path string
		origin, elsewhere  []string // the Authorization headers each server saw
		msg                string   // of the failure; "" for success
	}{
		{name: "basic", secret: "basic", path: "/image", origin: []string{"Basic YWxpY2U6czNjcmV0"}},
		{name: "bearer", secret: "bearer", path: "/image", origin: []string{"Bearer hunter2"}},
		{name: "not to a redirect's other host", secret: "bearer", path: "/moved", origin: []string{"Bearer hunter2"}, elsewhere: []string{""}},
		// net/http would send them there: it tells hosts by name only.
		{name: "not to a redirect's other port", secret: "basic", path: "/port", origin: []string{"Basic YWxpY2U6czNjcmV0"}, elsewhere: []string{""}},
		{name: "missing Secret", secret: "gone", path: "/image", msg: "Secret thinlvm-system/gone not found"},
		{name: "token and username", secret: "both", path: "/image", msg: "Secret thinlvm-system/both has both token and username/password"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			origin.auth, elsewhere.auth = nil, nil
			w := &Writer{Attempts: 1, CrossHostRedirects: true, dialHook: (&dials{t: t}).hook, Credentials: objects(t, basic, bearer, both)}
			s := spec(srv.URL+tt.path, sha(raw), thinlvmv1.FormatRaw)
			s.Source.HTTP.AuthSecret = tt.secret
			dev := device(t, 8<<20)
			_, err := w.Populate(t.Context(), s, dev, 8<<20, &Progress{})
			if tt.msg != "" {
				if err == nil || !strings.Contains(err.Error(), tt.msg) || !errors.Is(err, ErrPermanent) {
					t.Errorf("error %v, want a permanent one with %q", err, tt.msg)
				}
				if len(origin.auth) != 0 {
					t.Errorf("%d requests sent, want none", len(origin.auth))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkDevice(t, dev, raw)
			if diff := cmp.Diff(tt.origin, origin.auth); diff != "" {
				t.Errorf("Authorization the URL's host got (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.elsewhere, elsewhere.auth); diff != "" {
				t.Errorf("Authorization the redirect's host got (-want +got):\n%s", diff)
			}
		})
	}
}

// notSent is a transport that fails the test when it is asked anything:
// what reaches it would have been sent.
type notSent struct{ t *testing.T }

func (n notSent) RoundTrip(req *http.Request) (*http.Response, error) {
	n.t.Errorf("%s %s reached the transport, Authorization %q", req.Method, req.URL, req.Header.Get("Authorization"))
	return nil, errors.New("test: not sent")
}

// TestDownloadCredentialsNotInClear refuses an authSecret with a plain
// http URL to another host than this node's loopback, before anything is
// sent: the request would carry the credentials in clear. The URLs' hosts
// are never dialled: the Writer's transport fails the test if asked.
func TestDownloadCredentialsNotInClear(t *testing.T) {
	raw := testImage()
	basic := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "basic"}, Data: map[string][]byte{"username": []byte("alice"), "password": []byte("s3cret")}}
	bearer := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bearer"}, Data: map[string][]byte{"token": []byte("hunter2")}}
	for _, tt := range []struct{ url, secret string }{
		{url: "http://registry.example.invalid/disk.img", secret: "basic"},
		{url: "http://10.255.255.1:8080/disk.img?sig=x", secret: "bearer"},
		{url: "http://127.0.0.1.example.invalid/disk.img", secret: "bearer"}, // a name, not the loopback address
		{url: "HTTP://Registry.Example.Invalid/disk.img", secret: "basic"},
	} {
		t.Run(tt.url, func(t *testing.T) {
			d := &dials{t: t}
			w := &Writer{Attempts: 1, dialHook: d.hook, Credentials: objects(t, basic, bearer)}
			w.clientOnce.Do(func() { w.client = &http.Client{Transport: notSent{t}} })
			s := spec(tt.url, sha(raw), thinlvmv1.FormatRaw)
			s.Source.HTTP.AuthSecret = tt.secret
			_, err := w.Populate(t.Context(), s, device(t, 8<<20), 8<<20, &Progress{})
			msg := "authSecret " + tt.secret + " refused: its credentials would cross the network in clear over http"
			if err == nil || !strings.Contains(err.Error(), msg) || !errors.Is(err, ErrPermanent) {
				t.Errorf("error %v, want a permanent one with %q", err, msg)
			}
			if err != nil && strings.Contains(err.Error(), "sig=x") {
				t.Errorf("error %v shows the URL's query", err)
			}
			if d.count() != 0 {
				t.Errorf("%d connections dialled, want none", d.count())
			}
		})
	}
	// This node's loopback: the credentials stay on the node.
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		http.ServeContent(w, r, "image", time.Unix(1e9, 0), bytes.NewReader(raw))
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	w := &Writer{Attempts: 1, dialHook: (&dials{t: t}).hook, Credentials: objects(t, basic, bearer)}
	s := spec("http://localhost:"+port+"/disk.img", sha(raw), thinlvmv1.FormatRaw)
	s.Source.HTTP.AuthSecret = "bearer"
	dev := device(t, 8<<20)
	if _, err := w.Populate(t.Context(), s, dev, 8<<20, &Progress{}); err != nil {
		t.Fatal(err)
	}
	checkDevice(t, dev, raw)
	if diff := cmp.Diff([]string{"Bearer hunter2"}, got); diff != "" {
		t.Errorf("Authorization the loopback server got (-want +got):\n%s", diff)
	}
}

func TestCheckCleartextAuth(t *testing.T) {
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{url: "https://images.example.org/disk.img", ok: true},
		{url: "http://127.0.0.1:8080/disk.img", ok: true},
		{url: "http://127.4.5.6/disk.img", ok: true},
		{url: "http://localhost/disk.img", ok: true},
		{url: "http://[::1]:8080/disk.img", ok: true},
		{url: "http://images.example.org/disk.img"},
		{url: "http://10.0.0.7/disk.img"},
		{url: "http://[fd00::1]/disk.img"},
		{url: "http://localhost.example.org/disk.img"},
		{url: "http://127.0.0.1@images.example.org/disk.img"}, // user info, then the host
		{url: "http://127.0.0.256/disk.img"},                  // no address: a name
		{url: "http://LOCALHOST/disk.img"},                    // as the API server's rule
		{url: "ftp://localhost/disk.img"},
	} {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		err = checkCleartextAuth(u, "auth")
		if (err == nil) != tt.ok || err != nil && !errors.Is(err, ErrPermanent) {
			t.Errorf("%s: error %v, want ok %v", tt.url, err, tt.ok)
		}
	}
}

// TestDownloadCAConfigMap downloads over TLS from a server whose
// certificate only the CA ConfigMap trusts.
func TestDownloadCAConfigMap(t *testing.T) {
	raw := testImage()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "image", time.Unix(1e9, 0), bytes.NewReader(raw))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake the test refuses
	srv.StartTLS()
	t.Cleanup(srv.Close)
	for _, configMap := range []string{"ca", ""} {
		w := &Writer{Attempts: 1, dialHook: (&dials{t: t}).hook, Credentials: objects(t, caConfigMap("ca", srv))}
		s := spec(srv.URL, sha(raw), thinlvmv1.FormatRaw)
		s.Source.HTTP.CAConfigMap = configMap
		dev := device(t, 8<<20)
		_, err := w.Populate(t.Context(), s, dev, 8<<20, &Progress{})
		switch {
		case configMap != "" && err != nil:
			t.Fatal(err)
		case configMap != "":
			checkDevice(t, dev, raw)
		case err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority"):
			t.Errorf("without the ConfigMap: error %v, want the certificate refused", err)
		}
	}
}

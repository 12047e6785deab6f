package diskimage

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// DefaultBlocked are the addresses a download never connects to unless
// Writer.Blocked says otherwise: link-local ranges, where clouds serve
// instance metadata and credentials to anything on the node (and the node
// agent runs with the host's network), and the metadata addresses
// themselves.
func DefaultBlocked() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("fe80::/10"),
		netip.MustParsePrefix("169.254.169.254/32"), // AWS, GCP, Azure, OpenStack; inside the /16, named for whoever trims it
		netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS over IPv6
	}
}

// Timeouts of the download client. None bounds a whole download, which
// may rightly take hours; the watchdog bounds a stalled one.
const (
	dialTimeout           = 30 * time.Second
	tlsHandshakeTimeout   = 10 * time.Second
	responseHeaderTimeout = 60 * time.Second
	// maxRedirects is how many redirects a request follows: enough for a
	// mirror redirector in front of a CDN.
	maxRedirects = 5
	// defaultStallTimeout is Writer.StallTimeout's default.
	defaultStallTimeout = 60 * time.Second
	// minWindowBytes is the least a download must receive per
	// StallTimeout spent waiting (about 1 KiB/s with the default): a
	// server that trickles a byte now and then is as stuck as a silent one.
	minWindowBytes = 64 << 10
)

// httpClient is the Writer's download client, made once from its fields.
func (w *Writer) httpClient() *http.Client {
	w.clientOnce.Do(func() { w.client = &http.Client{Transport: w.newTransport(w.RootCAs), CheckRedirect: w.checkRedirect} })
	return w.client
}

// newTransport is a transport with the Writer's network rules that
// verifies https servers with roots (nil: the system's).
func (w *Writer) newTransport(roots *x509.CertPool) *http.Transport {
	blocked := w.Blocked
	if blocked == nil {
		blocked = DefaultBlocked()
	}
	dialer := &net.Dialer{
		Timeout:   dialTimeout,
		KeepAlive: 30 * time.Second,
		// Control runs on the resolved address after the socket is made and
		// before it connects: a name that resolves to a blocked address, a
		// redirect to one, and every address of a happy-eyeballs race are
		// all refused here, with no packet sent.
		Control: func(network, address string, _ syscall.RawConn) error {
			if err := checkAddress(blocked, address); err != nil {
				return err
			}
			if w.dialHook != nil {
				return w.dialHook(network, address)
			}
			return nil
		},
	}
	return &http.Transport{
		// No proxy: a proxy would connect for us, out of reach of the
		// address check.
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   tlsHandshakeTimeout,
		ResponseHeaderTimeout: responseHeaderTimeout,
		IdleConnTimeout:       90 * time.Second,
		// The checksum is of the file as served and a resumed Range
		// counts the file's bytes: a transparently decoded
		// Content-Encoding would break both.
		DisableCompression: true,
	}
}

// checkAddress refuses address (an ip:port, as a dialer has resolved it)
// when it is in a blocked range.
func checkAddress(blocked []netip.Prefix, address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: connect to %s refused: not an ip address", ErrPermanent, address)
	}
	// A zoned address matches no prefix, and a v4-mapped one no v4 prefix.
	ip := ap.Addr().WithZone("").Unmap()
	for _, p := range blocked {
		if p.Contains(ip) {
			return fmt.Errorf("%w: connect to %s refused: the address is in the blocked range %s (link-local or cloud metadata)", ErrPermanent, ip, p)
		}
	}
	return nil
}

// checkRedirect follows a few redirects, never from https to http (the
// checksum protects the bytes, not the credentials or the URL a redirect
// would expose) and, unless CrossHostRedirects allows it, never to another
// host: an image server must not be able to send the privileged agent
// anywhere on the node's network.
func (w *Writer) checkRedirect(req *http.Request, via []*http.Request) error {
	if err := checkHop(req, via); err != nil {
		return err
	}
	if !w.CrossHostRedirects && !strings.EqualFold(req.URL.Hostname(), via[0].URL.Hostname()) {
		return fmt.Errorf("%w: redirect to %s refused: another host than %s", ErrPermanent, redactURL(req.URL.String()), via[0].URL.Hostname())
	}
	return nil
}

// checkHop refuses what no redirect may do, from an image server or a
// registry: more than maxRedirects, a scheme other than http and https,
// and http after https.
func checkHop(req *http.Request, via []*http.Request) error {
	to := redactURL(req.URL.String())
	switch {
	case len(via) >= maxRedirects:
		return fmt.Errorf("%w: redirect to %s refused: more than %d redirects", ErrPermanent, to, maxRedirects)
	case req.URL.Scheme != "http" && req.URL.Scheme != "https":
		return fmt.Errorf("%w: redirect to %s refused: not http or https", ErrPermanent, to)
	case req.URL.Scheme == "http" && sentHTTPS(req, via):
		return fmt.Errorf("%w: redirect to %s refused: from https to http", ErrPermanent, to)
	}
	return nil
}

// sentHTTPS tells whether a hop of a redirect chain was sent over https.
// It reads the requests as sent (each hop's response names the request
// that got it): the registry's transport sends them over http when the
// registry speaks only that, whatever scheme they were made with.
func sentHTTPS(req *http.Request, via []*http.Request) bool {
	responses := []*http.Response{req.Response}
	for _, r := range via[1:] {
		responses = append(responses, r.Response)
	}
	return slices.ContainsFunc(responses, func(r *http.Response) bool {
		return r != nil && r.Request != nil && r.Request.URL.Scheme == "https"
	})
}

// redactURL is rawURL without what may be secret: its user info, the
// values of its query (presigned URLs carry signatures there) and its
// fragment. It is what errors, status and Events show.
func redactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(a url that does not parse)"
	}
	u.User = nil
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"REDACTED"}
		}
		u.RawQuery = q.Encode()
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// withoutURL is err without the *url.Error net/http wraps it in: that
// carries the URL with its user name and query, and callers name the
// redacted URL themselves.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// errStalled is a download that stopped making progress.
var errStalled = errors.New("stalled")

// watchdog is a response body whose Read fails when, while it waits, no
// byte arrives for timeout, or fewer than minWindowBytes arrive in timeout.
// Only time spent in Read counts: a population slowed by its device does
// not make the server look stalled. The response's context is cancelled to
// end a blocked Read.
type watchdog struct {
	body    io.ReadCloser
	cancel  context.CancelFunc
	timeout time.Duration
	timer   *time.Timer
	fired   atomic.Bool

	waited time.Duration // in Read, in the current window
	got    int64         // bytes, in the current window
	err    error         // once stalled, every Read's
}

func newWatchdog(body io.ReadCloser, cancel context.CancelFunc, timeout time.Duration) *watchdog {
	wd := &watchdog{body: body, cancel: cancel, timeout: timeout}
	wd.timer = time.AfterFunc(timeout, func() {
		wd.fired.Store(true)
		cancel()
	})
	wd.timer.Stop()
	return wd
}

func (wd *watchdog) Read(p []byte) (int, error) {
	if wd.err != nil {
		return 0, wd.err
	}
	begin := time.Now()
	wd.timer.Reset(wd.timeout)
	n, err := wd.body.Read(p)
	wd.timer.Stop()
	if err == io.EOF {
		return n, err // whole: too late to be stalled
	}
	wd.waited += time.Since(begin)
	wd.got += int64(n)
	switch {
	case wd.fired.Load():
		wd.err = fmt.Errorf("%w: no byte for %s", errStalled, wd.timeout)
	case wd.waited >= wd.timeout && wd.got < minWindowBytes:
		wd.err = fmt.Errorf("%w: %d bytes in %s", errStalled, wd.got, wd.timeout)
		wd.cancel()
	case wd.waited >= wd.timeout:
		wd.waited, wd.got = 0, 0
	}
	if wd.err != nil {
		// A read that brought bytes returns them; the stall comes with the
		// next, bare, so that download counts it as a failed attempt (it
		// forgets an error that came with bytes) and a trickling server
		// cannot be resumed from forever.
		if n > 0 {
			return n, nil
		}
		return 0, wd.err
	}
	return n, err
}

func (wd *watchdog) Close() error {
	wd.timer.Stop()
	err := wd.body.Close()
	wd.cancel()
	return err
}

// CAKey is the key of a CA ConfigMap (caConfigMap) that holds its PEM
// certificates, as in the ConfigMaps Kubernetes publishes its own CA in.
const CAKey = "ca.crt"

// Credentials reads the Secrets and ConfigMaps a source names
// (authSecret, pullSecret, caConfigMap), at each population: a credential
// or CA changed since takes effect with the next one. Its errors wrap
// ErrPermanent when the object does not exist or may not be sent; others
// are retried. The objects it returns carry their namespace, which the
// Writer's errors name.
type Credentials interface {
	Secret(ctx context.Context, name string) (*corev1.Secret, error)
	ConfigMap(ctx context.Context, name string) (*corev1.ConfigMap, error)
}

// noCredentials is the error of a Writer without Credentials asked for
// the object name of kind.
func noCredentials(kind, name string) error {
	return fmt.Errorf("%w: %s %s: this node agent reads no Secrets or ConfigMaps (it has no API client)", ErrPermanent, kind, name)
}

func (w *Writer) secret(ctx context.Context, name string) (*corev1.Secret, error) {
	if w.Credentials == nil {
		return nil, noCredentials("Secret", name)
	}
	return w.Credentials.Secret(ctx, name)
}

// caPool reads the CA ConfigMap name: the certificates that verify a
// server instead of the system's (nil when name is empty).
func (w *Writer) caPool(ctx context.Context, name string) (*x509.CertPool, error) {
	if name == "" {
		return nil, nil
	}
	if w.Credentials == nil {
		return nil, noCredentials("ConfigMap", name)
	}
	cm, err := w.Credentials.ConfigMap(ctx, name)
	if err != nil {
		return nil, err
	}
	pem, ok := cm.Data[CAKey]
	if !ok {
		return nil, fmt.Errorf("%w: ConfigMap %s/%s has no key %s", ErrPermanent, cm.Namespace, cm.Name, CAKey)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(pem)) {
		return nil, fmt.Errorf("%w: ConfigMap %s/%s: %s holds no PEM certificate", ErrPermanent, cm.Namespace, cm.Name, CAKey)
	}
	return pool, nil
}

// Keys of an HTTP source's authSecret.
const (
	AuthUsernameKey = "username"
	AuthPasswordKey = "password"
	AuthTokenKey    = "token"
)

// httpAuthorization reads the auth Secret name and returns the
// Authorization header it makes: basic with username and password, or
// bearer with token.
func (w *Writer) httpAuthorization(ctx context.Context, name string) (string, error) {
	s, err := w.secret(ctx, name)
	if err != nil {
		return "", err
	}
	user, hasUser := s.Data[AuthUsernameKey]
	pass, hasPass := s.Data[AuthPasswordKey]
	token, hasToken := s.Data[AuthTokenKey]
	switch {
	case hasToken && (hasUser || hasPass):
		return "", fmt.Errorf("%w: Secret %s/%s has both %s and %s/%s: keep one", ErrPermanent, s.Namespace, s.Name, AuthTokenKey, AuthUsernameKey, AuthPasswordKey)
	case hasToken && len(token) > 0:
		return "Bearer " + string(token), nil
	case hasUser && hasPass:
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(string(user)+":"+string(pass))), nil
	}
	return "", fmt.Errorf("%w: Secret %s/%s has neither %s and %s nor %s", ErrPermanent, s.Namespace, s.Name, AuthUsernameKey, AuthPasswordKey, AuthTokenKey)
}

// sourceClient is the client that downloads src: the Writer's, or one
// that verifies the server with src's CA ConfigMap and sends src's
// credentials. done releases its connections.
func (w *Writer) sourceClient(ctx context.Context, src *thinlvmv1.HTTPSource) (c *http.Client, done func(), err error) {
	done = func() {}
	if src.CAConfigMap == "" && src.AuthSecret == "" {
		return w.httpClient(), done, nil
	}
	rt := w.httpClient().Transport
	if src.CAConfigMap != "" {
		roots, err := w.caPool(ctx, src.CAConfigMap)
		if err != nil {
			return nil, done, err
		}
		t := w.newTransport(roots)
		rt, done = t, t.CloseIdleConnections
	}
	if src.AuthSecret != "" {
		u, err := url.Parse(src.URL)
		if err != nil {
			return nil, done, fmt.Errorf("%w: url %s: %w", ErrPermanent, redactURL(src.URL), withoutURL(err))
		}
		if err := checkCleartextAuth(u, src.AuthSecret); err != nil {
			return nil, done, err
		}
		value, err := w.httpAuthorization(ctx, src.AuthSecret)
		if err != nil {
			return nil, done, err
		}
		rt = &credentials{base: rt, scheme: u.Scheme, host: canonicalHost(u), authorization: value}
	}
	return &http.Client{Transport: rt, CheckRedirect: w.checkRedirect}, done, nil
}

// checkCleartextAuth refuses to send the auth Secret secret's credentials
// to u unless they are encrypted on the way (https) or stay on this node
// (plain http to its loopback). The API server refuses such a GoldenImage
// too, but the agent does not rely on it: an object admitted before that
// rule, or a CRD installed without it, would send them in clear.
func checkCleartextAuth(u *url.URL, secret string) error {
	if u.Scheme == "https" || u.Scheme == "http" && loopbackHost(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("%w: url %s: authSecret %s refused: its credentials would cross the network in clear over %s; use an https URL (plain http only to the node's loopback)",
		ErrPermanent, redactURL(u.String()), secret, u.Scheme)
}

// credentials adds an Authorization header to the requests to one scheme
// and host: a redirect elsewhere (which CrossHostRedirects may allow)
// never carries them.
type credentials struct {
	base          http.RoundTripper
	scheme, host  string
	authorization string
}

func (c *credentials) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == c.scheme && canonicalHost(req.URL) == c.host {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", c.authorization)
	}
	return c.base.RoundTrip(req)
}

// canonicalHost is u's host in lower case with its port, the scheme's
// default when u names none.
func canonicalHost(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

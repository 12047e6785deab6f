package manager

import (
	"crypto/tls"
	"net/http"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// metricsOptions configure controller-runtime's metrics server the way
// thinlvm's components serve metrics: on addr ("0" disables it), HTTPS,
// every request authenticated (TokenReview) and authorized
// (SubjectAccessReview for the path) by the API server. With secure false,
// metrics are plain HTTP for anyone who reaches addr (bind it to localhost
// then). extra are more paths served behind the same checks.
func metricsOptions(addr string, secure bool, extra map[string]http.Handler) metricsserver.Options {
	o := metricsserver.Options{BindAddress: addr, ExtraHandlers: extra}
	if secure {
		o.SecureServing = true
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
		// HTTP/1.1 only: HTTP/2's rapid reset (CVE-2023-44487) needs no
		// credentials to cost the server.
		o.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	return o
}

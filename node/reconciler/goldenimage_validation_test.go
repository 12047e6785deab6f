package reconciler_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// TestGoldenImageAuthSecretNeedsHTTPS: the API server refuses an HTTP
// source whose authSecret would go over plain http to another host than
// the node's loopback, where its credentials would cross the network in
// clear. The creates are dry runs: no object is stored, so nothing acts on
// them.
func TestGoldenImageAuthSecretNeedsHTTPS(t *testing.T) {
	ctx := context.Background()
	const msg = "authSecret needs an https url: over plain http its credentials would cross the network in clear"
	for _, tt := range []struct {
		url, authSecret string
		ok              bool
	}{
		{url: "http://images.example.org/disk.img", authSecret: "auth"},
		{url: "http://10.0.0.7:8080/disk.img", authSecret: "auth"},
		{url: "http://[fd00::1]/disk.img", authSecret: "auth"},
		{url: "http://localhost.example.org/disk.img", authSecret: "auth"},
		{url: "http://127.0.0.1.example.org/disk.img", authSecret: "auth"},
		{url: "http://127.0.0.1@images.example.org/disk.img", authSecret: "auth"}, // user info, then the host
		{url: "http://127.0.0.256/disk.img", authSecret: "auth"},                  // no address: a name
		{url: "http://LOCALHOST/disk.img", authSecret: "auth"},                    // as the agent, which compares the name as written
		{url: "https://images.example.org/disk.img", authSecret: "auth", ok: true},
		{url: "http://images.example.org/disk.img", ok: true}, // no credentials: the sha256 is the check
		{url: "http://127.0.0.1:8080/disk.img", authSecret: "auth", ok: true},
		{url: "http://127.4.5.6/disk.img", authSecret: "auth", ok: true},
		{url: "http://localhost:8080/disk.img", authSecret: "auth", ok: true},
		{url: "http://[::1]:8080/disk.img", authSecret: "auth", ok: true},
	} {
		gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "auth-over-http"}, Spec: thinlvmv1.GoldenImageSpec{
			Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: tt.url, SHA256: strings.Repeat("a", 64), AuthSecret: tt.authSecret}},
			Size:   resource.MustParse("16Mi")}}
		err := k8sClient.Create(ctx, gi, client.DryRunAll)
		switch {
		case tt.ok && err != nil:
			t.Errorf("%s (authSecret %q): %v, want accepted", tt.url, tt.authSecret, err)
		case !tt.ok && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), msg)):
			t.Errorf("%s (authSecret %q): %v, want Invalid with %q", tt.url, tt.authSecret, err, msg)
		}
	}
}

package golden

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/node/diskimage"
)

// The agent hands out only the Secrets of its namespace labelled for
// images; everything it refuses, it refuses for good.
func TestCredentials(t *testing.T) {
	labelled := map[string]string{thinlvmv1.ImageCredentialsLabel: "true"}
	reader := fake.NewClientBuilder().WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "thinlvm-system", Name: "login", Labels: labelled}},
		// A ServiceAccount token Secret, say: never sent.
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "thinlvm-system", Name: "sa-token"}, Data: map[string][]byte{"token": []byte("not for images")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: "other", Labels: labelled}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "thinlvm-system", Name: "ca"}},
	).Build()
	c := Credentials{Reader: reader, Namespace: "thinlvm-system"}
	if s, err := c.Secret(t.Context(), "login"); err != nil || s.Namespace != "thinlvm-system" {
		t.Errorf("labelled Secret: %v, %v", s, err)
	}
	if cm, err := c.ConfigMap(t.Context(), "ca"); err != nil || cm.Name != "ca" {
		t.Errorf("ConfigMap: %v, %v", cm, err)
	}
	for _, tt := range []struct {
		name string
		c    Credentials
		msg  string
	}{
		{"sa-token", c, "Secret thinlvm-system/sa-token is not labelled " + thinlvmv1.ImageCredentialsLabel + "=true"},
		{"other", c, "Secret thinlvm-system/other not found"},
		{"login", Credentials{Reader: reader}, "this node agent's namespace is unknown"},
	} {
		_, err := tt.c.Secret(t.Context(), tt.name)
		if err == nil || !errors.Is(err, diskimage.ErrPermanent) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("Secret %s: %v, want a permanent error with %q", tt.name, err, tt.msg)
		}
	}
}

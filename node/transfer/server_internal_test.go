package transfer

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// A server sends at most MaxBaseStreams bases at once: one more is refused
// with ResourceExhausted (its caller asks another node), and a stream's
// end makes room.
func TestBaseStreamsBounded(t *testing.T) {
	s := &Server{NodeName: "n1", MaxBaseStreams: 2}
	first, err := s.acquireBase()
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.acquireBase()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.acquireBase(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a third base stream: %v, want ResourceExhausted", err)
	}
	first()
	third, err := s.acquireBase()
	if err != nil {
		t.Fatalf("after a stream ended: %v", err)
	}
	second()
	third()
}

// A node whose LVMNode is not published yet answers a base's checksum with
// Unavailable, which the copying node retries; a failed API read gets the
// code kubestatus gives it; a base the LVMNode does not list Ready is
// FailedPrecondition.
func TestContentSHA256Codes(t *testing.T) {
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", UID: "u1"}}
	scheme := runtime.NewScheme()
	if err := thinlvmv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	none := fake.NewClientBuilder().WithScheme(scheme).Build()
	if _, err := (&Server{NodeName: "n1", Reader: none}).contentSHA256(t.Context(), gi); status.Code(err) != codes.Unavailable {
		t.Errorf("no LVMNode: %v, want Unavailable", err)
	}
	failing := interceptor.NewClient(none, interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return apierrors.NewTooManyRequests("slow down", 1)
	}})
	if _, err := (&Server{NodeName: "n1", Reader: failing}).contentSHA256(t.Context(), gi); status.Code(err) != codes.Unavailable {
		t.Errorf("API server overloaded: %v, want Unavailable", err)
	}
	withNode := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}).Build()
	if _, err := (&Server{NodeName: "n1", Reader: withNode}).contentSHA256(t.Context(), gi); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("base not Ready: %v, want FailedPrecondition", err)
	}
}

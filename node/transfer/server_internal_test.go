package transfer

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

package csi

import (
	"testing"

	"google.golang.org/grpc/codes"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// Each reason the node agent writes returns the code CSI callers saw when
// the reason was lvmd's code's name: the sidecars act on these codes.
func TestCodeOf(t *testing.T) {
	tests := []struct {
		reason string
		want   codes.Code
	}{
		{thinlvmv1.ReasonNoSpace, codes.ResourceExhausted},
		{thinlvmv1.ReasonSourceNotFound, codes.NotFound},
		{thinlvmv1.ReasonSourceOnOtherNode, codes.FailedPrecondition},
		{thinlvmv1.ReasonSourceMismatch, codes.FailedPrecondition},
		{thinlvmv1.ReasonForeignLV, codes.FailedPrecondition},
		{thinlvmv1.ReasonInvalidSpec, codes.InvalidArgument},
		{thinlvmv1.ReasonSizeOutOfRange, codes.OutOfRange},
		{thinlvmv1.ReasonConflict, codes.AlreadyExists},
		{thinlvmv1.ReasonBaseFailed, codes.Unavailable},
		{thinlvmv1.ReasonUnsupported, codes.Unimplemented},
		{thinlvmv1.ReasonLVMDUnavailable, codes.Unavailable},
		{thinlvmv1.ReasonLVMTimeout, codes.DeadlineExceeded},
		{thinlvmv1.ReasonLVMFailed, codes.Internal},
		// A reason from a newer agent, or a gRPC code's name from an older
		// one, is not parsed: Internal.
		{"SomethingNew", codes.Internal},
		{"ResourceExhausted", codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			if got := codeFor(tt.reason); got != tt.want {
				t.Errorf("codeFor(%s) = %v, want %v", tt.reason, got, tt.want)
			}
		})
	}
}

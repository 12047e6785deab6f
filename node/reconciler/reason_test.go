package reconciler

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// Every outcome of ensure gets one of the API's reasons: the reconciler's
// own refusals keep theirs, lvmd's codes map to the reason the controller
// turns back into that code.
func TestReasonOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"no space", status.Error(codes.ResourceExhausted, "thin pool over its high-water mark"), thinlvmv1.ReasonNoSpace},
		{"source LV missing", status.Error(codes.NotFound, "source lv vg/x"), thinlvmv1.ReasonSourceNotFound},
		{"unknown device class", status.Error(codes.InvalidArgument, "device class nvme"), thinlvmv1.ReasonInvalidSpec},
		{"shrink", status.Error(codes.OutOfRange, "shrink"), thinlvmv1.ReasonSizeOutOfRange},
		{"other size or source", status.Error(codes.AlreadyExists, "lv exists"), thinlvmv1.ReasonConflict},
		{"LV not thinlvm's", lvmdError(codes.FailedPrecondition, "without the thinlvm tag", pb.ErrorReason_ERROR_REASON_NOT_MANAGED), thinlvmv1.ReasonForeignLV},
		{"LV not thinlvm's, older lvmd", status.Error(codes.FailedPrecondition, "without the thinlvm tag"), thinlvmv1.ReasonForeignLV},
		{"VG missing", lvmdError(codes.FailedPrecondition, "device class unavailable", pb.ErrorReason_ERROR_REASON_DEVICE_CLASS_UNAVAILABLE), thinlvmv1.ReasonDeviceClassUnavailable},
		{"snapshot in a thick class", lvmdError(codes.FailedPrecondition, "device class hdd is thick: its volumes have no snapshots", pb.ErrorReason_ERROR_REASON_THICK), thinlvmv1.ReasonUnsupported},
		{"pool not active", lvmdError(codes.FailedPrecondition, "not active", pb.ErrorReason_ERROR_REASON_POOL_NOT_ACTIVE), thinlvmv1.ReasonLVMFailed},
		{"wrapped lvmd reason", fmt.Errorf("create: %w", lvmdError(codes.FailedPrecondition, "device class unavailable", pb.ErrorReason_ERROR_REASON_DEVICE_CLASS_UNAVAILABLE)), thinlvmv1.ReasonDeviceClassUnavailable},
		{"older lvmd", status.Error(codes.Unimplemented, "method ChangeLV"), thinlvmv1.ReasonUnsupported},
		{"lvmd down", status.Error(codes.Unavailable, "connection refused"), thinlvmv1.ReasonLVMDUnavailable},
		{"lvm timed out", status.Error(codes.DeadlineExceeded, "lvcreate"), thinlvmv1.ReasonLVMTimeout},
		{"call canceled", status.Error(codes.Canceled, "context canceled"), thinlvmv1.ReasonLVMTimeout},
		{"lvm failed", status.Error(codes.Internal, "exit status 5"), thinlvmv1.ReasonLVMFailed},
		{"plain error", errors.New("api server: etcd leader changed"), thinlvmv1.ReasonLVMFailed},
		{"wrapped lvmd code", fmt.Errorf("create: %w", status.Error(codes.ResourceExhausted, "full")), thinlvmv1.ReasonNoSpace},
		{"own refusal", refuse(thinlvmv1.ReasonTransferFailed, "node n2 unreachable"), thinlvmv1.ReasonTransferFailed},
		{"wrapped refusal", fmt.Errorf("source: %w", refuse(thinlvmv1.ReasonBaseFailed, "sha256 mismatch")), thinlvmv1.ReasonBaseFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reasonOf(tt.err); got != tt.want {
				t.Errorf("reasonOf(%v) = %s, want %s", tt.err, got, tt.want)
			}
		})
	}
}

// lvmdError is a refusal as lvmd makes it: a code and its reason.
func lvmdError(code codes.Code, msg string, reason pb.ErrorReason) error {
	return pb.Status(status.New(code, msg), reason).Err()
}

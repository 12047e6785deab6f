package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// toStatus turns a handler's error into a gRPC status. It is the only place
// lvmd makes status codes.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, r := range refusals {
		for _, target := range r.errs {
			if errors.Is(err, target) {
				return pb.Status(status.New(r.code, err.Error()), r.reason).Err()
			}
		}
	}
	code := codes.Internal
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}

// refusals are lvmd's refusals: the errors of each, the status code and
// the reason it attaches, first match wins.
var refusals = []struct {
	errs   []error
	code   codes.Code
	reason pb.ErrorReason
}{
	{[]error{lvm.ErrInvalid, lvm.ErrInvalidName}, codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID},
	{[]error{lvm.ErrInsufficientSpace}, codes.ResourceExhausted, pb.ErrorReason_ERROR_REASON_INSUFFICIENT_SPACE},
	{[]error{lvm.ErrConflict}, codes.AlreadyExists, pb.ErrorReason_ERROR_REASON_CONFLICT},
	{[]error{lvm.ErrExists}, codes.AlreadyExists, pb.ErrorReason_ERROR_REASON_EXISTS},
	{[]error{lvm.ErrShrink}, codes.OutOfRange, pb.ErrorReason_ERROR_REASON_SHRINK},
	{[]error{lvm.ErrNotManaged}, codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_NOT_MANAGED},
	{[]error{lvm.ErrNotActive}, codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_POOL_NOT_ACTIVE},
	{[]error{lvm.ErrMetadataSnapHeld}, codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_METADATA_SNAPSHOT_HELD},
	{[]error{lvm.ErrThick}, codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_THICK},
	{[]error{lvm.ErrUnavailable}, codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_DEVICE_CLASS_UNAVAILABLE},
	{[]error{lvm.ErrNotFound}, codes.NotFound, pb.ErrorReason_ERROR_REASON_NOT_FOUND},
	// The lvm shell died under the command: the caller retries, and lvmd
	// re-reads the report before that.
	{[]error{lvm.ErrOutcomeUnknown}, codes.Unavailable, pb.ErrorReason_ERROR_REASON_OUTCOME_UNKNOWN},
}

package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
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
	code := codes.Internal
	switch {
	case errors.Is(err, lvm.ErrInvalid), errors.Is(err, lvm.ErrInvalidName):
		code = codes.InvalidArgument
	case errors.Is(err, lvm.ErrInsufficientSpace):
		code = codes.ResourceExhausted
	case errors.Is(err, lvm.ErrConflict), errors.Is(err, lvm.ErrExists):
		code = codes.AlreadyExists
	case errors.Is(err, lvm.ErrShrink):
		code = codes.OutOfRange
	case errors.Is(err, lvm.ErrNotManaged), errors.Is(err, lvm.ErrNotActive), errors.Is(err, lvm.ErrMetadataSnapHeld), errors.Is(err, lvm.ErrUnavailable):
		code = codes.FailedPrecondition
	case errors.Is(err, lvm.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, lvm.ErrOutcomeUnknown):
		// The lvm shell died under the command: the caller retries, and
		// lvmd re-reads the report before that.
		code = codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}

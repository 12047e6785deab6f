// Package kubestatus decides the gRPC status of a call that failed because
// a Kubernetes API request failed: the CSI controller's and the transfer
// server's, which answer callers (the CSI sidecars, another node) that act
// on the code.
package kubestatus

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Errorf is the status for err, an API request's failure: its Code, and
// the message format's text followed by err's.
func Errorf(err error, format string, args ...any) error {
	return status.Errorf(Code(err), "%s: %v", fmt.Sprintf(format, args...), err)
}

// Code is the gRPC code for an API request's failure. A failure the
// request itself caused (refused as invalid or malformed: a bug of the
// caller) is Internal; the object's own state maps to its code (NotFound,
// AlreadyExists, a write conflict Aborted); refused by authorization is
// PermissionDenied. Everything else (the API server unreachable, slow,
// overloaded or failing) is Unavailable: the caller retries, and a retry
// may succeed.
func Code(err error) codes.Code {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case apierrors.IsNotFound(err):
		return codes.NotFound
	case apierrors.IsAlreadyExists(err):
		return codes.AlreadyExists
	case apierrors.IsConflict(err):
		return codes.Aborted
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return codes.Internal
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return codes.PermissionDenied
	}
	return codes.Unavailable
}

package v1alpha1

import "google.golang.org/grpc/codes"

// Retry is how the node agent retries a LogicalVolume whose last attempt
// failed with a reason.
type Retry int

const (
	// RetryWithBackoff: again at once, with the agent's exponential backoff
	// (lvmd unreachable or slow, an lvm command that failed).
	RetryWithBackoff Retry = iota
	// RetryAfterDelay: after the agent's retry delay (a minute by default):
	// space may be freed, a source made, a peer back, a volume group found.
	RetryAfterDelay
	// RetryOnSpecChange: not by itself; only a change of the spec, which
	// queues the volume again, can help.
	RetryOnSpecChange
)

func (r Retry) String() string {
	switch r {
	case RetryAfterDelay:
		return "after delay"
	case RetryOnSpecChange:
		return "on spec change"
	}
	return "with backoff"
}

// failure is what one failure reason means to the components.
// +kubebuilder:object:generate=false
type failure struct {
	code  codes.Code
	retry Retry
}

// failures is the one table of what a LogicalVolume's Failed reason means:
// the gRPC code the CSI controller returns to the call that waited for the
// volume, and how the node agent retries it. The codes are what the
// sidecars act on: ResourceExhausted makes the provisioner reschedule a
// WaitForFirstConsumer claim, Unavailable and DeadlineExceeded count as
// still in progress. A reason the API defines must have its row here (a
// test checks it).
var failures = map[string]failure{
	ReasonNoSpace:                {codes.ResourceExhausted, RetryAfterDelay},
	ReasonSourceNotFound:         {codes.NotFound, RetryAfterDelay},
	ReasonTransferFailed:         {codes.Unavailable, RetryAfterDelay},
	ReasonDeviceClassUnavailable: {codes.FailedPrecondition, RetryAfterDelay},
	ReasonSourceMismatch:         {codes.FailedPrecondition, RetryOnSpecChange},
	ReasonForeignLV:              {codes.FailedPrecondition, RetryOnSpecChange},
	ReasonInvalidSpec:            {codes.InvalidArgument, RetryOnSpecChange},
	ReasonSizeOutOfRange:         {codes.OutOfRange, RetryOnSpecChange},
	ReasonConflict:               {codes.AlreadyExists, RetryOnSpecChange},
	ReasonUnsupported:            {codes.Unimplemented, RetryOnSpecChange},
	ReasonBaseFailed:             {codes.Unavailable, RetryWithBackoff},
	ReasonLVMDUnavailable:        {codes.Unavailable, RetryWithBackoff},
	ReasonLVMTimeout:             {codes.DeadlineExceeded, RetryWithBackoff},
	ReasonLVMFailed:              {codes.Internal, RetryWithBackoff},
}

// Failure is what a Failed condition's reason means: the code of the CSI
// call that waited for the volume, and how the node agent retries it. A
// reason not in the API (a newer agent's) is Internal, retried with
// backoff.
func Failure(reason string) (codes.Code, Retry) {
	if f, ok := failures[reason]; ok {
		return f.code, f.retry
	}
	return codes.Internal, RetryWithBackoff
}

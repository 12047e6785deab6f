package proto

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo lvmd attaches to a
// refusal's status, whose reason is an ErrorReason's name.
const ErrorDomain = "lvmd.thinlvm.io"

// Status is lvmd's status for a refusal: code and message, and the reason
// as an ErrorInfo.
func Status(st *status.Status, reason ErrorReason) *status.Status {
	if reason == ErrorReason_ERROR_REASON_UNSPECIFIED {
		return st
	}
	withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Domain: ErrorDomain, Reason: reason.String()})
	if err != nil {
		return st // only a detail that cannot be marshalled fails
	}
	return withInfo
}

// ReasonOf is the reason lvmd attached to err's status (err may wrap it),
// or ERROR_REASON_UNSPECIFIED: not lvmd's, or an lvmd older than the
// reasons.
func ReasonOf(err error) ErrorReason {
	st, _ := status.FromError(err) // unwraps; no details if err is not a status
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return ErrorReason(ErrorReason_value[info.GetReason()])
		}
	}
	return ErrorReason_ERROR_REASON_UNSPECIFIED
}

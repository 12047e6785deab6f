package v1alpha1

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// The codes CSI callers see for each reason: the sidecars act on them, so
// a change here is a change of behaviour.
func TestFailure(t *testing.T) {
	tests := []struct {
		reason string
		code   codes.Code
		retry  Retry
	}{
		{ReasonNoSpace, codes.ResourceExhausted, RetryAfterDelay},
		{ReasonSourceNotFound, codes.NotFound, RetryAfterDelay},
		{ReasonTransferFailed, codes.Unavailable, RetryAfterDelay},
		{ReasonDeviceClassUnavailable, codes.FailedPrecondition, RetryAfterDelay},
		{ReasonSourceMismatch, codes.FailedPrecondition, RetryOnSpecChange},
		{ReasonForeignLV, codes.FailedPrecondition, RetryOnSpecChange},
		{ReasonInvalidSpec, codes.InvalidArgument, RetryOnSpecChange},
		{ReasonSizeOutOfRange, codes.OutOfRange, RetryOnSpecChange},
		{ReasonConflict, codes.AlreadyExists, RetryOnSpecChange},
		{ReasonUnsupported, codes.Unimplemented, RetryOnSpecChange},
		{ReasonBaseFailed, codes.Unavailable, RetryWithBackoff},
		{ReasonLVMDUnavailable, codes.Unavailable, RetryWithBackoff},
		{ReasonLVMTimeout, codes.DeadlineExceeded, RetryWithBackoff},
		{ReasonLVMFailed, codes.Internal, RetryWithBackoff},
		// A reason from a newer agent, or a gRPC code's name from an older
		// one, is not parsed: Internal, with backoff.
		{"SomethingNew", codes.Internal, RetryWithBackoff},
		{"ResourceExhausted", codes.Internal, RetryWithBackoff},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			code, retry := Failure(tt.reason)
			if code != tt.code || retry != tt.retry {
				t.Errorf("Failure(%s) = %v, %v; want %v, %v", tt.reason, code, retry, tt.code, tt.retry)
			}
		})
	}
}

// Every reason the API defines for a Failed condition has its row in the
// table, and the table has no row for a reason the API does not define.
func TestEveryFailureReasonHasARow(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "logicalvolume_types.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	notFailures := map[string]bool{ReasonCreated: true, ReasonSucceeded: true, ReasonWaitingForBase: true, ReasonCopying: true}
	// Declared with the LVMNode's reasons, and a LogicalVolume's too.
	defined := map[string]bool{ReasonDeviceClassUnavailable: true}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !strings.HasPrefix(name.Name, "Reason") || !ok {
					continue
				}
				reason, _ := strconv.Unquote(lit.Value)
				if notFailures[reason] {
					continue
				}
				defined[reason] = true
				if _, ok := failures[reason]; !ok {
					t.Errorf("reason %s (%s) has no row in failures", reason, name.Name)
				}
			}
		}
	}
	if len(defined) < 11 {
		t.Fatalf("found only %d failure reasons in the API: the parse is broken", len(defined))
	}
	for reason := range failures {
		if !defined[reason] {
			t.Errorf("failures has a row for %s, which logicalvolume_types.go does not define", reason)
		}
	}
}

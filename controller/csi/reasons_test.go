package csi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// Each reason the node agent writes returns the code CSI callers saw when
// the reason was lvmd's code's name: the sidecars act on these codes.
func TestCodeFor(t *testing.T) {
	tests := []struct {
		reason string
		want   codes.Code
	}{
		{thinlvmv1.ReasonNoSpace, codes.ResourceExhausted},
		{thinlvmv1.ReasonSourceNotFound, codes.NotFound},
		{thinlvmv1.ReasonTransferFailed, codes.Unavailable},
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

// Every reason the API defines for a Failed condition has its code here: a
// new reason without one would answer Internal.
func TestEveryFailureReasonHasACode(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../../api/v1alpha1/logicalvolume_types.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	notFailures := map[string]bool{thinlvmv1.ReasonCreated: true, thinlvmv1.ReasonSucceeded: true, thinlvmv1.ReasonWaitingForBase: true, thinlvmv1.ReasonCopying: true}
	n := 0
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
				n++
				if _, ok := reasonCodes[reason]; !ok {
					t.Errorf("reason %s (%s) has no gRPC code in reasonCodes", reason, name.Name)
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("found only %d failure reasons in the API: the parse is broken", n)
	}
}

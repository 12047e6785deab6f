package kubestatus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestCode(t *testing.T) {
	lv := schema.GroupResource{Group: "thinlvm.io", Resource: "logicalvolumes"}
	tests := []struct {
		name string
		err  error
		want codes.Code
	}{
		{"deadline", fmt.Errorf("get: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{"canceled", context.Canceled, codes.Canceled},
		{"not found", apierrors.NewNotFound(lv, "a"), codes.NotFound},
		{"exists", apierrors.NewAlreadyExists(lv, "a"), codes.AlreadyExists},
		{"write conflict", apierrors.NewConflict(lv, "a", errors.New("modified")), codes.Aborted},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Group: "thinlvm.io", Kind: "LogicalVolume"}, "a", field.ErrorList{field.Required(field.NewPath("spec"), "")}), codes.Internal},
		{"bad request", apierrors.NewBadRequest("x"), codes.Internal},
		{"forbidden", apierrors.NewForbidden(lv, "a", errors.New("rbac")), codes.PermissionDenied},
		{"unauthorized", apierrors.NewUnauthorized("token"), codes.PermissionDenied},
		{"server timeout", apierrors.NewServerTimeout(lv, "get", 1), codes.Unavailable},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), codes.Unavailable},
		{"internal", apierrors.NewInternalError(errors.New("etcd leader changed")), codes.Unavailable},
		{"unreachable", errors.New("dial tcp 127.0.0.1:6443: connect: connection refused"), codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Code(tt.err); got != tt.want {
				t.Errorf("Code(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestErrorf(t *testing.T) {
	err := Errorf(apierrors.NewServiceUnavailable("etcd"), "get LogicalVolume %s", "pvc-1")
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.HasPrefix(st.Message(), "get LogicalVolume pvc-1: ") || !strings.Contains(st.Message(), "etcd") {
		t.Errorf("Errorf = %v %q", st.Code(), st.Message())
	}
}

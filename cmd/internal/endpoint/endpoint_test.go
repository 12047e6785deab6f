package endpoint

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestListenUnixSocketMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "x.sock")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil { // a stale socket file
		t.Fatal(err)
	}
	lis, err := Listen("unix://" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a 0600 socket", st.Mode())
	}
}

func TestListenTCPAndErrors(t *testing.T) {
	lis, err := Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	for _, bad := range []string{"http://x", "unix://", "::bad", "/no/scheme"} {
		if l, err := Listen(bad); err == nil {
			l.Close()
			t.Errorf("Listen(%q) succeeded", bad)
		}
	}
}

// A failed call is logged at the default verbosity, without the request's
// secrets; a successful one only at V(2).
func TestFailuresAreLoggedByDefault(t *testing.T) {
	var lines []string
	s := &Server{Log: funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 0})}
	info := &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Node/NodePublishVolume"}
	req := &csi.NodePublishVolumeRequest{VolumeId: "vol-1", Secrets: map[string]string{"key": "s3cr3t"}}
	_, _ = s.logCall(context.Background(), req, info, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.NotFound, "volume vol-1 not found")
	})
	_, _ = s.logCall(context.Background(), req, info, func(context.Context, any) (any, error) { return nil, nil })
	if len(lines) != 1 {
		t.Fatalf("logged %d lines at V(0), want 1 (the failure): %q", len(lines), lines)
	}
	for _, want := range []string{"grpc call failed", "NotFound", "vol-1"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log %q lacks %q", lines[0], want)
		}
	}
	if strings.Contains(lines[0], "s3cr3t") {
		t.Errorf("log %q holds a secret", lines[0])
	}
}

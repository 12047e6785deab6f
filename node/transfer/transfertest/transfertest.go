// Package transfertest runs node agents' transfer endpoints on loopback
// for tests, with tokens a test makes up.
package transfertest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/node/lvmd"
	"github.com/thinlvm/thinlvm/node/transfer"
	transferpb "github.com/thinlvm/thinlvm/node/transfer/proto"
)

// Tokens authenticates the tests' tokens: "token-<node>" is that node's.
type Tokens struct{}

// Authenticate implements transfer.Authenticator.
func (Tokens) Authenticate(_ context.Context, token string) (string, error) {
	if node, ok := strings.CutPrefix(token, "token-"); ok {
		return node, nil
	}
	return "", errors.New("unknown token")
}

// Serve runs node's transfer endpoint over l on loopback until the test
// ends, reading objects with reader, and returns what node's LVMNode
// publishes of it.
func Serve(t testing.TB, node string, reader client.Reader, l lvmd.Client, opts ...grpc.ServerOption) *thinlvmv1.TransferEndpoint {
	t.Helper()
	cert, fp, err := transfer.NewCertificate(node)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append(opts, grpc.Creds(credentials.NewTLS(transfer.ServerTLS(cert))))...)
	transferpb.RegisterTransferServer(gs, &transfer.Server{Reader: reader, LVMD: l, NodeName: node, Auth: Tokens{}, Log: logr.Discard()})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return &thinlvmv1.TransferEndpoint{Address: lis.Addr().String(), CertificateSHA256: fp}
}

// TokenFile writes node's token in a file and returns its path.
func TokenFile(t testing.TB, node string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("token-"+node+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

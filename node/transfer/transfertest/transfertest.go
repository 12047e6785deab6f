// Package transfertest runs node agents' transfer endpoints on loopback
// for tests, each node with a certificate of its own (Identity).
package transfertest

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync"
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

// identities holds each node name's certificate: one per name for the
// test binary, as an agent has one per start.
var identities sync.Map // node name -> tls.Certificate

// Identity is node's agent's certificate (transfer.NewCertificate), the
// same for every call with that name: Serve's endpoint presents it, and a
// Copier of node presents it to other nodes' endpoints, which accept it
// when node's LVMNode publishes its fingerprint (Serve's endpoint does).
func Identity(node string) tls.Certificate {
	if c, ok := identities.Load(node); ok {
		return c.(tls.Certificate)
	}
	cert, _, err := transfer.NewCertificate(node)
	if err != nil {
		panic(fmt.Sprintf("transfertest: certificate of %s: %v", node, err))
	}
	c, _ := identities.LoadOrStore(node, cert)
	return c.(tls.Certificate)
}

// Copier is node's agent's copier, reading LVMNodes with reader.
func Copier(node string, reader client.Reader) *transfer.Copier {
	return &transfer.Copier{Reader: reader, Certificate: Identity(node)}
}

// Serve runs node's transfer endpoint over l on loopback until the test
// ends, reading objects with reader, and returns what node's LVMNode
// publishes of it.
func Serve(t testing.TB, node string, reader client.Reader, l lvmd.Client, opts ...grpc.ServerOption) *thinlvmv1.TransferEndpoint {
	t.Helper()
	cert := Identity(node)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append(opts, grpc.Creds(credentials.NewTLS(transfer.ServerTLS(cert))))...)
	transferpb.RegisterTransferServer(gs, &transfer.Server{Reader: reader, LVMD: l, NodeName: node, Log: logr.Discard()})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return &thinlvmv1.TransferEndpoint{Address: lis.Addr().String(), CertificateSHA256: transfer.Fingerprint(cert.Certificate[0])}
}

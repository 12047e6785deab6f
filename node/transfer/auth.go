package transfer

import (
	"context"
	"crypto/x509"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// A caller is a node's agent when it proves, in the TLS handshake, that it
// holds the key of the certificate that node's LVMNode publishes
// (status.transfer.certificateSHA256): the same key and certificate the
// agent serves its own endpoint with, made new at each start and never
// written anywhere. Only that node's agent can publish it: LVMNodes are
// written through the node agents' ServiceAccount binding alone, and the
// node identity admission policy lets an agent write only the LVMNode of
// the node its pod-bound token names. There is no bearer credential: a
// node that receives a call learns the caller's certificate, which is
// public, and nothing it could present to another node, where the
// handshake would need the key.

// commonNamePrefix starts the subject of an agent's certificate, followed
// by its node's name: the node the caller claims to be, which its LVMNode
// then confirms or refutes.
const commonNamePrefix = "thinlvm-transfer "

// authenticate returns the node whose agent made the call: the node named
// by the client certificate's subject, when that node's LVMNode publishes
// the certificate's fingerprint now.
func (s *Server) authenticate(ctx context.Context) (string, error) {
	cert, err := clientCertificate(ctx)
	if err != nil {
		return "", err
	}
	node, ok := strings.CutPrefix(cert.Subject.CommonName, commonNamePrefix)
	if !ok || node == "" {
		return "", status.Errorf(codes.Unauthenticated, "the client certificate %q names no thinlvm node", cert.Subject.CommonName)
	}
	ln := &thinlvmv1.LVMNode{}
	if err := s.Reader.Get(ctx, types.NamespacedName{Name: node}, ln); err != nil {
		if apierrors.IsNotFound(err) {
			return "", status.Errorf(codes.Unauthenticated, "the client certificate names node %s, which has no LVMNode", node)
		}
		return "", status.Errorf(codes.Unavailable, "get LVMNode %s: %v", node, err)
	}
	fp := Fingerprint(cert.Raw)
	if ep := ln.Status.Transfer; ep == nil || ep.CertificateSHA256 != fp {
		return "", status.Errorf(codes.Unauthenticated, "the client certificate %s is not the one node %s's LVMNode publishes: not that node's agent", fp, node)
	}
	return node, nil
}

// clientCertificate is the certificate the caller proved it holds the key
// of in the TLS handshake.
func clientCertificate(ctx context.Context) (*x509.Certificate, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil, status.Error(codes.Unauthenticated, "no client certificate: only thinlvm node agents may call")
	}
	return info.State.PeerCertificates[0], nil
}

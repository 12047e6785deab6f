package transfer

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// NewCertificate makes the key and self-signed certificate an agent
// presents, serving its endpoint and calling other nodes' endpoints, and
// its fingerprint (Fingerprint) for the agent's LVMNode. A new pair each
// start: no key is kept on the node, and no CA is needed, since both ends
// pin the fingerprint the other node itself published (authenticate).
func NewCertificate(nodeName string) (tls.Certificate, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("transfer key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("transfer certificate serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonNamePrefix + nodeName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("transfer certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, Fingerprint(der), nil
}

// Fingerprint is the hex SHA-256 of a DER certificate.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// ServerTLS is the endpoint's TLS configuration: every caller presents a
// certificate and proves it holds its key; which node's it is, if any, is
// checked per call against the LVMNodes (authenticate), not by a CA.
func ServerTLS(cert tls.Certificate) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, ClientAuth: tls.RequireAnyClientCert}
}

// pinnedTLS accepts only the server certificate whose fingerprint is
// fingerprint, and presents own: the chain is not verified against any CA
// (there is none), the pin is the whole check.
func pinnedTLS(fingerprint string, own tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{own},
		InsecureSkipVerify: true, // replaced by VerifyConnection's pin
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the transfer endpoint presented no certificate")
			}
			if got := Fingerprint(cs.PeerCertificates[0].Raw); got != fingerprint {
				return fmt.Errorf("the transfer endpoint's certificate %s is not the one its LVMNode publishes (%s)", got, fingerprint)
			}
			return nil
		},
	}
}

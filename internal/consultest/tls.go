package consultest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLS is a throwaway CA and a server certificate it signed for 127.0.0.1
// and localhost, as PEM files in a temp dir.
type TLS struct {
	CAFile   string
	CertFile string
	KeyFile  string
}

// NewTLS makes a new CA and a server certificate signed by it.
func NewTLS(t testing.TB) *TLS {
	t.Helper()
	dir := t.TempDir()
	caKey, caCert, caDER := newCA(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "server.dc1.consul"},
		DNSNames:     []string{"localhost", "server.dc1.consul"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	x := &TLS{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server-key.pem")}
	writePEM(t, x.CAFile, "CERTIFICATE", caDER)
	writePEM(t, x.CertFile, "CERTIFICATE", der)
	writePEM(t, x.KeyFile, "EC PRIVATE KEY", keyDER)
	return x
}

func newCA(t testing.TB) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "consultest throwaway CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// NewDevTLS starts a -dev agent that also serves HTTPS with a certificate
// of a new CA, and returns it, its HTTPS address ("https://127.0.0.1:port")
// and the CA. Its plain HTTP address and Client stay as with NewDev, for
// setting up and checking what a test did over HTTPS.
func NewDevTLS(t testing.TB) (*Server, string, *TLS) {
	t.Helper()
	x := NewTLS(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("consultest: free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	hcl := fmt.Sprintf(`ports { https = %d }
tls { defaults { ca_file = %q cert_file = %q key_file = %q verify_incoming = false } }`,
		port, x.CAFile, x.CertFile, x.KeyFile)
	return New(t, Options{HCL: hcl}), "https://127.0.0.1:" + strconv.Itoa(port), x
}

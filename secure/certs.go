package secure

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names WriteTestPKI writes in its folder.
const (
	CAFile    = "ca.pem"
	NodeFile  = "node.pem"
	KeyFile   = "node-key.pem"
	TokenFile = "token"
)

// WriteTestPKI makes a throwaway certificate authority and, signed by it,
// one node certificate for server and client use that names hosts (host
// names or IP addresses; localhost, 127.0.0.1 and ::1 are always named),
// valid for validFor, and a random token. It writes them into dir (made
// if missing; the key and the token readable by the owner only) and
// returns their paths. The CA's own key is not kept: to add a host, make
// a new set. It is for test clusters and docker-compose, not a PKI.
func WriteTestPKI(dir string, hosts []string, validFor time.Duration) (Files, error) {
	if validFor <= 0 {
		return Files{}, fmt.Errorf("validity %v: want > 0", validFor)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Files{}, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"Shoal test cluster"}, CommonName: "Shoal test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validFor),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return Files{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	node := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"Shoal test cluster"}, CommonName: "shoal node"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range hosts {
		switch ip := net.ParseIP(h); {
		case h == "":
			return Files{}, errors.New("an empty host name")
		case ip != nil:
			node.IPAddresses = append(node.IPAddresses, ip)
		default:
			node.DNSNames = append(node.DNSNames, h)
		}
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Files{}, err
	}
	nodeDER, err := x509.CreateCertificate(rand.Reader, node, caCert, &key.PublicKey, caKey)
	if err != nil {
		return Files{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Files{}, err
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return Files{}, err
	}
	f := Files{Cert: filepath.Join(dir, NodeFile), Key: filepath.Join(dir, KeyFile), CA: filepath.Join(dir, CAFile), Token: filepath.Join(dir, TokenFile)}
	for _, w := range []struct {
		path string
		data []byte
		perm os.FileMode
	}{
		{f.CA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644},
		{f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: nodeDER}), 0o644},
		{f.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600},
		{f.Token, []byte(hex.EncodeToString(tok) + "\n"), 0o600},
	} {
		if err := writeNew(w.path, w.data, w.perm); err != nil {
			return Files{}, err
		}
	}
	return f, nil
}

// writeNew writes data to a new file with perm and renames it to path:
// os.WriteFile would keep the mode of a file already there (a token
// readable by everyone stays so).
func writeNew(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone once renamed
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// serial is a random 128-bit certificate serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

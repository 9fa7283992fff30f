package dsort

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// MakeCerts writes a job's mutual TLS into dir (made if missing, 0700): a
// CA (ca.crt, ca.key) and, for each host, HOST.crt and HOST.key, a
// certificate for serving at that IP or DNS name and for dialing others,
// plus client.crt/client.key for tools (gantry sort status). Keys are
// ECDSA P-256 and private (0600); certificates last validity. It never
// overwrites: a file that exists already fails the call before anything
// is written, so a second run cannot replace the CA a running job trusts.
// It returns the paths it wrote.
func MakeCerts(dir string, hosts []string, validity time.Duration) ([]string, error) {
	names, paths, err := certTargets(dir, hosts)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "gantry sort CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity), IsCA: true, BasicConstraintsValid: true,
		MaxPathLenZero: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	if err := writePair(dir, "ca", caDER, caKey); err != nil {
		return nil, err
	}
	for _, n := range names[1:] {
		if err := makeLeaf(dir, n, ca, caKey, now, validity); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// certTargets checks the hosts and that none of the files MakeCerts would
// write exists; it returns the pairs' names (ca, client, the hosts) and the
// files' paths.
func certTargets(dir string, hosts []string) (names, paths []string, err error) {
	if len(hosts) == 0 {
		return nil, nil, errorf(ErrConfig, "name at least one host (--hosts 10.0.0.1,10.0.0.2)")
	}
	names = []string{"ca", "client"}
	for _, h := range hosts {
		if h == "" || strings.ContainsAny(h, `/\`) || h == "ca" || h == "client" {
			return nil, nil, errorf(ErrConfig, "%q is not a host name or IP address", h)
		}
		if slices.Contains(names, h) {
			return nil, nil, errorf(ErrConfig, "host %q is named twice", h)
		}
		names = append(names, h)
	}
	for _, n := range names {
		for _, ext := range []string{".crt", ".key"} {
			p := filepath.Join(dir, n+ext)
			if _, err := os.Lstat(p); err == nil {
				return nil, nil, errorf(ErrConfig, "%s exists; nothing was written (use an empty directory: the CA a job trusts is never replaced)", p)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, nil, err
			}
			paths = append(paths, p)
		}
	}
	return names, paths, nil
}

// makeLeaf writes NAME.crt and NAME.key, signed by ca: a client
// certificate, and for a host (any name but "client") a server one too,
// for its IP address or DNS name.
func makeLeaf(dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time, validity time.Duration) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if name != "client" {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		if ip := net.ParseIP(name); ip != nil {
			tmpl.IPAddresses = []net.IP{ip}
		} else {
			tmpl.DNSNames = []string{name}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	return writePair(dir, name, der, key)
}

// writePair writes NAME.crt and NAME.key (0600) into dir, failing if
// either exists (O_EXCL).
func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeNew(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return writeNew(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600)
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// serial is a random 128-bit certificate serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}
